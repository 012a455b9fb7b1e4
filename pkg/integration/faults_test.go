//go:build integration

package integration

// Faults injected into a real control plane: the API server or etcd going
// away, watches broken long enough that their history is compacted, the
// controller killed between two steps, and another client fighting over a
// Deployment. Each test states what must hold afterwards and logs how long
// re-convergence took (docs/reliability.md quotes these figures).

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	samplev1beta1 "example.com/foo-controller/pkg/apis/samplecontroller/v1beta1"
	"example.com/foo-controller/pkg/plan"
)

// TestControlPlaneRestarts stops the API server, and then etcd, for 10s
// while 200 Foos converge. The controller must ride it out (no exit), see
// the outage in its metrics, and converge every Foo once the component is
// back. Then it starts a controller while the API server is away.
func TestControlPlaneRestarts(t *testing.T) {
	t.Parallel()
	cl := privateCluster(t, clusterOptions{})
	for _, fault := range []struct {
		name        string
		stop, start func() error
	}{
		{"kube-apiserver", cl.stopAPIServer, func() error {
			if err := cl.startAPIServer(); err != nil {
				return err
			}
			// Not the controller under test, but it must work for Foos to
			// become Ready: kube-controller-manager's ReplicaSet syncs
			// that failed during the outage (and in the first seconds
			// after, while the new API server's RBAC cache fills) sit out
			// an exponential backoff of minutes. Restart it and the
			// scheduler, as a control-plane upgrade would; and kwok, which
			// stands in for the kubelets: once in CI it left 11 of 200
			// pods never ready after the restart (some of them pods whose
			// status it had failed to patch, five times each, during the
			// outage), which a kubelet, retrying, would not.
			for _, name := range []string{"kube-controller-manager", "kube-scheduler", "kwok"} {
				if err := cl.restartComponent(name); err != nil {
					return err
				}
			}
			return nil
		}},
		{"etcd", cl.stopEtcd, cl.startEtcd},
	} {
		t.Run(fault.name, func(t *testing.T) {
			s := newScenarioOn(t, cl)
			metricsAddr := freeAddr(t)
			const n = 200
			// The Foos exist before the controller starts, and the fault
			// strikes as its first Deployment appears: the outage then
			// always meets work in progress. (Struck after createFoos with
			// the controller already running, it could find all the work
			// done, and the controller idle, see nothing of an etcd
			// outage: the API server holds requests rather than failing.)
			names := s.createFoos("foo", n)
			// -v=2: the log shows each change and error, not each sync.
			ctrl := s.startController("-v=2", "-metrics-bind-address="+metricsAddr)
			s.waitForDeployments(1, time.Minute)
			if err := fault.stop(); err != nil {
				t.Fatal(err)
			}
			t.Logf("stopped %s as the first of %d Deployments appeared", fault.name, n)
			time.Sleep(10 * time.Second)
			if err := fault.start(); err != nil {
				t.Fatal(err)
			}
			back := time.Now()
			if !ctrl.running() {
				t.Fatalf("the controller exited during the outage: %v\n%s", ctrl.err, ctrl.tail(40))
			}
			s.eventually(3*time.Minute, "all Foos to converge", s.invariants)
			if got := s.count(names); got != n {
				t.Fatalf("%d of %d Foos exist", got, n)
			}
			t.Logf("all %d Foos converged %v after %s came back", n, time.Since(back).Round(time.Millisecond), fault.name)

			_, body := httpGet("http://" + metricsAddr + "/metrics")
			failed, _ := metricValue(body, "rest_client_requests_total", `code="<error>"`)
			unavailable, _ := metricValue(body, "rest_client_requests_total", `code="5`)
			syncErrors, _ := metricValue(body, "foo_controller_reconcile_total", `result="error"`)
			// While etcd is down the API server holds requests rather than
			// failing them: there the outage shows as slow syncs.
			syncs, _ := metricValue(body, "foo_controller_reconcile_duration_seconds_count")
			fast, _ := metricValue(body, "foo_controller_reconcile_duration_seconds_bucket", `le="5"`)
			t.Logf("outage seen by the controller: %v requests failed to connect, %v got 5xx, %v failed syncs, %v syncs took over 5s",
				failed, unavailable, syncErrors, syncs-fast)
			if failed+unavailable+syncs-fast == 0 {
				t.Errorf("the outage of %s left no trace in the REST client or sync metrics", fault.name)
			}
		})
	}

	// A controller started while the API server is away (a rollout during
	// a control-plane upgrade) waits for it instead of exiting 1 and
	// crash-looping, and converges once it is back.
	t.Run("kube-apiserver down at start", func(t *testing.T) {
		s := newScenarioOn(t, cl)
		names := s.createFoos("early", 20)
		if err := cl.stopAPIServer(); err != nil {
			t.Fatal(err)
		}
		probes := freeAddr(t)
		ctrl := s.startController("-v=2", "-health-probe-bind-address="+probes)
		s.eventually(30*time.Second, "the controller to say it waits", func() (bool, string) {
			return len(ctrl.logLines("Waiting for the API server")) >= 2, ctrl.tail(3)
		})
		// A liveness probe must not kill it meanwhile; readiness says why not yet.
		if code, body := httpGet("http://" + probes + "/healthz"); code != http.StatusOK {
			t.Errorf("/healthz while waiting for the API server: %d %s", code, body)
		}
		if code, body := httpGet("http://" + probes + "/readyz"); code != http.StatusInternalServerError || !strings.Contains(body, "checking the API server") {
			t.Errorf("/readyz while waiting for the API server: %d %s", code, body)
		}
		if err := cl.startAPIServer(); err != nil {
			t.Fatal(err)
		}
		back := time.Now()
		if !ctrl.running() {
			t.Fatalf("the controller exited while the API server was away: %v\n%s", ctrl.err, ctrl.tail(20))
		}
		s.eventually(time.Minute, "the controller's caches to sync", func() (bool, string) {
			code, body := httpGet("http://" + probes + "/readyz")
			return code == http.StatusOK, body
		})
		t.Logf("the controller was ready %v after the API server came back", time.Since(back).Round(time.Millisecond))
		s.eventually(2*time.Minute, "all Foos to converge", s.invariants)
		if got := s.count(names); got != len(names) {
			t.Fatalf("%d of %d Foos exist", got, len(names))
		}
		t.Logf("waited %d times for the API server; all %d Foos converged %v after it came back (kube-controller-manager, the scheduler and kwok included)",
			len(ctrl.logLines("Waiting for the API server")), len(names), time.Since(back).Round(time.Millisecond))
	})
}

// count returns how many of the named Foos exist.
func (s *scenario) count(names []string) int {
	list, err := s.foos.SamplecontrollerV1beta1().Foos(s.ns).List(s.ctx, metav1.ListOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	got := 0
	for _, f := range list.Items {
		if want[f.Name] {
			got++
		}
	}
	return got
}

// churnAndCompact creates 20 Foos (churn-00 to churn-19), so that the
// history past a resourceVersion read before is long, then compacts etcd
// up to now, so that a watch resuming from that resourceVersion gets 410
// Gone. It returns the revision compacted at.
func (s *scenario) churnAndCompact(cl *cluster) int64 {
	s.t.Helper()
	for i := range 20 {
		s.createFoo(newFoo(fmt.Sprintf("churn-%02d", i), fmt.Sprintf("churn-%02d", i), 1))
	}
	rev, err := cl.compactEtcd(s.ctx)
	if err != nil {
		s.t.Fatal(err)
	}
	return rev
}

// TestWatchExpiry cuts the controller off from the API server, changes
// Foos meanwhile, and compacts etcd, so that the resourceVersion its
// informers resume from no longer exists (410 Gone). The API server runs
// without its watch cache, so the watch goes to etcd and really fails. After
// the relist, every change made during the cut must be handled: created
// Foos converge, a scaled one follows, a deleted one's Deployment is gone
// (not recreated from a stale cache), and an Orphan deletion completes.
func TestWatchExpiry(t *testing.T) {
	t.Parallel()
	cl := privateCluster(t, clusterOptions{apiserverFlags: map[string]string{"watch-cache": "false"}})
	s := newScenarioOn(t, cl)
	proxy := proxyToAPIServer(t, cl, 0)
	metricsAddr := freeAddr(t)
	ctrl := s.startController("-kubeconfig="+proxy.kubeconfigVia(t, cl.ctrlKC), "-metrics-bind-address="+metricsAddr)

	for _, name := range []string{"kept", "scaled", "deleted"} {
		s.createFoo(newFoo(name, name, 1))
	}
	orphaned := newFoo("orphaned", "orphaned", 1)
	orphaned.Spec.DeletionPolicy = samplev1beta1.DeletionPolicyOrphan
	s.createFoo(orphaned)
	s.waitAllConverged([]string{"kept", "scaled", "deleted", "orphaned"}, 2*time.Minute)

	proxy.setCut(true)
	// Connection failures are retried by the reflectors without a watch
	// error (they back off and re-watch from the same resourceVersion);
	// they show in the REST client's metrics.
	s.eventually(time.Minute, "the controller to notice the cut", func() (bool, string) {
		_, body := httpGet("http://" + metricsAddr + "/metrics")
		v, _ := metricValue(body, "rest_client_requests_total", `code="<error>"`)
		return v > 0, fmt.Sprintf("failed requests %v", v)
	})
	s.createFoo(newFoo("created", "created", 1))
	s.updateFoo("scaled", func(f *samplev1beta1.Foo) { f.Spec.Deployment.Replicas = ptr.To[int32](3) })
	for _, name := range []string{"deleted", "orphaned"} {
		if err := s.foos.SamplecontrollerV1beta1().Foos(s.ns).Delete(s.ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("compacted etcd at revision %d while the controller was cut off", s.churnAndCompact(cl))
	proxy.setCut(false)
	restored := time.Now()

	s.eventually(3*time.Minute, "everything changed during the cut to be handled", func() (bool, string) {
		if ok, state := s.invariants(); !ok {
			return false, state
		}
		if _, err := s.getFoo("orphaned"); !apierrors.IsNotFound(err) {
			return false, fmt.Sprintf("Foo orphaned still exists: %v", err)
		}
		if _, err := s.getDeployment("deleted"); !apierrors.IsNotFound(err) {
			return false, fmt.Sprintf("Deployment deleted still exists: %v", err)
		}
		return true, ""
	})
	t.Logf("all changes made during the cut handled %v after the network came back", time.Since(restored).Round(time.Millisecond))
	if foo, _ := s.getFoo("scaled"); plan.Replicas(foo) != 3 {
		t.Errorf("Foo scaled: %d replicas", plan.Replicas(foo))
	}
	dep, err := s.getDeployment("orphaned")
	if err != nil {
		t.Fatalf("the Orphan policy must keep the Deployment: %v", err)
	}
	if len(dep.OwnerReferences) != 0 {
		t.Errorf("the kept Deployment still has owners: %v", dep.OwnerReferences)
	}
	expired := ctrl.logLines("is too old")
	_, body := httpGet("http://" + metricsAddr + "/metrics")
	watchErrors, _ := metricValue(body, "foo_controller_watch_errors_total")
	t.Logf("%v watch errors; %d log lines report an expired resourceVersion; first: %s", watchErrors, len(expired), first(expired))
	if len(expired) == 0 {
		t.Errorf("the informers never hit 410 Gone: the test did not exercise the relist it is about")
	}
	// An expired watch is routine: the reflector lists again without
	// reporting an error, so the alert on foo_controller_watch_errors_total
	// (docs/operations.md) does not fire for it.
	if watchErrors != 0 {
		t.Errorf("foo_controller_watch_errors_total = %v after expired watches; docs/operations.md says they do not count", watchErrors)
	}
}

func first(lines []string) string {
	if len(lines) == 0 {
		return "(none)"
	}
	return lines[0]
}

// TestKillBetweenOrphanSteps kills the controller in the one window where
// an Orphan deletion is half done: the owner reference is gone from the
// Deployment but the finalizer is still on the Foo. An admission policy
// holds it there (it denies the controller's finalizer removal) until the
// kill. The restarted controller must finish the job: the Foo goes, the
// Deployment stays, and the garbage collector leaves it alone.
func TestKillBetweenOrphanSteps(t *testing.T) {
	t.Parallel()
	s := newScenario(t)
	ctrl := s.startController()
	foo := newFoo("web", "web", 1)
	foo.Spec.DeletionPolicy = samplev1beta1.DeletionPolicyOrphan
	s.createFoo(foo)
	s.waitConverged("web", time.Minute)

	unfreeze := s.denyFinalizerRemoval()
	if err := s.foos.SamplecontrollerV1beta1().Foos(s.ns).Delete(s.ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	s.eventually(time.Minute, "the owner reference to be stripped, the finalizer kept", func() (bool, string) {
		dep, err := s.getDeployment("web")
		if err != nil {
			return false, err.Error()
		}
		f, err := s.getFoo("web")
		if err != nil {
			return false, "Foo: " + err.Error()
		}
		return len(dep.OwnerReferences) == 0 && len(f.Finalizers) > 0,
			fmt.Sprintf("owners %v, finalizers %v", dep.OwnerReferences, f.Finalizers)
	})
	ctrl.kill()
	unfreeze()

	s.startStarted()
	restarted := time.Now()
	s.eventually(time.Minute, "the Foo to be gone", func() (bool, string) {
		_, err := s.getFoo("web")
		return apierrors.IsNotFound(err), fmt.Sprintf("%v", err)
	})
	t.Logf("the Orphan deletion finished %v after the restart", time.Since(restarted).Round(time.Millisecond))
	// Give the garbage collector time to act on a mistake.
	time.Sleep(3 * time.Second)
	dep, err := s.getDeployment("web")
	if err != nil {
		t.Fatalf("the Deployment must be kept: %v", err)
	}
	if len(dep.OwnerReferences) != 0 {
		t.Errorf("the kept Deployment still has owners: %v", dep.OwnerReferences)
	}
}

// denyFinalizerRemoval installs a ValidatingAdmissionPolicy that denies the
// controller (and only it, in this namespace) removing the orphan finalizer
// from a Foo, and waits until it is in force. The returned func removes it
// and waits until it no longer is.
func (s *scenario) denyFinalizerRemoval() (unfreeze func()) {
	s.t.Helper()
	fin := samplev1beta1.OrphanFinalizer
	// A probe Foo, with the finalizer set by the admin: the policy is in
	// force once the controller's user may not remove it (dry run).
	// (The Orphan policy, so that the controller keeps the finalizer too.)
	probe := newFoo("freeze-probe", "freeze-probe", 1)
	probe.Spec.DeletionPolicy = samplev1beta1.DeletionPolicyOrphan
	probe.Finalizers = []string{fin}
	s.createFoo(probe)
	ctrlFoos := fooClientFor(s.t, s.cl.ctrlKC)
	denied := func() (bool, string) {
		patch := []byte(`{"metadata":{"finalizers":null}}`)
		_, err := ctrlFoos.SamplecontrollerV1beta1().Foos(s.ns).Patch(s.ctx, "freeze-probe", types.MergePatchType, patch,
			metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		return apierrors.IsInvalid(err) || apierrors.IsForbidden(err), fmt.Sprintf("dry-run removal: %v", err)
	}
	lift := s.denyToController("freeze-", admissionregistrationv1.RuleWithOperations{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
		Rule: admissionregistrationv1.Rule{
			APIGroups: []string{samplev1beta1.GroupVersion.Group}, APIVersions: []string{"*"},
			Resources: []string{"foos"},
		},
	}, admissionregistrationv1.Validation{
		Expression: fmt.Sprintf("!(%q in oldObject.metadata.?finalizers.orValue([])) || %q in object.metadata.?finalizers.orValue([])", fin, fin),
		Message:    "frozen by the test: the controller may not remove the orphan finalizer",
	}, denied)
	return func() {
		lift()
		s.updateFoo("freeze-probe", func(f *samplev1beta1.Foo) { f.Finalizers = nil })
		if err := s.foos.SamplecontrollerV1beta1().Foos(s.ns).Delete(s.ctx, "freeze-probe", metav1.DeleteOptions{}); err != nil {
			s.t.Fatal(err)
		}
	}
}

// TestKillAtRandomPoints SIGKILLs the controller at a random moment after
// a rename and after an Orphan deletion begins, several times, and checks
// after each restart that nothing is duplicated, orphaned or stuck. The
// seed is logged; FOO_KILL_SEED replays a failure.
func TestKillAtRandomPoints(t *testing.T) {
	t.Parallel()
	seed := seedFromEnv(t, "FOO_KILL_SEED")
	rng := rand.New(rand.NewPCG(seed, seed))
	s := newScenario(t)
	ctrl := s.startStarted()
	const rounds = 4
	for round := range rounds {
		name := fmt.Sprintf("foo-%d", round)
		foo := newFoo(name, name+"-a", 1)
		foo.Spec.DeletionPolicy = samplev1beta1.DeletionPolicyOrphan
		s.createFoo(foo)
		s.waitConverged(name, time.Minute)

		// A rename, then a kill somewhere in create-new/prune-old.
		s.updateFoo(name, func(f *samplev1beta1.Foo) { f.Spec.Deployment.Name = name + "-b" })
		time.Sleep(time.Duration(rng.IntN(400)) * time.Millisecond)
		ctrl.kill()
		ctrl = s.startStarted()
		s.eventually(time.Minute, "the invariants after a kill during a rename", s.invariants)
		if _, err := s.getDeployment(name + "-a"); !apierrors.IsNotFound(err) {
			t.Errorf("round %d: the old Deployment %s-a survived the rename: %v", round, name, err)
		}

		// An Orphan deletion, then a kill somewhere in strip-owner/remove-finalizer.
		if err := s.foos.SamplecontrollerV1beta1().Foos(s.ns).Delete(s.ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(rng.IntN(400)) * time.Millisecond)
		ctrl.kill()
		ctrl = s.startStarted()
		s.eventually(time.Minute, "the invariants after a kill during an Orphan deletion", s.invariants)
		s.eventually(time.Minute, "the Foo to be gone", func() (bool, string) {
			_, err := s.getFoo(name)
			return apierrors.IsNotFound(err), fmt.Sprintf("%v", err)
		})
		dep, err := s.getDeployment(name + "-b")
		if err != nil || len(dep.OwnerReferences) != 0 {
			t.Errorf("round %d: the Orphan policy must keep %s-b without owners: %v", round, name, err)
		}
	}
}

// startStarted starts a controller and waits until its workers run, so
// that a kill that follows hits a working controller (and a SIGTERM at the
// end of the test finds its signal handler installed).
func (s *scenario) startStarted(extraArgs ...string) *process {
	s.t.Helper()
	p := s.startController(extraArgs...)
	s.eventually(time.Minute, "the controller to start its workers", func() (bool, string) {
		return len(p.logLines(`"Started workers"`)) > 0, p.tail(3)
	})
	return p
}

// TestFightingWriter has another client set a managed Deployment's replicas
// every 100ms for 30s. The controller keeps putting it back, but no more
// often than its corrections limiter allows; other Foos converge as fast
// as they do in peace; and once the fight stops the Deployment settles at
// once and the controller goes quiet.
func TestFightingWriter(t *testing.T) {
	t.Parallel()
	s := newScenario(t)
	s.startController()
	s.createFoo(newFoo("fought", "fought", 2))
	s.waitConverged("fought", time.Minute)

	// Two latencies per new Foo: until its Deployment exists (the
	// controller's own work) and until it has converged (which also waits
	// for kube-controller-manager and kwok, busy with the fight's scaling).
	latencies := func(prefix string, n int) (created, converged []time.Duration) {
		start := time.Now()
		names := s.createFoos(prefix, n)
		for _, name := range names {
			s.eventually(time.Minute, "Deployment "+name, func() (bool, string) {
				_, err := s.getDeployment(name)
				return err == nil, fmt.Sprint(err)
			})
			created = append(created, time.Since(start))
		}
		for _, name := range names {
			s.waitConverged(name, 2*time.Minute)
			converged = append(converged, time.Since(start))
		}
		return created, converged
	}
	peace, peaceConverged := latencies("peace", 5)

	const period, fight = 100 * time.Millisecond, 30 * time.Second
	var fighterWrites atomic.Int64
	fightStart := time.Now()
	done := make(chan struct{})
	go func() {
		defer close(done)
		patch := []byte(`{"spec":{"replicas":5}}`)
		tick := time.NewTicker(period)
		defer tick.Stop()
		for time.Since(fightStart) < fight {
			if _, err := s.kube.AppsV1().Deployments(s.ns).Patch(s.ctx, "fought", types.MergePatchType, patch,
				metav1.PatchOptions{FieldManager: "fighter"}); err == nil {
				fighterWrites.Add(1)
			}
			select {
			case <-tick.C:
			case <-s.ctx.Done():
				return
			}
		}
	}()
	during, duringConverged := latencies("during", 5)
	<-done
	fightEnd := time.Now()

	s.waitConverged("fought", 30*time.Second)
	settled := time.Since(fightEnd)
	// Quiet afterwards: nothing more for that Deployment.
	time.Sleep(5 * time.Second)
	quietFrom := fightEnd.Add(settled)
	reqs := s.controllerRequests(fightStart, fightEnd)
	var corrections, statusWrites int
	for _, e := range reqs {
		switch {
		case e.Verb == "patch" && e.resource() == "deployments" && e.ObjectRef.Name == "fought":
			corrections++
		case e.Verb == "patch" && e.resource() == "foos/status" && e.ObjectRef.Name == "fought":
			statusWrites++
		}
	}
	var after []auditEvent
	for _, e := range writesOf(s.controllerRequests(quietFrom.Add(time.Second), time.Now())) {
		if e.resource() == "deployments" && e.ObjectRef.Name == "fought" {
			after = append(after, e)
		}
	}
	seconds := fightEnd.Sub(fightStart).Seconds()
	t.Logf("fight of %v: fighter wrote %d times (%.1f/s); controller put it back %d times (%.2f/s); settled %v after the fight",
		fightEnd.Sub(fightStart).Round(time.Millisecond), fighterWrites.Load(), float64(fighterWrites.Load())/seconds,
		corrections, float64(corrections)/seconds, settled.Round(time.Millisecond))
	t.Logf("other Foos' Deployments created after: in peace %v, during the fight %v", peace, during)
	t.Logf("other Foos converged after: in peace %v, during the fight %v", peaceConverged, duringConverged)
	events := s.fooEvents("fought")
	t.Logf("during the fight: %d status writes for the fought Foo; its Events: %v", statusWrites, events)

	// The limiter: correctionBurst (5) at once, then one per second.
	if limit := 5 + int(seconds) + 2; corrections > limit {
		t.Errorf("%d corrections in %.0fs: more than the limiter allows (%d)", corrections, seconds, limit)
	}
	if corrections < int(seconds)/2 {
		t.Errorf("only %d corrections in %.0fs: the controller stopped putting the Deployment back", corrections, seconds)
	}
	if events["Contested"] != 1 {
		t.Errorf("want exactly one Contested Warning for the fight: %v", events)
	}
	// The status follows the Deployment's real scaling between the two
	// values, not each of the fighter's writes.
	if int64(statusWrites) > fighterWrites.Load()/2 {
		t.Errorf("%d status writes during the fight: the status must not follow every move of a contested Deployment", statusWrites)
	}
	if len(after) > 0 {
		t.Errorf("the controller kept writing after the fight settled:%s", summarize(after))
	}
	if p, d := median(peace), median(during); d > 2*p+time.Second {
		t.Errorf("the controller was slowed by the fight: other Foos' Deployments created after a median %v during it, %v in peace", d, p)
	}
}

func median(ds []time.Duration) time.Duration {
	sorted := slices.Clone(ds)
	slices.Sort(sorted)
	return sorted[len(sorted)/2]
}

// seedFromEnv returns the seed in the environment variable, or a fresh one;
// either way it is logged, so that a failure can be replayed.
func seedFromEnv(t *testing.T, variable string) uint64 {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv(variable); v != "" {
		var err error
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("%s=%q: %v", variable, v, err)
		}
	}
	t.Logf("seed %d (replay with %s=%d)", seed, variable, seed)
	return seed
}

// TestRenameWhileTheOldDeleteIsRefused renames a Foo while an admission
// policy refuses the controller every Deployment delete in the namespace
// (what a policy engine or a missing RBAC rule does). The new Deployment
// serves, so the Foo must converge, status included, while the old one
// cannot go; once the refusal lifts, the retry deletes it.
func TestRenameWhileTheOldDeleteIsRefused(t *testing.T) {
	t.Parallel()
	s := newScenario(t)
	s.startController()
	s.createFoo(newFoo("web", "old-name", 1))
	s.waitConverged("web", time.Minute)

	lift := s.denyDeploymentDeletes("old-name")
	s.updateFoo("web", func(f *samplev1beta1.Foo) { f.Spec.Deployment.Name = "new-name" })
	s.waitConverged("web", time.Minute)
	if _, err := s.getDeployment("old-name"); err != nil {
		t.Fatalf("the old Deployment must still be there while its delete is refused: %v", err)
	}
	lift()
	// The delete is retried with backoff; a handful of refusals in, that is
	// well under a minute.
	s.eventually(time.Minute, "the old Deployment to be deleted", func() (bool, string) {
		_, err := s.getDeployment("old-name")
		return apierrors.IsNotFound(err), fmt.Sprintf("get old-name: %v", err)
	})
}

// denyDeploymentDeletes installs a ValidatingAdmissionPolicy that refuses
// the controller (and only it, in this namespace) deleting a Deployment,
// and waits until it refuses a dry-run delete of probe, an existing
// Deployment. The returned func removes it and waits until it no longer
// does.
func (s *scenario) denyDeploymentDeletes(probe string) (lift func()) {
	s.t.Helper()
	ctrlKube := clientFor(s.t, s.cl.ctrlKC)
	denied := func() (bool, string) {
		err := ctrlKube.AppsV1().Deployments(s.ns).Delete(s.ctx, probe, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		return apierrors.IsInvalid(err) || apierrors.IsForbidden(err), fmt.Sprintf("dry-run delete: %v", err)
	}
	return s.denyToController("nodelete-", admissionregistrationv1.RuleWithOperations{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Delete},
		Rule: admissionregistrationv1.Rule{
			APIGroups: []string{"apps"}, APIVersions: []string{"*"}, Resources: []string{"deployments"},
		},
	}, admissionregistrationv1.Validation{
		Expression: "false",
		Message:    "refused by the test: the controller may not delete Deployments",
	}, denied)
}

// denyToController installs a ValidatingAdmissionPolicy, named prefix and
// the namespace, that applies validation to the requests rule matches from
// the controller's user in this scenario's namespace, and nobody else's,
// and waits until denied (a dry-run probe of such a request) says it is in
// force. The returned func removes it and waits until denied says it is
// lifted; it is removed when the test ends in any case.
func (s *scenario) denyToController(prefix string, rule admissionregistrationv1.RuleWithOperations,
	validation admissionregistrationv1.Validation, denied func() (bool, string)) (lift func()) {
	s.t.Helper()
	name := prefix + s.ns
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: rule}},
			},
			MatchConditions: []admissionregistrationv1.MatchCondition{{
				Name: "controller", Expression: fmt.Sprintf("request.userInfo.username == %q", controllerUser),
			}},
			Validations: []admissionregistrationv1.Validation{validation},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources: &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{"kubernetes.io/metadata.name": s.ns},
			}},
		},
	}
	vap := s.kube.AdmissionregistrationV1()
	if _, err := vap.ValidatingAdmissionPolicies().Create(s.ctx, policy, metav1.CreateOptions{}); err != nil {
		s.t.Fatal(err)
	}
	if _, err := vap.ValidatingAdmissionPolicyBindings().Create(s.ctx, binding, metav1.CreateOptions{}); err != nil {
		s.t.Fatal(err)
	}
	remove := func() {
		_ = vap.ValidatingAdmissionPolicyBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
		_ = vap.ValidatingAdmissionPolicies().Delete(context.Background(), name, metav1.DeleteOptions{})
	}
	s.t.Cleanup(remove)
	s.eventually(30*time.Second, "the admission policy to be in force", denied)
	return func() {
		remove()
		s.eventually(30*time.Second, "the admission policy to be lifted", func() (bool, string) {
			d, state := denied()
			return !d, state
		})
	}
}

// TestUnreachableWebhookIsReported: a validating webhook for Deployments
// that the API server cannot call (failurePolicy Fail) fails every apply
// with a 500, which is not the API server refusing the object and may lift
// by itself. The controller retries it with backoff, and once
// plan.ReportAfterFailures tries in a row have failed (about 20 s), the Foo says
// why: Ready=False, DeploymentApplyFailed, quoting "failed calling
// webhook". Once the webhook is gone, a retry converges the Foo.
func TestUnreachableWebhookIsReported(t *testing.T) {
	t.Parallel()
	s := newScenario(t)
	name := "unreachable-" + s.ns
	hooks := s.kube.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	_, err := hooks.Create(s.ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:         "deployments.unreachable.example.com",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://127.0.0.1:1/validate")},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{"apps"}, APIVersions: []string{"v1"}, Resources: []string{"deployments"}},
			}},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": s.ns}},
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			TimeoutSeconds:          ptr.To[int32](2),
		}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	remove := func() { _ = hooks.Delete(context.Background(), name, metav1.DeleteOptions{}) }
	t.Cleanup(remove)
	s.eventually(30*time.Second, "the webhook to be in force", func() (bool, string) {
		_, err := s.kube.AppsV1().Deployments(s.ns).Create(s.ctx, probeDeployment(corev1.ContainerPort{ContainerPort: 80}),
			metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil && strings.Contains(err.Error(), "failed calling webhook"), fmt.Sprintf("dry-run create: %v", err)
	})

	s.startController()
	start := time.Now()
	s.createFoo(newFoo("web", "web", 1))
	s.waitNotReady("web", samplev1beta1.ReasonDeploymentApplyFailed, "failed calling webhook", 2*time.Minute)
	reported := time.Since(start)
	t.Logf("reported on the Foo %v after it was created", reported.Round(time.Millisecond))
	// Not at the first failure: a webhook restarting for a few seconds
	// says nothing on the Foo (5 ms doubling: 12 tries take about 20 s).
	if reported < 10*time.Second {
		t.Errorf("reported %v after the Foo was created; want after about 20 s of retries", reported)
	}

	remove()
	s.waitConverged("web", 2*time.Minute)
	t.Logf("converged %v after the webhook was removed", (time.Since(start) - reported).Round(time.Millisecond))
}
