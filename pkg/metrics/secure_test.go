package metrics

import (
	"crypto/tls"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// TestProtected: what Protected asks the API server, and what it answers
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
	h, err := Protected(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "metrics") }), kube)
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
}

// TestServeTLS: the metrics are served over TLS (a certificate signed by
// itself), not in plain HTTP.
func TestServeTLS(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	if err := ServeTLS(t.Context(), "metrics", addr, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })); err != nil {
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
}
