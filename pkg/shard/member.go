package shard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/sharding"
	"k8s.io/apimachinery/pkg/util/wait"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"example.com/foo-controller/pkg/leader"
	"example.com/foo-controller/pkg/metrics"
)

// Labels on the Leases of a group: which group, and whether a Lease is a
// member's or a slot's (and which slot).
const (
	GroupLabel = "shard.samplecontroller.example.com/group"
	SlotLabel  = "shard.samplecontroller.example.com/slot"
	RoleLabel  = "shard.samplecontroller.example.com/role"
	// SlotsLabel is the member's slot count (-shard-slots), on its own
	// Lease and on the slots' Leases it takes.
	SlotsLabel = "shard.samplecontroller.example.com/slots"
	// LayoutRole is the RoleLabel of the Lease that holds a group's slot
	// boundaries (see layoutOf).
	LayoutRole = "layout"
	// CutsAnnotation holds a layout Lease's slot boundaries
	// (Layout.FormatCuts); loadAnnotation a member Lease's load, the Foos
	// of the slots it runs (formatLoad).
	CutsAnnotation = "shard.samplecontroller.example.com/cuts"
	loadAnnotation = "shard.samplecontroller.example.com/load"
	// rebalanceAnnotation on a member Lease is the member's
	// -shard-rebalance-skew, absent when 0: only members that re-cut are
	// candidates to (see observe).
	rebalanceAnnotation = "shard.samplecontroller.example.com/rebalance-skew"
)

// Config configures a Member. The timings follow the leader election's
// rule (leader.Config.Validate): a member stops writing RenewDeadline after
// its last renewal, before any other may take its slots, LeaseDuration
// after that renewal as the other observed it.
type Config struct {
	// Group names the Leases: "<Group>-member-<identity>" for each member
	// and "<Group>-slot-<i>" for each slot. Replicas that share the work
	// must use the same Group, Namespace and Slots.
	Group     string
	Namespace string
	Slots     Slots
	Identity  string

	LeaseDuration, RenewDeadline, RetryPeriod time.Duration

	// Rebalance is when the slot boundaries are re-cut for the load
	// (Policy.Skew 0: never; they stay equal ranges), and RebalanceEvery
	// the least time between two re-cuts: each hands every slot over.
	Rebalance      Policy
	RebalanceEvery time.Duration
}

// Validate checks the configuration, the timing rule included.
func (c Config) Validate() error {
	if err := c.Slots.Validate(); err != nil {
		return err
	}
	if c.Group == "" || c.Namespace == "" || c.Identity == "" {
		return errors.New("shard: group, namespace and identity must be set")
	}
	if err := c.Rebalance.Validate(); err != nil {
		return fmt.Errorf("shard: %w", err)
	}
	if c.RebalanceEvery < 0 {
		return errors.New("shard: the re-balance interval must not be negative")
	}
	return leader.Config{LeaseName: c.Group, LeaseDuration: c.LeaseDuration, RenewDeadline: c.RenewDeadline, RetryPeriod: c.RetryPeriod}.Validate()
}

// Work is what a member runs for each slot it holds. Its context is
// cancelled when the slot must go, and context.Cause tells how:
//   - context.Canceled: handed over to another member, or a graceful
//     stop. The slot's Lease is released only after Work has returned, and
//     the member's writes for the slot's namespaces pass until then (see
//     WrapTransport): in-flight work may finish.
//   - ErrSlotTaken: the slot's Lease names another member now, or ErrLost
//     (and leader.ErrLost): the member lost its own Lease. Its writes for
//     the slot are refused already; Work should stop at once.
//
// An error returned while the context is still live ends the member: Run
// returns it.
type Work func(ctx context.Context, slot Slot) error

// Slot is one slot a member runs: its index in its layout, and its load,
// which the slot's informer keeps and the member publishes.
type Slot struct {
	Index  int
	Layout Layout
	load   *slotLoad
}

// Selector is the slot's shard selector.
func (s Slot) Selector() (sharding.Selector, error) { return s.Layout.Selector([]int{s.Index}) }

// Keep reports whether an object of namespace ns is the slot's.
func (s Slot) Keep(ns string) bool { return s.Layout.Contains(s.Index, ns) }

// ErrLost is why a member stopped while it still wanted to work: its
// member Lease was not renewed within RenewDeadline, was deleted, or names
// another member. The error Run returns then matches both ErrLost and
// leader.ErrLost (errors.Is), so that the process handles it as it does a
// lost leader (it exits at once, Events still queued are dropped), and
// says which of the three happened, in a member's words, not a leader's.
var ErrLost = errors.New("shard member lost its Lease")

// ErrSlotTaken is the cause with which a slot's Work is cancelled when the
// slot's Lease was found naming another member.
var ErrSlotTaken = errors.New("slot taken by another member")

// lostError is ErrLost with the reason.
type lostError struct{ reason string }

func (e *lostError) Error() string   { return ErrLost.Error() + ": " + e.reason }
func (e *lostError) Unwrap() []error { return []error{ErrLost, leader.ErrLost} }

// Member takes part in sharing the slots of a group among replicas, each
// slot held by at most one member at a time through its Lease.
//
// Liveness is per member, not per slot: a member renews one Lease of its
// own, and a slot's Lease names the member holding it. So renewals cost
// one write per member per RetryPeriod, whatever the number of slots, and
// a member that stops renewing loses all its slots together, which is
// right: it is the process that failed, not a slot. Another member takes
// a slot once the holder's member Lease has not changed for LeaseDuration
// by its own clock, or at once when the holder released it.
type Member struct {
	cfg    Config
	client kubernetes.Interface
	fence  *leader.Fence // the member's own renewals; shut for good when lost

	mu sync.Mutex
	// writing holds the slots whose namespaces may be written to, by
	// their Lease's name: in a change of layout, a slot of the old one
	// finishing its syncs sits beside none of the new (see observe).
	writing map[string]Slot
	// layout is the group's slot boundaries as last read.
	layout atomic.Pointer[Layout]

	joined atomic.Bool // in the group: joined, and neither left nor lost
	// viewAt (Unix nanoseconds) is how recent the member's cache of the
	// group's Leases is known to be: when the latest renewal it shows was
	// sent. Writes to namespaces stop once it is older than RenewDeadline
	// (see Check).
	viewAt atomic.Int64
}

// NewMember returns a member; client must not be fenced (it renews).
func NewMember(client kubernetes.Interface, c Config) (*Member, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	m := &Member{
		cfg:     c,
		client:  client,
		fence:   newFence(c.RenewDeadline),
		writing: map[string]Slot{},
	}
	eq := EqualLayout(c.Slots)
	m.layout.Store(&eq)
	return m, nil
}

// newFence is a member's fence: its refusals speak of the member Lease.
func newFence(renewDeadline time.Duration) *leader.Fence {
	return leader.NewFenceFor(renewDeadline, ErrLost, "not a live member (no renewal of the member Lease in the last %v)")
}

// Joined reports whether the member is in its group: it has created its
// Lease, and has neither left nor lost it.
func (m *Member) Joined() bool { return m.joined.Load() }

// Healthz is the member's liveness check (a metrics.Check for /healthz):
// it fails once the member's last successful renewal of its Lease is older
// than RenewDeadline, the threshold of the leader's own check
// (leader.Config.HealthzTimeout). A member that cannot renew stops writing
// at that moment and exits at its next tick; one still running past it is
// wedged (its loop stuck), and a restart is what it needs. Before joining
// it passes (the process may be waiting for the API server).
func (m *Member) Healthz(*http.Request) error { return m.fence.Stale() }

// Held returns the slots whose namespaces this member may write to now.
func (m *Member) Held() []int {
	m.mu.Lock()
	defer m.mu.Unlock()
	var s []int
	for _, slot := range m.writing {
		s = append(s, slot.Index)
	}
	slices.Sort(s)
	return s
}

// Layout is the group's slot boundaries as the member last read them.
func (m *Member) Layout() Layout {
	if l := m.layout.Load(); l != nil {
		return *l
	}
	return EqualLayout(m.cfg.Slots)
}

// Check returns why a write to namespace may not be sent now, or nil: the
// member must have renewed its Lease within RenewDeadline, hold the
// namespace's slot, and have a view of the group's Leases no older than
// RenewDeadline. A write outside any namespace needs only the first.
//
// The last rule is for a watch that stalls while its connection stays up:
// the member would go on renewing but never see a slot's Lease taken from
// it (deleted or overwritten by another writer, and taken by another
// member), and both would write for the slot until the watch moved again.
// Writes resume once the view shows the member's renewals again.
func (m *Member) Check(namespace string) error {
	if err := m.fence.Check(); err != nil {
		return err
	}
	if namespace == "" {
		return nil
	}
	m.mu.Lock()
	held := false
	for _, s := range m.writing {
		if s.Keep(namespace) {
			held = true
			break
		}
	}
	m.mu.Unlock()
	if !held {
		return fmt.Errorf("write refused: namespace %q is in slot %d, which this replica does not hold", namespace, m.Layout().Of(namespace))
	}
	if age := time.Since(time.Unix(0, m.viewAt.Load())); age > m.cfg.RenewDeadline {
		return fmt.Errorf("write refused: this replica's view of its group's Leases is %v old, more than the renew deadline (%v): its watch of them has stalled", age.Round(time.Second), m.cfg.RenewDeadline)
	}
	return nil
}

// WrapTransport is a rest.Config WrapTransport that refuses every write
// the member may not send (see Check), one check per write. With Dial,
// once the member stopped renewing, nothing is written on the connections
// beneath at all.
func (m *Member) WrapTransport(rt http.RoundTripper) http.RoundTripper {
	return leader.GuardWrites(rt, func(req *http.Request) error {
		var ns string
		if s := namespaced.FindStringSubmatch(req.URL.Path); s != nil {
			ns = s[1]
		}
		return m.Check(ns)
	})
}

// Dial is the member's guard on connections (see leader.Fence.Dial).
func (m *Member) Dial(dial func(ctx context.Context, network, address string) (net.Conn, error)) func(ctx context.Context, network, address string) (net.Conn, error) {
	return m.fence.Dial(dial)
}

// namespaced finds the namespace in a request path: /api/v1/namespaces/NS/…
// and /apis/GROUP/VERSION/namespaces/NS/…; a write to a Namespace itself
// (…/namespaces/NS with nothing after) is not a write in NS.
var namespaced = regexp.MustCompile(`^/(?:api/[^/]+|apis/[^/]+/[^/]+)/namespaces/([^/]+)/`)

// Lease names. An identity is a host name and a random suffix joined by
// "_" (leader.Identity), which a name may not hold.
func (c Config) memberLease() string {
	return c.Group + "-member-" + strings.ToLower(strings.ReplaceAll(c.Identity, "_", "-"))
}

// A slot's Lease names its layout too: slot 3 of 16 equal ranges, of 32,
// and of 16 balanced ones are different hash ranges ("-of-16",
// "-of-32", "-of-16.1f…").
func (c Config) slotLease(layout Layout, slot int) string {
	return fmt.Sprintf("%s-slot-%d-of-%s", c.Group, slot, layout.ID())
}

// memberAnnotations are those of our member Lease at join.
func (c Config) memberAnnotations() map[string]string {
	if c.Rebalance.Skew <= 0 {
		return nil
	}
	return map[string]string{rebalanceAnnotation: strconv.FormatFloat(c.Rebalance.Skew, 'g', -1, 64)}
}

// layoutLease names the Lease that stores a slot count's boundaries.
func (c Config) layoutLease() string {
	return fmt.Sprintf("%s-layout-of-%d", c.Group, int(c.Slots))
}

// labels of a member's or slot's Lease: SlotsLabel is the layout's ID
// (the slot count, for equal ranges, as before layouts existed).
func (c Config) labels(role, layout string) map[string]string {
	return map[string]string{GroupLabel: c.Group, RoleLabel: role, SlotsLabel: layout}
}

// observed is what a member knows of another member's Lease: when, by its
// own clock, it last saw the Lease change. Not the renewTime written in
// it, which is the other's clock.
type observed struct {
	resourceVersion string
	at              time.Time
	// dead: at first sight, the Lease's renewTime was older than twice
	// LeaseDuration by our clock (see renewedLongAgo); cleared when the
	// Lease changes.
	dead bool
}

// renewedLongAgo reports whether a member Lease seen for the first time
// was last renewed, by the time written in it, more than twice
// LeaseDuration ago: left by a process killed long before we started.
// That time is the other's clock, so it decides only our share (which is
// fairness), never whether a slot is free (which is safety): a member
// whose clock lags ours by that much is undercounted for one renewal.
func renewedLongAgo(l *coordinationv1.Lease, now time.Time, leaseDuration time.Duration) bool {
	return l.Spec.RenewTime != nil && now.Sub(l.Spec.RenewTime.Time) > 2*leaseDuration
}

// view is the state of the group as one member sees it at one moment.
type view struct {
	// members are the live members with our slot count, self among them,
	// that count in the share: without those presumed dead at first sight
	// (renewedLongAgo), whose slots still count as held.
	members []string
	holders map[int]string // slot → live holder; absent: free
	slots   map[int]*coordinationv1.Lease
	stale   []*coordinationv1.Lease
	// orphans are slot Leases of another slot count that nobody of that
	// count will take again: left by a change of -shard-slots.
	orphans []*coordinationv1.Lease
	// wait names a live member with another slot count that holds slots:
	// its ranges overlap ours, so we take none until it is gone; yield is
	// set when that member is also older than us, and we must let go of
	// what we hold.
	wait      string
	waitSlots string // its slot count
	yield     bool
	// draining is set while a slot Lease of another layout of our slot
	// count names a live member of ours (self included): a re-cut whose
	// old slots are still being handed over. Their ranges overlap the
	// new ones, so nobody takes a new slot until all are released.
	draining bool
	// ownOld are the slot Leases of another layout that name us: each
	// released once we no longer run it (see Run).
	ownOld []*coordinationv1.Lease
	// loads are the live members' published loads for our layout (see
	// formatLoad): slot → points, for the slots each runs.
	loads map[string]map[int][]point
	// rebalancers are the live members of our slot count that re-cut
	// (-shard-rebalance-skew above 0, in rebalanceAnnotation), sorted:
	// the first one does. A member with re-cutting off is never the one,
	// whatever its name.
	rebalancers []string
}

// countOf is the slot count of a layout ID ("16" of "16.1f…").
func countOf(layout string) string {
	n, _, _ := strings.Cut(layout, ".")
	return n
}

// observe computes the view from the group's Leases (a snapshot of the
// member's cache), updating seen (Lease name → last change observed). A
// member is live until LeaseDuration has passed since its Lease last
// changed, by our clock; a slot is free when its Lease names no holder, or
// a holder that is not live. Member Leases unchanged for twice
// LeaseDuration are stale, left by a process that was killed. A member
// Lease first seen already long unrenewed (renewedLongAgo) is not counted
// in the share, lest a replica that starts beside the Leases of killed
// processes take less than its share for a lease duration.
//
// Expiry is judged only when the cache is fresh (it shows our own latest
// renewals): a cache whose watch stalled would show every other member
// unchanged, and we would take slots from members that are alive. A slot
// whose holder has no member Lease at all (deleted by hand) is free only
// once we have seen it so for LeaseDuration: the holder may still be
// working on it until its next renewal fails.
//
// Members with another slot count (a rollout that changes -shard-slots)
// cut the hash space differently, so their slots overlap ours: they do not
// count in our share, and while one of them holds a slot, we take none.
// If two such members hold slots at once (they started together), the
// younger (the later member Lease, then the greater identity) lets go.
// Once no live member of a slot count is left, the slot Leases of that
// count that nobody live holds are orphans, to be deleted.
func observe(c Config, leases []*coordinationv1.Lease, seen map[string]observed, now time.Time, fresh bool) view {
	return observeAsOf(c, EqualLayout(c.Slots).ID(), leases, seen, now, now, fresh)
}

// observeAsOf is observe for a cache known to show every change made
// before asOf (when the renewal of ours it shows was sent), not until now:
// a Lease's age is counted to asOf. A member that renewed after asOf, and
// so unseen, renewed within RenewDeadline of a renewal before it, which
// the cache shows: counted to asOf, an age of LeaseDuration or more means
// it has stopped writing, whatever the timings.
//
// ours is the ID of our layout (Layout.ID): members and slots of another
// layout of our own slot count are a re-cut in progress, and are treated
// as those of another slot count are, with one more rule: a slot Lease of
// another layout that names a live member of ours (self included), which
// has switched already but is still finishing that slot's syncs, holds
// everyone back (draining).
func observeAsOf(c Config, ours string, leases []*coordinationv1.Lease, seen map[string]observed, now, asOf time.Time, fresh bool) view {
	v := view{holders: map[int]string{}, slots: map[int]*coordinationv1.Lease{}, loads: map[string]map[int][]point{}}
	live := map[string]bool{c.Identity: true}
	known := map[string]bool{}
	liveOther := map[string]*coordinationv1.Lease{}
	liveCounts := map[string]bool{} // the slot counts of live members of other counts
	var self *coordinationv1.Lease
	names := map[string]bool{}
	presumedDead := map[string]bool{}
	age := func(l *coordinationv1.Lease) time.Duration {
		names[l.Name] = true
		o, ok := seen[l.Name]
		if !ok || o.resourceVersion != l.ResourceVersion {
			o = observed{resourceVersion: l.ResourceVersion, at: now, dead: !ok && renewedLongAgo(l, now, c.LeaseDuration)}
			seen[l.Name] = o
		}
		if o.dead {
			presumedDead[ptr.Deref(l.Spec.HolderIdentity, "")] = true
		}
		if !fresh {
			return 0
		}
		return asOf.Sub(o.at)
	}
	for _, l := range leases {
		if l.Labels[RoleLabel] != "member" || l.Spec.HolderIdentity == nil {
			continue
		}
		id := *l.Spec.HolderIdentity
		known[id] = true
		switch a := age(l); {
		case id == c.Identity:
			self = l
		case a < c.LeaseDuration && countOf(l.Labels[SlotsLabel]) == countOf(ours):
			// Our slot count, whatever its layout: a member that has not
			// switched to ours yet (it names the old one until it runs no
			// slot of it) still counts in the share, or the first member
			// to switch would take every slot and hand most back a tick
			// later. Its old slots hold everyone back (draining, below).
			live[id] = true
			if layout, slots, err := parseLoad(l.Annotations[loadAnnotation]); err == nil && layout == ours {
				v.loads[id] = slots
			}
			if l.Annotations[rebalanceAnnotation] != "" {
				v.rebalancers = append(v.rebalancers, id)
			}
		case a < c.LeaseDuration:
			liveOther[id] = l
			liveCounts[l.Labels[SlotsLabel]] = true
		case a >= 2*c.LeaseDuration:
			v.stale = append(v.stale, l)
		}
	}
	// goneLong reports whether a holder with no member Lease (deleted by
	// hand, or as stale) has been seen so for a lease duration: it may be
	// at work until its next renewal fails.
	goneLong := func(h string) bool {
		key := "gone/" + h
		names[key] = true
		g, ok := seen[key]
		if !ok {
			g = observed{at: now}
			seen[key] = g
		}
		return fresh && asOf.Sub(g.at) >= c.LeaseDuration
	}
	for id := range live {
		if !presumedDead[id] || id == c.Identity {
			v.members = append(v.members, id)
		}
	}
	slices.Sort(v.members)
	if c.Rebalance.Skew > 0 {
		v.rebalancers = append(v.rebalancers, c.Identity)
	}
	slices.Sort(v.rebalancers)
	// Layout Leases of a slot count no live member runs (left by a change
	// of -shard-slots): a later return to that count starts afresh.
	liveN := map[string]bool{countOf(ours): true}
	for _, l := range liveOther {
		liveN[countOf(l.Labels[SlotsLabel])] = true
	}
	for _, l := range leases {
		if l.Labels[RoleLabel] == LayoutRole && fresh && !liveN[l.Labels[SlotsLabel]] {
			v.orphans = append(v.orphans, l)
		}
	}
	for _, l := range leases {
		if l.Labels[RoleLabel] != "slot" {
			continue
		}
		names[l.Name] = true
		h := ptr.Deref(l.Spec.HolderIdentity, "")
		if l.Labels[SlotsLabel] != ours {
			if other := liveOther[h]; other != nil {
				v.wait, v.waitSlots = h, other.Labels[SlotsLabel]
				if self != nil && older(other, self) {
					v.yield = true
				}
				continue
			}
			if h != "" && live[h] {
				// A member of ours still finishing a slot of the old
				// layout; ourselves, perhaps.
				v.draining = true
				if h == c.Identity {
					v.ownOld = append(v.ownOld, l)
				}
				continue
			}
			// No live member of its count to take it again, and its holder
			// (if any) expired as it would for a slot of ours.
			if fresh && !liveCounts[l.Labels[SlotsLabel]] && !live[h] && (h == "" || known[h] || goneLong(h)) {
				v.orphans = append(v.orphans, l)
			}
			continue
		}
		slot, err := strconv.Atoi(l.Labels[SlotLabel])
		if err != nil || slot < 0 || slot >= int(c.Slots) {
			continue
		}
		v.slots[slot] = l
		switch {
		case h == "":
		case live[h]:
			v.holders[slot] = h
		case !known[h]:
			// Its member Lease is gone (deleted by hand), but it may
			// still be at work until its next renewal fails: free once we
			// have seen it without a member Lease for a lease duration
			// (not from the slot Lease's age, which is as old as the take).
			if !goneLong(h) {
				v.holders[slot] = h
			}
		}
	}
	for name := range seen {
		if !names[name] {
			delete(seen, name)
		}
	}
	return v
}

// older reports whether member Lease a was created before b (the API
// server's clock), the identity breaking a tie.
func older(a, b *coordinationv1.Lease) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	return ptr.Deref(a.Spec.HolderIdentity, "") < ptr.Deref(b.Spec.HolderIdentity, "")
}

// free lists the slots no live member holds.
func (v view) free(n Slots) []int {
	var f []int
	for i := range int(n) {
		if _, held := v.holders[i]; !held {
			f = append(f, i)
		}
	}
	return f
}

// slotState is a slot this member holds, while its Work runs.
type slotState struct {
	slot   Slot
	lease  string // its Lease's name
	cancel context.CancelCauseFunc
	done   chan struct{} // closed when Work returned and the slot was released
	going  bool          // Work was asked to stop (Run's goroutine only)
	since  time.Time     // when we took it
	// taken is set when the slot's Lease was found naming another member:
	// writes for it stop at once, and it is not released (not ours).
	taken atomic.Bool
}

// stop asks the slot's Work to return, with cause (nil: context.Canceled,
// a hand-over or a graceful stop; see Work).
func (s *slotState) stop(cause error) {
	s.going = true
	s.cancel(cause)
}

// Run joins the group and runs work for each slot this member holds, until
// ctx is cancelled or the member's Lease is lost.
//
// A graceful stop (ctx cancelled) stops every slot's Work, releases each
// slot's Lease once its Work has returned, then deletes the member's own
// Lease, so that the others take the slots at their next RetryPeriod; Run
// returns nil. A lost member Lease (no renewal within RenewDeadline, or
// another writer changed it, or deleted it) shuts every write at once,
// cancels the Works (cause ErrLost), and Run returns an error matching
// ErrLost and leader.ErrLost without waiting for more than a moment: the
// process must exit, as other members may be taking its slots.
func (m *Member) Run(ctx context.Context, work Work) error {
	c := m.cfg
	logger := klog.FromContext(ctx).WithValues("group", c.Group, "identity", c.Identity)
	ctx = klog.NewContext(ctx, logger)
	leases := m.client.CoordinationV1().Leases(c.Namespace)

	// The group's Leases, watched: one watch per member instead of a read of
	// every Lease at every tick.
	factory := kubeinformers.NewSharedInformerFactoryWithOptions(m.client, 0, kubeinformers.WithNamespace(c.Namespace),
		kubeinformers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = labels.Set{GroupLabel: c.Group}.String()
		}))
	lister := factory.Coordination().V1().Leases().Lister().Leases(c.Namespace)
	informer := factory.Coordination().V1().Leases().Informer()
	// Stopped, not waited for: a reflector backing off after a failed
	// watch ignores its stop channel until the backoff ends (client-go
	// v0.37), and a member that lost its Lease must return at once.
	watchCtx, stopWatch := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWatch()
	factory.Start(watchCtx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		return ctx.Err()
	}

	// Join with the boundaries in place, so that the others count us at once.
	if all, err := lister.List(labels.Everything()); err == nil {
		cur, _, _ := layoutOf(c, all)
		m.layout.Store(&cur)
	}
	joinSent := time.Now()
	self, err := m.join(ctx, leases)
	if err != nil {
		return err
	}
	m.joined.Store(true)
	// The cache synced before the join was sent: it was as recent as that.
	m.viewAt.Store(joinSent.UnixNano())
	logger.Info("Joined the shard group", "slots", int(c.Slots), "lease", klog.KObj(self))

	r := &memberRun{
		m: m, c: c, logger: logger, leases: leases, lister: lister, work: work, self: self,
		slots:    map[int]*slotState{},
		finished: make(chan *slotState, 2*int(c.Slots)),
		workErrs: make(chan error, 2*int(c.Slots)),
		seen:     map[string]observed{},
		stopping: ctx.Done(),
		apiCtx:   context.WithoutCancel(ctx),
		// The join stands for the first renewal (see renewAndRead).
		recentSent: [2]time.Time{{}, joinSent},
		left:       map[int]time.Time{},
		leftByName: map[string]time.Time{},
		layout:     m.Layout(), layoutSince: time.Now(),
	}
	// The first tick comes one RetryPeriod after joining, so that members
	// started together see each other before taking slots.
	tick := time.NewTicker(c.RetryPeriod)
	defer tick.Stop()
	for {
		if r.stopping == nil && len(r.slots) == 0 {
			m.leave(r.apiCtx, leases, r.self)
			logger.Info("Left the shard group")
			return nil
		}
		select {
		case <-r.stopping:
			// A graceful stop: every slot's Work returns and its slot is
			// released while we go on renewing, then we leave.
			r.stopping = nil
			r.stopAll(nil)
		case st := <-r.finished:
			if r.slots[st.slot.Index] == st {
				delete(r.slots, st.slot.Index)
			}
			r.left[st.slot.Index] = time.Now()
			r.leftByName[st.lease] = time.Now()
		case err := <-r.workErrs:
			return r.lost(err)
		case <-tick.C:
			if err := r.tick(ctx); err != nil {
				return err
			}
		}
	}
}

// layoutOf finds the group's slot boundaries among its Leases (the layout
// Lease of our slot count): equal ranges when there is none, or when it
// does not parse (then with the error, and the Lease, to log), so that
// every member, reading the same Lease, cuts the same way.
func layoutOf(c Config, leases []*coordinationv1.Lease) (Layout, *coordinationv1.Lease, error) {
	name := c.layoutLease()
	for _, l := range leases {
		if l.Name != name {
			continue
		}
		layout, err := ParseLayout(c.Slots, l.Annotations[CutsAnnotation])
		if err != nil {
			return EqualLayout(c.Slots), l, err
		}
		return layout, l, nil
	}
	return EqualLayout(c.Slots), nil, nil
}

// loadBudget bounds the points a member publishes: about this many for
// all its slots together, plus a namespace heavier than 1/loadBudget of
// its load each (see summarize).
const loadBudget = 128

// ownLoad is the load of the slots of layout that we run and whose caches
// have synced, as we publish it (formatLoad) and as the re-cut reads it:
// slot → points; nil when there are none.
func (m *Member) ownLoad(slots map[int]*slotState, layout Layout) map[int][]point {
	counts := map[int]map[string]int{}
	total := 0
	for _, st := range slots {
		if st.going || st.slot.Layout.ID() != layout.ID() {
			continue
		}
		if c, ready := st.slot.load.snapshot(); ready {
			counts[st.slot.Index] = c
			total += slotTotal(c)
		}
	}
	if len(counts) == 0 {
		return nil
	}
	points := map[int][]point{}
	for slot, c := range counts {
		// One limit for all our slots: loadBudget points over our load.
		points[slot] = summarize(c, max(1, loadBudget*slotTotal(c)/max(1, total)))
	}
	return points
}

func slotTotal(c map[string]int) int {
	t := 0
	for _, w := range c {
		t += w
	}
	return t
}

// label is the layout our member Lease names: the current one, unless a
// slot of another still runs here. Until it is released, we go on naming
// the layout of that slot, so that every member, one of an earlier
// version included, that reads the Lease sees a live member of that
// layout holding it: a member naming another layout would make the slot
// look free to a member of the old one.
func (m *Member) label(slots map[int]*slotState, layout Layout) string {
	for _, st := range slots {
		if id := st.slot.Layout.ID(); id != layout.ID() {
			return id
		}
	}
	return layout.ID()
}

// runs reports whether a slot with Lease name is one whose Work runs here.
func (m *Member) runs(slots map[int]*slotState, name string) bool {
	for _, st := range slots {
		if st.lease == name {
			return true
		}
	}
	return false
}

// rebalance re-cuts the slot boundaries when the load asks for it
// (Policy.decide), from the loads the slots' holders published (own: ours,
// as this tick's renewal published it, see ownLoad): only
// once every slot is held by a live member that published its load, so
// that no namespace is left out. The new boundaries are written to the
// layout Lease at the version seen (created if absent): two members that
// both think themselves first cannot both write. Every member, this one
// included, then hands its slots over (see Run).
func (m *Member) rebalance(ctx context.Context, leases leaseClient, layout Layout, cur *coordinationv1.Lease, v view, own map[int][]point) {
	c := m.cfg
	if c.Rebalance.Skew <= 0 {
		return
	}
	var points []point
	for i := range int(c.Slots) {
		h, held := v.holders[i]
		if !held {
			return
		}
		load := v.loads[h]
		if h == c.Identity {
			load = own
		}
		pts, ok := load[i]
		if !ok {
			return // its cache is not synced yet, or not published
		}
		points = append(points, pts...)
	}
	next, before, after, ok := c.Rebalance.decide(layout, points)
	if !ok {
		return
	}
	logger := klog.FromContext(ctx)
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: c.layoutLease(), Namespace: c.Namespace,
		Labels: c.labels(LayoutRole, strconv.Itoa(int(c.Slots)))}}
	if cur != nil {
		l = cur.DeepCopy()
	}
	metav1.SetMetaDataAnnotation(&l.ObjectMeta, CutsAnnotation, next.FormatCuts())
	now := metav1.NewMicroTime(time.Now())
	l.Spec.HolderIdentity, l.Spec.RenewTime = ptr.To(c.Identity), &now
	ctx, cancel := context.WithTimeout(ctx, c.RetryPeriod/2)
	defer cancel()
	var err error
	if cur == nil {
		_, err = leases.Create(ctx, l, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			// There, but not in our watch: its labels were removed or never
			// set (a hand edit). Every member ignores it; put the group's
			// labels back with the new cuts, at the version read.
			var found *coordinationv1.Lease
			if found, err = leases.Get(ctx, l.Name, metav1.GetOptions{}); err == nil {
				logger.Info("The layout Lease exists without the group's labels, so no member sees it (a hand edit); writing it with them", "lease", klog.KObj(found))
				fixed := found.DeepCopy()
				fixed.Labels, fixed.Annotations, fixed.Spec = l.Labels, l.Annotations, l.Spec
				_, err = leases.Update(ctx, fixed, metav1.UpdateOptions{})
			}
		}
	} else {
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
	}
	if err != nil {
		logger.Info("Could not write new slot boundaries; trying again later", "err", err.Error())
		return
	}
	metrics.ShardLayoutChanges.Inc()
	logger.Info("Re-balanced the slots: wrote new boundaries; every member hands its slots over and takes new ones",
		"from", layout.ID(), "to", next.ID(), "skew", fmt.Sprintf("%.2f", before), "newSkew", fmt.Sprintf("%.2f", after), "foos", sum(points))
}

func sum(points []point) int {
	t := 0
	for _, p := range points {
		t += p.Weight
	}
	return t
}

// leaderLive reads the Lease of the single-leader mode (named as our
// group, in its namespace) and reports whether a leader may be at work: the
// Lease changed within LeaseDuration by our clock (seen; a Lease first seen
// counts as just changed), whether it names a holder or was just released,
// for a standby takes a released Lease within its retry period. holder is
// the name in it. A Lease unchanged for LeaseDuration is deleted (at the
// version seen), so that members starting later need not wait a lease
// duration for a leader gone for good. It is read at every tick rather
// than watched: a read cannot be stale as a stalled watch can. When the
// read fails, Run neither takes nor lets go.
func (m *Member) leaderLive(ctx context.Context, leases leaseClient, seen *observed) (live bool, holder string, err error) {
	c := m.cfg
	ctx, cancel := context.WithTimeout(ctx, c.RetryPeriod/2)
	defer cancel()
	l, err := leases.Get(ctx, c.Group, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		*seen = observed{}
		return false, "", nil
	case err != nil:
		return false, "", err
	}
	now := time.Now()
	if seen.resourceVersion != l.ResourceVersion {
		*seen = observed{resourceVersion: l.ResourceVersion, at: now}
	}
	holder = ptr.Deref(l.Spec.HolderIdentity, "")
	if now.Sub(seen.at) < c.LeaseDuration {
		return true, holder, nil
	}
	if deleteAsSeen(ctx, leases, l, c.RetryPeriod/2) == nil { // within the read's bound
		klog.FromContext(ctx).Info("Deleted the Lease of the single-leader mode, unchanged for a lease duration", "lease", klog.KObj(l), "holder", holder)
	}
	return false, holder, nil
}

// start runs work for a slot just acquired: writes for it pass until work
// returns, then its Lease is released.
func (m *Member) start(ctx context.Context, leases leaseClient, l *coordinationv1.Lease, layout Layout, work Work, finished chan<- *slotState, errs chan<- error) *slotState {
	slot, _ := strconv.Atoi(l.Labels[SlotLabel])
	workCtx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	s := &slotState{slot: Slot{Index: slot, Layout: layout, load: &slotLoad{}}, lease: l.Name,
		cancel: cancel, done: make(chan struct{}), since: time.Now()}
	m.mu.Lock()
	m.writing[l.Name] = s.slot
	m.mu.Unlock()
	go func() {
		defer func() {
			close(s.done)
			finished <- s
		}()
		err := work(klog.NewContext(workCtx, klog.FromContext(ctx).WithValues("slot", slot)), s.slot)
		// From here on, nothing more is written for this slot; only then
		// may another member take it.
		m.mu.Lock()
		delete(m.writing, l.Name)
		m.mu.Unlock()
		if err != nil && workCtx.Err() == nil {
			errs <- fmt.Errorf("slot %d: %w", slot, err)
			return
		}
		if m.fence.Check() != nil || s.taken.Load() {
			return // lost, or the slot is another's now: nothing to release
		}
		m.releaseSlot(context.WithoutCancel(ctx), leases, l.Name, slot)
	}()
	return s
}

type leaseClient interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*coordinationv1.Lease, error)
	Create(ctx context.Context, l *coordinationv1.Lease, opts metav1.CreateOptions) (*coordinationv1.Lease, error)
	Update(ctx context.Context, l *coordinationv1.Lease, opts metav1.UpdateOptions) (*coordinationv1.Lease, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
}

// join creates (or takes back, after a restart under the same identity)
// the member's own Lease.
func (m *Member) join(ctx context.Context, leases leaseClient) (*coordinationv1.Lease, error) {
	c := m.cfg
	now := metav1.NewMicroTime(time.Now())
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: c.memberLease(), Namespace: c.Namespace,
			Labels: c.labels("member", m.Layout().ID()), Annotations: c.memberAnnotations()},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(c.Identity),
			LeaseDurationSeconds: ptr.To(int32(c.LeaseDuration.Seconds())),
			AcquireTime:          &now, RenewTime: &now,
		},
	}
	sentAt := time.Now()
	created, err := leases.Create(ctx, l, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("creating the member Lease %s: %w", klog.KObj(l), err)
	}
	m.fence.Renewed(sentAt)
	return created, nil
}

// renew writes the member's Lease again. Only this member writes it (the
// others only delete it once it is stale), so a conflict means that an
// earlier renewal landed although we saw it time out: we read the Lease
// and, if it still names us, renew from that version. A Lease that is gone
// or names another holder means the member is lost. A renewal is
// attempted only within RenewDeadline of the last one sent; Run tries
// again at its next tick after a transient error.
func (m *Member) renew(ctx context.Context, leases leaseClient, self *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	if err := m.fence.Check(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, m.cfg.RetryPeriod)
	defer cancel()
	// Two writes at most (Steps: 2), the second at once after the read
	// (no Duration: no wait): the conflict is with our own renewal, no
	// other writer to back off from. A conflict on the second is
	// returned, as is any other error.
	var renewed *coordinationv1.Lease
	reread := false
	err := retry.RetryOnConflict(wait.Backoff{Steps: 2}, func() error {
		var err error
		if reread {
			if self, err = leases.Get(ctx, self.Name, metav1.GetOptions{}); err != nil {
				return err
			}
			if holder := ptr.Deref(self.Spec.HolderIdentity, ""); holder != m.cfg.Identity {
				return fmt.Errorf("the member Lease names %q: %w", holder, errTaken)
			}
		}
		reread = true
		l := self.DeepCopy()
		now := metav1.NewMicroTime(time.Now())
		l.Spec.RenewTime = &now
		sentAt := time.Now()
		if renewed, err = leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
			return err
		}
		m.fence.Renewed(sentAt)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return renewed, nil
}

// errTaken is why a member is lost when its own Lease was taken over.
var errTaken = errors.New("taken over")

// acquire writes us into a slot's Lease as the view saw it free (cur; nil
// when there was none), preconditioned on that very version: if another
// member took it since, or took it first, we do not.
func (m *Member) acquire(ctx context.Context, leases leaseClient, cur *coordinationv1.Lease, layout Layout, slot int) (*coordinationv1.Lease, bool) {
	c := m.cfg
	now := metav1.NewMicroTime(time.Now())
	var l *coordinationv1.Lease
	if cur == nil {
		labels := c.labels("slot", layout.ID())
		labels[SlotLabel] = strconv.Itoa(slot)
		l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: c.slotLease(layout, slot), Namespace: c.Namespace, Labels: labels}}
	} else {
		l = cur.DeepCopy()
		l.Spec.LeaseTransitions = ptr.To(ptr.Deref(l.Spec.LeaseTransitions, 0) + 1)
	}
	l.Spec.HolderIdentity = ptr.To(c.Identity)
	l.Spec.LeaseDurationSeconds = ptr.To(int32(c.LeaseDuration.Seconds()))
	l.Spec.AcquireTime, l.Spec.RenewTime = &now, &now
	ctx, cancel := context.WithTimeout(ctx, c.RetryPeriod)
	defer cancel()
	var (
		got *coordinationv1.Lease
		err error
	)
	if cur == nil {
		got, err = leases.Create(ctx, l, metav1.CreateOptions{})
	} else {
		got, err = leases.Update(ctx, l, metav1.UpdateOptions{})
	}
	if err != nil {
		if !apierrors.IsConflict(err) && !apierrors.IsAlreadyExists(err) {
			klog.FromContext(ctx).Info("Could not take a slot; trying again later", "slot", slot, "err", err.Error())
		}
		return nil, false
	}
	return got, true
}

// releaseSlot clears the holder of a slot's Lease, if it still names us.
// If it cannot, the Lease goes on naming us: Run releases it at a later
// tick, when its view shows it so (see the slots whose Lease names us).
func (m *Member) releaseSlot(ctx context.Context, leases leaseClient, name string, slot int) {
	logger := klog.FromContext(ctx)
	ctx, cancel := context.WithTimeout(ctx, m.cfg.RenewDeadline)
	defer cancel()
	l, err := leases.Get(ctx, name, metav1.GetOptions{})
	if err == nil && ptr.Deref(l.Spec.HolderIdentity, "") != m.cfg.Identity {
		logger.Info("Not releasing a slot whose Lease names another member", "slot", slot, "holder", ptr.Deref(l.Spec.HolderIdentity, ""))
		return
	}
	if err != nil {
		logger.Error(err, "Could not release a slot; trying again at a later tick", "slot", slot, "lease", klog.KRef(m.cfg.Namespace, name))
		return
	}
	_ = m.release(ctx, leases, l, slot, m.cfg.RenewDeadline)
}

// release clears the holder of the slot's Lease l, preconditioned on l's
// version, within timeout, and reports whether it did.
func (m *Member) release(ctx context.Context, leases leaseClient, l *coordinationv1.Lease, slot int, timeout time.Duration) bool {
	logger := klog.FromContext(ctx)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	l = l.DeepCopy()
	l.Spec.HolderIdentity = nil
	if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		if !apierrors.IsConflict(err) {
			logger.Error(err, "Could not release a slot; trying again at a later tick", "slot", slot, "lease", klog.KObj(l))
		}
		return false
	}
	logger.Info("Released a slot", "slot", slot, "lease", klog.KObj(l))
	return true
}

// leave deletes the member's Lease once every slot was released, so that
// the others count one member less at once.
func (m *Member) leave(ctx context.Context, leases leaseClient, self *coordinationv1.Lease) {
	m.joined.Store(false)
	m.fence.Close()
	err := deleteAsSeen(ctx, leases, self, m.cfg.RenewDeadline)
	if err != nil && !apierrors.IsNotFound(err) {
		klog.FromContext(ctx).Error(err, "Could not delete the member Lease; the others stop counting this member when it expires", "lease", klog.KObj(self))
	}
}

// deleteAsSeen deletes the Lease l at the version seen, so that one that
// changed since (renewed, taken, released) is kept, within timeout.
func deleteAsSeen(ctx context.Context, leases leaseClient, l *coordinationv1.Lease, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return leases.Delete(ctx, l.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &l.ResourceVersion}})
}

// lose shuts every write for good.
func (m *Member) lose() {
	m.joined.Store(false)
	m.fence.Close()
	m.mu.Lock()
	clear(m.writing)
	m.mu.Unlock()
}

// waitBriefly gives the slots' aborted Works a moment to return.
func (m *Member) waitBriefly(slots map[int]*slotState) {
	deadline := time.After(time.Second)
	for _, s := range slots {
		select {
		case <-s.done:
		case <-deadline:
			return
		}
	}
}
