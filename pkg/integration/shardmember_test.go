//go:build integration

package integration

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"example.com/foo-controller/pkg/leader"
	"example.com/foo-controller/pkg/shard"
)

// slotLog records, for each slot, when each member's Work ran on it, and
// checks the one rule that matters: a member works on a slot (and may
// write to its namespaces) only while no other member does.
type slotLog struct {
	mu       sync.Mutex
	open     map[int]string       // slot → member working on it
	started  map[string]time.Time // "member/slot" → when its Work last started
	causes   map[string]error     // "member/slot" → why its Work last ended
	problems []string
}

// cause says why member's Work on slot last ended (nil: it has not).
func (l *slotLog) cause(member string, slot int) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.causes[fmt.Sprintf("%s/%d", member, slot)]
}

func (l *slotLog) work(id string) shard.Work {
	return func(ctx context.Context, s shard.Slot) error {
		slot := s.Index
		l.mu.Lock()
		if other, ok := l.open[slot]; ok {
			l.problems = append(l.problems, fmt.Sprintf("%s started on slot %d while %s still worked on it", id, slot, other))
		}
		l.open[slot] = id
		l.started[fmt.Sprintf("%s/%d", id, slot)] = time.Now()
		l.mu.Unlock()
		<-ctx.Done()
		l.mu.Lock()
		if l.open[slot] == id {
			delete(l.open, slot)
		}
		if l.causes == nil {
			l.causes = map[string]error{}
		}
		l.causes[fmt.Sprintf("%s/%d", id, slot)] = context.Cause(ctx)
		l.mu.Unlock()
		return nil
	}
}

// TestShardMembersShareSlots: members of a group, on the real API server,
// divide the slots fairly; a member that joins gets its share handed over
// without two members ever working on one slot; a member that stops
// gracefully hands its slots over at once, not after its Lease expires; a
// member cut off from the API server stops writing before another takes
// its slots, and its Lease is cleaned up.
func TestShardMembersShareSlots(t *testing.T) {
	t.Parallel()
	s := newScenario(t)
	const slots = shard.Slots(8)
	base := shard.Config{
		Group: "shard-test", Namespace: s.ns, Slots: slots,
		LeaseDuration: 4 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 500 * time.Millisecond,
	}
	log := &slotLog{open: map[int]string{}, started: map[string]time.Time{}}

	type running struct {
		m    *shard.Member
		stop context.CancelFunc
		done chan error
	}
	startWith := func(id string, cfg *rest.Config, slots shard.Slots) *running {
		client, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		c := base
		c.Identity = id
		c.Slots = slots
		m, err := shard.NewMember(client, c)
		if err != nil {
			t.Fatal(err)
		}
		ctx, stop := context.WithCancel(s.ctx)
		r := &running{m: m, stop: stop, done: make(chan error, 1)}
		go func() { r.done <- m.Run(ctx, log.work(id)) }()
		t.Cleanup(func() {
			stop()
			select {
			case err := <-r.done:
				if err != nil && !errors.Is(err, leader.ErrLost) {
					t.Errorf("member %s: %v", id, err)
				}
			case <-time.After(10 * time.Second):
				t.Errorf("member %s did not stop", id)
			}
		})
		return r
	}
	start := func(id string, cfg *rest.Config) *running { return startWith(id, cfg, slots) }
	holding := func(want map[*running]int) func() (bool, string) {
		return func() (bool, string) {
			var state []string
			ok := true
			union := map[int]int{}
			for r, n := range want {
				h := r.m.Held()
				state = append(state, fmt.Sprint(h))
				if len(h) != n {
					ok = false
				}
				for _, slot := range h {
					union[slot]++
				}
			}
			for slot, n := range union {
				if n > 1 {
					t.Errorf("slot %d held by %d members at once", slot, n)
				}
			}
			return ok && len(union) == int(slots), strings.Join(state, " ")
		}
	}

	a := start("member-a", s.cl.admin)
	s.eventually(20*time.Second, "a alone to hold every slot", holding(map[*running]int{a: 8}))

	joined := time.Now()
	b := start("member-b", s.cl.admin)
	s.eventually(20*time.Second, "a and b to hold 4 slots each", holding(map[*running]int{a: 4, b: 4}))
	t.Logf("b joined: slots shared 4/4 after %v", time.Since(joined).Round(time.Millisecond))
	for _, slot := range b.m.Held() {
		// Handed over: a's Work ends as in a graceful stop, its in-flight
		// work let finish.
		if cause := log.cause("member-a", slot); !errors.Is(cause, context.Canceled) {
			t.Errorf("a's Work on slot %d, handed over to b, ended with %v, want context.Canceled", slot, cause)
		}
	}

	// A graceful stop releases at once: a holds everything well before
	// b's Lease could have expired.
	left := time.Now()
	b.stop()
	if err := <-b.done; err != nil {
		t.Fatalf("b's graceful stop: %v", err)
	}
	b.done <- nil // for the cleanup
	s.eventually(base.LeaseDuration, "a to take b's slots back, before b's Lease could expire", holding(map[*running]int{a: 8}))
	t.Logf("b left: a held all 8 slots after %v", time.Since(left).Round(time.Millisecond))
	if _, err := s.kube.CoordinationV1().Leases(s.ns).Get(s.ctx, "shard-test-member-member-b", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("b's member Lease after a graceful stop: %v, want it deleted", err)
	}

	// c reaches the API server through a proxy, which then stops
	// forwarding: a partitioned or frozen replica.
	p := proxyToAPIServer(t, s.cl, 0)
	cCfg := rest.CopyConfig(s.cl.admin)
	u, _ := url.Parse(cCfg.Host)
	u.Host = p.addr
	cCfg.Host = u.String()
	cCfg.Timeout = time.Second
	c := start("member-c", cCfg)
	s.eventually(20*time.Second, "a and c to hold 4 slots each", holding(map[*running]int{a: 4, c: 4}))
	cSlots := c.m.Held()
	for _, slot := range cSlots {
		if err := c.m.Check(namespaceIn(slots, slot)); err != nil {
			t.Fatalf("c may not write to its own slot %d: %v", slot, err)
		}
		if err := a.m.Check(namespaceIn(slots, slot)); err == nil {
			t.Fatalf("a may write to c's slot %d", slot)
		}
	}
	cut := time.Now()
	p.setHeld(true)
	var fenced time.Time
	s.eventually(base.LeaseDuration, "c to stop writing", func() (bool, string) {
		err := c.m.Check(namespaceIn(slots, cSlots[0]))
		if err != nil {
			fenced = time.Now()
		}
		return err != nil, fmt.Sprint(err)
	})
	s.eventually(4*base.LeaseDuration, "a to take c's slots", holding(map[*running]int{a: 8}))
	log.mu.Lock()
	for _, slot := range cSlots {
		took := log.started[fmt.Sprintf("member-a/%d", slot)]
		if !took.After(fenced) {
			t.Errorf("a took slot %d at %v, before c stopped writing at %v", slot, took.Sub(cut), fenced.Sub(cut))
		}
		if took.Sub(cut) < base.LeaseDuration-base.RetryPeriod {
			t.Errorf("a took slot %d %v after c was cut off, before c's Lease could expire (%v)", slot, took.Sub(cut), base.LeaseDuration)
		}
	}
	log.mu.Unlock()
	t.Logf("c cut off: it stopped writing after %v; a took its slots after %v", fenced.Sub(cut).Round(time.Millisecond), time.Since(cut).Round(time.Millisecond))
	select {
	case err := <-c.done:
		if !errors.Is(err, leader.ErrLost) || !errors.Is(err, shard.ErrLost) || strings.Contains(err.Error(), "leader") {
			t.Errorf("c's Run returned %v, want shard.ErrLost (and leader.ErrLost), in a member's words", err)
		}
		for _, slot := range cSlots {
			// Lost: c's Works are told so, to stop at once.
			if cause := log.cause("member-c", slot); !errors.Is(cause, shard.ErrLost) {
				t.Errorf("c's Work on slot %d ended with %v, want shard.ErrLost", slot, cause)
			}
		}
		c.done <- err
	case <-time.After(10 * time.Second):
		t.Errorf("c's Run did not return after it lost its Lease")
	}
	// c's Lease is left behind, as by a killed process; a deletes it once
	// it has not changed for twice its duration.
	s.eventually(4*base.LeaseDuration, "a to delete c's stale member Lease", func() (bool, string) {
		_, err := s.kube.CoordinationV1().Leases(s.ns).Get(s.ctx, "shard-test-member-member-c", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	p.setHeld(false)

	log.mu.Lock()
	for _, problem := range log.problems {
		t.Error(problem)
	}
	if held := a.m.Held(); !slices.Equal(held, []int{0, 1, 2, 3, 4, 5, 6, 7}) {
		t.Errorf("a holds %v before the change of slot count", held)
	}
	log.mu.Unlock()

	// A rollout that changes the slot count: d cuts the hash space in 4,
	// which overlaps a's 8 slots, so it takes none while a holds any, and
	// all of them once a has left.
	d := startWith("member-d", s.cl.admin, 4)
	time.Sleep(4 * base.RetryPeriod)
	if held := d.m.Held(); len(held) != 0 {
		t.Fatalf("d (4 slots) took %v while a (8 slots) holds every slot", held)
	}
	a.stop()
	if err := <-a.done; err != nil {
		t.Fatalf("a's graceful stop: %v", err)
	}
	a.done <- nil
	s.eventually(base.LeaseDuration, "d to take all 4 of its slots once a has left", func() (bool, string) {
		held := d.m.Held()
		return slices.Equal(held, []int{0, 1, 2, 3}), fmt.Sprint(held)
	})
	// The 8 slot Leases a released are nobody's now: d deletes them.
	s.eventually(base.LeaseDuration, "d to delete the slot Leases of 8 slots", func() (bool, string) {
		l, err := s.kube.CoordinationV1().Leases(s.ns).List(s.ctx, metav1.ListOptions{
			LabelSelector: shard.GroupLabel + "=shard-test," + shard.RoleLabel + "=slot," + shard.SlotsLabel + "=8"})
		if err != nil {
			return false, err.Error()
		}
		return len(l.Items) == 0, fmt.Sprintf("%d left", len(l.Items))
	})

	// Someone else's name written into one of d's slot Leases (by hand,
	// or a member with a wrong view): d stops writing for that slot at
	// once and does not release it; the name belongs to no live member, so
	// once the Lease has been unchanged for a lease duration d takes it
	// back.
	leases := s.kube.CoordinationV1().Leases(s.ns)
	l, err := leases.Get(s.ctx, "shard-test-slot-0-of-4", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l.Spec.HolderIdentity = ptr.To("intruder")
	if _, err := leases.Update(s.ctx, l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	overwritten := time.Now()
	s.eventually(4*base.RetryPeriod, "d to stop writing for slot 0", func() (bool, string) {
		return d.m.Check(namespaceIn(4, 0)) != nil, fmt.Sprint(d.m.Held())
	})
	stopped := time.Since(overwritten)
	s.eventually(4*base.RetryPeriod, "d's Work on slot 0 to end", func() (bool, string) {
		return log.cause("member-d", 0) != nil, "still running"
	})
	if cause := log.cause("member-d", 0); !errors.Is(cause, shard.ErrSlotTaken) || !strings.Contains(cause.Error(), `"intruder"`) {
		t.Errorf("d's Work on slot 0 ended with %v, want shard.ErrSlotTaken naming the intruder", cause)
	}
	if l, err := leases.Get(s.ctx, "shard-test-slot-0-of-4", metav1.GetOptions{}); err != nil || ptr.Deref(l.Spec.HolderIdentity, "") != "intruder" {
		t.Errorf("slot 0's Lease after d stopped: %v %v, want it still naming the intruder (not released)", ptrHolder(l), err)
	}
	s.eventually(3*base.LeaseDuration, "d to take slot 0 back", func() (bool, string) {
		return slices.Contains(d.m.Held(), 0), fmt.Sprint(d.m.Held())
	})
	t.Logf("slot Lease overwritten: d stopped writing for it after %v, took it back after %v", stopped.Round(time.Millisecond), time.Since(overwritten).Round(time.Millisecond))
}

// namespaceIn returns a namespace name that falls in the given slot, to ask
// the fences about.
func namespaceIn(slots shard.Slots, slot int) string {
	for i := 0; ; i++ {
		if name := fmt.Sprintf("tenant-%d", i); slots.Of(name) == slot {
			return name
		}
	}
}

func ptrHolder(l *coordinationv1.Lease) string {
	if l == nil {
		return "(none)"
	}
	return ptr.Deref(l.Spec.HolderIdentity, "")
}

// TestShardMembersStartedTogether: members that start at the same moment
// (make run REPLICAS=2, a fresh Deployment, a cold start) never work on one
// slot at once and leave no slot without a member; members with different
// slot counts started together end with one count at work, never both.
func TestShardMembersStartedTogether(t *testing.T) {
	t.Parallel()
	s := newScenario(t)
	run := func(group string, counts ...shard.Slots) []*shard.Member {
		log := &slotLog{open: map[int]string{}, started: map[string]time.Time{}}
		var members []*shard.Member
		var ready sync.WaitGroup
		ready.Add(1)
		for i, n := range counts {
			client, err := kubernetes.NewForConfig(s.cl.admin)
			if err != nil {
				t.Fatal(err)
			}
			id := fmt.Sprintf("%s-%d", group, i)
			m, err := shard.NewMember(client, shard.Config{Group: group, Namespace: s.ns, Slots: n, Identity: id,
				LeaseDuration: 4 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 500 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			members = append(members, m)
			ctx, stop := context.WithCancel(s.ctx)
			done := make(chan error, 1)
			work := log.work(id)
			if n != counts[0] {
				// Another cut of the hash space: its slot numbers mean
				// other ranges. (Started together, the two counts may
				// overlap until the younger lets go: not checked here.)
				work = (&slotLog{open: map[int]string{}, started: map[string]time.Time{}}).work(id)
			}
			go func() {
				ready.Wait()
				done <- m.Run(ctx, work)
			}()
			t.Cleanup(func() {
				stop()
				if err := <-done; err != nil {
					t.Errorf("member %s: %v", id, err)
				}
			})
		}
		ready.Done() // all at once
		t.Cleanup(func() {
			log.mu.Lock()
			defer log.mu.Unlock()
			for _, p := range log.problems {
				t.Errorf("%s: %s", group, p)
			}
		})
		return members
	}
	settled := func(group string, ms []*shard.Member, want int) {
		stable := 0
		s.eventually(30*time.Second, group+": every slot held by exactly one member, for 2 s", func() (bool, string) {
			count := map[int]int{}
			var state []string
			for _, m := range ms {
				state = append(state, fmt.Sprint(m.Held()))
				for _, slot := range m.Held() {
					count[slot]++
				}
			}
			ok := len(count) == want
			for slot, n := range count {
				if n > 1 {
					t.Errorf("%s: slot %d held by %d members at once (%v)", group, slot, n, state)
					ok = false
				}
			}
			if ok {
				stable++
			} else {
				stable = 0
			}
			return stable >= 20, strings.Join(state, " ")
		})
	}
	for round := range 4 {
		group := fmt.Sprintf("together-%d", round)
		settled(group, run(group, 8, 8, 8), 8)
	}
	// Different slot counts at once: the younger side lets go.
	ms := run("mixed", 8, 4)
	s.eventually(30*time.Second, "one slot count at work, not both", func() (bool, string) {
		a, b := len(ms[0].Held()), len(ms[1].Held())
		return (a == 8 && b == 0) || (a == 0 && b == 4), fmt.Sprintf("8-slot member holds %d, 4-slot member %d", a, b)
	})
}
