package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"

	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"
)

// Check is a named health check: nil means healthy.
type Check struct {
	Name  string
	Check func(*http.Request) error
}

// metricsHandler serves the registered metrics in the Prometheus text format.
func metricsHandler() http.Handler { return legacyregistry.Handler() }

// metricsMux serves /metrics and, with profiling, Go's profiles under
// /debug/pprof/ (heap, goroutines, CPU), for measuring the controller at
// scale. Off by default: profiles show the process's internals to anyone
// who can reach the port.
func metricsMux(profiling bool) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/metrics", metricsHandler())
	if profiling {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}

// probeHandler answers 200 "ok" when every check passes, else 500 with the
// failing checks, one per line (what kubelet logs on a failed probe).
func probeHandler(checks ...Check) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var failed []error
		for _, c := range checks {
			if err := c.Check(r); err != nil {
				failed = append(failed, fmt.Errorf("%s: %w", c.Name, err))
			}
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if len(failed) > 0 {
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = fmt.Fprintln(w, errors.Join(failed...))
			return
		}
		_, _ = fmt.Fprintln(w, "ok")
	})
}

// servePlain serves handler over plain HTTP on addr until ctx is done ("0"
// or "" disables it). Listening happens before servePlain returns, so a bad
// or taken address is an error at start-up, not a log line later.
func servePlain(ctx context.Context, name, addr string, handler http.Handler) error {
	if addr == "" || addr == "0" {
		return nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("%s server: %w", name, err)
	}
	srv := newServer(ctx, handler)
	ln = limited(ctx, name, ln)
	serveUntil(ctx, name, srv, func() error { return srv.Serve(ln) })
	klog.FromContext(ctx).Info("Serving", "server", name, "address", ln.Addr().String())
	return nil
}
