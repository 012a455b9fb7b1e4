package promtext

import (
	"maps"
	"strings"
	"testing"
)

// scrape is shaped as client_golang exposes it: labels sorted, le and
// quantile last, histogram series as _bucket, _sum and _count.
const scrape = `# HELP rest_client_requests_total Number of HTTP requests, partitioned by status code, method, and host.
# TYPE rest_client_requests_total counter
rest_client_requests_total{code="200",host="10.0.0.1:6443",method="GET"} 40
rest_client_requests_total{code="200",host="10.0.0.1:6443",method="PATCH"} 7
rest_client_requests_total{code="403",host="10.0.0.1:6443",method="PATCH"} 2
rest_client_requests_total{code="500",host="10.0.0.1:6443",method="GET"} 1
rest_client_requests_total{code="503",host="10.0.0.1:6443",method="PUT"} 3
rest_client_requests_total{code="<error>",host="10.0.0.1:6443",method="GET"} 5
# HELP workqueue_depth [ALPHA] Current depth of workqueue
# TYPE workqueue_depth gauge
workqueue_depth{name="foo-controller"} 4
workqueue_depth{name="other"} 9
# HELP foo_controller_leader [ALPHA] 1 while this process is the leader and runs workers, else 0.
# TYPE foo_controller_leader gauge
foo_controller_leader 1
# HELP foo_controller_reconcile_duration_seconds [ALPHA] Time one Foo sync takes, by result.
# TYPE foo_controller_reconcile_duration_seconds histogram
foo_controller_reconcile_duration_seconds_bucket{result="error",le="0.5"} 1
foo_controller_reconcile_duration_seconds_bucket{result="error",le="5"} 2
foo_controller_reconcile_duration_seconds_bucket{result="error",le="+Inf"} 4
foo_controller_reconcile_duration_seconds_sum{result="error"} 31.5
foo_controller_reconcile_duration_seconds_count{result="error"} 4
foo_controller_reconcile_duration_seconds_bucket{result="success",le="0.5"} 10
foo_controller_reconcile_duration_seconds_bucket{result="success",le="5"} 12
foo_controller_reconcile_duration_seconds_bucket{result="success",le="+Inf"} 12
foo_controller_reconcile_duration_seconds_sum{result="success"} 2.25
foo_controller_reconcile_duration_seconds_count{result="success"} 12
# HELP go_gc_duration_seconds A summary of the wall-time pause (stop-the-world) duration in garbage collection cycles.
# TYPE go_gc_duration_seconds summary
go_gc_duration_seconds{quantile="0"} 1e-05
go_gc_duration_seconds{quantile="0.5"} 0.0002
go_gc_duration_seconds{quantile="1"} 0.003
go_gc_duration_seconds_sum 0.0125
go_gc_duration_seconds_count 30
legacy_thing{path="/a \"quoted\" path"} 6
legacy_thing{path="/b"} 1
`

func TestSum(t *testing.T) {
	f, err := Parse(strings.NewReader(scrape))
	if err != nil {
		t.Fatal(err)
	}
	const hist = "foo_controller_reconcile_duration_seconds"
	for _, tc := range []struct {
		name      string
		fragments []string
		want      float64
		wantFound bool
	}{
		// counter
		{"rest_client_requests_total", nil, 58, true},
		{"rest_client_requests_total", []string{`code="403"`}, 2, true},
		{"rest_client_requests_total", []string{`code="5`}, 4, true}, // a prefix: every 5xx
		{"rest_client_requests_total", []string{`code="<error>"`}, 5, true},
		{"rest_client_requests_total", []string{`code="2`, `method="PATCH"`}, 7, true},
		{"rest_client_requests_total", []string{`method="DELETE"`}, 0, false},
		// gauge, with and without labels
		{"workqueue_depth", []string{`name="foo-controller"`}, 4, true},
		{"workqueue_depth", nil, 13, true},
		{"foo_controller_leader", nil, 1, true},
		// histogram: cumulative buckets, sum, count; nothing under its own name
		{hist + "_bucket", []string{`le="5"`}, 14, true},
		{hist + "_bucket", []string{`result="error"`, `le="+Inf"`}, 4, true},
		{hist + "_bucket", []string{`le="0.5"`}, 11, true},
		{hist + "_bucket", []string{`le="7"`}, 0, false},
		{hist + "_count", nil, 16, true},
		{hist + "_count", []string{`result="success"`}, 12, true},
		{hist + "_sum", nil, 33.75, true},
		{hist, nil, 0, false},
		// summary: quantiles under its own name, sum, count; no buckets
		{"go_gc_duration_seconds", []string{`quantile="0.5"`}, 0.0002, true},
		{"go_gc_duration_seconds_count", nil, 30, true},
		{"go_gc_duration_seconds_sum", nil, 0.0125, true},
		{"go_gc_duration_seconds_bucket", nil, 0, false},
		// untyped (no TYPE line), a label value matched as exposed (escaped)
		{"legacy_thing", nil, 7, true},
		{"legacy_thing", []string{`path="/a \"quoted\" path"`}, 6, true},
		// missing
		{"no_such_metric", nil, 0, false},
		{"rest_client_requests", nil, 0, false}, // a prefix of a name is not the name
	} {
		got, found := f.Sum(tc.name, tc.fragments...)
		if got != tc.want || found != tc.wantFound {
			t.Errorf("Sum(%s, %q) = %v, %v; want %v, %v", tc.name, tc.fragments, got, found, tc.want, tc.wantFound)
		}
	}
}

func TestSumBy(t *testing.T) {
	f, err := Parse(strings.NewReader(scrape))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"GET": 46, "PATCH": 9, "PUT": 3}
	if got := f.SumBy("rest_client_requests_total", "method"); !maps.Equal(got, want) {
		t.Errorf("SumBy(method) = %v, want %v", got, want)
	}
	if got := f.SumBy("workqueue_depth", "method"); len(got) != 0 {
		t.Errorf("SumBy on series without the label = %v, want none", got)
	}
}

// Text that is not a scrape (an HTTP error body, a truncated line) is an
// error, not an empty result.
func TestParseError(t *testing.T) {
	for _, in := range []string{
		"dial tcp 127.0.0.1:8080: connect: connection refused",
		"rest_client_requests_total{code=\"200\"",
	} {
		if _, err := Parse(strings.NewReader(in)); err == nil {
			t.Errorf("Parse(%q): no error", in)
		}
	}
}
