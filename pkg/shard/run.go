package shard

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	coordinationlisters "k8s.io/client-go/listers/coordination/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// memberRun is the state of one Member.Run between its ticks. Each tick
// (step) is, in order: renew the member Lease and read the group's Leases
// (renewAndRead), follow the slot boundaries (followLayout), stop the
// slots whose Lease names another member (stopTaken), tidy the Leases
// left behind (tidy), hold back while another mode or layout is at work
// (holdBack), re-cut the boundaries if this member is the one to
// (maybeRebalance), and take or hand over slots to reach the share
// (share).
type memberRun struct {
	m      *Member
	c      Config
	logger klog.Logger
	leases leaseClient
	lister coordinationlisters.LeaseNamespaceLister
	work   Work
	self   *coordinationv1.Lease

	slots    map[int]*slotState
	finished chan *slotState
	workErrs chan error
	seen     map[string]observed
	// stopping is the context's Done until a graceful stop begins, then
	// nil: every slot is stopping, and Run leaves once none is left.
	stopping <-chan struct{}
	apiCtx   context.Context // renewals go on while slots stop

	// recent are the resourceVersions of our last two renewals (or the
	// join), sent no earlier than recentSent.
	recent     [2]string
	recentSent [2]time.Time
	// left is when each slot's Work last returned (and its release was
	// tried): a view older than that may not show the release.
	left       map[int]time.Time
	leftByName map[string]time.Time

	// layout is the group's slot boundaries, in place here since
	// layoutSince; load is what this tick's renewal published of ours.
	layout      Layout
	layoutSince time.Time
	load        map[int][]point
	// leaderSeen is what we know of the single-leader mode's Lease (see
	// leaderLive).
	leaderSeen observed

	// What is logged once, when it starts (and, for viewStale, ends).
	waitingFor       string // the member of another slot count we wait for
	waitingForLeader bool
	leaderUnread     bool   // the last read of the leader's Lease failed
	draining         bool   // slots of the previous layout are being handed over
	viewStale        bool   // writes are refused for a stale view (see Check)
	badLayout        string // the resourceVersion of a layout Lease that did not parse
}

// snapshot is what one tick reads: the group's Leases from the cache, and
// whether that cache is fresh (it shows one of our last two renewals),
// covering every change made before covered.
type snapshot struct {
	all     []*coordinationv1.Lease
	fresh   bool
	covered time.Time
	start   time.Time // when the tick began
}

// tick runs one round of the loop. It returns an error only when the
// member is lost (Run returns it).
func (r *memberRun) tick(ctx context.Context) error {
	snap, ok, err := r.renewAndRead()
	if err != nil || !ok {
		return err
	}
	if r.stopping == nil {
		// Every slot is stopping: none is checked below.
		r.seeing(snap)
		return nil
	}
	layoutLease := r.followLayout(snap)
	v := observeAsOf(r.c, r.layout.ID(), snap.all, r.seen, time.Now(), snap.covered, snap.fresh)
	r.stopTaken(v, snap)
	r.seeing(snap)
	r.tidy(ctx, v, snap)
	if r.holdBack(ctx, v) {
		return nil
	}
	if snap.fresh && len(v.rebalancers) > 0 && v.rebalancers[0] == r.c.Identity &&
		((layoutLease == nil && r.layout.IsEqual()) || time.Since(r.layoutSince) >= r.c.RebalanceEvery) {
		// The member first in order of those that re-cut does, if the load
		// asks for it.
		r.m.rebalance(ctx, r.leases, r.layout, layoutLease, v, r.load)
	}
	r.share(ctx, v, snap)
	return nil
}

// renewAndRead renews the member Lease, carrying our layout and the load
// of the slots we run, then reads the group's Leases from the cache. Not
// ok (and no error) when the renewal failed for a reason worth another
// try; an error when the member is lost.
func (r *memberRun) renewAndRead() (snapshot, bool, error) {
	c, m := r.c, r.m
	start := time.Now()
	next := r.self.DeepCopy()
	next.Labels[SlotsLabel] = m.label(r.slots, r.layout)
	if a := c.memberAnnotations(); a != nil {
		metav1.SetMetaDataAnnotation(&next.ObjectMeta, rebalanceAnnotation, a[rebalanceAnnotation])
	} else {
		delete(next.Annotations, rebalanceAnnotation)
	}
	r.load = m.ownLoad(r.slots, r.layout)
	if r.load != nil {
		metav1.SetMetaDataAnnotation(&next.ObjectMeta, loadAnnotation, formatLoad(r.layout.ID(), r.load))
	}
	renewed, err := m.renew(r.apiCtx, r.leases, next)
	if err != nil {
		var why string
		switch {
		case m.fence.Check() != nil:
			why = fmt.Sprintf("not renewed within the renew deadline (%v)", c.RenewDeadline)
		case errors.Is(err, errTaken):
			why = err.Error()
		case apierrors.IsNotFound(err):
			why = "the member Lease was deleted"
		}
		if why != "" {
			r.logger.Info("Lost the member Lease; stopping all writes and exiting", "reason", why)
			return snapshot{}, false, r.lost(&lostError{reason: why})
		}
		r.logger.Info("Could not renew the member Lease; trying again", "err", err.Error())
		return snapshot{}, false, nil
	}
	r.recent = [2]string{r.self.ResourceVersion, renewed.ResourceVersion}
	r.recentSent = [2]time.Time{r.recentSent[1], start}
	r.self = renewed

	all, err := r.lister.List(labels.Everything())
	if err != nil {
		return snapshot{}, false, r.lost(err)
	}
	// Fresh: the cache shows one of our last two renewals. It then holds
	// every change the API server made before that renewal was sent (a
	// watch delivers in order), among them every slot we had taken by
	// then: covered is when that renewal was sent. Read from the same
	// snapshot as the rest, so that it covers them.
	snap := snapshot{all: all, start: start}
	for _, l := range all {
		if l.Name != r.self.Name {
			continue
		}
		for i, rv := range r.recent {
			if l.ResourceVersion == rv {
				snap.fresh, snap.covered = true, r.recentSent[i]
			}
		}
	}
	return snap, true, nil
}

// seeing records how recent the view is, for Check: called once the
// slots taken from us in it have been stopped (stopTaken), lest a write
// for one of them pass in between.
func (r *memberRun) seeing(snap snapshot) {
	if snap.fresh {
		r.m.viewAt.Store(snap.covered.UnixNano())
	}
	age := time.Since(time.Unix(0, r.m.viewAt.Load()))
	switch stale := age > r.c.RenewDeadline; {
	case stale && !r.viewStale:
		r.logger.Info("The watch of the group's Leases shows none of this member's recent renewals; refusing writes to every slot until it does",
			"viewAge", age.Round(time.Second), "renewDeadline", r.c.RenewDeadline)
	case !stale && r.viewStale:
		r.logger.Info("The watch of the group's Leases caught up; writes resume")
	}
	r.viewStale = age > r.c.RenewDeadline
}

// followLayout reads the boundaries from the tick's snapshot (a member
// that has switched to new ones is seen with them) and, when they
// changed, hands every slot of the old ones over. It returns the layout
// Lease (nil when there is none).
func (r *memberRun) followLayout(snap snapshot) *coordinationv1.Lease {
	cur, layoutLease, err := layoutOf(r.c, snap.all)
	if err != nil && layoutLease.ResourceVersion != r.badLayout {
		r.logger.Error(err, "The layout Lease does not hold valid slot boundaries; using equal ranges until it does (a member that re-balances, if any, writes new ones)", "lease", klog.KObj(layoutLease))
		r.badLayout = layoutLease.ResourceVersion
	}
	if cur.ID() == r.layout.ID() {
		return layoutLease
	}
	r.logger.Info("The slot boundaries changed; handing every slot over, to take new ones once all are released", "from", r.layout.ID(), "to", cur.ID(), "handingOver", len(r.slots))
	r.layout, r.layoutSince = cur, time.Now()
	r.m.layout.Store(&cur)
	for _, st := range r.slots {
		if st.slot.Layout.ID() != cur.ID() && !st.going {
			st.stop(nil)
		}
	}
	return layoutLease
}

// stopTaken stops, at once and without releasing it, each slot whose
// Lease names another member now (deleted by hand and taken, or taken
// while our view was wrong): it is not ours.
func (r *memberRun) stopTaken(v view, snap snapshot) {
	for slot, st := range r.slots {
		l := v.slots[slot]
		switch {
		case st.going || st.slot.Layout.ID() != r.layout.ID():
		case !snap.fresh || !st.since.Before(snap.covered):
			// The cache may not show our taking it yet.
		case l == nil || ptr.Deref(l.Spec.HolderIdentity, "") != r.c.Identity:
			holder := "(no Lease)"
			if l != nil {
				holder = ptr.Deref(l.Spec.HolderIdentity, "")
			}
			r.logger.Info("The Lease of a slot held here no longer names this member; stopping its writes at once, without releasing it",
				"slot", slot, "holder", holder)
			st.taken.Store(true)
			r.m.mu.Lock()
			delete(r.m.writing, st.lease)
			r.m.mu.Unlock()
			st.stop(fmt.Errorf("slot %d: its Lease names %q: %w", slot, holder, ErrSlotTaken))
		}
	}
}

// tidy deletes or releases the Leases others left or that name us
// wrongly: members gone for good, slots whose Lease names us though we do
// not run them (of our layout or the previous one), and the slots of a
// slot count or layout nobody live uses. Each request is bounded, as every
// request of the loop: one that hangs here would stop the renewals (a
// wedged member).
func (r *memberRun) tidy(ctx context.Context, v view, snap snapshot) {
	c, m := r.c, r.m
	for _, l := range v.stale {
		// Left by a killed process; the precondition keeps us from
		// deleting one that came back to life.
		if deleteAsSeen(ctx, r.leases, l, c.RetryPeriod) == nil {
			r.logger.Info("Deleted the Lease of a member gone for good", "lease", klog.KObj(l))
		}
	}
	for slot, l := range v.slots {
		// A slot whose Lease names us though we do not run it: a take
		// whose answer was lost, a release that failed, or a hand edit.
		// Live as we are, nobody else would ever take it. Released at the
		// version seen: if the cache is behind (a release that did land),
		// the API server refuses it.
		if _, ours := r.slots[slot]; ours || !snap.fresh || ptr.Deref(l.Spec.HolderIdentity, "") != c.Identity {
			continue
		}
		if t, ok := r.left[slot]; ok && !t.Before(snap.covered) {
			continue // the view may not show its release yet
		}
		if m.release(ctx, r.leases, l, slot, c.RetryPeriod) {
			r.logger.Info("Released a slot whose Lease named this member, which did not run it (a take whose answer was lost, a release that failed, or a hand edit)", "slot", slot)
		}
	}
	for _, l := range v.ownOld {
		// A slot of the previous boundaries whose Lease names us though we
		// no longer run it (its release failed): the others wait for it
		// (draining), so release it as above.
		if !snap.fresh || m.runs(r.slots, l.Name) {
			continue
		}
		if t, ok := r.leftByName[l.Name]; ok && !t.Before(snap.covered) {
			continue
		}
		slot, _ := strconv.Atoi(l.Labels[SlotLabel])
		if m.release(ctx, r.leases, l, slot, c.RetryPeriod) {
			r.logger.Info("Released a slot of the previous boundaries whose Lease named this member, which did not run it", "lease", klog.KObj(l))
		}
	}
	for _, l := range v.orphans {
		// At the version seen: unless a member of its count took it since.
		if deleteAsSeen(ctx, r.leases, l, c.RetryPeriod) != nil {
			continue
		}
		if l.Labels[RoleLabel] == LayoutRole {
			r.logger.Info("Deleted the layout Lease of a slot count no live member runs", "lease", klog.KObj(l), "slots", l.Labels[SlotsLabel])
			continue
		}
		r.logger.Info("Deleted the Lease of a slot of another slot count or layout, which no live member of it holds", "lease", klog.KObj(l), "slots", l.Labels[SlotsLabel])
	}
}

// kept are the slots we run that are not stopping.
func (r *memberRun) kept() []int {
	var keep []int
	for slot, s := range r.slots {
		if !s.going {
			keep = append(keep, slot)
		}
	}
	return keep
}

// holdBack reports whether this tick must take no slot, handing over what
// it holds where it must: a leader of the single-leader mode may be at
// work (a rollout between the two modes), a member of another slot count
// holds slots (a rollout that changes -shard-slots), or slots of the
// previous boundaries are still being handed over.
func (r *memberRun) holdBack(ctx context.Context, v view) bool {
	c := r.c
	keep := r.kept()
	// A leader under our name works on every namespace: we take no slot
	// while its Lease moves, and let go of those we hold.
	leaderAtWork, leader, err := r.m.leaderLive(ctx, r.leases, &r.leaderSeen)
	if err != nil && !r.leaderUnread {
		r.logger.Info("Could not read the Lease of the single-leader mode; taking no slot, and keeping those held, until it can be read", "lease", klog.KRef(c.Namespace, c.Group), "err", err.Error())
	}
	r.leaderUnread = err != nil
	if leaderAtWork || err != nil {
		if leaderAtWork && !r.waitingForLeader {
			r.logger.Info("The Lease of the single-leader mode changed within a lease duration: a leader may be at work; taking no slot, and handing over those held, until it has been still for a lease duration",
				"lease", klog.KRef(c.Namespace, c.Group), "holder", leader, "handingOver", len(keep))
		}
		r.waitingForLeader = leaderAtWork
		for _, slot := range keep {
			if leaderAtWork {
				r.slots[slot].stop(nil)
			}
		}
		return true
	}
	r.waitingForLeader = false
	if v.wait != "" {
		if v.wait != r.waitingFor {
			// Another slot count only: a member of ours on the previous
			// layout counts as ours, and its old slots as draining.
			r.logger.Info("Another member runs with a different slot count and holds slots; taking none until it is gone",
				"member", v.wait, "theirSlots", v.waitSlots, "slots", int(c.Slots), "handingOver", v.yield && len(keep) > 0)
		}
		r.waitingFor = v.wait
		if v.yield {
			// Both hold slots and it is older: ours go.
			for _, slot := range keep {
				r.slots[slot].stop(nil)
			}
		}
		return true
	}
	r.waitingFor = ""
	if v.draining {
		if !r.draining {
			r.logger.Info("Slots of the previous boundaries are still being handed over; taking none until all are released", "layout", r.layout.ID())
		}
		r.draining = true
		return true
	}
	r.draining = false
	return false
}

// share hands over the slots beyond our share and takes free ones up to
// it, the takes only in the first half of the retry period (the rest at
// the next tick, after the next renewal).
func (r *memberRun) share(ctx context.Context, v view, snap snapshot) {
	c := r.c
	release, acquire := rebalanceShare(r.kept(), v.free(c.Slots), Share(c.Slots, v.members, c.Identity))
	for _, slot := range release {
		r.logger.Info("Handing a slot over", "slot", slot, "members", len(v.members))
		r.slots[slot].stop(nil)
	}
	for _, slot := range acquire {
		if _, ours := r.slots[slot]; ours {
			continue // still stopping here
		}
		if time.Since(snap.start) > c.RetryPeriod/2 {
			break
		}
		l, ok := r.m.acquire(ctx, r.leases, v.slots[slot], r.layout, slot)
		if !ok {
			continue
		}
		r.logger.Info("Took a slot", "slot", slot, "members", len(v.members))
		r.slots[slot] = r.m.start(ctx, r.leases, l, r.layout, r.work, r.finished, r.workErrs)
	}
}

// stopAll asks every slot's Work to return.
func (r *memberRun) stopAll(cause error) {
	for _, s := range r.slots {
		s.stop(cause)
	}
}

// lost shuts every write, stops every slot with err as the cause, and
// returns err once they have had a moment to return.
func (r *memberRun) lost(err error) error {
	r.m.lose()
	r.stopAll(err)
	r.m.waitBriefly(r.slots)
	return err
}
