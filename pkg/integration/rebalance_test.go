//go:build integration

package integration

import (
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"example.com/foo-controller/pkg/shard"
)

// TestShardedRebalance: two replicas over namespaces named as people name
// them (team-a…team-p), which equal ranges put in one or two of 8 slots.
// In a burst of Foos, with a namespace created meanwhile, the member first
// in order re-cuts the boundaries between the namespaces, every slot is
// handed over once, and the replicas end up holding about half the Foos
// each; every Foo converges, and the audit log shows every write to a
// namespace from a replica holding a slot Lease whose range held it, in
// the old layout or the new. Then the failure paths of the layout Lease:
// edited by hand into nonsense (equal ranges until the next re-cut),
// deleted by hand (re-cut at once), and a member killed in the middle of
// a re-cut (the other takes every slot once its Lease expired).
func TestShardedRebalance(t *testing.T) {
	t.Parallel()
	cl := privateCluster(t, clusterOptions{})
	const slots = shard.Slots(8)
	var spaces []*scenario
	crowded := map[int]bool{}
	for c := 'a'; c <= 'p'; c++ {
		sp := newScenarioIn(t, cl, fmt.Sprintf("team-%c", c))
		spaces = append(spaces, sp)
		crowded[slots.Of(sp.ns)] = true
	}
	if len(crowded) > 2 {
		t.Fatalf("team-a…team-p fall in %d equal slots of 8; the test needs them crowded", len(crowded))
	}
	s := spaces[0] // the Leases live in its namespace
	args := append(shardedArgs(cl, s.ns, slots, "-v=2"), "-shard-rebalance-interval=5s")
	metricsA, metricsB := freeAddr(t), freeAddr(t)
	a := s.launch(controllerBin, nil, append(args, "-metrics-bind-address="+metricsA)...)
	b := s.launch(controllerBin, nil, append(args, "-metrics-bind-address="+metricsB)...)
	layoutLease := func() (string, bool) {
		l, err := s.kube.CoordinationV1().Leases(s.ns).Get(s.ctx, "foo-controller-layout-of-8", metav1.GetOptions{})
		if err != nil {
			return err.Error(), false
		}
		return l.Annotations[shard.CutsAnnotation], true
	}
	held := func() int { return heldSlotLeases(s) }
	s.eventually(30*time.Second, "every slot held", func() (bool, string) { return held() == int(slots), strconv.Itoa(held()) })
	if _, ok := layoutLease(); ok {
		t.Fatal("a layout Lease before any Foo: nothing to balance yet")
	}

	// The burst, and a namespace created while the ranges move.
	handedOver := len(a.logLines("Handing a slot over")) + len(b.logLines("Handing a slot over"))
	const per = 8
	burst := time.Now()
	names := map[*scenario][]string{}
	for i, sp := range spaces {
		names[sp] = sp.createFoos("burst", per)
		if i == len(spaces)/2 {
			late := newScenarioIn(t, cl, "team-q")
			spaces = append(spaces, late)
			names[late] = late.createFoos("burst", per)
		}
	}
	s.eventually(60*time.Second, "the layout Lease", func() (bool, string) {
		cuts, ok := layoutLease()
		_, err := shard.ParseLayout(slots, cuts)
		return ok && err == nil, cuts
	})
	for _, sp := range spaces {
		sp.eventually(2*time.Minute, "every Foo of "+sp.ns+" converged, none orphaned", sp.invariants)
	}
	t.Logf("%d Foos in %d namespaces converged %v after the burst began", per*len(spaces), len(spaces), time.Since(burst).Round(time.Millisecond))
	gauge := func(addr, name string) float64 {
		_, body := httpGet("http://" + addr + "/metrics")
		m := regexp.MustCompile(`(?m)^` + name + ` (\S+)$`).FindStringSubmatch(body)
		if m == nil {
			return -1
		}
		v, _ := strconv.ParseFloat(m[1], 64)
		return v
	}
	total := float64(per * len(spaces))
	s.eventually(30*time.Second, "the replicas to hold about half the Foos each", func() (bool, string) {
		fa, fb := gauge(metricsA, "foo_controller_shard_foos"), gauge(metricsB, "foo_controller_shard_foos")
		skew := max(fa, fb) / (total / 2)
		// 17 namespaces of 8 Foos over 8 slots, 4 a replica: whole
		// namespaces make 9 against 8 the best split, and the cut is made
		// in the burst, on the Foos there by then (runs: 64/72, 72/64,
		// 56/80). Equal ranges would leave 136 against 0: skew 2.
		return fa+fb == total && skew <= 1.4, fmt.Sprintf("a %v, b %v of %v Foos: skew %.2f", fa, fb, total, skew)
	})
	// A re-cut hands every slot over once and each member takes its share
	// of the new ones: none takes more and hands the rest back (the
	// attack saw the first to switch take all 8).
	if n := len(a.logLines("Handing a slot over")) + len(b.logLines("Handing a slot over")) - handedOver; n > 0 {
		t.Errorf("%d slots handed over for the share after the re-cut, want none", n)
	}
	t.Logf("Foos held: a %v, b %v of %v", gauge(metricsA, "foo_controller_shard_foos"), gauge(metricsB, "foo_controller_shard_foos"), total)
	if changes := gauge(metricsA, "foo_controller_shard_layout_changes_total") + gauge(metricsB, "foo_controller_shard_layout_changes_total"); changes < 1 {
		t.Errorf("%v layout changes counted, want at least one", changes)
	}
	for _, p := range []*process{a, b} {
		if len(p.logLines("The slot boundaries changed")) == 0 {
			t.Errorf("%s did not log the change of boundaries", p.log)
		}
	}

	// Edited by hand into nonsense: equal ranges (logged), and a valid
	// re-cut once the interval has passed.
	l, err := s.kube.CoordinationV1().Leases(s.ns).Get(s.ctx, "foo-controller-layout-of-8", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l.Annotations[shard.CutsAnnotation] = "nonsense"
	if _, err := s.kube.CoordinationV1().Leases(s.ns).Update(s.ctx, l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	edited := time.Now()
	s.eventually(60*time.Second, "valid boundaries written again", func() (bool, string) {
		cuts, ok := layoutLease()
		_, err := shard.ParseLayout(slots, cuts)
		return ok && err == nil, cuts
	})
	t.Logf("the layout Lease edited into nonsense: valid again after %v", time.Since(edited).Round(time.Millisecond))
	if len(a.logLines("does not hold valid slot boundaries"))+len(b.logLines("does not hold valid slot boundaries")) == 0 {
		t.Error("nobody logged the layout Lease's nonsense")
	}
	for _, sp := range spaces {
		names[sp] = sp.createFoos("edited", 2)
	}
	for _, sp := range spaces {
		sp.eventually(2*time.Minute, "every Foo of "+sp.ns+" converged after the edit", sp.invariants)
	}

	// Deleted by hand, and a member killed in the re-cut that follows: the
	// boundaries are re-cut at once (from equal ranges), and a takes every
	// slot once b's Lease has expired.
	if err := s.kube.CoordinationV1().Leases(s.ns).Delete(s.ctx, "foo-controller-layout-of-8", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	s.eventually(30*time.Second, "the layout Lease written again", func() (bool, string) {
		cuts, ok := layoutLease()
		return ok, cuts
	})
	t.Logf("the layout Lease deleted: written again after %v", time.Since(deleted).Round(time.Millisecond))
	b.kill()
	killed := time.Now()
	for _, sp := range spaces {
		names[sp] = sp.createFoos("killed", 2)
	}
	s.eventually(60*time.Second, "a to hold every Foo", func() (bool, string) {
		fa := gauge(metricsA, "foo_controller_shard_foos")
		return fa == float64((per+4)*len(spaces)), fmt.Sprint(fa)
	})
	for _, sp := range spaces {
		sp.eventually(2*time.Minute, "every Foo of "+sp.ns+" converged after b was killed", sp.invariants)
	}
	t.Logf("b killed in a re-cut: a held every Foo and all converged %v after", time.Since(killed).Round(time.Millisecond))

	leases, checked, replicas := checkSlotWrites(t, cl, s.ns, slots)
	t.Logf("%d writes checked against %d slot Lease writes by %d replicas: each from a holder of its namespace's slot", checked, len(leases), replicas)
	if checked < per*len(spaces) {
		t.Errorf("only %d writes checked; want at least one per Foo of the burst (%d)", checked, per*len(spaces))
	}
}
