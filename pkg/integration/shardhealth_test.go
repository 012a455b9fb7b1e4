//go:build integration

package integration

import (
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"example.com/foo-controller/pkg/shard"
)

// sharded is a sharded controller process with its probes and metrics.
type sharded struct {
	*process
	id, probes, metrics string
}

func (r sharded) get(path string) (int, string) {
	addr := r.probes
	if path == "/metrics" {
		addr = r.metrics
	}
	return httpGet("http://" + addr + path)
}

// queueSlots lists the slots whose workqueue series the replica exports.
func (r sharded) queueSlots() []int {
	_, body := r.get("/metrics")
	var slots []int
	for _, m := range regexp.MustCompile(`(?m)^workqueue_depth\{name="foo-controller-slot-(\d+)"\} `).FindAllStringSubmatch(body, -1) {
		n, _ := strconv.Atoi(m[1])
		slots = append(slots, n)
	}
	slices.Sort(slots)
	return slots
}

func (r sharded) gauge(name string) string {
	_, body := r.get("/metrics")
	if m := regexp.MustCompile(`(?m)^` + name + ` (\S+)$`).FindStringSubmatch(body); m != nil {
		return m[1]
	}
	return "absent"
}

// TestShardedProbesAndMetrics: what an operator sees of sharded replicas
// through their probes and metrics, on the real API server.
//   - /readyz passes once a replica has joined and its slots' caches have
//     synced, and for a replica holding no slot: one of more replicas than
//     slots, or one waiting for members of another slot count (a rollout
//     waits on readiness; a standby that could never be ready would stop
//     it for good).
//   - A slot handed over takes its workqueue series with it: each replica
//     exports the series of the slots it holds, and no others.
//   - /healthz watches the member's renewals: it fails (check
//     "shard-member") once the last one is older than the renew deadline,
//     before the member exits; and the exit says a member lost its Lease,
//     not that a leader election was lost.
func TestShardedProbesAndMetrics(t *testing.T) {
	t.Parallel()
	cl := privateCluster(t, clusterOptions{})
	const slots = shard.Slots(2)
	spaces := spacesOverSlots(t, cl, slots)
	s := spaces[0]
	const renewDeadline = 4 * time.Second // shardedArgs
	start := func(n shard.Slots, extra ...string) sharded {
		r := sharded{probes: freeAddr(t), metrics: freeAddr(t)}
		args := append(shardedArgs(cl, s.ns, n, "-v=2"), "-metrics-bind-address="+r.metrics, "-health-probe-bind-address="+r.probes)
		r.process = s.launch(controllerBin, nil, append(args, extra...)...)
		r.id = s.identityOf(r.process)
		return r
	}
	converge := func(prefix string) {
		var names [][]string
		for _, sp := range spaces {
			names = append(names, sp.createFoos(prefix, 2))
		}
		for i, sp := range spaces {
			sp.waitAllConverged(names[i], 2*time.Minute)
		}
	}
	// settled: every replica ready, the slots held once each, and each
	// replica's workqueue series those of the slots it holds.
	settled := func(rs ...sharded) func() (bool, string) {
		return func() (bool, string) {
			h := slotHolders(s, slots)
			ok := len(h) == int(slots)
			var state []string
			for slot := range int(slots) {
				ok = ok && h[slot] != ""
			}
			for _, r := range rs {
				var held []int
				for slot, id := range h {
					if id == r.id {
						held = append(held, slot)
					}
				}
				slices.Sort(held)
				code, body := r.get("/readyz")
				queues := r.queueSlots()
				state = append(state, fmt.Sprintf("%s: holds %v, queues %v, shard_slots %s, readyz %d %q",
					r.id, held, queues, r.gauge("foo_controller_shard_slots"), code, strings.TrimSpace(body)))
				ok = ok && code == http.StatusOK && slices.Equal(held, queues) && r.gauge("foo_controller_shard_slots") == strconv.Itoa(len(held))
			}
			return ok, strings.Join(state, "; ")
		}
	}

	// a, reaching the API server through a proxy, holds both slots.
	proxy := proxyToAPIServer(t, cl, 0)
	a := start(slots, "-kubeconfig="+proxy.kubeconfigVia(t, cl.ctrlKC))
	s.eventually(30*time.Second, "a to hold both slots, ready, with a queue for each", settled(a))
	converge("alone")

	// b and c join: three replicas for two slots. a hands at least one
	// slot over, and its series go with it; the replica left without a
	// slot is ready all the same.
	b, c := start(slots), start(slots)
	s.eventually(30*time.Second, "three replicas sharing two slots, all ready", settled(a, b, c))
	idle := 0
	for _, r := range []sharded{a, b, c} {
		if r.queueSlots() == nil {
			idle++
			t.Logf("%s holds no slot: /readyz 200, shard_slots %s, no slot workqueue series", r.id, r.gauge("foo_controller_shard_slots"))
		}
	}
	if idle != 1 {
		t.Errorf("%d replicas hold no slot, want 1", idle)
	}
	if n := len(a.logLines("Handing a slot over")); n == 0 {
		t.Errorf("a handed no slot over\n%s", a.tail(30))
	}
	converge("shared")

	// d runs with another slot count: it takes nothing while the others
	// hold slots, and is ready meanwhile.
	d := start(4)
	s.eventually(30*time.Second, "d to wait for the members of 2 slots, ready", func() (bool, string) {
		code, body := d.get("/readyz")
		waiting := len(d.logLines("Another member runs with a different slot count")) > 0
		return waiting && code == http.StatusOK && d.gauge("foo_controller_shard_slots") == "0" && d.queueSlots() == nil,
			fmt.Sprintf("waiting logged %v, readyz %d %q, shard_slots %s, queues %v", waiting, code, body, d.gauge("foo_controller_shard_slots"), d.queueSlots())
	})

	// a's API server stops answering: its renewals stop. Its /healthz
	// fails past the renew deadline, before it exits.
	health := watchHealth(s.ctx, a.probes)
	s.eventually(5*time.Second, "a's /healthz to be polled", func() (bool, string) {
		return health.answered()[http.StatusOK] > 0, fmt.Sprint(health.answered())
	})
	held := time.Now()
	proxy.setHeld(true)
	select {
	case <-a.done:
	case <-time.After(renewDeadline + 15*time.Second):
		t.Fatalf("a still runs %v after its API server stopped answering\n%s", time.Since(held), a.tail(30))
	}
	proxy.setCut(true)
	proxy.setHeld(false)
	failed, body := health.failed()
	t.Logf("held: a's /healthz failed %v after the hold began (%q); a exited %v after it; probes answered %v",
		failed.Sub(held).Round(time.Millisecond), strings.TrimSpace(body), a.ended.Sub(held).Round(time.Millisecond), health.answered())
	switch {
	case failed.IsZero() || failed.After(a.ended):
		t.Errorf("a's /healthz did not fail before a exited (first failure %v, exit %v)", failed, a.ended)
	case !strings.Contains(body, "shard-member"):
		t.Errorf("a's /healthz failed with %q, want the shard-member check", body)
	case failed.Sub(held) < renewDeadline-time.Second:
		t.Errorf("a's /healthz failed %v into the hold, before its renew deadline (%v) could pass", failed.Sub(held), renewDeadline)
	}
	if a.err == nil {
		t.Errorf("a exited 0 after losing its member Lease, want 1")
	}
	if lines := a.logLines("foo-controller: shard member lost its Lease: not renewed within the renew deadline"); len(lines) != 1 {
		t.Errorf("a's exit did not say that the member lost its Lease\n%s", a.tail(20))
	}
	if lines := a.logLines("leader election"); len(lines) > 0 {
		t.Errorf("a, a shard member, speaks of a leader election: %q", lines)
	}

	// b and c take a's slots over, and their series with them; d still
	// waits, ready.
	s.eventually(4*6*time.Second, "b and c to hold both slots, ready", settled(b, c))
	if code, body := d.get("/readyz"); code != http.StatusOK || d.queueSlots() != nil {
		t.Errorf("d: readyz %d %q, queues %v; want ready, holding nothing", code, body, d.queueSlots())
	}
	converge("after")
}
