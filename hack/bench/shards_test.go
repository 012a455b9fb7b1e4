package main

import (
	"slices"
	"strings"
	"testing"

	"example.com/foo-controller/pkg/promtext"
	"example.com/foo-controller/pkg/shard"
)

// TestSpreadNamespaces: the scale-out run's namespaces fill every slot
// evenly (count/slots each, or one more), where names numbered at their
// end would crowd a few slots (TestSequentialNamesCrowd); they are
// distinct, start "bench-" (checkClean finds what an interrupted run left)
// and are valid namespace names.
func TestSpreadNamespaces(t *testing.T) {
	for _, tc := range []struct{ count, slots int }{{16, 16}, {32, 16}, {64, 16}, {20, 16}, {100, 16}, {8, 4}, {300, 256}} {
		slots := shard.Slots(tc.slots)
		names, err := spreadNamespaces("k2-1-1767225600", tc.count, slots)
		if err != nil {
			t.Fatalf("%d over %d slots: %v", tc.count, tc.slots, err)
		}
		if len(names) != tc.count {
			t.Fatalf("%d over %d slots: got %d names", tc.count, tc.slots, len(names))
		}
		per := make([]int, tc.slots)
		for _, n := range names {
			per[slots.Of(n)]++
			if !strings.HasPrefix(n, "bench-") || len(n) > 63 {
				t.Errorf("name %q", n)
			}
		}
		if lo, hi := slices.Min(per), slices.Max(per); lo != tc.count/tc.slots || hi > lo+1 {
			t.Errorf("%d over %d slots: per slot %v", tc.count, tc.slots, per)
		}
		if len(slices.Compact(slices.Sorted(slices.Values(names)))) != tc.count {
			t.Errorf("%d over %d slots: names repeat", tc.count, tc.slots)
		}
	}
}

// TestSharedOut: the bench starts measuring sharded replicas only once
// each holds its share (shard.Share), whatever their order.
func TestSharedOut(t *testing.T) {
	for _, tc := range []struct {
		held  []int
		slots int
		want  bool
	}{
		{[]int{16}, 16, true},
		{[]int{8, 8}, 16, true},
		{[]int{16, 0}, 16, false}, // the first to start took everything
		{[]int{9, 7}, 16, false},
		{[]int{4, 4, 4, 4}, 16, true},
		{[]int{5, 6, 5}, 16, true},
		{[]int{6, 6, 4}, 16, false},
		{[]int{4, 4, 4, 3}, 16, false}, // one slot still free
	} {
		if got := sharedOut(tc.held, tc.slots); got != tc.want {
			t.Errorf("sharedOut(%v, %d) = %v, want %v", tc.held, tc.slots, got, tc.want)
		}
	}
	if got := fairShares(16, 3); !slices.Equal(got, []int{6, 5, 5}) {
		t.Errorf("fairShares(16, 3) = %v", got)
	}
}

// TestSumSamples: converge over several processes reads their metrics
// summed: requests per method, and the depth of every workqueue of ours (a
// leader's, each slot's), not of another.
func TestSumSamples(t *testing.T) {
	parse := func(text string) sample {
		f, err := promtext.Parse(strings.NewReader(text))
		if err != nil {
			t.Fatal(err)
		}
		return sample(f)
	}
	a := parse(`# TYPE rest_client_requests_total counter
rest_client_requests_total{code="200",host="h",method="GET"} 3
rest_client_requests_total{code="201",host="h",method="POST"} 5
# TYPE workqueue_depth gauge
workqueue_depth{name="foo-controller-slot-1"} 2
workqueue_depth{name="foo-controller-slot-2"} 1
workqueue_depth{name="other"} 100
`)
	b := parse(`# TYPE rest_client_requests_total counter
rest_client_requests_total{code="201",host="h",method="POST"} 7
# TYPE workqueue_depth gauge
workqueue_depth{name="foo-controller-slot-3"} 4
# TYPE foo_controller_shard_slots gauge
foo_controller_shard_slots 8
`)
	leader := parse(`# TYPE workqueue_depth gauge
workqueue_depth{name="foo-controller"} 6
`)
	sum := sumSamples(a, b)
	if got := sum.requestsByMethod(); got["GET"] != 3 || got["POST"] != 12 {
		t.Errorf("requests by method = %v, want GET 3, POST 12", got)
	}
	if got := sum.sum("workqueue_depth", ourQueues); got != 7 {
		t.Errorf("depth of our queues = %v, want 7", got)
	}
	if got := sum.sum("foo_controller_shard_slots"); got != 8 {
		t.Errorf("slots = %v, want 8", got)
	}
	if got := sumSamples(leader).sum("workqueue_depth", ourQueues); got != 6 {
		t.Errorf("the leader's depth = %v, want 6", got)
	}
	// The inputs are not changed by the sum.
	if got := a.sum("workqueue_depth", ourQueues); got != 3 {
		t.Errorf("a's depth after the sum = %v, want 3", got)
	}
}

// TestWithoutLeaseWrites: the sharded replicas' PUTs (their Lease
// renewals, withoutLeaseWrites) are left out of the sum converge counts,
// and not from the processes' own samples.
func TestWithoutLeaseWrites(t *testing.T) {
	f, err := promtext.Parse(strings.NewReader(`# TYPE rest_client_requests_total counter
rest_client_requests_total{code="200",host="h",method="PUT"} 30
rest_client_requests_total{code="201",host="h",method="POST"} 5
rest_client_requests_total{code="200",host="h",method="PATCH"} 9
`))
	if err != nil {
		t.Fatal(err)
	}
	s := withoutPUTs(sumSamples(sample(f)))
	if got := s.requestsByMethod(); got["PUT"] != 0 || got["POST"] != 5 || got["PATCH"] != 9 {
		t.Errorf("summed without PUTs: %v", got)
	}
	if got := sample(f).requestsByMethod(); got["PUT"] != 30 {
		t.Errorf("the process's own sample lost its PUTs: %v", got)
	}
}

// TestPrintScaleOut: a row per configuration, the leader first, with the
// per-replica figures against its.
func TestPrintScaleOut(t *testing.T) {
	var b strings.Builder
	printScaleOut(&b, scaleOutReport{header: header{N: 300}, Slots: 16, Namespaces: 32, Configs: []scaleOutConfig{
		{K: 0, Runs: []figures{{}}, Median: figures{"deployments_exist_s": 10, "replica_peak_rss_max_mb": 100, "peak_rss_max_vs_leader": 1}},
		{K: 2, Runs: []figures{{}}, Median: figures{"deployments_exist_s": 6, "replica_peak_rss_max_mb": 60, "peak_rss_max_vs_leader": 0.6},
			Processes: []processFigures{{Slots: 8, Foos: 150}, {Slots: 8, Foos: 150}}},
	}})
	out := b.String()
	for _, want := range []string{"N=300 over 32 namespaces", "\n  0 ", "\n  2 ", "60.0 / 0.0", "0.60", "k=2 #1:   8 slots"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

// TestControlPlaneCPU: the control plane's CPU is its components' over
// the burst and the tail, without the bench's and the controllers'.
func TestControlPlaneCPU(t *testing.T) {
	got, ok := controlPlaneCPU(figures{
		"burst_cpu_kube_apiserver_s": 10, "tail_cpu_kube_apiserver_s": 2, "burst_cpu_etcd_s": 3,
		"burst_cpu_bench_s": 5, "burst_cpu_controller_1_s": 4, "tail_cpu_controller_s": 1, "burst_cpu_cores": 1.8,
		"floor_cpu_etcd_s": 100,
	})
	if !ok || got != 15 {
		t.Errorf("controlPlaneCPU = %v, %v; want 15, true", got, ok)
	}
	if _, ok := controlPlaneCPU(figures{"burst_cpu_bench_s": 5, "burst_cpu_controller_s": 4}); ok {
		t.Error("controlPlaneCPU found a control plane in figures without one")
	}
}
