package metrics

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"example.com/foo-controller/pkg/promtext"
)

func TestProbeHandler(t *testing.T) {
	synced := false
	h := probeHandler(
		Check{Name: "always", Check: func(*http.Request) error { return nil }},
		Check{Name: "informers", Check: func(*http.Request) error {
			if !synced {
				return errors.New("caches not synced yet")
			}
			return nil
		}},
	)
	get := func() (int, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		b, _ := io.ReadAll(rec.Body)
		return rec.Code, string(b)
	}
	if code, body := get(); code != http.StatusInternalServerError || !strings.Contains(body, "informers: caches not synced yet") ||
		strings.Contains(body, "always") {
		t.Errorf("before sync: %d %q", code, body)
	}
	synced = true
	if code, body := get(); code != http.StatusOK || strings.TrimSpace(body) != "ok" {
		t.Errorf("after sync: %d %q", code, body)
	}
}

func TestServeDisabledAndBadAddress(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := servePlain(ctx, "metrics", "0", http.NotFoundHandler()); err != nil {
		t.Errorf(`"0" must disable the server: %v`, err)
	}
	if err := servePlain(ctx, "metrics", "not-an-address", http.NotFoundHandler()); err == nil {
		t.Error("a bad address must fail at start-up")
	}
}

// The integration tests and hack/bench read this output with expfmt
// (pkg/promtext), which refuses a malformed exposition where a line scan
// would skip it: check that it parses, a histogram bucket included.
func TestMetricsHandlerParses(t *testing.T) {
	Register("test", "0123abc")
	ReconcileDuration.WithLabelValues(ResultSuccess).Observe(3)
	rec := httptest.NewRecorder()
	metricsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	f, err := promtext.Parse(rec.Body)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := f.Sum("foo_controller_reconcile_duration_seconds_bucket", `result="success"`, `le="5"`); v < 1 {
		t.Errorf(`reconcile_duration_seconds_bucket{le="5"} = %v, want >= 1`, v)
	}
	if _, ok := f.Sum("foo_controller_build_info", `version="test"`, `revision="0123abc"`); !ok {
		t.Error("foo_controller_build_info missing")
	}
}

// TestMetricsMuxProfiling: Go's profiles are served only when asked for.
func TestMetricsMuxProfiling(t *testing.T) {
	for _, profiling := range []bool{false, true} {
		rec := httptest.NewRecorder()
		metricsMux(profiling).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/pprof/heap?debug=1", nil))
		served := rec.Code == http.StatusOK && strings.Contains(rec.Body.String(), "heap profile")
		if served != profiling {
			t.Errorf("profiling=%v: /debug/pprof/heap answered %d", profiling, rec.Code)
		}
		rec = httptest.NewRecorder()
		metricsMux(profiling).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		if rec.Code != http.StatusOK {
			t.Errorf("profiling=%v: /metrics answered %d", profiling, rec.Code)
		}
	}
}
