package metrics

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// ServeProbes serves the health probes on addr ("0" or "" disables them).
// Liveness: the process serves, and live passes: a leader (or a shard
// member) still renews its Lease; one stuck past the renew deadline gets
// restarted; one that gives up exits by itself. Readiness: the caches are
// synced (standbys too: they are ready to take over; sharded, see
// shard.Ready), and the conversion webhook, if served (webhookReady not
// nil), has a certificate to serve. They are served before the start-up
// checks, so that a liveness probe does not kill a process that waits for
// the API server (startup.CheckAPI); /readyz fails until ready says why
// no more.
func ServeProbes(ctx context.Context, addr string, live Check, ready *atomic.Pointer[func() error], webhookReady func() error) error {
	probes := http.NewServeMux()
	probes.Handle("/healthz", probeHandler(live))
	readiness := []Check{{Name: "informers", Check: func(*http.Request) error {
		f := ready.Load()
		if f == nil {
			return errors.New("starting: checking the API server")
		}
		return (*f)()
	}}}
	if webhookReady != nil {
		readiness = append(readiness, Check{Name: "conversion-webhook", Check: func(*http.Request) error { return webhookReady() }})
	}
	probes.Handle("/readyz", probeHandler(readiness...))
	return servePlain(ctx, "health probes", addr, probes)
}

// Endpoint is where and how ServeMetrics serves: the -metrics-bind-address,
// -metrics-secure and -profiling flags.
type Endpoint struct {
	Addr      string // "0" or "": not served
	Secure    bool   // HTTPS, behind the API server's reviews; else plain HTTP to anyone
	Profiling bool   // Go's profiles beside /metrics (metricsMux)
}

// ServeMetrics serves /metrics (and, with profiling, Go's profiles) over
// HTTPS to the clients the API server says may get them (delegated
// authentication and authorization: docs/operations.md), or, not Secure,
// to anyone over plain HTTP (make run). Its client, from cfg, is outside
// the write guard: a standby's reviews are no Foo's writes.
func ServeMetrics(ctx context.Context, cfg *rest.Config, e Endpoint) error {
	mux := metricsMux(e.Profiling)
	if !e.Secure {
		return servePlain(ctx, "metrics", e.Addr, mux)
	}
	if e.Addr == "" || e.Addr == "0" {
		return nil
	}
	kube, err := kubernetes.NewForConfig(reviewClientConfig(cfg))
	if err != nil {
		return err
	}
	protected, err := protect(mux, kube)
	if err != nil {
		return err
	}
	return serveTLS(ctx, "metrics", e.Addr, protected)
}

// CountWatchErrors makes the informers count their list/watch failures (a
// cache going stale is otherwise only a log line), by resource, in
// watchErrors, then log them as client-go does by default.
func CountWatchErrors(informers map[string]cache.SharedIndexInformer) error {
	for resource, inf := range informers {
		if err := inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
			watchErrors.WithLabelValues(resource).Inc()
			cache.DefaultWatchErrorHandler(ctx, r, err)
		}); err != nil {
			return err
		}
	}
	return nil
}
