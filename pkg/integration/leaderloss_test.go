//go:build integration

package integration

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// The lease-loss tests use short leader election timings, so that a loss
// takes seconds, not the defaults' tens of seconds. The rule Validate
// enforces holds: renew deadline < lease duration - retry period.
const (
	lossLeaseDuration = 6 * time.Second
	lossRenewDeadline = 4 * time.Second
	lossRetryPeriod   = 1 * time.Second
	// exitBound is how soon after it knows it lost the Lease a leader
	// must have exited (issue 11).
	exitBound = 2 * time.Second
	// transit allows for a request that the controller sent just before it
	// learned of the loss and that the API server received just after
	// (through a proxy that adds 20 ms per chunk).
	transit = 250 * time.Millisecond
)

func (s *scenario) leaseArgs() []string {
	return []string{
		"-leader-elect=true",
		"-leader-elect-namespace=" + s.ns,
		"-leader-elect-lease-name=foo-controller",
		"-leader-elect-lease-duration=" + lossLeaseDuration.String(),
		"-leader-elect-renew-deadline=" + lossRenewDeadline.String(),
		"-leader-elect-retry-period=" + lossRetryPeriod.String(),
	}
}

// leaseHolder returns the holder of the scenario's foo-controller Lease
// ("" if none).
func (s *scenario) leaseHolder() string {
	l, err := s.kube.CoordinationV1().Leases(s.ns).Get(s.ctx, "foo-controller", metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// identityRe finds the identity in the line every controller process logs
// at start, whatever its mode (it campaigns or shares slots under it).
var identityRe = regexp.MustCompile(`"Starting".*identity="([^"]+)"`)

// identityOf reads the identity a controller process runs under from its
// log. It is also in the process's user agent, which is how the audit log
// tells two replicas apart.
func (s *scenario) identityOf(p *process) string {
	s.t.Helper()
	var id string
	s.eventually(30*time.Second, p.log+" to start", func() (bool, string) {
		b, _ := os.ReadFile(p.log)
		if m := identityRe.FindSubmatch(b); m != nil {
			id = string(m[1])
			return true, ""
		}
		return false, "no identity logged yet"
	})
	return id
}

// waitLeading waits until the process with identity id holds the Lease.
func (s *scenario) waitLeading(id string, timeout time.Duration) {
	s.t.Helper()
	s.eventually(timeout, id+" to lead", func() (bool, string) { return s.leaseHolder() == id, "held by " + s.leaseHolder() })
}

// startSlowLeader starts a controller with the lease-loss timings that
// talks through a proxy adding 20 ms per chunk, with 4 workers instead of
// 32 (so that a fault strikes part-way through its burst: with 32, a quiet
// machine had 138 of 150 Deployments created before the test could cut
// it off, and the rest in flight), and waits until it leads.
func (s *scenario) startSlowLeader() (p *process, id string, proxy *tcpProxy) {
	s.t.Helper()
	proxy = proxyToAPIServer(s.t, s.cl, 20*time.Millisecond)
	p = s.startController(append(s.leaseArgs(), "-workers=4", "-kubeconfig="+proxy.kubeconfigVia(s.t, s.cl.ctrlKC))...)
	id = s.identityOf(p)
	s.waitLeading(id, 30*time.Second)
	return p, id, proxy
}

// writesBy returns the writes the process with identity id sent in the
// scenario's namespace, received in [from, to), other than to the Lease
// (a preconditioned update of the Lease can only succeed while we hold it).
func (s *scenario) writesBy(id string, from, to time.Time) []auditEvent {
	var out []auditEvent
	for _, e := range writesOf(s.controllerRequests(from, to)) {
		if strings.Contains(e.UserAgent, id) && e.resource() != "leases" {
			out = append(out, e)
		}
	}
	return out
}

// requireLostAndExited waits for p to give up the Lease and exit, and
// checks how: non-zero, within exitBound of the loss, in-flight syncs
// cancelled, and no write received after the loss (allowing transit). It
// returns when the loss was logged.
func (s *scenario) requireLostAndExited(p *process, id, wantReason string, timeout time.Duration) time.Time {
	s.t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		s.t.Fatalf("the leader did not exit within %v of losing the Lease\n%s", timeout, p.tail(40))
	}
	var exit *exec.ExitError
	if !errors.As(p.err, &exit) || exit.ExitCode() == 0 {
		s.t.Errorf("the leader exited with %v, want a non-zero exit code", p.err)
	}
	lost := logTimes(s.t, p.log, "Lost the leader Lease")
	if len(lost) != 1 {
		s.t.Fatalf("want one \"Lost the leader Lease\" line, got %d\n%s", len(lost), p.tail(40))
	}
	if why := p.logLines("Lost the leader Lease"); !strings.Contains(why[0], wantReason) {
		s.t.Errorf("the loss was logged as %q, want the reason %q", why[0], wantReason)
	}
	took := p.ended.Sub(lost[0])
	s.t.Logf("exited %v after logging the loss (%s)", took.Round(time.Millisecond), exit)
	if took > exitBound {
		s.t.Errorf("the leader exited %v after it lost the Lease, want at most %v\n%s", took, exitBound, p.tail(40))
	}
	if len(p.logLines("in-flight syncs cancelled")) == 0 {
		s.t.Errorf("no \"in-flight syncs cancelled\" line: the syncs were not aborted\n%s", p.tail(40))
	}
	if late := s.writesBy(id, lost[0].Add(transit), time.Now().Add(time.Minute)); len(late) > 0 {
		s.t.Errorf("%d writes received more than %v after the leader knew it lost the Lease:%s", len(late), transit, summarize(late))
	}
	return lost[0]
}

// healthWatch polls a controller's /healthz and remembers the first
// failure.
type healthWatch struct {
	mu        sync.Mutex
	firstFail time.Time
	body      string
	codes     map[int]int // answers by status code (0: no answer)
}

// watchHealth polls every 100ms.
func watchHealth(ctx context.Context, addr string) *healthWatch {
	return watchHealthEvery(ctx, addr, 100*time.Millisecond)
}

func watchHealthEvery(ctx context.Context, addr string, every time.Duration) *healthWatch {
	h := &healthWatch{codes: map[int]int{}}
	go func() {
		for ctx.Err() == nil {
			code, body := httpGet("http://" + addr + "/healthz")
			h.mu.Lock()
			h.codes[code]++
			if code != 0 && code != http.StatusOK && h.firstFail.IsZero() {
				h.firstFail, h.body = time.Now(), body
			}
			h.mu.Unlock()
			time.Sleep(every)
		}
	}()
	return h
}

func (h *healthWatch) failed() (time.Time, string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.firstFail, h.body
}

// answered returns how many probes got each status code so far.
func (h *healthWatch) answered() map[int]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return maps.Clone(h.codes)
}

// TestLeaseTakenByAnotherHolder: another process writes itself into the
// Lease while the leader works through a burst (what a new leader does
// after a partition, or `kubectl patch lease`). The old leader must stop
// writing at once and exit non-zero; a fresh process stands by while the
// other holder renews, and takes over when it stops.
func TestLeaseTakenByAnotherHolder(t *testing.T) {
	t.Parallel()
	s := newScenario(t)
	const n = 150
	names := s.createFoos("taken", n)
	a, idA, _ := s.startSlowLeader()
	s.waitForDeployments(n/5, 2*time.Minute)

	// The usurper renews every half second, as a leader would.
	usurp, stopUsurping := context.WithCancel(s.ctx)
	defer stopUsurping()
	taken := make(chan time.Time, 1)
	go func() {
		reported := false
		for usurp.Err() == nil {
			l, err := s.kube.CoordinationV1().Leases(s.ns).Get(usurp, "foo-controller", metav1.GetOptions{})
			if err == nil {
				now := metav1.NewMicroTime(time.Now())
				l.Spec = coordinationv1.LeaseSpec{HolderIdentity: ptr.To("usurper"), LeaseDurationSeconds: ptr.To(int32(lossLeaseDuration / time.Second)),
					AcquireTime: l.Spec.AcquireTime, RenewTime: &now, LeaseTransitions: l.Spec.LeaseTransitions}
				_, err = s.kube.CoordinationV1().Leases(s.ns).Update(usurp, l, metav1.UpdateOptions{})
				if err == nil && !reported {
					taken <- now.Time
					reported = true
				}
			}
			time.Sleep(500 * time.Millisecond)
		}
	}()
	takenAt := <-taken
	s.requireMidBurst(n, "taking the Lease")
	lostAt := s.requireLostAndExited(a, idA, `held by \"usurper\"`, 15*time.Second)
	t.Logf("the leader knew %v after the Lease was taken (retry period %v)", lostAt.Sub(takenAt).Round(time.Millisecond), lossRetryPeriod)
	if d := lostAt.Sub(takenAt); d > lossRetryPeriod+time.Second {
		t.Errorf("the leader learned of the loss %v after the Lease was taken, want within a retry period (%v) and a request", d, lossRetryPeriod)
	}

	// A fresh process (what the kubelet's restart gives) stands by while
	// the usurper renews.
	b := s.startController(s.leaseArgs()...)
	idB := s.identityOf(b)
	s.eventually(30*time.Second, "the fresh process to stand by", func() (bool, string) {
		return len(b.logLines(`standing by" leader="usurper"`)) > 0, "not standing by yet"
	})
	time.Sleep(2 * lossRetryPeriod)
	if syncs := syncTimes(t, b.log); len(syncs) > 0 || s.leaseHolder() != "usurper" {
		t.Fatalf("the fresh process synced %d times while the usurper held the Lease (holder %q)", len(syncs), s.leaseHolder())
	}
	stopUsurping()
	start := time.Now()
	s.waitLeading(idB, lossLeaseDuration+4*lossRetryPeriod)
	t.Logf("the fresh process took over %v after the usurper stopped renewing", time.Since(start).Round(time.Millisecond))
	s.waitAllConverged(names, 3*time.Minute)
	s.eventually(time.Minute, "the invariants", s.invariants)
}

// TestLeaderLosesTheAPIServer: the API server stops answering the leader
// for less than the renew deadline (nothing happens), then for longer
// (it exits, /healthz having failed first); then a second leader loses it
// to a cut network. A fresh process takes over and converges everything.
func TestLeaderLosesTheAPIServer(t *testing.T) {
	t.Parallel()
	s := newScenario(t)
	names := s.createFoos("outage", 20)
	proxy := proxyToAPIServer(t, s.cl, 0)
	probes := freeAddr(t)
	a := s.startController(append(s.leaseArgs(), "-kubeconfig="+proxy.kubeconfigVia(t, s.cl.ctrlKC),
		"-health-probe-bind-address="+probes)...)
	idA := s.identityOf(a)
	s.waitLeading(idA, 30*time.Second)
	s.waitAllConverged(names, 2*time.Minute)
	watchCtx, stopWatching := context.WithCancel(s.ctx)
	defer stopWatching()
	health := watchHealth(watchCtx, probes)

	// Shorter than the renew deadline: a slow moment, not a loss.
	short := lossRenewDeadline / 2
	proxy.setHeld(true)
	time.Sleep(short)
	proxy.setHeld(false)
	s.createFoo(newFoo("after-short", "after-short", 1))
	s.waitConverged("after-short", time.Minute)
	if !a.running() || s.leaseHolder() != idA {
		t.Fatalf("a %v outage (renew deadline %v) ended the leader: running %v, holder %q\n%s", short, lossRenewDeadline, a.running(), s.leaseHolder(), a.tail(30))
	}
	if failed, body := health.failed(); !failed.IsZero() {
		t.Errorf("/healthz failed during a %v outage: %s", short, body)
	}
	if ok := health.answered()[http.StatusOK]; ok < 10 {
		t.Fatalf("/healthz answered 200 only %d times during the short outage: %v", ok, health.answered())
	}
	t.Logf("a %v outage: still leading, /healthz stayed 200", short)

	// Longer than the renew deadline: the leader gives up and exits; its
	// /healthz fails past the renew deadline, before it exits.
	heldNames := s.createFoos("held", 10) // work the leader cannot finish
	held := time.Now()
	proxy.setHeld(true)
	s.requireLostAndExited(a, idA, "could not renew", lossRenewDeadline+lossRetryPeriod+10*time.Second)
	proxy.setCut(true) // drops what it held: a partition, not a late delivery
	proxy.setHeld(false)
	failed, body := health.failed()
	t.Logf("held: /healthz failed %v after the hold began; the process exited %v after it (probes answered %v)",
		failed.Sub(held).Round(time.Millisecond), a.ended.Sub(held).Round(time.Millisecond), health.answered())
	if failed.IsZero() || failed.After(a.ended) {
		t.Errorf("/healthz did not fail before the leader exited (first failure %v, exit %v)", failed, a.ended)
	} else if !strings.Contains(body, "leader-election") {
		t.Errorf("/healthz failed with %q, want the leader-election check", body)
	}

	// Unreachable: a second leader behind a cut network.
	proxy.setCut(false)
	b := s.startController(append(s.leaseArgs(), "-kubeconfig="+proxy.kubeconfigVia(t, s.cl.ctrlKC))...)
	idB := s.identityOf(b)
	s.waitLeading(idB, lossLeaseDuration+30*time.Second) // a's Lease must expire first
	// Leading, it first checks that no sharded replica holds a slot
	// (shard.WaitForSlotsReleased): cut it off once its workers run.
	s.eventually(30*time.Second, "b's workers to start", func() (bool, string) {
		return len(b.logLines("Started workers")) > 0, ""
	})
	proxy.setCut(true)
	s.requireLostAndExited(b, idB, "could not renew", lossRenewDeadline+lossRetryPeriod+10*time.Second)

	c := s.startController(s.leaseArgs()...)
	idC := s.identityOf(c)
	s.waitLeading(idC, lossLeaseDuration+30*time.Second)
	s.waitAllConverged(append(append(names, heldNames...), "after-short"), 2*time.Minute)
	s.eventually(time.Minute, "the invariants", s.invariants)
}

// TestHandOverAfterLeaseLoss: two replicas; the leader is cut off from the
// API server mid-burst. The standby takes over once the Lease expires and
// converges everything, and no Deployment is written by both.
func TestHandOverAfterLeaseLoss(t *testing.T) {
	t.Parallel()
	s := newScenario(t)
	const n = 150
	names := s.createFoos("handover", n)
	start := time.Now()
	a, idA, proxyA := s.startSlowLeader()
	b := s.startController(s.leaseArgs()...)
	idB := s.identityOf(b)

	s.waitForDeployments(n/5, 2*time.Minute)
	proxyA.setHeld(true)
	s.requireMidBurst(n, "cutting the leader off")
	s.requireLostAndExited(a, idA, "could not renew", lossRenewDeadline+lossRetryPeriod+10*time.Second)
	proxyA.setCut(true)
	proxyA.setHeld(false)
	s.waitLeading(idB, lossLeaseDuration+4*lossRetryPeriod)
	s.waitAllConverged(names, 3*time.Minute)
	s.eventually(time.Minute, "the invariants", s.invariants)

	// Written means the API server took the write (2xx). A request the old
	// leader began before it was cut off can be received (its headers) and
	// then fail for want of its body when the connection goes: it changed
	// nothing.
	writers := map[string]map[string]bool{} // Deployment -> identities
	end := time.Now().Add(time.Minute)
	for id, who := range map[string]string{idA: "a", idB: "b"} {
		for _, e := range s.writesBy(id, start, end) {
			if e.resource() == "deployments" && e.ResponseStatus != nil && e.ResponseStatus.Code < 300 {
				if writers[e.ObjectRef.Name] == nil {
					writers[e.ObjectRef.Name] = map[string]bool{}
				}
				writers[e.ObjectRef.Name][who] = true
			}
		}
	}
	var byA, byB, both int
	for name, w := range writers {
		switch {
		case w["a"] && w["b"]:
			both++
			t.Errorf("Deployment %s was written by both leaders", name)
		case w["a"]:
			byA++
		default:
			byB++
		}
	}
	t.Logf("Deployments written by a only: %d, by b only: %d, by both: %d", byA, byB, both)
	if byA == 0 || byB == 0 {
		t.Errorf("want both leaders to have written some Deployments (a %d, b %d): the loss did not strike mid-burst", byA, byB)
	}
	if byA+byB+both != n {
		t.Errorf("%d Deployments written, want %d", byA+byB+both, n)
	}
}

// TestFrozenLeader: the leader is frozen mid-burst (SIGSTOP: what a paused
// VM, a long stop-the-world pause or a starved CPU does) for longer than
// the lease, and a standby takes over. When the old leader wakes, its
// workers run before its elector has noticed anything: its fence, which
// sees that its last renewal is too old, must refuse their writes.
func TestFrozenLeader(t *testing.T) {
	t.Parallel()
	s := newScenario(t)
	const n = 150
	names := s.createFoos("frozen", n)
	a, idA, _ := s.startSlowLeader()
	b := s.startController(s.leaseArgs()...)
	idB := s.identityOf(b)

	s.waitForDeployments(n/5, 2*time.Minute)
	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	s.requireMidBurst(n, "freezing the leader")
	s.waitLeading(idB, lossLeaseDuration+4*lossRetryPeriod+5*time.Second)
	time.Sleep(2 * time.Second) // the new leader at work
	woke := time.Now()
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	s.requireLostAndExited(a, idA, "", 15*time.Second)
	if late := s.writesBy(idA, woke, time.Now().Add(time.Minute)); len(late) > 0 {
		t.Errorf("the old leader sent %d writes after it woke:%s", len(late), summarize(late))
	}
	if refused := a.logLines("write refused"); len(refused) > 0 {
		t.Logf("its fence refused %d writes after it woke, e.g. %s", len(refused), refused[0])
	}
	s.waitAllConverged(names, 3*time.Minute)
	s.eventually(time.Minute, "the invariants", s.invariants)
}

// TestFrozenLeaderWhoseLeaseWasDeleted: the leader is frozen past its
// renew deadline, and its Lease is deleted meanwhile, as sharded replicas
// delete a leader's Lease once it has been still for a lease duration (a
// switch of modes). On waking, the leader must not create the Lease anew
// and lead on, writing beside the replicas that took over: it exits as
// lost. (Found by the fifth attack of issue 14: a paused leader recreated
// the Lease and led on.)
func TestFrozenLeaderWhoseLeaseWasDeleted(t *testing.T) {
	t.Parallel()
	s := newScenario(t)
	const n = 60
	names := s.createFoos("lapsed", n)
	a, idA, _ := s.startSlowLeader()
	s.waitForDeployments(n/5, 2*time.Minute)
	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(lossLeaseDuration + lossRetryPeriod)
	if err := s.kube.CoordinationV1().Leases(s.ns).Delete(s.ctx, "foo-controller", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	s.requireLostAndExited(a, idA, "", 15*time.Second)
	if h := s.leaseHolder(); h == idA {
		t.Errorf("the woken leader wrote the deleted Lease anew, naming itself")
	}
	s.startController(s.leaseArgs()...)
	s.waitAllConverged(names, 3*time.Minute)
}
