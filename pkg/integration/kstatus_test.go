//go:build integration

package integration

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"

	samplev1beta1 "example.com/foo-controller/pkg/apis/samplecontroller/v1beta1"
)

// These tests read the Foo as the ecosystem does: kstatus (Flux, kpt,
// cli-utils) computes Current, InProgress or Failed from its
// observedGeneration and its Reconciling, Stalled and Ready conditions.

// kstatusSeen is one version of a Foo and what kstatus made of it.
type kstatusSeen struct {
	generation, observedGeneration int64
	result                         status.Result
	conditions                     []metav1.Condition
}

func (k kstatusSeen) String() string {
	var conds []string
	for _, c := range k.conditions {
		conds = append(conds, fmt.Sprintf("%s=%s/%s", c.Type, c.Status, c.Reason))
	}
	return fmt.Sprintf("gen %d/%d %s %q [%s]", k.observedGeneration, k.generation, k.result.Status, k.result.Message,
		strings.Join(conds, " "))
}

func computeKstatus(t *testing.T, u *unstructured.Unstructured) kstatusSeen {
	t.Helper()
	res, err := status.Compute(u)
	if err != nil {
		t.Fatalf("kstatus: %v", err)
	}
	var foo samplev1beta1.Foo
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &foo); err != nil {
		t.Fatal(err)
	}
	return kstatusSeen{generation: foo.Generation, observedGeneration: foo.Status.ObservedGeneration,
		result: *res, conditions: foo.Status.Conditions}
}

// kstatusOf is kstatus of the live Foo.
func (s *scenario) kstatusOf(name string) kstatusSeen {
	s.t.Helper()
	u, err := s.dyn.Resource(fooGVR).Namespace(s.ns).Get(s.ctx, name, metav1.GetOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	return computeKstatus(s.t, u)
}

// waitKstatus waits until kstatus of the Foo is want, and returns it.
func (s *scenario) waitKstatus(name string, want status.Status, timeout time.Duration) kstatusSeen {
	s.t.Helper()
	var seen kstatusSeen
	s.eventually(timeout, fmt.Sprintf("kstatus %s of Foo %s", want, name), func() (bool, string) {
		seen = s.kstatusOf(name)
		return seen.result.Status == want, seen.String()
	})
	s.t.Logf("kstatus of %s: %s", name, seen)
	return seen
}

// recordKstatus watches the Foo from its current version on and records
// kstatus of every version the API server holds, so that a state that
// lasts a moment is not missed between two polls. The returned func stops
// the watch and returns what was seen.
func (s *scenario) recordKstatus(name string) (stop func() []kstatusSeen) {
	s.t.Helper()
	cur, err := s.dyn.Resource(fooGVR).Namespace(s.ns).Get(s.ctx, name, metav1.GetOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(s.ctx)
	w, err := s.dyn.Resource(fooGVR).Namespace(s.ns).Watch(ctx, metav1.ListOptions{
		FieldSelector: "metadata.name=" + name, ResourceVersion: cur.GetResourceVersion(),
	})
	if err != nil {
		s.t.Fatal(err)
	}
	var (
		mu   sync.Mutex
		seen = []kstatusSeen{computeKstatus(s.t, cur)}
		done = make(chan struct{})
	)
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			u, ok := ev.Object.(*unstructured.Unstructured)
			if !ok || (ev.Type != watch.Added && ev.Type != watch.Modified) {
				continue
			}
			res, err := status.Compute(u)
			if err != nil {
				continue
			}
			var foo samplev1beta1.Foo
			_ = runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &foo)
			mu.Lock()
			seen = append(seen, kstatusSeen{generation: foo.Generation, observedGeneration: foo.Status.ObservedGeneration,
				result: *res, conditions: foo.Status.Conditions})
			mu.Unlock()
		}
	}()
	return func() []kstatusSeen {
		w.Stop()
		cancel()
		<-done
		mu.Lock()
		defer mu.Unlock()
		return seen
	}
}

// TestKstatusThroughScaleAndRollout: a Foo is Current once converged;
// InProgress while it scales and while a new image rolls out, reported
// by its own Reconciling condition (not only by a generation it has not
// observed yet); Current again after each. A scale that keeps the
// Deployment available leaves Ready True and its lastTransitionTime
// where it was, however often the Foo is scaled; a new image makes it
// False until the rollout is done, so that kubectl wait waits for it.
func TestKstatusThroughScaleAndRollout(t *testing.T) {
	s := newScenario(t)
	s.startController()
	s.createFoo(newFoo("web", "web", 4))
	s.waitConverged("web", 2*time.Minute)
	current := s.waitKstatus("web", status.CurrentStatus, 30*time.Second)
	if meta.FindStatusCondition(current.conditions, samplev1beta1.ConditionReconciling) != nil ||
		meta.FindStatusCondition(current.conditions, samplev1beta1.ConditionStalled) != nil {
		t.Errorf("a converged Foo carries abnormal conditions: %s", current)
	}

	// Pods on kwok's nodes are ready at once; minReadySeconds (a field the
	// controller does not own) makes each new pod take a few seconds to
	// count as available, so that a scale and a rollout last long enough
	// to be seen.
	// (The ReplicaSet counts its pods again under the new minReadySeconds:
	// the Deployment, and so the Foo, is briefly unavailable.)
	s.editDeployment("web", func(d *appsv1.Deployment) { d.Spec.MinReadySeconds = 3 })
	s.eventually(time.Minute, "the Deployment to observe minReadySeconds and be available again", func() (bool, string) {
		d, err := s.getDeployment("web")
		if err != nil {
			return false, err.Error()
		}
		return d.Status.ObservedGeneration == d.Generation && d.Status.AvailableReplicas == 4,
			fmt.Sprintf("generation %d observed %d, %d available", d.Generation, d.Status.ObservedGeneration, d.Status.AvailableReplicas)
	})
	s.waitConverged("web", time.Minute)
	s.waitKstatus("web", status.CurrentStatus, time.Minute)
	foo, err := s.getFoo("web")
	if err != nil {
		t.Fatal(err)
	}
	readyBefore := *meta.FindStatusCondition(foo.Status.Conditions, samplev1beta1.ConditionReady)

	// Scale 4 -> 5: at 5 the Deployment allows one unavailable pod, so it
	// stays available while the fifth starts.
	rec := s.recordKstatus("web")
	scaleStart := time.Now()
	if out, err := s.kubectl("scale", "foo/web", "--replicas=5"); err != nil {
		t.Fatalf("kubectl scale: %v\n%s", err, out)
	}
	s.waitConverged("web", 2*time.Minute)
	s.waitKstatus("web", status.CurrentStatus, 30*time.Second)
	time.Sleep(time.Second) // let the watch deliver the last versions
	seen := rec()
	scaleEnd := time.Now()
	var reconciling bool
	for _, k := range seen {
		t.Logf("during the scale: %s", k)
		r := meta.FindStatusCondition(k.conditions, samplev1beta1.ConditionReady)
		if r == nil || r.Status != metav1.ConditionTrue || !r.LastTransitionTime.Equal(&readyBefore.LastTransitionTime) {
			t.Errorf("Ready moved during a scale that kept the Deployment available: %+v (was %+v)", r, readyBefore)
		}
		if k.result.Status == status.InProgressStatus && k.observedGeneration == k.generation &&
			meta.FindStatusCondition(k.conditions, samplev1beta1.ConditionReconciling) != nil {
			reconciling = true
		}
		if k.result.Status == status.FailedStatus {
			t.Errorf("Failed during a scale: %s", k)
		}
	}
	if !reconciling {
		t.Errorf("kstatus never said InProgress through Reconciling during the scale")
	}
	if last := seen[len(seen)-1]; last.result.Status != status.CurrentStatus {
		t.Errorf("after the scale: %s", last)
	}
	writes := 0
	for _, e := range writesOf(s.controllerRequests(scaleStart, scaleEnd)) {
		if e.resource() == "foos/status" {
			writes++
		}
	}
	t.Logf("status writes during the scale: %d", writes)

	// A new image: Ready goes False (RollingOut) and kubectl wait, started
	// right after the change, returns only once no old pod is left.
	rec = s.recordKstatus("web")
	s.updateFoo("web", func(f *samplev1beta1.Foo) { f.Spec.Deployment.Image = "nginx:1.27.1" })
	if out, err := s.kubectl("wait", "--for=condition=Ready", "foo/web", "--timeout=120s"); err != nil {
		t.Fatalf("kubectl wait: %v\n%s", err, out)
	}
	dep, err := s.getDeployment("web")
	if err != nil {
		t.Fatal(err)
	}
	if dep.Status.ObservedGeneration < dep.Generation || dep.Status.UpdatedReplicas != 5 || dep.Status.Replicas != 5 {
		t.Errorf("kubectl wait returned before the rollout was done: Deployment generation %d observed %d, %d replicas, %d updated",
			dep.Generation, dep.Status.ObservedGeneration, dep.Status.Replicas, dep.Status.UpdatedReplicas)
	}
	s.waitConverged("web", 2*time.Minute)
	s.waitKstatus("web", status.CurrentStatus, 30*time.Second)
	time.Sleep(time.Second)
	seen = rec()
	var rollingOut bool
	for _, k := range seen {
		t.Logf("during the rollout: %s", k)
		r := meta.FindStatusCondition(k.conditions, samplev1beta1.ConditionReady)
		if k.result.Status == status.InProgressStatus && k.observedGeneration == k.generation &&
			meta.FindStatusCondition(k.conditions, samplev1beta1.ConditionReconciling) != nil &&
			r != nil && r.Status == metav1.ConditionFalse && r.Reason == samplev1beta1.ReasonRollingOut {
			rollingOut = true
		}
		if k.result.Status == status.FailedStatus {
			t.Errorf("Failed during a rollout: %s", k)
		}
	}
	if !rollingOut {
		t.Errorf("kstatus never said InProgress with Ready=False/RollingOut during the rollout")
	}
}

// TestKstatusBeforeTheFirstStatus: a Foo the controller has not reported
// on yet (it is not running here; when it runs, a new Foo's first status
// may wait 2 s) is InProgress, not Current: the CRD defaults
// status.observedGeneration to 0, and kstatus compares it with the
// generation. Without the default, kstatus reads a Foo with no status at
// all as Current, before its Deployment exists. In both versions.
func TestKstatusBeforeTheFirstStatus(t *testing.T) {
	t.Parallel()
	s := newScenario(t)
	s.createFoo(newFoo("unseen", "unseen", 1))
	k := s.kstatusOf("unseen")
	t.Logf("kstatus of a Foo no controller has seen: %s", k)
	if k.result.Status != status.InProgressStatus || k.generation != 1 || k.observedGeneration != 0 {
		t.Errorf("want InProgress at generation 1, observed 0; got %s", k)
	}
	// The same in v1alpha1, through the conversion webhook, which must
	// write the 0 out (a GitOps tool reads the version of its manifest).
	u, err := s.dyn.Resource(fooV1alpha1GVR).Namespace(s.ns).Get(s.ctx, "unseen", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if k := computeKstatus(t, u); k.result.Status != status.InProgressStatus {
		t.Errorf("in v1alpha1: want InProgress; got %s", k)
	}

	// Then the controller reports, and kstatus follows it to Current.
	s.startController()
	s.waitKstatus("unseen", status.CurrentStatus, time.Minute)
}

// TestKstatusFailed: what will not resolve by itself is Stalled, which
// kstatus reports as Failed: a Deployment name taken by someone else, and
// a Deployment the API server refuses. Once the cause is gone, the Foo is
// Current, with Stalled removed.
func TestKstatusFailed(t *testing.T) {
	s := newScenario(t)
	foreign := foreignDeployment("taken")
	if _, err := s.kube.AppsV1().Deployments(s.ns).Create(s.ctx, foreign, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The controller may not create Deployments named "refused-*".
	ctrlKube := clientFor(t, s.cl.ctrlKC)
	probe := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "refused-probe"},
		Spec:       *foreign.Spec.DeepCopy(),
	}
	lift := s.denyToController("norefused-", admissionregistrationv1.RuleWithOperations{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
		Rule: admissionregistrationv1.Rule{
			APIGroups: []string{"apps"}, APIVersions: []string{"*"}, Resources: []string{"deployments"},
		},
	}, admissionregistrationv1.Validation{
		Expression: "!object.metadata.name.startsWith('refused-')",
		Message:    "refused by the test: no refused-* Deployments",
	}, func() (bool, string) {
		_, err := ctrlKube.AppsV1().Deployments(s.ns).Create(s.ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return apierrors.IsInvalid(err) || apierrors.IsForbidden(err), fmt.Sprintf("dry-run create: %v", err)
	})

	s.startController()
	s.createFoo(newFoo("conflict", "taken", 1))
	s.createFoo(newFoo("refused", "refused-web", 1))

	for name, reason := range map[string]string{
		"conflict": samplev1beta1.ReasonDeploymentConflict,
		"refused":  samplev1beta1.ReasonDeploymentApplyFailed,
	} {
		k := s.waitKstatus(name, status.FailedStatus, time.Minute)
		stalled := meta.FindStatusCondition(k.conditions, samplev1beta1.ConditionStalled)
		if stalled == nil || stalled.Reason != reason || k.observedGeneration != k.generation {
			t.Errorf("%s: want Stalled/%s at the Foo's generation: %s", name, reason, k)
		}
		if meta.FindStatusCondition(k.conditions, samplev1beta1.ConditionReconciling) != nil {
			t.Errorf("%s: Reconciling beside Stalled: %s", name, k)
		}
		// Events are sent asynchronously: the Warning may come a moment
		// after the status.
		s.eventually(30*time.Second, "one "+reason+" Warning on "+name, func() (bool, string) {
			ev := s.fooEvents(name)
			return ev[reason] == 1, fmt.Sprintf("%v", ev)
		})
	}
	for name, reason := range map[string]string{
		"conflict": samplev1beta1.ReasonDeploymentConflict,
		"refused":  samplev1beta1.ReasonDeploymentApplyFailed,
	} {
		if ev := s.fooEvents(name); ev[reason] != 1 {
			t.Errorf("%s: events %v, want exactly one %s Warning", name, ev, reason)
		}
	}

	// The causes go: both converge, without Stalled.
	lift()
	if err := s.kube.AppsV1().Deployments(s.ns).Delete(s.ctx, "taken", metav1.DeleteOptions{
		PropagationPolicy: ptr.To(metav1.DeletePropagationForeground),
	}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"conflict", "refused"} {
		// The refused apply is retried with backoff: up to a few seconds.
		s.waitConverged(name, 2*time.Minute)
		k := s.waitKstatus(name, status.CurrentStatus, 30*time.Second)
		if meta.FindStatusCondition(k.conditions, samplev1beta1.ConditionStalled) != nil {
			t.Errorf("%s: Stalled left behind: %s", name, k)
		}
	}
}
