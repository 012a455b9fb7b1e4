package main

import (
	"math"
	"slices"
	"strings"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	k8sfake "k8s.io/client-go/kubernetes/fake"

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
// per-replica figures against its; each replica's Foos held, peak RSS and
// CPU side by side, with the row's skew and re-balances.
func TestPrintScaleOut(t *testing.T) {
	var b strings.Builder
	printScaleOut(&b, scaleOutReport{
		header: header{N: 10000, Namespaces: 64, NamespaceNames: namesSequential, Replicas: 0, Concurrency: 50, Date: "2026-11-26T12:00:00Z"},
		Slots:  16,
		Configs: []scaleOutConfig{
			{K: 0, Runs: []figures{{}}, Median: figures{"deployments_exist_s": 69.9, "replica_peak_rss_max_mb": 186.4, "replica_peak_rss_mean_mb": 186.4,
				"peak_rss_max_vs_leader": 1, "replica_foos_skew": 1, "replica_cpu_max_s": 30.4, "replica_cpu_mean_s": 30.4},
				Processes: []processFigures{{Slots: 16, SlotsWorked: 16, Foos: 10000, Syncs: 20012, PeakRSSMB: 186.4, LiveHeapMB: 73.1, CPUSeconds: 30.4}}},
			{K: 2, Runs: []figures{{}}, Median: figures{"deployments_exist_s": 82.7, "replica_peak_rss_max_mb": 120.3, "replica_peak_rss_mean_mb": 120.1,
				"peak_rss_max_vs_leader": 0.65, "replica_foos_skew": 1.0024, "layout_changes": 1, "replica_cpu_max_s": 20.1, "replica_cpu_mean_s": 19.8},
				Processes: []processFigures{
					{Slots: 8, SlotsWorked: 8, Foos: 5012, LayoutChanges: 1, Syncs: 10020, PeakRSSMB: 120.3, LiveHeapMB: 40.8, CPUSeconds: 20.1},
					{Slots: 8, SlotsWorked: 8, Foos: 4988, Syncs: 9990, PeakRSSMB: 119.8, LiveHeapMB: 40.2, CPUSeconds: 19.5},
				}},
			{K: 4, Runs: []figures{{}}, Median: figures{"deployments_exist_s": 98.3, "replica_peak_rss_max_mb": 95.2, "replica_peak_rss_mean_mb": 84.0,
				"peak_rss_max_vs_leader": 0.51, "replica_foos_skew": 1.04, "layout_changes": 2, "replica_cpu_max_s": 15.2, "replica_cpu_mean_s": 13.9},
				Processes: []processFigures{
					{Slots: 4, SlotsWorked: 4, Foos: 2600, LayoutChanges: 2, Syncs: 5210, PeakRSSMB: 95.2, LiveHeapMB: 24.0, CPUSeconds: 15.2},
					{Slots: 4, SlotsWorked: 5, Foos: 2480, Syncs: 4977, PeakRSSMB: 81.6, LiveHeapMB: 23.4, CPUSeconds: 13.6},
					{Slots: 4, SlotsWorked: 4, Foos: 2460, Syncs: 4931, PeakRSSMB: 80.1, LiveHeapMB: 23.1, CPUSeconds: 13.4},
					{Slots: 4, SlotsWorked: 4, Foos: 2460, Syncs: 4925, PeakRSSMB: 79.1, LiveHeapMB: 23.0, CPUSeconds: 13.3},
				}},
		},
	})
	out := b.String()
	t.Logf("printScaleOut:\n%s", out)
	for _, want := range []string{
		"N=10000 over 64 namespaces (bench-00 to bench-63)", "\n  0  1.00      - ", "\n  2  1.00      1 ", "120.3 / 120.1", "0.65",
		"  k  skew  re-bal  Foos held                      peak RSS MB                CPU s\n" +
			"  0  1.00  -       10,000                         186.4                      30.4\n" +
			"  2  1.00  1       5,012 / 4,988                  120.3 / 119.8              20.1 / 19.5\n" +
			"  4  1.04  2       2,600 / 2,480 / 2,460 / 2,460  95.2 / 81.6 / 80.1 / 79.1  15.2 / 13.6 / 13.4 / 13.3\n",
		"\n  4  1.04      2 ",
		"k=2 #1:   8 slots (8 worked)   4,988 Foos",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

// TestSkew: the most Foos a replica holds over the mean, 1 when even.
func TestSkew(t *testing.T) {
	for _, tc := range []struct {
		held []float64
		want float64
	}{
		{[]float64{10000}, 1},
		{[]float64{5000, 5000}, 1},
		{[]float64{5012, 4988}, 1.0024},
		{[]float64{7500, 2500}, 1.5},
		{[]float64{10000, 0, 0, 0}, 4}, // every namespace in one replica's slots
		{[]float64{2600, 2480, 2460, 2460}, 1.04},
		{[]float64{0, 0}, 0}, // nothing held: no skew to speak of, and no NaN in the JSON
		{nil, 0},
	} {
		if got := skew(tc.held); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("skew(%v) = %v, want %v", tc.held, got, tc.want)
		}
	}
}

// TestSpreadFigures: the skew and the group's re-balances are among the
// figures of a run, for the medians.
func TestSpreadFigures(t *testing.T) {
	got := spreadFigures([]processFigures{{Foos: 7500, LayoutChanges: 1}, {Foos: 2500, LayoutChanges: 2}})
	if got["replica_foos_skew"] != 1.5 || got["layout_changes"] != 3 || got["replica_foos_min"] != 2500 || got["replica_foos_max"] != 7500 {
		t.Errorf("spreadFigures = %v", got)
	}
}

// TestSlotsWorked: a slot counts when its queue took keys, including one
// taken again in a re-balance, whose counter started again from 0.
func TestSlotsWorked(t *testing.T) {
	parse := func(text string) sample {
		f, err := promtext.Parse(strings.NewReader("# TYPE workqueue_adds_total counter\n" + text))
		if err != nil {
			t.Fatal(err)
		}
		return sample(f)
	}
	before := parse(`workqueue_adds_total{name="foo-controller-slot-0"} 5
workqueue_adds_total{name="foo-controller-slot-1"} 900
workqueue_adds_total{name="foo-controller-slot-2"} 7
workqueue_adds_total{name="foo-controller-slot-3"} 3
`)
	after := parse(`workqueue_adds_total{name="foo-controller-slot-0"} 600
workqueue_adds_total{name="foo-controller-slot-1"} 40
workqueue_adds_total{name="foo-controller-slot-2"} 7
workqueue_adds_total{name="foo-controller-slot-4"} 12
`)
	// 0 rose; 1 started again (handed over and taken back); 2 took
	// nothing; 3 was handed away; 4 was taken.
	if got := slotsWorked(before, after, 8); got != 3 {
		t.Errorf("slotsWorked = %d, want 3", got)
	}
}

func TestThousands(t *testing.T) {
	for n, want := range map[int]string{0: "0", 999: "999", 1000: "1,000", 4988: "4,988", 10000: "10,000", 100000: "100,000", 1234567: "1,234,567", -5012: "-5,012"} {
		if got := thousands(n); got != want {
			t.Errorf("thousands(%d) = %q, want %q", n, got, want)
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

// TestResetLayout: a sharded row starts from equal ranges, the layout
// Lease of the bench's group deleted, and nothing else: not another
// group's, not a slot's, and nothing on a control plane not the bench's.
func TestResetLayout(t *testing.T) {
	lease := func(ns, name, group, role string) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(name),
			Labels: map[string]string{shard.GroupLabel: group, shard.RoleLabel: role}}}
	}
	objects := []runtime.Object{
		lease("default", "foo-controller-layout-of-16", "foo-controller", "layout"),
		lease("default", "other-layout-of-16", "other", "layout"),
		lease("default", "foo-controller-slot-3-of-16", "foo-controller", "slot"),
		lease("leases", "bench-group-layout-of-16", "bench-group", "layout"),
	}
	for _, tc := range []struct {
		name    string
		own     bool
		args    []string
		deleted string
	}{
		{name: "the defaults", own: true, deleted: "default/foo-controller-layout-of-16"},
		{name: "a group and namespace given", own: true,
			args: []string{"-leader-elect-namespace=leases", "--leader-elect-lease-name=bench-group"}, deleted: "leases/bench-group-layout-of-16"},
		{name: "a control plane of the caller's"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kube := k8sfake.NewClientset(objects...)
			o := options{ownControlPlane: tc.own, controller: controllerExtras{args: tc.args}}
			if err := resetLayout(t.Context(), clients{kube: kube}, o); err != nil {
				t.Fatal(err)
			}
			all, err := kube.CoordinationV1().Leases(metav1.NamespaceAll).List(t.Context(), metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var left []string
			for _, l := range all.Items {
				left = append(left, l.Namespace+"/"+l.Name)
			}
			want := len(objects)
			if tc.deleted != "" {
				want--
			}
			if len(left) != want || slices.Contains(left, tc.deleted) {
				t.Errorf("left %v, want all but %q", left, tc.deleted)
			}
		})
	}
}

func TestControllerFlag(t *testing.T) {
	args := []string{"-workers=8", "--leader-elect-namespace=a", "-leader-elect-namespace-x=b", "-leader-elect-namespace=c"}
	if got := controllerFlag(args, "leader-elect-namespace", "d"); got != "c" {
		t.Errorf("controllerFlag = %q, want the last given, c", got)
	}
	if got := controllerFlag(args, "leader-elect-lease-name", "foo-controller"); got != "foo-controller" {
		t.Errorf("controllerFlag = %q, want the default", got)
	}
}
