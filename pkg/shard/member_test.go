package shard

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"example.com/foo-controller/pkg/leader"
)

func lease(name, role, slot, holder, rv string) *coordinationv1.Lease {
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: rv,
		Labels: map[string]string{GroupLabel: "g", RoleLabel: role, SlotsLabel: "4"}}}
	if slot != "" {
		l.Labels[SlotLabel] = slot
	}
	if holder != "" {
		l.Spec.HolderIdentity = ptr.To(holder)
	}
	return l
}

// TestObserve: members are live until their Lease has not changed for
// LeaseDuration by the observer's clock (never by the time written in it),
// stale after twice that; a slot is free unless a live member holds it.
func TestObserve(t *testing.T) {
	c := Config{Group: "g", Slots: 4, Identity: "self", LeaseDuration: 10 * time.Second}
	t0 := time.Unix(1000, 0)
	seen := map[string]observed{}
	leases := func(bRV, cRV string) []*coordinationv1.Lease {
		return []*coordinationv1.Lease{
			lease("g-member-self", "member", "", "self", "1"),
			lease("g-member-b", "member", "", "b", bRV),
			lease("g-member-c", "member", "", "c", cRV),
			lease("g-slot-0", "slot", "0", "self", "5"),
			lease("g-slot-1", "slot", "1", "b", "6"),
			lease("g-slot-2", "slot", "2", "c", "7"),
			lease("g-slot-3", "slot", "3", "", "8"),  // released
			lease("g-slot-9", "slot", "9", "b", "9"), // out of range: ignored
		}
	}
	v := observe(c, leases("2", "3"), seen, t0, true)
	if want := []string{"b", "c", "self"}; !slices.Equal(v.members, want) {
		t.Errorf("first sight: members %v, want %v (a Lease first seen counts as just renewed)", v.members, want)
	}
	if got := v.free(c.Slots); !slices.Equal(got, []int{3}) {
		t.Errorf("first sight: free %v, want [3]", got)
	}
	// b renews, c does not: c stays live until LeaseDuration after we
	// first saw its version.
	v = observe(c, leases("20", "3"), seen, t0.Add(9*time.Second), true)
	if !slices.Contains(v.members, "c") {
		t.Errorf("c dropped before its Lease expired")
	}
	v = observe(c, leases("21", "3"), seen, t0.Add(10*time.Second), true)
	if want := []string{"b", "self"}; !slices.Equal(v.members, want) {
		t.Errorf("after c's Lease expired: members %v, want %v", v.members, want)
	}
	if got := v.free(c.Slots); !slices.Equal(got, []int{2, 3}) {
		t.Errorf("after c's Lease expired: free %v, want [2 3] (c's slot is free)", got)
	}
	if len(v.stale) != 0 {
		t.Errorf("c stale after one LeaseDuration")
	}
	v = observe(c, leases("22", "3"), seen, t0.Add(20*time.Second), true)
	if len(v.stale) != 1 || v.stale[0].Name != "g-member-c" {
		t.Errorf("after twice LeaseDuration: stale %v, want c's Lease", v.stale)
	}
	// c comes back (a new version): live again at once.
	v = observe(c, leases("23", "4"), seen, t0.Add(21*time.Second), true)
	if !slices.Contains(v.members, "c") || len(v.stale) != 0 {
		t.Errorf("c renewed again: members %v, stale %d", v.members, len(v.stale))
	}
	// A member with another slot count holding a slot: we wait, and it
	// does not count in our share. Once it holds none, it does not stop us.
	other := lease("g-member-d", "member", "", "d", "1")
	other.Labels[SlotsLabel] = "8"
	otherSlot := lease("g-slot-5-of-8", "slot", "5", "d", "2")
	otherSlot.Labels[SlotsLabel] = "8"
	v = observe(c, append(leases("23", "4"), other, otherSlot), seen, t0.Add(21*time.Second), true)
	if v.wait != "d" || slices.Contains(v.members, "d") {
		t.Errorf("with a member of 8 slots holding one: wait %q, members %v; want to wait for d, not count it", v.wait, v.members)
	}
	otherSlot.Spec.HolderIdentity = nil
	if v = observe(c, append(leases("23", "4"), other, otherSlot), seen, t0.Add(21*time.Second), true); v.wait != "" {
		t.Errorf("a member of another slot count holding nothing makes us wait for %q", v.wait)
	}
	// Both of us hold slots and d is older: we yield. Younger: we keep.
	self := lease("g-member-self", "member", "", "self", "1")
	self.CreationTimestamp = metav1.NewTime(t0.Add(time.Second))
	other.CreationTimestamp = metav1.NewTime(t0)
	otherSlot.Spec.HolderIdentity = ptr.To("d")
	both := append(leases("23", "4")[1:], self, other, otherSlot)
	if v = observe(c, both, seen, t0.Add(21*time.Second), true); !v.yield {
		t.Errorf("an older member of another slot count holds slots: yield %v, want true", v.yield)
	}
	other.CreationTimestamp = metav1.NewTime(t0.Add(2 * time.Second))
	if v = observe(c, both, seen, t0.Add(21*time.Second), true); v.yield || v.wait != "d" {
		t.Errorf("a younger member of another slot count holds slots: yield %v wait %q, want to keep ours and wait", v.yield, v.wait)
	}
	// A deleted Lease is forgotten.
	observe(c, leases("24", "4")[:2], seen, t0.Add(22*time.Second), true)
	if _, ok := seen["g-member-c"]; ok {
		t.Errorf("seen keeps a Lease that is gone")
	}
}

// TestObserveLongDeadMembers: a member Lease seen for the first time whose
// renewTime is more than twice LeaseDuration old (a process killed before
// we started) does not count in the share, but still holds its slots for
// a lease duration of our own watching: the time written in a Lease is
// another clock, trusted for fairness only. Renewed, it counts at once.
func TestObserveLongDeadMembers(t *testing.T) {
	c := Config{Group: "g", Slots: 4, Identity: "self", LeaseDuration: 10 * time.Second}
	t0 := time.Unix(1000, 0)
	member := func(id, rv string, renewed time.Time) *coordinationv1.Lease {
		l := lease("g-member-"+id, "member", "", id, rv)
		l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(renewed))
		return l
	}
	leases := func(deadRV string, deadRenewed time.Time) []*coordinationv1.Lease {
		return []*coordinationv1.Lease{
			member("self", "1", t0),
			member("b", "2", t0.Add(-time.Second)),                        // live
			member("dead", deadRV, deadRenewed),                           // killed long ago?
			member("skewed", "3", t0.Add(-2*c.LeaseDuration+time.Second)), // a clock behind ours, within the margin
			lease("g-slot-1", "slot", "1", "dead", "6"),
		}
	}
	seen := map[string]observed{}
	v := observe(c, leases("4", t0.Add(-time.Hour)), seen, t0, true)
	if want := []string{"b", "self", "skewed"}; !slices.Equal(v.members, want) {
		t.Errorf("first sight: members %v, want %v (the long-unrenewed Lease not counted)", v.members, want)
	}
	if v.holders[1] != "dead" {
		t.Errorf("first sight: slot 1 held by %q, want still held by the member presumed dead (safety is judged by our clock)", v.holders[1])
	}
	if Share(c.Slots, v.members, c.Identity) != 1 {
		t.Errorf("share with 3 counted members of 4 slots: %d, want 1", Share(c.Slots, v.members, c.Identity))
	}
	// Still unchanged: still not counted, and its slot is free after a
	// lease duration as for any member.
	v = observe(c, leases("4", t0.Add(-time.Hour)), seen, t0.Add(c.LeaseDuration), true)
	if slices.Contains(v.members, "dead") || v.holders[1] != "" {
		t.Errorf("a lease duration on: members %v, slot 1 held by %q; want neither", v.members, v.holders[1])
	}
	// It renews (it was alive, its clock far behind ours): counted at once.
	seen = map[string]observed{}
	observe(c, leases("4", t0.Add(-time.Hour)), seen, t0, true)
	v = observe(c, leases("5", t0.Add(-time.Hour+2*time.Second)), seen, t0.Add(2*time.Second), true)
	if !slices.Contains(v.members, "dead") {
		t.Errorf("after a renewal: members %v, want the renewing member counted", v.members)
	}
}

// TestObserveOrphanSlotLeases: the slot Leases of another slot count (a
// change of -shard-slots) are orphans once no live member of that count is
// left and their holder, if any, has expired as for a slot of ours; never
// judged on a stale cache.
func TestObserveOrphanSlotLeases(t *testing.T) {
	c := Config{Group: "g", Slots: 4, Identity: "self", LeaseDuration: 10 * time.Second}
	t0 := time.Unix(1000, 0)
	of8 := func(l *coordinationv1.Lease) *coordinationv1.Lease {
		l.Labels[SlotsLabel] = "8"
		return l
	}
	member8 := of8(lease("g-member-e", "member", "", "e", "1"))
	free8 := of8(lease("g-slot-5-of-8", "slot", "5", "", "2"))
	heldByGone8 := of8(lease("g-slot-6-of-8", "slot", "6", "killed", "3"))
	ours := []*coordinationv1.Lease{lease("g-member-self", "member", "", "self", "1"), lease("g-slot-0", "slot", "0", "self", "4")}
	orphans := func(v view) []string {
		var names []string
		for _, l := range v.orphans {
			names = append(names, l.Name)
		}
		slices.Sort(names)
		return names
	}
	seen := map[string]observed{}
	if v := observe(c, append(slices.Clone(ours), member8, free8, heldByGone8), seen, t0, true); len(v.orphans) != 0 {
		t.Errorf("a live member of 8 slots left: orphans %v, want none (it may take them)", orphans(v))
	}
	// e left (its Lease deleted on a graceful stop).
	rest := append(slices.Clone(ours), free8, heldByGone8)
	if v := observe(c, rest, seen, t0.Add(time.Second), false); len(v.orphans) != 0 {
		t.Errorf("stale cache: orphans %v, want none", orphans(v))
	}
	if v := observe(c, rest, seen, t0.Add(time.Second), true); !slices.Equal(orphans(v), []string{"g-slot-5-of-8"}) {
		t.Errorf("no member of 8 slots: orphans %v, want only the free one (the other's holder may still be at work)", orphans(v))
	}
	if v := observe(c, rest, seen, t0.Add(time.Second+c.LeaseDuration), true); !slices.Equal(orphans(v), []string{"g-slot-5-of-8", "g-slot-6-of-8"}) {
		t.Errorf("its holder gone for a lease duration: orphans %v, want both", orphans(v))
	}
	for _, l := range ours {
		if slices.Contains(orphans(observe(c, rest, seen, t0.Add(time.Minute), true)), l.Name) {
			t.Errorf("our own Lease %s is an orphan", l.Name)
		}
	}
}

// TestObserveAsOf: ages are counted to the time the cache is known to be
// up to date with (the send time of the renewal of ours it shows), not to
// now: a cache that shows a renewal of ours sent long ago (the first tick
// after an outage) cannot show another member's later renewals, so it
// expires nobody for the time it lags.
func TestObserveAsOf(t *testing.T) {
	c := Config{Group: "g", Slots: 4, Identity: "self", LeaseDuration: 10 * time.Second}
	t0 := time.Unix(1000, 0)
	leases := []*coordinationv1.Lease{
		lease("g-member-self", "member", "", "self", "1"),
		lease("g-member-b", "member", "", "b", "2"),
		lease("g-slot-1", "slot", "1", "b", "3"),
	}
	seen := map[string]observed{}
	observeAsOf(c, "4", leases, seen, t0, t0, true)
	now := t0.Add(c.LeaseDuration + time.Second)
	if v := observeAsOf(c, "4", leases, seen, now, now.Add(-3*time.Second), true); !slices.Contains(v.members, "b") || v.holders[1] != "b" {
		t.Errorf("a cache 3 s behind, b unchanged for 11 s by the clock: members %v, slot 1 held by %q; want b live (9 s as of the cache)", v.members, v.holders[1])
	}
	if v := observeAsOf(c, "4", leases, seen, now, now, true); slices.Contains(v.members, "b") || v.holders[1] != "" {
		t.Errorf("a cache up to date, b unchanged for 11 s: members %v, slot 1 held by %q; want b expired", v.members, v.holders[1])
	}
}

// TestObserveStaleCacheAndMissingMembers: a cache that stopped moving (a
// stalled watch) expires nobody; a slot whose holder has no member Lease is
// held until the slot's own Lease has not changed for LeaseDuration.
func TestObserveStaleCacheAndMissingMembers(t *testing.T) {
	c := Config{Group: "g", Slots: 4, Identity: "self", LeaseDuration: 10 * time.Second}
	t0 := time.Unix(1000, 0)
	seen := map[string]observed{}
	leases := []*coordinationv1.Lease{
		lease("g-member-self", "member", "", "self", "1"),
		lease("g-member-b", "member", "", "b", "2"),
		lease("g-slot-0", "slot", "0", "b", "3"),
		lease("g-slot-1", "slot", "1", "ghost", "4"), // its member Lease was deleted
	}
	observe(c, leases, seen, t0, true)
	if v := observe(c, leases, seen, t0.Add(time.Minute), false); len(v.free(c.Slots)) != 2 || !slices.Contains(v.members, "b") {
		t.Errorf("stale cache: free %v, members %v; want b live and slots 0, 1 held", v.free(c.Slots), v.members)
	}
	seen = map[string]observed{}
	observe(c, leases, seen, t0, true)
	if v := observe(c, leases, seen, t0.Add(9*time.Second), true); v.holders[1] != "ghost" {
		t.Errorf("a holder without a member Lease freed its slot before LeaseDuration: %v", v.holders)
	}
	if v := observe(c, leases, seen, t0.Add(10*time.Second), true); slices.Equal(v.free(c.Slots), []int{0, 1, 2, 3}) == false {
		t.Errorf("after LeaseDuration, free %v, want every slot (b expired, ghost's slot unchanged)", v.free(c.Slots))
	}
	// A member Lease deleted by hand long after its slot was taken (the
	// slot Lease is old): its slot stays held for a lease duration from
	// when we first miss the member Lease, not from the slot Lease's age.
	seen = map[string]observed{}
	withB := []*coordinationv1.Lease{
		lease("g-member-self", "member", "", "self", "1"),
		lease("g-member-b", "member", "", "b", "2"),
		lease("g-slot-0", "slot", "0", "b", "3"),
	}
	observe(c, withB, seen, t0, true)
	withB[1] = lease("g-member-b", "member", "", "b", "20") // b renews for a minute
	observe(c, withB, seen, t0.Add(time.Minute), true)
	deleted := []*coordinationv1.Lease{withB[0], withB[2]}
	if v := observe(c, deleted, seen, t0.Add(time.Minute+time.Second), true); v.holders[0] != "b" {
		t.Errorf("b's member Lease deleted a second ago: slot 0 free already (%v)", v.holders)
	}
	if v := observe(c, deleted, seen, t0.Add(time.Minute+11*time.Second), true); v.holders[0] != "" {
		t.Errorf("b's member Lease missing for LeaseDuration: slot 0 still held by %q", v.holders[0])
	}
}

// TestMemberCheck: a write passes only while the member renews, holds the
// slot of the namespace in the request's path, and its view of the
// group's Leases is recent.
func TestMemberCheck(t *testing.T) {
	c := Config{Group: "g", Namespace: "ns", Slots: 16, Identity: "self",
		LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second}
	m := &Member{cfg: c, fence: newFence(c.RenewDeadline), writing: map[string]Slot{}}
	eq := EqualLayout(c.Slots)
	m.layout.Store(&eq)
	mine, other := "tenant-a", ""
	for i := 0; other == ""; i++ {
		if ns := "tenant-" + string(rune('b'+i)); c.Slots.Of(ns) != c.Slots.Of(mine) {
			other = ns
		}
	}
	if err := m.Check(mine); err == nil {
		t.Fatal("a member that never renewed may write")
	}
	m.fence.Renewed(time.Now())
	m.writing["mine"] = Slot{Index: c.Slots.Of(mine), Layout: eq}
	m.viewAt.Store(time.Now().UnixNano())
	sent := 0
	rt := m.WrapTransport(roundTripFunc(func(*http.Request) (*http.Response, error) {
		sent++
		return &http.Response{StatusCode: 200, Body: http.NoBody}, nil
	}))
	for _, tc := range []struct {
		method, path string
		pass         bool
	}{
		{"PATCH", "/apis/apps/v1/namespaces/" + mine + "/deployments/d", true},
		{"PATCH", "/apis/apps/v1/namespaces/" + other + "/deployments/d", false},
		{"POST", "/apis/events.k8s.io/v1/namespaces/" + other + "/events", false},
		{"POST", "/api/v1/namespaces/" + mine + "/events", true},
		{"PUT", "/apis/samplecontroller.example.com/v1beta1/namespaces/" + other + "/foos/f/status", false},
		{"GET", "/apis/apps/v1/namespaces/" + other + "/deployments", true},
		{"PUT", "/apis/coordination.k8s.io/v1/namespaces/" + other + "/leases/l", true},
		{"DELETE", "/api/v1/namespaces/" + other, true}, // not a write in that namespace
	} {
		before := sent
		req, _ := http.NewRequestWithContext(t.Context(), tc.method, "https://api"+tc.path, nil)
		resp, err := rt.RoundTrip(req)
		if resp != nil {
			_ = resp.Body.Close()
		}
		if passed := err == nil && sent == before+1; passed != tc.pass {
			t.Errorf("%s %s: passed %v (err %v), want %v", tc.method, tc.path, passed, err, tc.pass)
		}
	}
	// The watch of the Leases stalled: the last renewal it showed was
	// sent longer ago than the renew deadline, while renewals go on.
	m.viewAt.Store(time.Now().Add(-c.RenewDeadline - time.Second).UnixNano())
	if err := m.Check(mine); err == nil || !strings.Contains(err.Error(), "stalled") {
		t.Errorf("a member whose view is stale may write to its slot: %v", err)
	}
	if err := m.Check(""); err != nil {
		t.Errorf("a stale view refuses a write outside namespaces: %v", err)
	}
	m.viewAt.Store(time.Now().Add(-c.RenewDeadline + time.Second).UnixNano())
	if err := m.Check(mine); err != nil {
		t.Errorf("a view just within the renew deadline refuses a write: %v", err)
	}
	m.lose()
	if err := m.Check(mine); err == nil {
		t.Errorf("a lost member may still write")
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// leaseStore is a Lease client over one Lease with the API server's
// optimistic concurrency; lateOK makes the next Update land but report a
// timeout, as when the response is lost.
type leaseStore struct {
	l      *coordinationv1.Lease
	rv     int
	lateOK bool
}

func (s *leaseStore) Get(context.Context, string, metav1.GetOptions) (*coordinationv1.Lease, error) {
	if s.l == nil {
		return nil, apierrors.NewNotFound(coordinationv1.Resource("leases"), "l")
	}
	return s.l.DeepCopy(), nil
}

func (s *leaseStore) Create(_ context.Context, l *coordinationv1.Lease, _ metav1.CreateOptions) (*coordinationv1.Lease, error) {
	s.rv++
	s.l = l.DeepCopy()
	s.l.ResourceVersion = strconv.Itoa(s.rv)
	return s.l.DeepCopy(), nil
}

func (s *leaseStore) Update(_ context.Context, l *coordinationv1.Lease, _ metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	if s.l == nil {
		return nil, apierrors.NewNotFound(coordinationv1.Resource("leases"), l.Name)
	}
	if l.ResourceVersion != s.l.ResourceVersion {
		return nil, apierrors.NewConflict(coordinationv1.Resource("leases"), l.Name, errors.New("modified"))
	}
	s.rv++
	s.l = l.DeepCopy()
	s.l.ResourceVersion = strconv.Itoa(s.rv)
	if s.lateOK {
		s.lateOK = false
		return nil, context.DeadlineExceeded
	}
	return s.l.DeepCopy(), nil
}

func (s *leaseStore) Delete(context.Context, string, metav1.DeleteOptions) error {
	s.l = nil
	return nil
}

// TestRenewAfterALostResponse: a renewal that landed although its response
// was lost (seen as a timeout) does not make the next one look like
// another writer's: the member reads its Lease back and renews from it.
// Only a Lease that names another holder, or is gone, loses the member.
func TestRenewAfterALostResponse(t *testing.T) {
	c := Config{Group: "g", Namespace: "ns", Slots: 4, Identity: "self",
		LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second}
	m := &Member{cfg: c, fence: newFence(c.RenewDeadline), writing: map[string]Slot{}}
	store := &leaseStore{}
	self, err := m.join(t.Context(), store)
	if err != nil {
		t.Fatal(err)
	}
	store.lateOK = true
	if _, err := m.renew(t.Context(), store, self); err == nil {
		t.Fatal("the lost response was not reported")
	}
	renewed, err := m.renew(t.Context(), store, self) // self is now one version behind
	if err != nil {
		t.Fatalf("renewal after a lost response: %v, want it to read the Lease back and renew", err)
	}
	if renewed.ResourceVersion != store.l.ResourceVersion {
		t.Errorf("renewed at version %s, the store has %s", renewed.ResourceVersion, store.l.ResourceVersion)
	}
	// Another holder in our Lease: lost.
	store.l.Spec.HolderIdentity = ptr.To("other")
	if _, err := m.renew(t.Context(), store, self); !errors.Is(err, errTaken) {
		t.Errorf("renewal of a Lease naming another holder: %v, want errTaken", err)
	}
	// Gone: lost too (NotFound).
	_ = store.Delete(t.Context(), "", metav1.DeleteOptions{})
	if _, err := m.renew(t.Context(), store, renewed); !apierrors.IsNotFound(err) {
		t.Errorf("renewal of a deleted Lease: %v, want NotFound", err)
	}
}

// TestLostSaysItIsAMember: the error a lost member ends with is matched by
// what handles a lost leader (leader.ErrLost: exit at once, drop the
// queued Events), but it says what happened in a member's words.
func TestLostSaysItIsAMember(t *testing.T) {
	err := error(&lostError{reason: "the member Lease was deleted"})
	if !errors.Is(err, ErrLost) || !errors.Is(err, leader.ErrLost) {
		t.Errorf("%v does not match both ErrLost and leader.ErrLost", err)
	}
	if msg := err.Error(); strings.Contains(msg, "leader") || !strings.Contains(msg, "member Lease was deleted") {
		t.Errorf("the loss reads %q; want the member's words and the reason", msg)
	}
	m, err := NewMember(fake.NewClientset(), Config{Group: "g", Namespace: "ns", Slots: 4, Identity: "self",
		LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	m.fence.Renewed(time.Now())
	m.lose()
	if err := m.Check(""); !errors.Is(err, ErrLost) || strings.Contains(err.Error(), "leader") {
		t.Errorf("a lost member's write refused with %v; want ErrLost, in a member's words", err)
	}
}

// TestHealthzFailsForAWedgedMember: a member whose loop is stuck (here, in
// a renewal that never returns: a client that ignores its timeout) lives on
// but renews no more. Its liveness check passes before it joins and while
// it renews, and fails once its last renewal is older than the renew
// deadline, as the leader's does; its writes stop then too.
func TestHealthzFailsForAWedgedMember(t *testing.T) {
	client := fake.NewClientset()
	var hung atomic.Bool
	stuck := make(chan struct{})
	client.PrependReactor("update", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if l, ok := a.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease); ok && hung.Load() && strings.Contains(l.Name, "-member-") {
			<-stuck
		}
		return false, nil, nil
	})
	c := Config{Group: "g", Namespace: "ns", Slots: 2, Identity: "self",
		LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 200 * time.Millisecond}
	m, err := NewMember(client, c)
	if err != nil {
		t.Fatal(err)
	}
	probe := httptest.NewRequest(http.MethodGet, "/healthz", nil)
	if err := m.Healthz(probe); err != nil || m.Joined() {
		t.Fatalf("before joining: healthz %v, joined %v; want healthy, not joined", err, m.Joined())
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- m.Run(ctx, func(ctx context.Context, _ Slot) error { <-ctx.Done(); return nil })
	}()
	defer func() {
		close(stuck)
		cancel()
		select {
		case err := <-done:
			// Let go past its deadline, it stops or finds itself lost.
			if err != nil && !errors.Is(err, ErrLost) {
				t.Errorf("the member's Run, once let go and stopped: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("the member did not stop")
		}
	}()
	for deadline := time.Now().Add(10 * time.Second); !m.Joined() || len(m.Held()) < 2; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the member did not join and take both slots: joined %v, held %v", m.Joined(), m.Held())
		}
	}
	for range 5 {
		if err := m.Healthz(probe); err != nil {
			t.Fatalf("a member that renews is unhealthy: %v", err)
		}
		time.Sleep(c.RetryPeriod)
	}
	hung.Store(true)
	since := time.Now()
	for m.Healthz(probe) == nil {
		if time.Since(since) > 2*c.LeaseDuration {
			t.Fatalf("healthz still passes %v after the renewals stopped (renew deadline %v)", time.Since(since), c.RenewDeadline)
		}
		time.Sleep(20 * time.Millisecond)
	}
	took := time.Since(since)
	if took > c.RenewDeadline+c.RetryPeriod || took < c.RenewDeadline-c.RetryPeriod {
		t.Errorf("healthz failed %v after the renewals stopped, want at the renew deadline (%v, within a retry period)", took, c.RenewDeadline)
	}
	select {
	case err := <-done:
		t.Fatalf("Run returned (%v): the member was not wedged", err)
	default:
	}
	if err := m.Check(namespaceOf(c.Slots, m.Held()[0])); err == nil {
		t.Errorf("a wedged member past its renew deadline may still write")
	}
	t.Logf("healthz failed %v after the renewals stopped: %v", took.Round(time.Millisecond), m.Healthz(probe))
}

// namespaceOf returns a namespace in slot.
func namespaceOf(n Slots, slot int) string {
	for i := 0; ; i++ {
		if ns := "ns-" + strconv.Itoa(i); n.Of(ns) == slot {
			return ns
		}
	}
}

func runFakeMember(t *testing.T, client *fake.Clientset, c Config) (*Member, func()) {
	t.Helper()
	m, err := NewMember(client, c)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- m.Run(ctx, func(ctx context.Context, _ Slot) error { <-ctx.Done(); return nil })
	}()
	return m, func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("member: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("member did not stop")
		}
	}
}

// TestSlotTakenWithALostAnswerIsReleased: the member's take of a slot
// lands on the API server but its answer is lost (a timeout). The slot's
// Lease then names a live member that does not run it, which nobody would
// ever take; the member releases it once its view shows it so, and takes
// it again. (Found by the third attack, as a slot no one worked on.)
func TestSlotTakenWithALostAnswerIsReleased(t *testing.T) {
	client := fake.NewClientset()
	var failed atomic.Bool
	client.PrependReactor("create", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		l := a.(k8stesting.CreateAction).GetObject().(*coordinationv1.Lease)
		if strings.Contains(l.Name, "-slot-1-") && failed.CompareAndSwap(false, true) {
			// Land it, then lose the answer.
			if _, _, err := k8stesting.ObjectReaction(client.Tracker())(a); err != nil {
				t.Errorf("landing the create: %v", err)
			}
			return true, nil, apierrors.NewTimeoutError("the response was lost", 1)
		}
		return false, nil, nil
	})
	c := Config{Group: "g", Namespace: "ns", Slots: 2, Identity: "self",
		LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 200 * time.Millisecond}
	m, stop := runFakeMember(t, client, c)
	defer stop()
	deadline := time.Now().Add(4 * c.LeaseDuration)
	for len(m.Held()) < 2 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	l, err := client.CoordinationV1().Leases("ns").Get(t.Context(), "g-slot-1-of-2", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if held := m.Held(); len(held) < 2 {
		t.Errorf("the only member holds %v of 2 slots after %v; slot 1's Lease names %q: nobody runs slot 1",
			held, 4*c.LeaseDuration, ptr.Deref(l.Spec.HolderIdentity, ""))
	}
}

// TestSlotWhoseReleaseFailedIsReleasedLater: a member hands a slot over to
// a joining member, and the release fails once (a 500, a connection reset
// during an API server restart). The slot's Lease still names the member,
// alive and renewing; it releases the slot at a later tick, so that the
// member joining can take it.
func TestSlotWhoseReleaseFailedIsReleasedLater(t *testing.T) {
	client := fake.NewClientset()
	var failed atomic.Bool
	client.PrependReactor("update", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		l := a.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease)
		if strings.Contains(l.Name, "-slot-") && l.Spec.HolderIdentity == nil && failed.CompareAndSwap(false, true) {
			return true, nil, apierrors.NewInternalError(errors.New("etcdserver: request timed out"))
		}
		return false, nil, nil
	})
	c := Config{Group: "g", Namespace: "ns", Slots: 2, Identity: "a",
		LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 200 * time.Millisecond}
	m, stop := runFakeMember(t, client, c)
	defer stop()
	for deadline := time.Now().Add(5 * time.Second); len(m.Held()) < 2; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("did not take both slots: %v", m.Held())
		}
	}
	// A second member "b" joins (the test renews its Lease: it is alive)
	// and would take whatever is free.
	leases := client.CoordinationV1().Leases("ns")
	b := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "g-member-b", Namespace: "ns",
		Labels: map[string]string{GroupLabel: "g", RoleLabel: "member", SlotsLabel: "2"}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("b")}}
	b, err := leases.Create(t.Context(), b, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	renewB := time.NewTicker(c.RetryPeriod)
	defer renewB.Stop()
	end := time.Now().Add(4 * c.LeaseDuration)
	for i := 100; time.Now().Before(end); i++ {
		<-renewB.C
		// The fake tracker keeps resourceVersions as given: change it, as
		// the API server would.
		b.ResourceVersion = strconv.Itoa(i)
		b.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now()))
		if b, err = leases.Update(t.Context(), b, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	l, err := leases.Get(t.Context(), "g-slot-1-of-2", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h := ptr.Deref(l.Spec.HolderIdentity, ""); h == "a" && len(m.Held()) == 1 {
		t.Errorf("%v after the hand-over: a runs slots %v, yet slot 1's Lease still names %q (alive): the member joining cannot take it",
			4*c.LeaseDuration, m.Held(), h)
	}
}

// TestLeaderLive: the single-leader mode's Lease holds members back while
// it has changed within LeaseDuration by the member's clock, whether it
// names a holder or was just released (a standby may take it); still for
// a lease duration, it is deleted, so that no member starting later waits;
// absent, it holds nobody back; a failed read is an error (Run then neither
// takes nor lets go).
func TestLeaderLive(t *testing.T) {
	c := Config{Group: "g", Namespace: "ns", Slots: 2, Identity: "self",
		LeaseDuration: 200 * time.Millisecond, RenewDeadline: 100 * time.Millisecond, RetryPeriod: 50 * time.Millisecond}
	client := fake.NewClientset()
	m, err := NewMember(client, c)
	if err != nil {
		t.Fatal(err)
	}
	leases := client.CoordinationV1().Leases("ns")
	var seen observed
	check := func(what string, wantLive bool, wantHolder string) {
		t.Helper()
		live, holder, err := m.leaderLive(t.Context(), leases, &seen)
		if err != nil || live != wantLive || holder != wantHolder {
			t.Errorf("%s: leaderLive = %v, %q, %v; want %v, %q", what, live, holder, err, wantLive, wantHolder)
		}
	}
	check("no leader Lease", false, "")
	l, err := leases.Create(t.Context(), &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "g", Namespace: "ns", ResourceVersion: "1"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("leader"),
			// Written an hour ago, by the holder's clock: not trusted.
			RenewTime: ptr.To(metav1.NewMicroTime(time.Now().Add(-time.Hour)))}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	check("first sight of a held Lease", true, "leader")
	time.Sleep(c.LeaseDuration / 2)
	l.Spec.HolderIdentity, l.ResourceVersion = nil, "2"
	if l, err = leases.Update(t.Context(), l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	check("just released (a standby may take it)", true, "")
	time.Sleep(c.LeaseDuration / 2)
	l.Spec.HolderIdentity, l.ResourceVersion = ptr.To("standby"), "3"
	if _, err = leases.Update(t.Context(), l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	check("taken by a standby", true, "standby")
	time.Sleep(c.LeaseDuration)
	check("still for a lease duration", false, "standby")
	if _, err := leases.Get(t.Context(), "g", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the Lease still for a lease duration: %v, want it deleted", err)
	}
	check("deleted", false, "")
	client.PrependReactor("get", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewServiceUnavailable("down")
	})
	if _, _, err := m.leaderLive(t.Context(), leases, &seen); err == nil {
		t.Errorf("a failed read: no error")
	}
}

// TestObserveNewLayout: after a re-cut, a slot Lease of the old layout
// that names a live member of ours (self included: switched already, still
// finishing that slot's syncs) holds everyone back, ours listed to release
// once not run; a member still labelled with the old layout is waited for
// as one of another slot count; released, the old Leases are orphans.
func TestObserveNewLayout(t *testing.T) {
	freeOld := func(name string) *coordinationv1.Lease { return lease(name, "slot", "1", "", "10") }
	c := Config{Group: "g", Slots: 4, Identity: "self", LeaseDuration: 10 * time.Second}
	t0 := time.Unix(1000, 0)
	const next = "4.00000000000000ab"
	relabel := func(l *coordinationv1.Lease, layout string) *coordinationv1.Lease {
		l.Labels[SlotsLabel] = layout
		return l
	}
	self := relabel(lease("g-member-self", "member", "", "self", "1"), next)
	b := relabel(lease("g-member-b", "member", "", "b", "2"), next)
	oldSelf := lease("g-slot-0-of-4", "slot", "0", "self", "3")
	oldB := lease("g-slot-1-of-4", "slot", "1", "b", "4")
	seen := map[string]observed{}
	v := observeAsOf(c, next, []*coordinationv1.Lease{self, b, oldSelf, oldB}, seen, t0, t0, true)
	if !v.draining || len(v.ownOld) != 1 || v.ownOld[0].Name != oldSelf.Name || len(v.orphans) != 0 {
		t.Errorf("old slots held by us and b: draining %v, ownOld %v, orphans %d; want draining, ours listed, none orphaned", v.draining, v.ownOld, len(v.orphans))
	}
	// b has not switched yet: its old slot holds us back, and it counts
	// in the share (or the first to switch would take every slot).
	bOld := lease("g-member-b", "member", "", "b", "5")
	if v := observeAsOf(c, next, []*coordinationv1.Lease{self, bOld, oldB}, seen, t0, t0, true); v.wait != "" || !v.draining || !slices.Equal(v.members, []string{"b", "self"}) {
		t.Errorf("b on the old layout holding its slot: wait %q, draining %v, members %v; want draining, b and self sharing", v.wait, v.draining, v.members)
	}
	bOldFree := lease("g-member-b", "member", "", "b", "5")
	if v := observeAsOf(c, next, []*coordinationv1.Lease{self, bOldFree, freeOld("g-slot-1-of-4")}, seen, t0, t0, true); v.draining || !slices.Equal(v.members, []string{"b", "self"}) || Share(c.Slots, v.members, "self") != 2 {
		t.Errorf("b released its old slot, not relabelled yet: draining %v, members %v; want self's share 2 of 4, not all", v.draining, v.members)
	}
	// A layout Lease of a slot count nobody runs goes too; ours stays.
	layout8 := lease("g-layout-of-8", LayoutRole, "", "", "11")
	layout8.Labels[SlotsLabel] = "8"
	layout4 := lease("g-layout-of-4", LayoutRole, "", "", "12")
	if v := observeAsOf(c, next, []*coordinationv1.Lease{self, layout8, layout4}, seen, t0, t0, true); len(v.orphans) != 1 || v.orphans[0].Name != "g-layout-of-8" {
		t.Errorf("orphans %v, want the layout Lease of 8 slots only", v.orphans)
	}
	// Both released: nothing holds anyone back, the old Leases go.
	freeSelf := lease("g-slot-0-of-4", "slot", "0", "", "6")
	freeB := lease("g-slot-1-of-4", "slot", "1", "", "7")
	v = observeAsOf(c, next, []*coordinationv1.Lease{self, relabel(lease("g-member-b", "member", "", "b", "8"), next), freeSelf, freeB}, seen, t0, t0, true)
	if v.draining || v.wait != "" || len(v.orphans) != 2 || len(v.free(c.Slots)) != 4 {
		t.Errorf("old slots released: draining %v, wait %q, orphans %d, free %v; want all four new slots free, both old Leases orphaned", v.draining, v.wait, len(v.orphans), v.free(c.Slots))
	}
	// A member's load counts only for our layout.
	bLoad := relabel(lease("g-member-b", "member", "", "b", "9"), next)
	bLoad.Annotations = map[string]string{loadAnnotation: next + " 1=ab:3"}
	stale := relabel(lease("g-member-d", "member", "", "d", "1"), next)
	stale.Annotations = map[string]string{loadAnnotation: "4 2=ab:3"}
	v = observeAsOf(c, next, []*coordinationv1.Lease{self, bLoad, stale}, seen, t0, t0, true)
	if len(v.loads["b"][1]) != 1 || v.loads["d"] != nil {
		t.Errorf("loads %v: want b's for slot 1, none of d's (another layout's)", v.loads)
	}
}

// TestRebalancers: only members that re-cut (-shard-rebalance-skew above
// 0, published on their Lease) are candidates, so one with re-cutting off
// never holds the whole group's re-cuts back by sorting first.
func TestRebalancers(t *testing.T) {
	c := Config{Group: "g", Slots: 4, Identity: "self", LeaseDuration: 10 * time.Second}
	t0 := time.Unix(1000, 0)
	off := lease("g-member-aaa", "member", "", "aaa", "1") // sorts first, skew 0
	on := lease("g-member-b", "member", "", "b", "2")
	on.Annotations = map[string]string{rebalanceAnnotation: "1.5"}
	all := []*coordinationv1.Lease{lease("g-member-self", "member", "", "self", "3"), off, on}
	if v := observe(c, all, map[string]observed{}, t0, true); !slices.Equal(v.rebalancers, []string{"b"}) || v.members[0] != "aaa" {
		t.Errorf("self off: rebalancers %v (members %v), want b alone", v.rebalancers, v.members)
	}
	c.Rebalance.Skew = 1.5
	if v := observe(c, all, map[string]observed{}, t0, true); !slices.Equal(v.rebalancers, []string{"b", "self"}) {
		t.Errorf("self on: rebalancers %v, want b then self", v.rebalancers)
	}
}

// TestRebalanceRestoresAnUnlabelledLayoutLease: a layout Lease whose
// labels were removed by hand is in no member's watch; the member that
// re-cuts finds it on create and writes it back with the labels and its
// new cuts, instead of failing at every tick.
func TestRebalanceRestoresAnUnlabelledLayoutLease(t *testing.T) {
	c := Config{Group: "g", Namespace: "ns", Slots: 4, Identity: "self",
		LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second,
		Rebalance: Policy{Skew: 1.5, MinLoad: 10}}
	client := fake.NewClientset(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "g-layout-of-4", Namespace: "ns",
		Annotations: map[string]string{CutsAnnotation: "nonsense"}}})
	m, err := NewMember(client, c)
	if err != nil {
		t.Fatal(err)
	}
	layout := EqualLayout(4)
	v := view{holders: map[int]string{}}
	slots := map[int]*slotState{}
	for i := range 4 {
		v.holders[i] = "self"
		st := &slotState{slot: Slot{Index: i, Layout: layout, load: &slotLoad{}}}
		st.slot.load.Ready()
		slots[i] = st
	}
	for _, ns := range letters() { // all in one or two equal slots
		slots[layout.Of(ns)].slot.load.Add(ns, 5)
	}
	leases := client.CoordinationV1().Leases("ns")
	m.rebalance(t.Context(), leases, layout, nil, v, m.ownLoad(slots, layout))
	got, err := leases.Get(t.Context(), "g-layout-of-4", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Labels[GroupLabel] != "g" || got.Labels[RoleLabel] != LayoutRole {
		t.Errorf("labels %v, want the group's and the layout role", got.Labels)
	}
	if l, err := ParseLayout(4, got.Annotations[CutsAnnotation]); err != nil || l.IsEqual() {
		t.Errorf("cuts %q (%v), want balanced ones", got.Annotations[CutsAnnotation], err)
	}
}

// TestWaitForSlotsReleased: the first look is at once; a List that fails
// is tried again a retryPeriod after it; a slot a live member holds is
// waited for until ctx ends.
func TestWaitForSlotsReleased(t *testing.T) {
	inNS := func(l *coordinationv1.Lease) *coordinationv1.Lease { l.Namespace = "ns"; return l }
	// wait runs WaitForSlotsReleased with its first refused Lists refused.
	wait := func(t *testing.T, client *fake.Clientset, refused int, ctxTimeout, retryPeriod time.Duration) (lists int, took time.Duration) {
		t.Helper()
		client.PrependReactor("list", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
			if lists++; lists <= refused {
				return true, nil, errors.New("refused")
			}
			return false, nil, nil
		})
		ctx, cancel := context.WithTimeout(t.Context(), ctxTimeout)
		defer cancel()
		start := time.Now()
		WaitForSlotsReleased(ctx, client, "g", "ns", time.Minute, retryPeriod)
		return lists, time.Since(start)
	}
	t.Run("none held: the first look, at once", func(t *testing.T) {
		if lists, took := wait(t, fake.NewClientset(), 0, 10*time.Second, time.Hour); lists != 1 || took > 5*time.Second {
			t.Errorf("returned after %v, %d lists; want at the first", took, lists)
		}
	})
	t.Run("lists refused twice: tried again a retry period later", func(t *testing.T) {
		if lists, took := wait(t, fake.NewClientset(), 2, 10*time.Second, 50*time.Millisecond); lists != 3 || took < 100*time.Millisecond {
			t.Errorf("returned after %v, %d lists; want the third, two retry periods on", took, lists)
		}
	})
	t.Run("held by a live member: until ctx ends", func(t *testing.T) {
		client := fake.NewClientset(inNS(lease("g-member-m", "member", "", "m", "1")), inNS(lease("g-slot-0", "slot", "0", "m", "1")))
		if lists, took := wait(t, client, 0, 300*time.Millisecond, 50*time.Millisecond); took < 300*time.Millisecond || lists < 2 {
			t.Errorf("returned after %v, %d lists; want at ctx's end", took, lists)
		}
	})
}
