package metrics

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// TestProtected: what protect asks the API server, and what it answers
// for each answer: 401 without a token or with one refused, 403 for a
// user not allowed to get the path (asked as a non-resource URL, the
// method as the verb), the handler's answer otherwise. (On a real API
// server, with the shipped RBAC: TestRBACIsExactlyEnough.)
func TestProtected(t *testing.T) {
	// An API server that answers the two reviews, as a real one would for
	// these tokens and RBAC.
	var asked []authorizationv1.SubjectAccessReviewSpec
	apiserver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/apis/authentication.k8s.io/v1/tokenreviews":
			var tr authenticationv1.TokenReview
			_ = json.NewDecoder(r.Body).Decode(&tr)
			if tr.Spec.Token == "reader" || tr.Spec.Token == "other" {
				tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: tr.Spec.Token}}
			}
			_ = json.NewEncoder(w).Encode(tr)
		case "/apis/authorization.k8s.io/v1/subjectaccessreviews":
			var sar authorizationv1.SubjectAccessReview
			_ = json.NewDecoder(r.Body).Decode(&sar)
			asked = append(asked, sar.Spec)
			na := sar.Spec.NonResourceAttributes
			sar.Status.Allowed = sar.Spec.User == "reader" && na != nil && na.Path == "/metrics" && na.Verb == "get"
			_ = json.NewEncoder(w).Encode(sar)
		default:
			http.NotFound(w, r)
		}
	}))
	defer apiserver.Close()
	kube, err := kubernetes.NewForConfig(&rest.Config{Host: apiserver.URL})
	if err != nil {
		t.Fatal(err)
	}
	h, err := protect(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "metrics") }), kube)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, token string
		code        int
	}{
		{"no token", "", http.StatusUnauthorized},
		{"a token refused", "stolen", http.StatusUnauthorized},
		{"a user not allowed", "other", http.StatusForbidden},
		{"a reader", "reader", http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
			if tc.token != "" {
				req.Header.Set("Authorization", "Bearer "+tc.token)
			}
			h.ServeHTTP(rec, req)
			if rec.Code != tc.code || (tc.code == http.StatusOK) != (rec.Body.String() == "metrics") {
				t.Errorf("%d %q, want %d", rec.Code, rec.Body.String(), tc.code)
			}
		})
	}
	if len(asked) != 2 || asked[1].User != "reader" || asked[1].ResourceAttributes != nil {
		t.Errorf("SubjectAccessReviews asked: %+v", asked)
	}
	// Go's profiles are behind the same checks, path by path: the reader
	// of /metrics may not read them.
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/debug/pprof/heap", nil)
	req.Header.Set("Authorization", "Bearer reader")
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusForbidden {
		t.Errorf("/debug/pprof/heap for a reader of /metrics: %d, want 403", rec.Code)
	}
}

// TestProtectedBoundsItsReviews: tokens never seen before, sent in a
// loop, cost the API server no more reviews than the review client's
// limit (reviewClientConfig: 5 a second, a burst of 10), not one each;
// and an API server that does not answer costs a request reviewTimeout,
// not the retries' sum.
func TestProtectedBoundsItsReviews(t *testing.T) {
	var reviews atomic.Int64
	hang := make(chan struct{})
	apiserver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reviews.Add(1)
		if r.Header.Get("X-Hang") != "" {
			<-hang
		}
		var tr authenticationv1.TokenReview
		_ = json.NewDecoder(r.Body).Decode(&tr)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(tr) // not authenticated
	}))
	defer apiserver.Close()
	defer close(hang)
	kube, err := kubernetes.NewForConfig(reviewClientConfig(&rest.Config{Host: apiserver.URL}))
	if err != nil {
		t.Fatal(err)
	}
	h, err := protect(http.NotFoundHandler(), kube)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var wg sync.WaitGroup
	for i := range 30 {
		wg.Go(func() {
			req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
			req.Header.Set("Authorization", fmt.Sprintf("Bearer token-%d", i))
			h.ServeHTTP(httptest.NewRecorder(), req)
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if limit := 10 + int64(5*elapsed.Seconds()) + 1; reviews.Load() > limit {
		t.Errorf("%d TokenReviews for 30 new tokens in %v, over the limit's %d", reviews.Load(), elapsed, limit)
	}
	if elapsed < 3*time.Second {
		t.Errorf("30 new tokens reviewed in %v: the limit does not hold them back", elapsed)
	}

	hanging, err := kubernetes.NewForConfig(reviewClientConfig(&rest.Config{Host: apiserver.URL,
		WrapTransport: func(rt http.RoundTripper) http.RoundTripper {
			return roundTripperFunc(func(r *http.Request) (*http.Response, error) {
				r.Header.Set("X-Hang", "1")
				return rt.RoundTrip(r)
			})
		}}))
	if err != nil {
		t.Fatal(err)
	}
	h, err = protect(http.NotFoundHandler(), hanging)
	if err != nil {
		t.Fatal(err)
	}
	defer func(d time.Duration) { reviewTimeout = d }(reviewTimeout)
	reviewTimeout = time.Second
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	req.Header.Set("Authorization", "Bearer another")
	start = time.Now()
	h.ServeHTTP(rec, req)
	if took := time.Since(start); rec.Code != http.StatusUnauthorized || took > 3*time.Second {
		t.Errorf("with the API server not answering: %d after %v, want 401 after about %v", rec.Code, took, reviewTimeout)
	}
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestServeTLS: the metrics are served over TLS (a certificate signed by
// itself), not in plain HTTP.
func TestServeTLS(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	if err := serveTLS(t.Context(), "metrics", addr, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })); err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // signed by itself
	resp, err := client.Get("https://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.TLS == nil {
		t.Errorf("%d, TLS %v", resp.StatusCode, resp.TLS != nil)
	}
	if resp, err := http.Get("http://" + addr + "/metrics"); err == nil { //nolint:noctx // a test probe
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Errorf("plain HTTP answered 200")
		}
	}
	// HTTP/1 only; 8 connections from one address at most.
	var conns []*tls.Conn
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	for i := range maxConnsPerAddress + 1 {
		c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2", "http/1.1"}}) //nolint:gosec // signed by itself
		if i == maxConnsPerAddress {
			if err == nil {
				_ = c.SetReadDeadline(time.Now().Add(time.Second))
				_, err = c.Read(make([]byte, 1))
				_ = c.Close()
			}
			if err == nil || os.IsTimeout(err) {
				t.Errorf("connection %d from one address kept, over %d", i+1, maxConnsPerAddress)
			}
			break
		}
		if err != nil {
			t.Fatalf("connection %d: %v", i+1, err)
		}
		if p := c.ConnectionState().NegotiatedProtocol; p == "h2" {
			t.Errorf("HTTP/2 negotiated")
		}
		conns = append(conns, c)
	}
}
