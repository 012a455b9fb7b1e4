package metrics

import (
	"net/http"
	"net/http/httptest"
	"regexp"
	"testing"

	"k8s.io/client-go/util/workqueue"
)

// queueSeries scrapes /metrics and returns, for each workqueue_* series of
// the queue called name, its value ("workqueue_depth" → "3").
func queueSeries(t *testing.T, name string) map[string]string {
	t.Helper()
	rec := httptest.NewRecorder()
	metricsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	series := map[string]string{}
	re := regexp.MustCompile(`(?m)^(workqueue_[a-z_]+)\{name="` + regexp.QuoteMeta(name) + `"\} (\S+)$`)
	for _, m := range re.FindAllStringSubmatch(rec.Body.String(), -1) {
		series[m[1]] = m[2]
	}
	return series
}

// TestForgetQueue: a named workqueue exports the seven workqueue series
// under its name, as component-base's adapter does; once it has shut down,
// its series stay at their last value (what a handed-over slot's queue
// showed on the replica that let it go) until ForgetQueue removes them. A
// queue of the same name made later starts afresh.
func TestForgetQueue(t *testing.T) {
	Register("test", "0123abc")
	const name = "test-slot-3"
	newQ := func() workqueue.TypedRateLimitingInterface[string] {
		return workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: name})
	}
	q := newQ()
	q.Add("a")
	q.Add("b")
	q.AddRateLimited("c")
	got := queueSeries(t, name)
	for _, s := range []string{"workqueue_depth", "workqueue_adds_total", "workqueue_unfinished_work_seconds",
		"workqueue_longest_running_processor_seconds", "workqueue_retries_total"} {
		if _, ok := got[s]; !ok {
			t.Errorf("%s{name=%q} missing: %v", s, name, got)
		}
	}
	if d := got["workqueue_depth"]; d != "2" && d != "3" { // c comes in after its 5ms
		t.Errorf("depth %s, want 2 or 3", d)
	}
	q.ShutDown()
	last := queueSeries(t, name)["workqueue_depth"]
	if last == "0" || last == "" {
		t.Fatalf("depth %q after ShutDown", last)
	}
	if got := queueSeries(t, name); got["workqueue_depth"] != last {
		t.Errorf("after ShutDown alone, depth %q then %q; client-go leaves it at its last value", last, got["workqueue_depth"])
	}
	ForgetQueue(name)
	if got := queueSeries(t, name); len(got) != 0 {
		t.Errorf("after ForgetQueue: %v, want no series", got)
	}
	q.Add("late") // a shut-down queue's late record goes nowhere
	if got := queueSeries(t, name); len(got) != 0 {
		t.Errorf("after a late Add: %v, want no series", got)
	}
	q = newQ()
	defer func() { q.ShutDown(); ForgetQueue(name) }()
	q.Add("x")
	if got := queueSeries(t, name); got["workqueue_depth"] != "1" || got["workqueue_adds_total"] != "1" {
		t.Errorf("a new queue of the same name: %v, want depth 1 and adds 1 (afresh)", got)
	}
}
