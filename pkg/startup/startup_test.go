package startup

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// TestCheckAPIExplainsWhatIsMissing: at start, a missing CRD, a missing
// permission to list what the informers watch, or an address where nothing
// answers (past the wait) is one clear error (main prints it and exits 1),
// not informers retrying forever; a refusal from a ready API server is
// not waited for.
func TestCheckAPIExplainsWhatIsMissing(t *testing.T) {
	for _, tc := range []struct{ refused, want string }{
		{fooGV, "API samplecontroller.example.com/v1beta1 is not served (is the CRD installed?"},
		{fooGV + "/foos", "cannot list foos (does the controller's identity have RBAC permission"},
		{"/apis/apps/v1/deployments", "cannot list deployments (does the controller's identity have RBAC permission"},
		{"/api/v1/namespaces", "cannot list namespaces (does the controller's identity have RBAC permission"},
		{"everything", "cannot reach the API server at http://"},
		{"nothing", ""},
	} {
		t.Run(tc.refused, func(t *testing.T) {
			srv := httptest.NewServer(fakeAPIServer(tc.refused, http.StatusForbidden, http.StatusOK))
			host := srv.URL
			if tc.refused == "everything" {
				srv.Close() // nothing listens there any more
			}
			defer srv.Close()
			wait := time.Minute
			if tc.refused == "everything" {
				wait = 0 // would be waited for: TestCheckAPIWaitsForTheAPIServer
			}
			start := time.Now()
			err := CheckAPI(t.Context(), &rest.Config{Host: host}, "", wait)
			if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("got %v, want an error containing %q", err, tc.want)
			}
			if took := time.Since(start); took > 10*time.Second {
				t.Errorf("took %v: a refusal from a ready API server was waited for", took)
			}
		})
	}
	t.Run("CRD without foos", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"kind":"APIResourceList","groupVersion":"samplecontroller.example.com/v1beta1","resources":[]}`))
		}))
		defer srv.Close()
		err := CheckAPI(t.Context(), &rest.Config{Host: srv.URL}, "", time.Minute)
		if err == nil || !strings.Contains(err.Error(), "does not serve foos") {
			t.Errorf("got %v, want the CRD named", err)
		}
	})
	t.Run("no such host", func(t *testing.T) {
		start := time.Now()
		err := CheckAPI(t.Context(), &rest.Config{Host: "https://no-such-host.invalid"}, "", time.Minute)
		if err == nil || !strings.Contains(err.Error(), "cannot reach the API server") {
			t.Errorf("got %v, want it named unreachable", err)
		}
		if took := time.Since(start); took > 10*time.Second {
			t.Errorf("took %v: a wrong address was waited for", took)
		}
	})
}

// TestCheckAPIWaitsForTheAPIServer: an API server that is not there yet,
// answers 5xx or 429, or refuses while its /readyz fails (its RBAC cache
// filling after a start) is waited for, up to the bound; a signal ends the
// wait as a clean stop.
func TestCheckAPIWaitsForTheAPIServer(t *testing.T) {
	t.Run("comes up", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		_ = l.Close() // connections are refused until the server starts
		const after = 1500 * time.Millisecond
		go func() {
			time.Sleep(after)
			l, err := net.Listen("tcp", addr)
			if err != nil {
				t.Error(err)
				return
			}
			srv := httptest.NewUnstartedServer(fakeAPIServer("nothing", 0, http.StatusOK))
			srv.Listener = l
			srv.Start()
			t.Cleanup(srv.Close)
		}()
		start := time.Now()
		if err := CheckAPI(t.Context(), &rest.Config{Host: "http://" + addr}, "", 20*time.Second); err != nil {
			t.Fatalf("got %v, want the API server waited for", err)
		}
		if took := time.Since(start); took < after {
			t.Errorf("returned after %v, before the API server was up", took)
		}
	})
	for _, tc := range []struct {
		name     string
		refused  string
		code     int
		readyz   int
		contains string
		notRBAC  bool
	}{
		{"503 on list", fooGV + "/foos", http.StatusServiceUnavailable, http.StatusOK, "cannot list foos", true},
		{"500 on list", "/apis/apps/v1/deployments", http.StatusInternalServerError, http.StatusOK, "cannot list deployments", true},
		{"504 on list", fooGV + "/foos", http.StatusGatewayTimeout, http.StatusOK, "cannot list foos", true},
		{"429 on list", fooGV + "/foos", http.StatusTooManyRequests, http.StatusOK, "cannot list foos", true},
		{"503 on discovery", fooGV, http.StatusServiceUnavailable, http.StatusOK, "is not served", false},
		{"403 while not ready", fooGV + "/foos", http.StatusForbidden, http.StatusInternalServerError, "RBAC permission", false},
		{"404 while not ready", fooGV, http.StatusNotFound, http.StatusInternalServerError, "is not served", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(fakeAPIServer(tc.refused, tc.code, tc.readyz))
			defer srv.Close()
			const bound = 1500 * time.Millisecond
			start := time.Now()
			err := CheckAPI(t.Context(), &rest.Config{Host: srv.URL}, "", bound)
			took := time.Since(start)
			if err == nil || !strings.Contains(err.Error(), tc.contains) {
				t.Errorf("got %v, want an error containing %q", err, tc.contains)
			}
			if tc.notRBAC && err != nil && strings.Contains(err.Error(), "RBAC") {
				t.Errorf("got %v: an unavailable API server is not an RBAC problem", err)
			}
			if took < bound {
				t.Errorf("returned after %v, want it waited for (bound %v)", took, bound)
			}
		})
	}
	t.Run("signal while waiting", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(500*time.Millisecond, cancel)
		start := time.Now()
		err := CheckAPI(ctx, &rest.Config{Host: "http://127.0.0.1:1"}, "", time.Minute)
		if !errors.Is(err, context.Canceled) {
			t.Errorf("got %v, want context.Canceled (main: a clean stop)", err)
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("the signal ended the wait only after %v", took)
		}
	})
	t.Run("signal while a try hangs", func(t *testing.T) {
		hang := make(chan struct{})
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-hang }))
		defer srv.Close()
		defer close(hang)
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(500*time.Millisecond, cancel)
		start := time.Now()
		err := CheckAPI(ctx, &rest.Config{Host: srv.URL}, "", time.Minute)
		if !errors.Is(err, context.Canceled) {
			t.Errorf("got %v, want context.Canceled", err)
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("the signal ended the wait only after %v", took)
		}
	})
}

const fooGV = "/apis/samplecontroller.example.com/v1beta1"

// fakeAPIServer answers the start-up checks: code for the path refused
// ("nothing": no path is), readyz for /readyz.
func fakeAPIServer(refused string, code, readyz int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case refused:
			w.WriteHeader(code)
			_, _ = fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":%q,"code":%d}`,
				metav1.StatusReason(strings.ReplaceAll(http.StatusText(code), " ", "")), code)
		case "/readyz":
			w.WriteHeader(readyz)
			_, _ = w.Write([]byte("ok"))
		case "/version":
			_, _ = w.Write([]byte(`{"major":"1","minor":"37"}`))
		case fooGV:
			_, _ = w.Write([]byte(`{"kind":"APIResourceList","groupVersion":"samplecontroller.example.com/v1beta1",` +
				`"resources":[{"name":"foos","namespaced":true,"kind":"Foo","verbs":["list","watch"]}]}`))
		case fooGV + "/foos":
			_, _ = w.Write([]byte(`{"kind":"FooList","apiVersion":"samplecontroller.example.com/v1beta1","items":[]}`))
		case "/api/v1/namespaces":
			_, _ = w.Write([]byte(`{"kind":"NamespaceList","apiVersion":"v1","items":[]}`))
		default:
			_, _ = w.Write([]byte(`{"kind":"DeploymentList","apiVersion":"apps/v1","items":[]}`))
		}
	})
}
