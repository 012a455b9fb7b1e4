//go:build integration

package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
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

// The tests in this file are about a member's view of its group's Leases:
// what it trusts in it, and what it does when the view stops moving.

// runMember runs a member of group on cfg until the test ends.
func runMember(t *testing.T, s *scenario, cfg *rest.Config, c shard.Config, work shard.Work) *shard.Member {
	t.Helper()
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m, err := shard.NewMember(client, c)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(s.ctx)
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx, work) }()
	t.Cleanup(func() {
		stop()
		select {
		case err := <-done:
			if err != nil && !errors.Is(err, leader.ErrLost) {
				t.Errorf("member %s: %v", c.Identity, err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("member %s did not stop", c.Identity)
		}
	})
	return m
}

// TestShardMemberSkipsLongDeadMembers: a member that starts beside the
// member Lease of a process killed long ago (its renewTime an hour old)
// takes its full share at once, instead of counting the dead one for a
// lease duration. The Lease is still left to expire by the member's own
// clock before it is deleted.
func TestShardMemberSkipsLongDeadMembers(t *testing.T) {
	t.Parallel()
	s := newScenario(t)
	c := shard.Config{Group: "dead", Namespace: s.ns, Slots: 4, Identity: "alive",
		// A long lease duration: counting the dead member would hold the
		// share at 2 for 20 s, far beyond the wait below.
		LeaseDuration: 20 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 500 * time.Millisecond}
	hourAgo := metav1.NewMicroTime(time.Now().Add(-time.Hour))
	leases := s.kube.CoordinationV1().Leases(s.ns)
	if _, err := leases.Create(s.ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "dead-member-killed", Labels: map[string]string{
			shard.GroupLabel: "dead", shard.RoleLabel: "member", shard.SlotsLabel: "4"}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("killed"), LeaseDurationSeconds: ptr.To(int32(20)),
			AcquireTime: &hourAgo, RenewTime: &hourAgo},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	log := &slotLog{open: map[int]string{}, started: map[string]time.Time{}}
	started := time.Now()
	m := runMember(t, s, s.cl.admin, c, log.work("alive"))
	s.eventually(5*time.Second, "the member to take all 4 slots, not counting the long-dead member", func() (bool, string) {
		return len(m.Held()) == 4, fmt.Sprint(m.Held())
	})
	t.Logf("all 4 slots held after %v (lease duration %v)", time.Since(started).Round(time.Millisecond), c.LeaseDuration)
	if _, err := leases.Get(s.ctx, "dead-member-killed", metav1.GetOptions{}); err != nil {
		t.Errorf("the dead member's Lease, %v after start: %v; want it left until it has been unchanged for twice the lease duration by the member's clock", time.Since(started), err)
	}
}

// stalledBody holds a watch's response body while g is held: a watch
// whose connection stays up but which delivers nothing.
type stalledBody struct {
	io.ReadCloser
	g *holdGate
}

func (b stalledBody) Read(p []byte) (int, error) {
	b.g.wait()
	return b.ReadCloser.Read(p)
}

type stallLeaseWatches struct {
	g    *holdGate
	next http.RoundTripper
}

func (s stallLeaseWatches) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := s.next.RoundTrip(req)
	if err == nil && req.URL.Query().Get("watch") == "true" && strings.Contains(req.URL.Path, "/leases") {
		resp.Body = stalledBody{ReadCloser: resp.Body, g: s.g}
	}
	return resp, err
}

// TestShardMemberFencesAStalledWatch: a member whose watch of its group's
// Leases stalls (the connection up, nothing delivered) while its renewals
// go on cannot see a slot taken from it. It refuses every write to its
// slots once its view is older than the renew deadline, so that when a
// slot's Lease is deleted by hand and another member takes the slot, the
// two do not both write for it; once the watch delivers again, it stops
// the slot taken from it and writes to its other slots again.
func TestShardMemberFencesAStalledWatch(t *testing.T) {
	t.Parallel()
	s := newScenario(t)
	base := shard.Config{Group: "stall", Namespace: s.ns, Slots: 4,
		LeaseDuration: 4 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 500 * time.Millisecond}
	gate := &holdGate{}
	t.Cleanup(func() { gate.set(false) }) // before the member stops: its watch must return
	stallable := rest.CopyConfig(s.cl.admin)
	stallable.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return stallLeaseWatches{g: gate, next: rt} }
	// Each member's Works are logged apart: a's Work on the slot taken
	// from it goes on (fenced) until its view catches up.
	aLog := &slotLog{open: map[int]string{}, started: map[string]time.Time{}}
	bLog := &slotLog{open: map[int]string{}, started: map[string]time.Time{}}
	ac := base
	ac.Identity = "a"
	a := runMember(t, s, stallable, ac, aLog.work("a"))
	s.eventually(10*time.Second, "a to hold all 4 slots", func() (bool, string) {
		return len(a.Held()) == 4, fmt.Sprint(a.Held())
	})
	for slot := range 4 {
		if err := a.Check(namespaceIn(4, slot)); err != nil {
			t.Fatalf("a may not write to its slot %d before the stall: %v", slot, err)
		}
	}

	stalled := time.Now()
	gate.set(true)
	var fenced time.Duration
	s.eventually(base.RenewDeadline+4*base.RetryPeriod, "a to refuse writes to its slots", func() (bool, string) {
		err := a.Check(namespaceIn(4, 0))
		fenced = time.Since(stalled)
		return err != nil && strings.Contains(err.Error(), "stalled"), fmt.Sprint(err)
	})
	// The view is up to two renewals old when the stall begins.
	if fenced < base.RenewDeadline-2*base.RetryPeriod {
		t.Errorf("a refused writes %v after its watch stalled, before its view could be older than the renew deadline (%v)", fenced, base.RenewDeadline)
	}
	t.Logf("watch stalled: a refused writes after %v (renew deadline %v)", fenced.Round(time.Millisecond), base.RenewDeadline)

	// Someone deletes slot 0's Lease by hand, and b joins: b sees slot 0
	// free and takes it, which a cannot see.
	leases := s.kube.CoordinationV1().Leases(s.ns)
	if err := leases.Delete(s.ctx, "stall-slot-0-of-4", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	bc := base
	bc.Identity = "b"
	b := runMember(t, s, s.cl.admin, bc, bLog.work("b"))
	s.eventually(10*time.Second, "b to take slot 0", func() (bool, string) {
		if err := a.Check(namespaceIn(4, 0)); err == nil {
			t.Errorf("a may write to slot 0 while its view is stale (b holds %v)", b.Held())
		}
		return slices.Contains(b.Held(), 0), fmt.Sprint(b.Held())
	})
	if !slices.Contains(a.Held(), 0) {
		t.Fatalf("a no longer holds slot 0 while its watch is stalled (%v): the test did not stall it", a.Held())
	}
	for range 4 {
		// Still stalled, still fenced, though it renews.
		time.Sleep(base.RetryPeriod)
		if err := a.Check(namespaceIn(4, 0)); err == nil {
			t.Fatalf("a may write to slot 0, held by b, while its watch is stalled")
		}
		if !a.Joined() {
			t.Fatalf("a left its group while its watch was stalled; it should go on renewing")
		}
	}

	released := time.Now()
	gate.set(false)
	s.eventually(10*time.Second, "a to stop slot 0 and write to its other slots again", func() (bool, string) {
		other := slices.DeleteFunc(a.Held(), func(slot int) bool { return slot == 0 })
		ok := !slices.Contains(a.Held(), 0) && len(other) > 0 && a.Check(namespaceIn(4, other[0])) == nil
		return ok, fmt.Sprintf("a holds %v", a.Held())
	})
	t.Logf("watch released: a caught up after %v", time.Since(released).Round(time.Millisecond))
	if err := a.Check(namespaceIn(4, 0)); err == nil {
		t.Errorf("a may write to slot 0, taken by b")
	}
	s.eventually(5*time.Second, "a's Work on slot 0 to end as taken", func() (bool, string) {
		cause := aLog.cause("a", 0)
		return errors.Is(cause, shard.ErrSlotTaken), fmt.Sprint(cause)
	})
	if l, err := leases.Get(s.ctx, "stall-slot-0-of-4", metav1.GetOptions{}); err != nil || ptr.Deref(l.Spec.HolderIdentity, "") != "b" {
		t.Errorf("slot 0's Lease: %v %v, want it naming b (a must not release a slot taken from it)", ptrHolder(l), err)
	}
}

// loseFirstSlotAnswer sends the first write of a slot's Lease on to the
// API server, then answers with an error, as if the answer were lost.
type loseFirstSlotAnswer struct {
	lost *atomic.Bool
	next http.RoundTripper
}

func (l loseFirstSlotAnswer) RoundTrip(req *http.Request) (*http.Response, error) {
	if (req.Method != http.MethodPost && req.Method != http.MethodPut) || !strings.Contains(req.URL.Path, "/leases") || req.GetBody == nil {
		return l.next.RoundTrip(req)
	}
	body, err := req.GetBody()
	if err != nil {
		return nil, err
	}
	b, err := io.ReadAll(body)
	if err != nil {
		return nil, err
	}
	resp, err := l.next.RoundTrip(req)
	if err == nil && bytes.Contains(b, []byte("-slot-")) && l.lost.CompareAndSwap(false, true) {
		_ = resp.Body.Close()
		return nil, errors.New("the answer was lost")
	}
	return resp, err
}

// TestShardMemberReleasesSlotsItDoesNotRun: a slot Lease that names a live
// member which does not run the slot would be taken by nobody, for as long
// as that member lives. Two ways in, on the real API server: a take whose
// answer was lost (the write landed), and an operator writing one live
// member's name into a slot Lease held by another. Either way the member
// named releases the slot, and it is worked on again.
func TestShardMemberReleasesSlotsItDoesNotRun(t *testing.T) {
	t.Parallel()
	s := newScenario(t)
	base := shard.Config{Namespace: s.ns, Slots: 4,
		// Long enough that expiry is never what frees a slot here.
		LeaseDuration: 20 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 500 * time.Millisecond}

	t.Run("a take whose answer was lost", func(t *testing.T) {
		lost := &atomic.Bool{}
		cfg := rest.CopyConfig(s.cl.admin)
		cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
			return loseFirstSlotAnswer{lost: lost, next: rt}
		}
		c := base
		c.Group, c.Identity = "lost", "alone"
		log := &slotLog{open: map[int]string{}, started: map[string]time.Time{}}
		m := runMember(t, s, cfg, c, log.work("alone"))
		s.eventually(10*time.Second, "the member to hold all 4 slots", func() (bool, string) {
			return len(m.Held()) == 4, fmt.Sprint(m.Held())
		})
		if !lost.Load() {
			t.Fatal("no answer to a slot take was lost: the test did not test")
		}
	})

	t.Run("a live member's name written by hand", func(t *testing.T) {
		c := base
		c.Group = "edited"
		log := &slotLog{open: map[int]string{}, started: map[string]time.Time{}}
		ac, bc := c, c
		ac.Identity, bc.Identity = "a", "b"
		a := runMember(t, s, s.cl.admin, ac, log.work("a"))
		b := runMember(t, s, s.cl.admin, bc, log.work("b"))
		shared := func() (bool, string) {
			h := map[int]int{}
			for _, slot := range append(a.Held(), b.Held()...) {
				h[slot]++
			}
			return len(a.Held()) == 2 && len(b.Held()) == 2 && len(h) == 4, fmt.Sprintf("a %v, b %v", a.Held(), b.Held())
		}
		s.eventually(10*time.Second, "a and b to hold 2 slots each", shared)
		slot := a.Held()[0]
		leases := s.kube.CoordinationV1().Leases(s.ns)
		name := fmt.Sprintf("edited-slot-%d-of-4", slot)
		l, err := leases.Get(s.ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		l.Spec.HolderIdentity = ptr.To("b")
		if _, err := leases.Update(s.ctx, l, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		edited := time.Now()
		s.eventually(10*time.Second, "a to stop the slot named b", func() (bool, string) {
			cause := log.cause("a", slot)
			return errors.Is(cause, shard.ErrSlotTaken), fmt.Sprint(cause)
		})
		s.eventually(10*time.Second, "the edited slot to be worked on again, 2 slots each", func() (bool, string) {
			ok, state := shared()
			if !ok {
				return false, state
			}
			l, err := leases.Get(s.ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			holder := ptr.Deref(l.Spec.HolderIdentity, "")
			runs := map[string]*shard.Member{"a": a, "b": b}[holder]
			return runs != nil && slices.Contains(runs.Held(), slot), fmt.Sprintf("%s; slot %d's Lease names %q", state, slot, holder)
		})
		t.Logf("slot %d's Lease made to name b by hand: worked on again after %v (lease duration %v)", slot, time.Since(edited).Round(time.Millisecond), c.LeaseDuration)
	})
}

// TestShardMemberWaitsForALeader: a rollout between the single-leader mode
// and the sharded one, on the real API server, through the leader's Lease
// (named as the group, in its namespace; written here by the test as
// leaders would). While that Lease moves (renewed, released, taken by a
// standby), members take no slot; once it has been still for a lease
// duration (its last holder killed), they take their shares and delete it,
// so that a member starting later does not wait; when a leader appears
// again (a rollback), they hand every slot over.
func TestShardMemberWaitsForALeader(t *testing.T) {
	t.Parallel()
	s := newScenario(t)
	c := shard.Config{Group: "modes", Namespace: s.ns, Slots: 4,
		LeaseDuration: 4 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 500 * time.Millisecond}
	leases := s.kube.CoordinationV1().Leases(s.ns)
	// write sets the leader's Lease to holder ("": released), creating it
	// if need be, as client-go's leader election would.
	write := func(holder string) {
		t.Helper()
		l, err := leases.Get(s.ctx, "modes", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			l, err = leases.Create(s.ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "modes"}}, metav1.CreateOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
		l.Spec.HolderIdentity = ptr.To(holder)
		if holder == "" {
			l.Spec.HolderIdentity = nil
		}
		l.Spec.LeaseDurationSeconds = ptr.To(int32(4))
		l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now()))
		if _, err := leases.Update(s.ctx, l, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// lead renews as holder every retry period for d, checking that the
	// given members hold nothing meanwhile; it returns when it last wrote.
	lead := func(holder string, d time.Duration, idle ...*shard.Member) (last time.Time) {
		t.Helper()
		for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(c.RetryPeriod) {
			write(holder)
			last = time.Now()
			for _, m := range idle {
				if held := m.Held(); len(held) != 0 {
					t.Fatalf("a member holds %v while %q holds the leader's Lease", held, holder)
				}
			}
		}
		return last
	}
	logA := &slotLog{open: map[int]string{}, started: map[string]time.Time{}}
	logB := &slotLog{open: map[int]string{}, started: map[string]time.Time{}}
	write("old-leader")
	ac := c
	ac.Identity = "a"
	a := runMember(t, s, s.cl.admin, ac, logA.work("a"))
	s.eventually(5*time.Second, "a to join", func() (bool, string) { return a.Joined(), "" })
	// Longer than a lease duration: only a leader at work holds it back.
	lead("old-leader", c.LeaseDuration+2*c.RetryPeriod, a)
	// The old leader stops gracefully, and its standby takes over at its
	// next retry, as in a rolling update of a Deployment with two
	// replicas: a must not take slots in between.
	write("")
	time.Sleep(c.RetryPeriod)
	// Then the standby is killed: its Lease stays, naming it, and never
	// moves again.
	killed := lead("standby", c.LeaseDuration+2*c.RetryPeriod, a)
	s.eventually(c.LeaseDuration+10*time.Second, "a to take every slot once the leader's Lease has been still for a lease duration", func() (bool, string) {
		return len(a.Held()) == 4, fmt.Sprint(a.Held())
	})
	// Less a margin: a GET may see the last write land before the test
	// has its answer.
	if d := time.Since(killed); d < c.LeaseDuration-c.RetryPeriod/2 {
		t.Errorf("a took every slot %v after the last leader's last renewal, before a lease duration (%v)", d, c.LeaseDuration)
	}
	t.Logf("the last leader killed: a held every slot after %v (lease duration %v)", time.Since(killed).Round(time.Millisecond), c.LeaseDuration)
	s.eventually(2*time.Second, "the still leader's Lease to be deleted", func() (bool, string) {
		_, err := leases.Get(s.ctx, "modes", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	// A member starting now waits for no leader.
	bc := c
	bc.Identity = "b"
	joined := time.Now()
	b := runMember(t, s, s.cl.admin, bc, logB.work("b"))
	s.eventually(c.LeaseDuration-c.RetryPeriod, "b to take its share without waiting a lease duration", func() (bool, string) {
		return len(a.Held()) == 2 && len(b.Held()) == 2, fmt.Sprintf("a %v, b %v", a.Held(), b.Held())
	})
	t.Logf("b started after the Lease was deleted: shares 2/2 after %v", time.Since(joined).Round(time.Millisecond))

	// The rollback: a leader starts again.
	rolledBack := time.Now()
	write("new-leader")
	s.eventually(10*time.Second, "a and b to hand every slot over to the new leader", func() (bool, string) {
		write("new-leader")
		return len(a.Held())+len(b.Held()) == 0, fmt.Sprintf("a %v, b %v", a.Held(), b.Held())
	})
	t.Logf("a leader took the Lease: the members held nothing after %v", time.Since(rolledBack).Round(time.Millisecond))
	for _, m := range []struct {
		id  string
		log *slotLog
	}{{"a", logA}, {"b", logB}} {
		for slot := range 4 {
			if cause := m.log.cause(m.id, slot); cause != nil && !errors.Is(cause, context.Canceled) {
				t.Errorf("%s's Work on slot %d ended with %v, want context.Canceled (a hand-over: in-flight syncs finish)", m.id, slot, cause)
			}
		}
	}
}

// TestLeaderWaitsForShardedReplicas: a leader of the single-leader mode
// elected while sharded members of its group hold slots (a rollback, or a
// standby elected the moment members took their slots) starts work only
// once they have handed every slot over, so that the two modes never
// write at once. (Found by the fifth attack of issue 14.)
func TestLeaderWaitsForShardedReplicas(t *testing.T) {
	t.Parallel()
	s := newScenario(t)
	c := shard.Config{Group: "foo-controller", Namespace: s.ns, Slots: 4,
		LeaseDuration: lossLeaseDuration, RenewDeadline: lossRenewDeadline, RetryPeriod: lossRetryPeriod}
	log := &slotLog{open: map[int]string{}, started: map[string]time.Time{}}
	var (
		mu      sync.Mutex
		lastEnd time.Time // when the members' last Work returned: their writes stopped
	)
	var members []*shard.Member
	for _, id := range []string{"a", "b"} {
		mc := c
		mc.Identity = id
		work := log.work(id)
		members = append(members, runMember(t, s, s.cl.admin, mc, func(ctx context.Context, slot shard.Slot) error {
			err := work(ctx, slot)
			mu.Lock()
			lastEnd = time.Now()
			mu.Unlock()
			return err
		}))
	}
	s.eventually(20*time.Second, "the members to hold every slot", func() (bool, string) {
		return len(members[0].Held())+len(members[1].Held()) == 4, fmt.Sprintf("%v %v", members[0].Held(), members[1].Held())
	})
	names := s.createFoos("rollback", 10)
	p := s.startController(s.leaseArgs()...)
	s.eventually(30*time.Second, "the members to hand every slot over", func() (bool, string) {
		return len(members[0].Held())+len(members[1].Held()) == 0, fmt.Sprintf("%v %v", members[0].Held(), members[1].Held())
	})
	for _, id := range []string{"a", "b"} {
		for slot := range 4 {
			if cause := log.cause(id, slot); cause != nil && !errors.Is(cause, context.Canceled) {
				t.Errorf("%s's Work on slot %d ended with %v, want a hand-over (context.Canceled)", id, slot, cause)
			}
		}
	}
	s.waitAllConverged(names, 2*time.Minute)
	waited := logTimes(t, p.log, "waiting for them to hand over before starting work")
	started := logTimes(t, p.log, "Sharded replicas have handed every slot over; starting work")
	if len(waited) != 1 || len(started) != 1 {
		t.Fatalf("the leader logged %d waits and %d starts, want one each\n%s", len(waited), len(started), p.tail(30))
	}
	mu.Lock()
	defer mu.Unlock()
	if started[0].Before(lastEnd) {
		t.Errorf("the leader started work at %v, before the members' last Work returned (%v)", started[0], lastEnd)
	}
	t.Logf("the leader waited %v for the members to hand their slots over; it started %v after their last Work returned",
		started[0].Sub(waited[0]).Round(time.Millisecond), started[0].Sub(lastEnd).Round(time.Millisecond))
}
