//go:build integration

package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"example.com/foo-controller/pkg/shard"
)

// spacesOverSlots creates scenarios (namespaces) on cl, at least eight,
// until every slot has one.
func spacesOverSlots(t *testing.T, cl *cluster, slots shard.Slots) []*scenario {
	t.Helper()
	var spaces []*scenario
	bySlot := map[int]int{}
	for len(bySlot) < int(slots) || len(spaces) < 8 {
		sp := newScenarioOn(t, cl)
		spaces = append(spaces, sp)
		bySlot[slots.Of(sp.ns)]++
		if len(spaces) > 40 {
			t.Fatalf("40 namespaces did not cover %d slots: %v", int(slots), bySlot)
		}
	}
	return spaces
}

// spacesInSlots creates per scenarios (namespaces) in each slot, named
// after the test and the same in every run: scenario i is in slot i mod
// slots. Unlike spacesOverSlots, the count and the slots are fixed, so that
// a seeded test that picks namespaces by index picks the same slots again.
func spacesInSlots(t *testing.T, cl *cluster, slots shard.Slots, per int) []*scenario {
	t.Helper()
	bySlot := make([][]string, int(slots))
	for i, filled := 0, 0; filled < int(slots)*per; i++ {
		name := fmt.Sprintf("%s-%d", testSlug(t), i)
		if slot := slots.Of(name); len(bySlot[slot]) < per {
			bySlot[slot] = append(bySlot[slot], name)
			filled++
		}
	}
	spaces := make([]*scenario, 0, int(slots)*per)
	for i := range int(slots) * per {
		spaces = append(spaces, newScenarioIn(t, cl, bySlot[i%int(slots)][i/int(slots)]))
	}
	return spaces
}

// shardedArgs are the flags of a sharded controller process on cl with its
// Leases in leaseNS: short Lease timings (6s, 4s, 1s), no fixed ports.
func shardedArgs(cl *cluster, leaseNS string, slots shard.Slots, verbosity string) []string {
	return []string{
		"-kubeconfig=" + cl.ctrlKC, verbosity,
		"-metrics-bind-address=0", "-health-probe-bind-address=0", plainMetrics,
		fmt.Sprintf("-shard-slots=%d", int(slots)), "-leader-elect-namespace=" + leaseNS,
		"-leader-elect-lease-duration=6s", "-leader-elect-renew-deadline=4s", "-leader-elect-retry-period=1s",
	}
}

// slotHolders reads the slot Leases of a group of the given slot count
// from s's namespace: slot → holder ("" while free).
func slotHolders(s *scenario, slots shard.Slots) map[int]string {
	s.t.Helper()
	list, err := s.kube.CoordinationV1().Leases(s.ns).List(s.ctx, metav1.ListOptions{
		LabelSelector: shard.RoleLabel + "=slot," + shard.SlotsLabel + "=" + strconv.Itoa(int(slots))})
	if err != nil {
		s.t.Fatal(err)
	}
	h := map[int]string{}
	for _, l := range list.Items {
		var slot int
		if _, err := fmt.Sscan(l.Labels[shard.SlotLabel], &slot); err == nil {
			h[slot] = ptr.Deref(l.Spec.HolderIdentity, "")
		}
	}
	return h
}

// heldSlotLeases counts the slot Leases in s's namespace that name a
// holder, of any slot count or layout.
func heldSlotLeases(s *scenario) int {
	s.t.Helper()
	list, err := s.kube.CoordinationV1().Leases(s.ns).List(s.ctx, metav1.ListOptions{LabelSelector: shard.RoleLabel + "=slot"})
	if err != nil {
		s.t.Fatal(err)
	}
	n := 0
	for _, l := range list.Items {
		if ptr.Deref(l.Spec.HolderIdentity, "") != "" {
			n++
		}
	}
	return n
}

// TestShardedReplicas: two controller processes with -shard-slots share
// the namespaces of a cluster. Each takes half the slots; every Foo
// converges; after the split, each namespace is written to by the one
// replica holding its slot (audit log); a replica killed with SIGKILL
// loses its slots to the other once its Lease expired, and the Foos of its
// namespaces converge again; a graceful stop releases the slots and
// deletes the member Lease.
//
// It runs twice: on an API server that filters by shard, and on one with
// the ShardedListAndWatch gate off, which sends every object to every
// slot's watches; the controller then filters on its side, says so in the
// log and in foo_controller_shard_server_filtering, and behaves the same.
func TestShardedReplicas(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		opts    clusterOptions
		filters string
	}{
		{"server filters", clusterOptions{}, "1"},
		{"server does not filter", clusterOptions{apiserverFlags: map[string]string{"feature-gates": "ShardedListAndWatch=false"}}, "0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			testShardedReplicas(t, tc.opts, tc.filters)
		})
	}
}

func testShardedReplicas(t *testing.T, opts clusterOptions, filters string) {
	cl := privateCluster(t, opts)
	const slots = shard.Slots(4)
	spaces := spacesOverSlots(t, cl, slots)
	s := spaces[0] // the Leases live in its namespace
	const leaseDuration = 6 * time.Second
	// Equal ranges throughout: this test places namespaces by them
	// (TestShardedRebalance re-cuts).
	args := append(shardedArgs(cl, s.ns, slots, "-v=4"), "-shard-rebalance-skew=0")
	identity := s.identityOf
	holders := func() map[int]string { return slotHolders(s, slots) }
	count := func(h map[int]string, id string) int {
		n := 0
		for _, holder := range h {
			if holder == id {
				n++
			}
		}
		return n
	}
	createAndConverge := func(prefix string, per int) {
		var names [][]string
		for _, sp := range spaces {
			names = append(names, sp.createFoos(prefix, per))
		}
		for i, sp := range spaces {
			sp.waitAllConverged(names[i], 2*time.Minute)
		}
	}

	// a serves its metrics and probes (the last flag wins).
	metricsA, probesA := freeAddr(t), freeAddr(t)
	a := s.launch(controllerBin, nil, append(args, "-metrics-bind-address="+metricsA, "-health-probe-bind-address="+probesA)...)
	idA := identity(a)
	s.eventually(30*time.Second, "a to hold every slot", func() (bool, string) {
		h := holders()
		return count(h, idA) == int(slots), fmt.Sprint(h)
	})
	gauge := func(name string) string {
		_, body := httpGet("http://" + metricsA + "/metrics")
		m := regexp.MustCompile(`(?m)^` + name + ` (\S+)$`).FindStringSubmatch(body)
		if m == nil {
			return "absent"
		}
		return m[1]
	}
	s.eventually(30*time.Second, "a to be ready and count its slots", func() (bool, string) {
		code, body := httpGet("http://" + probesA + "/readyz")
		state := fmt.Sprintf("readyz %d %q, shard_slots %s, shard_server_filtering %s, queue of slot 0: %v", code, body,
			gauge("foo_controller_shard_slots"), gauge("foo_controller_shard_server_filtering"),
			strings.Contains(func() string { _, b := httpGet("http://" + metricsA + "/metrics"); return b }(), `workqueue_depth{name="foo-controller-slot-0"}`))
		return code == 200 && gauge("foo_controller_shard_slots") == "4" && gauge("foo_controller_shard_server_filtering") == filters &&
			strings.HasSuffix(state, "true"), state
	})
	b := s.launch(controllerBin, nil, args...)
	idB := identity(b)
	s.eventually(30*time.Second, "a and b to hold 2 slots each", func() (bool, string) {
		h := holders()
		return count(h, idA) == 2 && count(h, idB) == 2, fmt.Sprint(h)
	})
	s.eventually(10*time.Second, "a's metric to count 2 slots", func() (bool, string) {
		return gauge("foo_controller_shard_slots") == "2", gauge("foo_controller_shard_slots")
	})
	createAndConverge("before", 3)
	if filters == "0" && len(a.logLines("does not filter lists and watches by shard")) == 0 {
		t.Errorf("a did not log that the API server does not filter")
	}

	// Settled: each namespace's writes come from its slot's holder alone.
	from := time.Now()
	h := holders()
	createAndConverge("split", 3)
	to := time.Now()
	for _, sp := range spaces {
		want := h[slots.Of(sp.ns)]
		writes := writesOf(sp.controllerRequests(from, to))
		if len(writes) == 0 {
			t.Errorf("namespace %s: no writes seen for its new Foos", sp.ns)
		}
		for _, w := range writes {
			if w.resource() == "leases" {
				continue // the members' own Leases, in the first namespace
			}
			if !strings.Contains(w.UserAgent, want) {
				t.Errorf("namespace %s (slot %d, held by %s): %s %s written by %q", sp.ns, slots.Of(sp.ns), want, w.Verb, w.resource(), w.UserAgent)
			}
		}
	}
	if syncs := len(syncTimes(t, b.log)); syncs == 0 {
		t.Errorf("b never synced a Foo")
	}

	// SIGKILL b: a takes its slots once b's member Lease expired.
	bSlots := []int{}
	for slot, holder := range h {
		if holder == idB {
			bSlots = append(bSlots, slot)
		}
	}
	slices.Sort(bSlots)
	killed := time.Now()
	b.kill()
	s.eventually(4*leaseDuration, "a to take b's slots", func() (bool, string) {
		h := holders()
		return count(h, idA) == int(slots), fmt.Sprint(h)
	})
	took := time.Since(killed)
	if took < leaseDuration-time.Second {
		t.Errorf("a took b's slots %v after b was killed, before b's Lease could expire (%v)", took, leaseDuration)
	}
	createAndConverge("after", 2)
	t.Logf("b (slots %v) killed: a held every slot after %v, and the Foos of all %d namespaces converged after %v",
		bSlots, took.Round(time.Millisecond), len(spaces), time.Since(killed).Round(time.Millisecond))

	// A graceful stop releases the slots and leaves the group.
	if err := a.stop(30 * time.Second); err != nil {
		t.Fatalf("a's graceful stop: %v\n%s", err, a.tail(30))
	}
	for slot, holder := range holders() {
		if holder != "" {
			t.Errorf("slot %d still held by %q after a's graceful stop", slot, holder)
		}
	}
	list, err := s.kube.CoordinationV1().Leases(s.ns).List(s.ctx, metav1.ListOptions{LabelSelector: shard.RoleLabel + "=member"})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range list.Items {
		if ptr.Deref(l.Spec.HolderIdentity, "") == idA {
			t.Errorf("a's member Lease %s is still there after its graceful stop", l.Name)
		}
	}
}

// leaseWrite is a successful write of a slot's Lease, from the audit log.
type leaseWrite struct {
	at     time.Time
	lease  string
	holder string // the holder the write named; "" for a release
}

// slotWrites reads, from the cluster's audit log, every successful write
// of a slot Lease in namespace ns, in the order the API server received
// them, every other successful write by a controller replica (its
// identity from the user agent), by namespace, and the cuts each write of
// a layout Lease named (Layout.FormatCuts).
func slotWrites(t *testing.T, cl *cluster, ns string) (leases []leaseWrite, writes map[string][]auditEvent, cuts []string) {
	t.Helper()
	b, err := os.ReadFile(cl.auditLog)
	if err != nil {
		t.Fatal(err)
	}
	writes = map[string][]auditEvent{}
	for _, line := range strings.Split(string(b), "\n") {
		var e struct {
			auditEvent
			RequestObject *struct {
				Metadata struct {
					Annotations map[string]string `json:"annotations"`
				} `json:"metadata"`
				Spec struct {
					HolderIdentity *string `json:"holderIdentity"`
				} `json:"spec"`
			} `json:"requestObject"`
		}
		if json.Unmarshal([]byte(line), &e) != nil || e.Stage != "ResponseComplete" || e.User.Username != controllerUser ||
			e.ObjectRef == nil || !writeVerbs[e.Verb] || e.ResponseStatus == nil || e.ResponseStatus.Code >= 300 {
			continue
		}
		if e.ObjectRef.Resource == "leases" {
			if e.ObjectRef.Namespace == ns && strings.Contains(e.ObjectRef.Name, "-slot-") && e.RequestObject != nil {
				leases = append(leases, leaseWrite{at: e.RequestReceivedTimestamp.Time, lease: e.ObjectRef.Name,
					holder: ptr.Deref(e.RequestObject.Spec.HolderIdentity, "")})
			}
			if e.ObjectRef.Namespace == ns && strings.Contains(e.ObjectRef.Name, "-layout-") && e.RequestObject != nil {
				cuts = append(cuts, e.RequestObject.Metadata.Annotations[shard.CutsAnnotation])
			}
			continue
		}
		writes[e.ObjectRef.Namespace] = append(writes[e.ObjectRef.Namespace], e.auditEvent)
	}
	slices.SortFunc(leases, func(a, b leaseWrite) int { return a.at.Compare(b.at) })
	return leases, writes, cuts
}

// heldAt says who held a slot's Lease at time at, by the last write before
// it: the API server's own order, not any replica's clock.
func heldAt(leases []leaseWrite, lease string, at time.Time) string {
	holder := ""
	for _, w := range leases {
		if w.lease != lease || !w.at.Before(at) {
			continue
		}
		holder = w.holder
	}
	return holder
}

// TestShardedReplicasChurn: replicas join, are killed and leave in the
// middle of a burst of Foos over namespaces that cover every slot. Nothing
// is lost (every Foo converges, no Deployment orphaned or doubled), and the
// audit log shows that every write to a namespace came from the replica
// holding that namespace's slot Lease when the API server received it:
// never two replicas writing for one Foo in overlapping windows.
func TestShardedReplicasChurn(t *testing.T) {
	t.Parallel()
	cl := privateCluster(t, clusterOptions{})
	const slots = shard.Slots(4)
	spaces := spacesOverSlots(t, cl, slots)
	s := spaces[0]
	args := shardedArgs(cl, s.ns, slots, "-v=2")
	start := func() *process { return s.launch(controllerBin, nil, args...) }
	slotLeases := func() int { return heldSlotLeases(s) }

	a, b := start(), start()
	s.eventually(30*time.Second, "every slot held", func() (bool, string) { return slotLeases() == int(slots), fmt.Sprint(slotLeases()) })

	// The burst: 25 Foos in each namespace, created while the membership
	// changes.
	const per = 25
	created := make(chan struct{})
	go func() {
		defer close(created)
		for i := range per {
			for _, sp := range spaces {
				sp.createFoo(newFoo(fmt.Sprintf("churn-%03d", i), fmt.Sprintf("churn-%03d", i), 1))
			}
		}
	}()
	burst := time.Now()
	time.Sleep(2 * time.Second)
	c := start() // joins: a and b hand slots over
	time.Sleep(3 * time.Second)
	b.kill() // killed: its slots wait for its Lease to expire
	time.Sleep(2 * time.Second)
	if err := a.stop(30 * time.Second); err != nil { // leaves gracefully
		t.Errorf("a's graceful stop: %v", err)
	}
	d := start() // and another joins
	<-created
	t.Logf("burst of %d Foos created in %v, with a replica added, one killed, one stopped and one added", per*len(spaces), time.Since(burst).Round(time.Millisecond))
	for _, sp := range spaces {
		sp.eventually(3*time.Minute, "every Foo of "+sp.ns+" converged, none orphaned", sp.invariants)
	}
	t.Logf("everything converged %v after the burst began", time.Since(burst).Round(time.Millisecond))
	if !c.running() || !d.running() {
		t.Errorf("c or d exited: c %v, d %v", c.running(), d.running())
	}

	leases, checked, replicas := checkSlotWrites(t, cl, s.ns, slots)
	t.Logf("slot Lease writes (seconds, slot, holder named): %s", leaseHistory(leases))
	t.Logf("%d writes checked against %d slot Lease writes by %d replicas: each from its slot's holder", checked, len(leases), replicas)
	if checked < per*len(spaces) {
		t.Errorf("only %d writes checked; want at least one per Foo (%d)", checked, per*len(spaces))
	}
}

// checkSlotWrites reads the cluster's audit log and fails the test for
// every write a controller replica sent to a namespace (Foos, their status,
// Deployments, Events) that the API server received while that replica
// did not hold the namespace's slot Lease (the Leases of a group of the
// given slot count, in leaseNS), by the Lease writes before it in the API
// server's own order: two replicas writing to one namespace in
// overlapping windows fail it. It returns the slot Lease writes, how many
// writes it checked, and how many replicas held a slot.
func checkSlotWrites(t *testing.T, cl *cluster, leaseNS string, slots shard.Slots) (leases []leaseWrite, checked, replicas int) {
	t.Helper()
	leases, writes, cuts := slotWrites(t, cl, leaseNS)
	// Each slot Lease's range, from its name ("…-slot-3-of-4" or
	// "…-slot-3-of-4.1f…") and the layouts written: a re-cut moves a
	// namespace from one slot Lease to another.
	layouts := map[string]shard.Layout{strconv.Itoa(int(slots)): shard.EqualLayout(slots)}
	for _, c := range cuts {
		if l, err := shard.ParseLayout(slots, c); err == nil {
			layouts[l.ID()] = l
		}
	}
	slotOf := regexp.MustCompile(`-slot-(\d+)-of-(\S+)$`)
	leasesOf := func(ns string) []string {
		var names []string
		for _, w := range leases {
			m := slotOf.FindStringSubmatch(w.lease)
			if m == nil || slices.Contains(names, w.lease) {
				continue
			}
			i, _ := strconv.Atoi(m[1])
			if l, ok := layouts[m[2]]; ok && l.Contains(i, ns) {
				names = append(names, w.lease)
			}
		}
		return names
	}
	identities := map[string]bool{}
	for _, w := range leases {
		if w.holder != "" {
			identities[w.holder] = true
		}
	}
	namespaces := make([]string, 0, len(writes))
	for ns := range writes {
		if ns != "" { // cluster-scoped: the start-up's access reviews
			namespaces = append(namespaces, ns)
		}
	}
	slices.Sort(namespaces)
	failed := 0
	for _, ns := range namespaces {
		candidates := leasesOf(ns)
		for _, w := range writes[ns] {
			// The writer must have held one of the slot Leases whose range
			// holds ns (of any layout), by the API server's order.
			lease, holder := strings.Join(candidates, " or "), ""
			for _, l := range candidates {
				if h := heldAt(leases, l, w.RequestReceivedTimestamp.Time); h != "" && strings.Contains(w.UserAgent, h) {
					lease, holder = l, h
				}
			}
			if holder == "" {
				if failed++; failed <= 20 {
					t.Errorf("%s %s %s/%s at %s by %q while %s was held by %q",
						w.Verb, w.resource(), ns, w.ObjectRef.Name, w.RequestReceivedTimestamp.Format("15:04:05.000000"), w.UserAgent, lease, holder)
				}
				continue
			}
			checked++
		}
	}
	if failed > 20 {
		t.Errorf("... and %d more writes from a replica that did not hold the slot", failed-20)
	}
	return leases, checked, len(identities)
}

// leaseHistory renders slot Lease writes as "seconds slot→holder".
func leaseHistory(leases []leaseWrite) string {
	var history []string
	for _, w := range leases {
		history = append(history, fmt.Sprintf("%s %s→%q", w.at.Format("05.000"), strings.TrimPrefix(w.lease, "foo-controller-"), w.holder))
	}
	return strings.Join(history, ", ")
}
