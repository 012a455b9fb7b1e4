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
//   - /healthz passes through an outage shorter than the renew deadline. A
//     longer one ends the member at the deadline, saying that a member
//     lost its Lease, not that a leader election was lost. /healthz fails
//     (check "shard-member") from the deadline until the exit, which is a
//     moment at most (the time the member's slots take to stop): the probe
//     may or may not see it, so that is logged, not required; the check is
//     for a member that is wedged and does not exit, which only a unit
//     test can make (TestHealthzFailsForAWedgedMember).
func TestShardedProbesAndMetrics(t *testing.T) {
	t.Parallel()
	cl := privateCluster(t, clusterOptions{})
	const slots = shard.Slots(2)
	spaces := spacesOverSlots(t, cl, slots)
	s := spaces[0]
	const renewDeadline = 4 * time.Second // shardedArgs
	start := func(n shard.Slots, extra ...string) sharded {
		r := sharded{probes: freeAddr(t), metrics: freeAddr(t)}
		args := append(shardedArgs(cl, s.ns, n, "-v=2"), "-metrics-bind-address="+r.metrics, "-health-probe-bind-address="+r.probes,
			"-shard-rebalance-skew=0") // equal ranges: the slots this test counts
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
	// settledNow: every replica ready, the slots held once each, and each
	// replica's workqueue series those of the slots it holds.
	settledNow := func(rs ...sharded) func() (bool, string) {
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
	// settled: settledNow, and so for two retry periods on end. Members
	// that join together can pass through such a state on the way: a slot
	// taken by one that ranks after a member it has not seen yet.
	settled := func(rs ...sharded) func() (bool, string) {
		var since time.Time
		return func() (bool, string) {
			ok, state := settledNow(rs...)()
			switch {
			case !ok:
				since = time.Time{}
			case since.IsZero():
				since = time.Now()
			}
			return ok && time.Since(since) >= 2*time.Second, state
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

	// a's API server stops answering for half the renew deadline: a slow
	// moment, not a loss.
	health := watchHealthEvery(s.ctx, a.probes, 20*time.Millisecond)
	s.eventually(5*time.Second, "a's /healthz to be polled", func() (bool, string) {
		return health.answered()[http.StatusOK] > 0, fmt.Sprint(health.answered())
	})
	proxy.setHeld(true)
	time.Sleep(renewDeadline / 2)
	proxy.setHeld(false)
	time.Sleep(2 * time.Second) // a renewal or two
	if failed, body := health.failed(); !failed.IsZero() || !a.running() {
		t.Fatalf("a %v outage (renew deadline %v): /healthz failed %q, a running %v\n%s", renewDeadline/2, renewDeadline, body, a.running(), a.tail(20))
	}
	t.Logf("a %v outage: /healthz stayed 200 (%v)", renewDeadline/2, health.answered())

	// Now for good: a's renewals stop, and it exits at its renew deadline.
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
	t.Logf("held: a exited %v after the hold began; probes answered %v", a.ended.Sub(held).Round(time.Millisecond), health.answered())
	if !failed.IsZero() {
		t.Logf("a's /healthz failed %v after the hold began (%q)", failed.Sub(held).Round(time.Millisecond), strings.TrimSpace(body))
	}
	switch {
	case failed.IsZero():
		t.Logf("a exited before a probe saw /healthz fail")
	case !strings.Contains(body, "shard-member") || !strings.Contains(body, "past the renew deadline"):
		t.Errorf("a's /healthz failed with %q, want the shard-member check past the renew deadline", body)
	case failed.Sub(held) < renewDeadline-2*time.Second:
		t.Errorf("a's /healthz failed %v into the hold, before its renew deadline (%v, retry period 1s) could pass", failed.Sub(held), renewDeadline)
	}
	if d := a.ended.Sub(held); d > renewDeadline+5*time.Second {
		t.Errorf("a exited %v into the hold, want about its renew deadline (%v)", d, renewDeadline)
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
