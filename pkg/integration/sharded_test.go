//go:build integration

package integration

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"example.com/foo-controller/pkg/shard"
)

var startingIdentityRe = regexp.MustCompile(`"Starting".*identity="([^"]+)"`)

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
	// Namespaces until every slot has one.
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
	s := spaces[0] // the Leases live in its namespace
	const leaseDuration = 6 * time.Second
	args := []string{
		"-kubeconfig=" + cl.ctrlKC, "-v=4",
		"-metrics-bind-address=0", "-health-probe-bind-address=0",
		"-shard-slots=4", "-leader-elect-namespace=" + s.ns,
		"-leader-elect-lease-duration=6s", "-leader-elect-renew-deadline=4s", "-leader-elect-retry-period=1s",
	}
	identity := func(p *process) string {
		var id string
		s.eventually(30*time.Second, p.log+" to start", func() (bool, string) {
			b, _ := os.ReadFile(p.log)
			if m := startingIdentityRe.FindSubmatch(b); m != nil {
				id = string(m[1])
				return true, ""
			}
			return false, "no identity logged yet"
		})
		return id
	}
	holders := func() map[int]string {
		list, err := s.kube.CoordinationV1().Leases(s.ns).List(s.ctx, metav1.ListOptions{LabelSelector: shard.RoleLabel + "=slot"})
		if err != nil {
			t.Fatal(err)
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
