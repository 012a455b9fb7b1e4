package main

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	core "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	samplev1beta1 "example.com/foo-controller/pkg/apis/samplecontroller/v1beta1"
	"example.com/foo-controller/pkg/plan"
)

func TestSyncCorrectsDrift(t *testing.T) {
	tests := []struct {
		name      string
		mutate    func(*appsv1.Deployment)
		wantEvent string
	}{
		{"replicas", func(d *appsv1.Deployment) { d.Spec.Replicas = ptr.To[int32](7) }, "Normal Scaled"},
		{"image", func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Image = "evil:1" }, "Normal Updated"},
		{"container removed", func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Name = "renamed" }, "Normal Updated"},
		{"label value", func(d *appsv1.Deployment) { d.Labels[plan.ManagedByLabel] = "someone" }, "Normal Updated"},
		{"label removed", func(d *appsv1.Deployment) { delete(d.Labels, plan.ManagedByLabel) }, "Normal Updated"},
		{"template label", func(d *appsv1.Deployment) { delete(d.Spec.Template.Labels, plan.ManagedByLabel) }, "Normal Updated"},
		{"owner reference removed", func(d *appsv1.Deployment) { d.OwnerReferences = nil }, "Normal Adopted"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			foo := newFoo("a", 2)
			dep := ownedDeployment(foo)
			withConvergedStatus(foo, dep, false)
			tc.mutate(dep)
			f := newFixture(t).withFoo(foo).withDeployment(dep)
			kube, foos, evts, err := f.sync(keyOf(foo))
			if err != nil {
				t.Fatal(err)
			}
			assertActions(t, "kube", kube, []string{"patch deployments a-deploy " + applyPatch})
			// (Whether status is written then depends on the generation the
			// API server gives the put-back Deployment: the status tests
			// cover that.)
			_ = foos
			assertEvents(t, evts, tc.wantEvent)
			d := appliedDeployment(t, kube)
			if len(plan.Drift(foo, plan.NewDeploymentView(d))) != 0 {
				t.Errorf("applied Deployment still drifts: %v", plan.Drift(foo, plan.NewDeploymentView(d)))
			}
		})
	}
}

func TestSyncCorrectionsAreRateLimited(t *testing.T) {
	// Another client keeps scaling our Deployment to 7: each sync sees it
	// changed again (a newer object in the informer cache).
	foo := newFoo("a", 2)
	dep := ownedDeployment(foo)
	withConvergedStatus(foo, dep, false)
	f := newFixture(t).withFoo(foo).withDeployment(dep)
	_, ctx := ktesting.NewTestContext(t)
	c := f.newController(ctx)
	fight := func() {
		t.Helper()
		f.deploymentChanged(dep, func(d *appsv1.Deployment) { d.Spec.Replicas = ptr.To[int32](7) })
	}
	applies := func() int {
		n := 0
		for _, a := range f.kubeclient.Actions() {
			if a.GetVerb() == "patch" && a.GetResource().Resource == "deployments" {
				n++
			}
		}
		return n
	}

	delayedBefore := counterValue(t, "foo_controller_corrections_delayed_total", "")
	for i := range correctionBurst + 3 {
		fight()
		res, err := c.syncHandler(ctx, keyOf(foo))
		if err != nil {
			t.Fatalf("sync %d: %v", i, err)
		}
		if held := i >= correctionBurst; held != (res.requeueAfter > 0) || res.requeueAfter > correctionEvery {
			t.Errorf("sync %d: requeue after %v; a held-back correction must come back within %v, an applied one not at all",
				i, res.requeueAfter, correctionEvery)
		}
	}
	if got := applies(); got != correctionBurst {
		t.Errorf("a fight of %d changes at one instant got %d corrections, want the burst of %d",
			correctionBurst+3, got, correctionBurst)
	}
	if c.workqueue.Len() != 0 {
		t.Errorf("the sync must not queue the key itself; handleErr does (queue length %d)", c.workqueue.Len())
	}
	if got := counterValue(t, "foo_controller_corrections_delayed_total", "") - delayedBefore; got != 3 {
		t.Errorf("corrections_delayed_total went up by %v, want 3 (one per held-back correction)", got)
	}
	// One Event per correction until the fight is noticed, then one
	// Warning, then silence.
	wantEvents := slices.Repeat([]string{"Normal Scaled"}, correctionBurst)
	assertEvents(t, drainEvents(f.recorder), append(wantEvents, "Warning Contested")...)
	if n := len(f.client.Actions()); n != 0 {
		t.Errorf("the Foo's status must not follow a Deployment about to be put back: %s", describeAll(f.client.Actions()))
	}

	// One period later there is a token for one more.
	f.clock.Step(correctionEvery)
	fight()
	fight()
	for range 2 {
		if _, err := c.syncHandler(ctx, keyOf(foo)); err != nil {
			t.Fatal(err)
		}
	}
	if got := applies(); got != correctionBurst+1 {
		t.Errorf("after one period: %d corrections, want %d", got, correctionBurst+1)
	}
	assertEvents(t, drainEvents(f.recorder))

	// The user scales the Foo: what it declares changed, so the change is
	// applied at once, however long the fight has gone on.
	stored, err := f.client.SamplecontrollerV1beta1().Foos(foo.Namespace).Get(ctx, foo.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	scaled := stored.DeepCopy()
	scaled.Spec.Deployment.Replicas = ptr.To[int32](3)
	scaled.Generation = 2
	if _, err := f.client.SamplecontrollerV1beta1().Foos(foo.Namespace).Update(ctx, scaled, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := f.fooIndexer.Update(scaled); err != nil {
		t.Fatal(err)
	}
	fight()
	if _, err := c.syncHandler(ctx, keyOf(foo)); err != nil {
		t.Fatal(err)
	}
	if got := applies(); got != correctionBurst+2 {
		t.Errorf("a new generation must be applied at once: %d applies, want %d", got, correctionBurst+2)
	}
}

// TestAFightEnds: the corrections limiter forgets a fight once it is over
// (its bucket refilled) and never hands a fight to a recreated Foo of the
// same name. Each used to carry over: the limiter was keyed by name and
// stayed contested for the rest of the generation, so every later Scaled or
// Updated Event was suppressed, and a recreated Foo's first correction was
// held back.
func TestAFightEnds(t *testing.T) {
	for _, tc := range []struct {
		name  string
		after func(f *fixture, foo *samplev1beta1.Foo) *samplev1beta1.Foo
	}{
		{"quiet for burst periods", func(f *fixture, foo *samplev1beta1.Foo) *samplev1beta1.Foo {
			f.clock.Step(time.Duration(correctionBurst+1) * correctionEvery)
			return foo
		}},
		{"the Foo recreated under its name", func(f *fixture, foo *samplev1beta1.Foo) *samplev1beta1.Foo {
			again := foo.DeepCopy()
			again.UID = "recreated-uid"
			if err := f.fooIndexer.Update(again); err != nil {
				t.Fatal(err)
			}
			return again
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			foo := newFoo("a", 2)
			dep := ownedDeployment(foo)
			withConvergedStatus(foo, dep, false)
			f := newFixture(t).withFoo(foo).withDeployment(dep)
			_, ctx := ktesting.NewTestContext(t)
			c := f.newController(ctx)
			scaledBySomeoneElse := func(owner *samplev1beta1.Foo) {
				t.Helper()
				f.deploymentChanged(ownedDeployment(owner), func(d *appsv1.Deployment) { d.Spec.Replicas = ptr.To[int32](7) })
			}
			for range correctionBurst + 1 {
				scaledBySomeoneElse(foo)
				if _, err := c.syncHandler(ctx, keyOf(foo)); err != nil {
					t.Fatal(err)
				}
			}
			assertEvents(t, drainEvents(f.recorder), append(slices.Repeat([]string{"Normal Scaled"}, correctionBurst), "Warning Contested")...)

			foo = tc.after(f, foo)
			f.kubeclient.ClearActions()
			scaledBySomeoneElse(foo)
			res, err := c.syncHandler(ctx, keyOf(foo))
			if err != nil {
				t.Fatal(err)
			}
			// A held correction asks to come back within the limiter's
			// period; the fake's apply answer also drifts ("owner"), whose
			// retry (overriddenRetry) is not a held correction.
			if res.requeueAfter > 0 && res.requeueAfter < overriddenRetry {
				t.Errorf("the correction was held back (requeue after %v): the old fight carried over", res.requeueAfter)
			}
			assertActions(t, "kube", f.kubeclient.Actions(), []string{"patch deployments a-deploy " + applyPatch})
			assertEvents(t, drainEvents(f.recorder), "Normal Scaled")
		})
	}
}

func TestSyncNoEventWhenTheAPIServerOverridesUs(t *testing.T) {
	// A mutating webhook pins the image: our apply "succeeds" but the
	// answer still carries the other image. That is not a change worth an
	// Event (it would be one per sync).
	foo := newFoo("a", 2)
	dep := ownedDeployment(foo)
	withConvergedStatus(foo, dep, false)
	dep.Spec.Template.Spec.Containers[0].Image = "nginx@sha256:0123"
	f := newFixture(t).withFoo(foo).withDeployment(dep)
	_, ctx := ktesting.NewTestContext(t)
	c := f.newController(ctx)
	f.apiServerKeeps(dep)
	if _, err := c.syncHandler(ctx, keyOf(foo)); err != nil {
		t.Fatal(err)
	}
	assertActions(t, "kube", f.kubeclient.Actions(), []string{"patch deployments a-deploy " + applyPatch})
	assertEvents(t, drainEvents(f.recorder))
}

// TestSyncReplicasOverriddenIsStalled: an admission policy caps replicas
// below what the Foo declares, so the API server keeps our correction at
// its cap. The replica count is never reached; without Stalled the Foo
// would report Reconciling for good (kstatus: InProgress for ever). It is
// reported once: one status write, one Warning, then silence.
func TestSyncReplicasOverriddenIsStalled(t *testing.T) {
	foo := newFoo("a", 5)
	dep := ownedDeployment(newFoo("a", 3)) // capped at 3, all available
	dep.OwnerReferences[0].UID = foo.UID
	dep.Labels, dep.Spec.Template.Labels = plan.Labels(foo), plan.Labels(foo)
	dep.Spec.Selector.MatchLabels = plan.SelectorLabels(foo)
	withConvergedStatus(foo, dep, false)
	f := newFixture(t).withFoo(foo).withDeployment(dep)
	_, ctx := ktesting.NewTestContext(t)
	c := f.newController(ctx)
	f.apiServerKeeps(dep)
	if _, err := c.syncHandler(ctx, keyOf(foo)); err != nil {
		t.Fatal(err)
	}
	assertActions(t, "kube", f.kubeclient.Actions(), []string{"patch deployments a-deploy " + applyPatch})
	assertActions(t, "foo", f.client.Actions(), []string{"patch foos/status a " + applyPatch})
	st := appliedStatus(t, f.client.Actions())
	stalled := meta.FindStatusCondition(st.Conditions, samplev1beta1.ConditionStalled)
	if stalled == nil || stalled.Reason != samplev1beta1.ReasonReplicasOverridden || meta.FindStatusCondition(st.Conditions, samplev1beta1.ConditionReconciling) != nil {
		t.Fatalf("want Stalled/ReplicasOverridden and no Reconciling: %+v", st.Conditions)
	}
	if r := readyOf(t, st); r.Status != metav1.ConditionFalse || r.Reason != samplev1beta1.ReasonReplicasOverridden {
		t.Errorf("Ready: %s/%s", r.Status, r.Reason)
	}
	assertEvents(t, drainEvents(f.recorder), "Warning ReplicasOverridden")

	// Our write's event, and later syncs: no correction, no status write,
	// no Event.
	f.kubeclient.ClearActions()
	f.client.ClearActions()
	for range 3 {
		if _, err := c.syncHandler(ctx, keyOf(foo)); err != nil {
			t.Fatal(err)
		}
	}
	assertActions(t, "kube", f.kubeclient.Actions(), nil)
	assertActions(t, "foo", f.client.Actions(), nil)
	assertEvents(t, drainEvents(f.recorder))
}

// TestRefusedCorrectionsBackOff: something keeps changing our Deployment
// and the API server refuses every correction (an admission webhook, say).
// Each refusal is an error; a refused correction takes no token from the
// corrections limiter, so nothing is held back in between and nothing
// resets the backoff: the key's failures keep counting, so it retries ever
// more slowly instead of about once a second forever.
func TestRefusedCorrectionsBackOff(t *testing.T) {
	foo := newFoo("a", 2)
	dep := ownedDeployment(foo)
	withConvergedStatus(foo, dep, false)
	f := newFixture(t).withFoo(foo).withDeployment(dep)
	_, ctx := ktesting.NewTestContext(t)
	c := f.newController(ctx)
	refusal := apierrors.NewInvalid(schema.GroupKind{Group: "apps", Kind: "Deployment"}, "a-deploy", nil)
	f.kubeclient.PrependReactor("patch", "deployments", func(core.Action) (bool, runtime.Object, error) {
		return true, nil, refusal
	})
	last := 0
	for i := range 4 * correctionBurst {
		f.deploymentChanged(dep, func(d *appsv1.Deployment) { d.Spec.Replicas = ptr.To[int32](7) })
		c.workqueue.Add(keyOf(foo))
		if !c.processNextWorkItem(ctx, ctx) {
			t.Fatal("worker stopped")
		}
		n := c.workqueue.NumRequeues(keyOf(foo))
		if n < last {
			t.Fatalf("sync %d: the key's failures went from %d to %d: a held-back correction reset the backoff", i, last, n)
		}
		last = n
		f.clock.Step(correctionEvery / 5)
	}
	if last <= correctionBurst {
		t.Errorf("after %d refused or held-back corrections the key has %d failures, want more than %d",
			4*correctionBurst, last, correctionBurst)
	}
}

// TestSyncPutsBackARekeyedPort: another writer changed the number of our
// "http" port, so the entry holding the name is keyed differently and owned
// by them. The API server refuses our apply (duplicate port name); the sync
// removes the stray with a JSON patch and applies again, in one sync, with
// one Event.
func TestSyncPutsBackARekeyedPort(t *testing.T) {
	foo := newFoo("a", 2)
	foo.Spec.Deployment.ContainerPort = ptr.To[int32](9090)
	dep := ownedDeployment(foo)
	withConvergedStatus(foo, dep, false)
	dep.Spec.Template.Spec.Containers[0].Ports[0].ContainerPort = 7070
	f := newFixture(t).withFoo(foo).withDeployment(dep)
	_, ctx := ktesting.NewTestContext(t)
	c := f.newController(ctx)
	refused := false
	f.kubeclient.PrependReactor("patch", "deployments", func(a core.Action) (bool, runtime.Object, error) {
		if a.(core.PatchAction).GetPatchType() != types.ApplyPatchType || refused {
			return false, nil, nil
		}
		refused = true
		return true, nil, apierrors.NewInvalid(schema.GroupKind{Group: "apps", Kind: "Deployment"}, "a-deploy", field.ErrorList{
			field.Duplicate(field.NewPath("spec", "template", "spec", "containers").Index(0).Child("ports").Index(1).Child("name"), "http"),
		})
	})
	if _, err := c.syncHandler(ctx, keyOf(foo)); err != nil {
		t.Fatal(err)
	}
	assertActions(t, "kube", f.kubeclient.Actions(), []string{
		"patch deployments a-deploy " + applyPatch,
		"patch deployments a-deploy " + jsonPatch,
		"patch deployments a-deploy " + applyPatch,
	})
	// One change of the pod template, not two: the patch puts our port
	// where theirs was, and the apply after it changes nothing more.
	patch := string(f.kubeclient.Actions()[1].(core.PatchAction).GetPatch())
	if !strings.Contains(patch, `"op":"add"`) || !strings.Contains(patch, `"containerPort":9090`) {
		t.Errorf("JSON patch %s: want our port added in place of theirs", patch)
	}
	got, err := f.kubeclient.AppsV1().Deployments(testNS).Get(ctx, "a-deploy", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p := got.Spec.Template.Spec.Containers[0].Ports; len(p) != 1 || p[0].ContainerPort != 9090 || p[0].Name != plan.PortName {
		t.Errorf("ports after the sync: %+v", p)
	}
	assertEvents(t, drainEvents(f.recorder), "Normal Updated Updated Deployment a-deploy: [containerPort]")
}

// TestSyncAppliesTheRestWhenTheAPIServerRewritesOurPort: a mutating
// admission policy rewrites our port (9090 → 8090) on every write, so
// every apply that declares it is refused (two "http" ports), and the
// patch that puts it back changes nothing. Someone scaled the Deployment:
// the sync applies without the port, which puts the replicas back and
// never sends a pod template without a port.
func TestSyncAppliesTheRestWhenTheAPIServerRewritesOurPort(t *testing.T) {
	foo := newFoo("a", 2)
	foo.Spec.Deployment.ContainerPort = ptr.To[int32](9090)
	dep := ownedDeployment(foo)
	withConvergedStatus(foo, dep, false)
	dep.Spec.Template.Spec.Containers[0].Ports[0].ContainerPort = 8090
	dep.Spec.Replicas = ptr.To[int32](7)
	f := newFixture(t).withFoo(foo).withDeployment(dep)
	_, ctx := ktesting.NewTestContext(t)
	c := f.newController(ctx)
	f.kubeclient.PrependReactor("patch", "deployments", func(a core.Action) (bool, runtime.Object, error) {
		p := a.(core.PatchAction)
		switch {
		case p.GetPatchType() == types.JSONPatchType: // rewritten back: nothing changes
			return true, dep.DeepCopy(), nil
		case strings.Contains(string(p.GetPatch()), "ports"):
			return true, nil, apierrors.NewInvalid(schema.GroupKind{Group: "apps", Kind: "Deployment"}, "a-deploy", field.ErrorList{
				field.Duplicate(field.NewPath("spec", "template", "spec", "containers").Index(0).Child("ports").Index(1).Child("name"), "http"),
			})
		}
		return false, nil, nil // the apply without ports goes to the tracker
	})
	res, err := c.syncHandler(ctx, keyOf(foo))
	if err != nil {
		t.Fatal(err)
	}
	assertActions(t, "kube", f.kubeclient.Actions(), []string{
		"patch deployments a-deploy " + applyPatch,
		"patch deployments a-deploy " + jsonPatch,
		"patch deployments a-deploy " + applyPatch,
	})
	got, err := f.kubeclient.AppsV1().Deployments(testNS).Get(ctx, "a-deploy", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if *got.Spec.Replicas != 2 {
		t.Errorf("replicas %d, want 2 put back", *got.Spec.Replicas)
	}
	if p := got.Spec.Template.Spec.Containers[0].Ports; len(p) != 1 || p[0].ContainerPort != 8090 {
		t.Errorf("ports %+v, want the policy's 8090 left alone", p)
	}
	assertEvents(t, drainEvents(f.recorder), "Normal Scaled Scaled Deployment a-deploy from 7 to 2 replicas")
	if res.requeueAfter != overriddenRetry {
		t.Errorf("requeue after %v, want the port's retry in %v", res.requeueAfter, overriddenRetry)
	}

	// Its event: left alone.
	f.kubeclient.ClearActions()
	f.deploymentChanged(got, func(*appsv1.Deployment) {})
	if _, err := c.syncHandler(ctx, keyOf(foo)); err != nil {
		t.Fatal(err)
	}
	assertActions(t, "kube", f.kubeclient.Actions(), nil)

	// The Foo now asks for the policy's port: nothing is overridden any
	// more, and there is no retry to come back for.
	foo = foo.DeepCopy()
	foo.Spec.Deployment.ContainerPort = ptr.To[int32](8090)
	foo.Generation++
	if err := f.fooIndexer.Update(foo); err != nil {
		t.Fatal(err)
	}
	res, err = c.syncHandler(ctx, keyOf(foo))
	if err != nil {
		t.Fatal(err)
	}
	if res.requeueAfter >= time.Minute {
		t.Errorf("requeue after %v: a retry of a correction nobody overrides any more", res.requeueAfter)
	}
}

// TestSyncRemovesAnHTTPPortTheApplyLeaves: with spec.containerPort unset,
// an "http" port someone else wrote is not removed by our apply (we do not
// own it); the sync removes it with a JSON patch.
func TestSyncRemovesAnHTTPPortTheApplyLeaves(t *testing.T) {
	foo := newFoo("a", 2)
	dep := ownedDeployment(foo)
	withConvergedStatus(foo, dep, false)
	dep.Spec.Template.Spec.Containers[0].Ports = []corev1.ContainerPort{
		{Name: "metrics", ContainerPort: 9100, Protocol: corev1.ProtocolTCP},
		{Name: plan.PortName, ContainerPort: 8080, Protocol: corev1.ProtocolTCP},
	}
	f := newFixture(t).withFoo(foo).withDeployment(dep)
	_, ctx := ktesting.NewTestContext(t)
	c := f.newController(ctx)
	if _, err := c.syncHandler(ctx, keyOf(foo)); err != nil {
		t.Fatal(err)
	}
	assertActions(t, "kube", f.kubeclient.Actions(), []string{
		"patch deployments a-deploy " + applyPatch,
		"patch deployments a-deploy " + jsonPatch,
	})
	got, err := f.kubeclient.AppsV1().Deployments(testNS).Get(ctx, "a-deploy", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p := got.Spec.Template.Spec.Containers[0].Ports; len(p) != 1 || p[0].Name != "metrics" {
		t.Errorf("ports after the sync: %+v, want only metrics", p)
	}
	assertEvents(t, drainEvents(f.recorder), "Normal Updated Updated Deployment a-deploy: [containerPort]")
}

// TestSyncStrayPortPatchThatFailsItsTestIsTransient: the JSON patch's
// "test" fails when our copy is behind, and the API server answers 422.
// That is not the API server refusing the Deployment: no
// DeploymentApplyFailed condition, just a retry.
func TestSyncStrayPortPatchThatFailsItsTestIsTransient(t *testing.T) {
	foo := newFoo("a", 2)
	dep := ownedDeployment(foo)
	withConvergedStatus(foo, dep, false)
	dep.Spec.Template.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: plan.PortName, ContainerPort: 8080, Protocol: corev1.ProtocolTCP}}
	f := newFixture(t).withFoo(foo).withDeployment(dep)
	_, ctx := ktesting.NewTestContext(t)
	c := f.newController(ctx)
	f.kubeclient.PrependReactor("patch", "deployments", func(a core.Action) (bool, runtime.Object, error) {
		if a.(core.PatchAction).GetPatchType() != types.JSONPatchType {
			return false, nil, nil
		}
		return true, nil, apierrors.NewGenericServerResponse(http.StatusUnprocessableEntity, "", schema.GroupResource{}, "",
			`testing value /spec/template/spec/containers/0/ports/0/containerPort failed: test failed`, 0, false)
	})
	_, err := c.syncHandler(ctx, keyOf(foo))
	if err == nil || plan.IsRefusal(err) {
		t.Fatalf("got %v, want a transient error", err)
	}
	assertActions(t, "foos", f.client.Actions(), nil)
}

// TestSyncStrayPortPatchRefusedIsReported: an admission policy that
// refuses our JSON patch is a refusal like a refused apply: the Foo says
// so (DeploymentApplyFailed), and it is retried with backoff.
func TestSyncStrayPortPatchRefusedIsReported(t *testing.T) {
	foo := newFoo("a", 2)
	dep := ownedDeployment(foo)
	withConvergedStatus(foo, dep, false)
	dep.Spec.Template.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: plan.PortName, ContainerPort: 8080, Protocol: corev1.ProtocolTCP}}
	f := newFixture(t).withFoo(foo).withDeployment(dep)
	_, ctx := ktesting.NewTestContext(t)
	c := f.newController(ctx)
	f.kubeclient.PrependReactor("patch", "deployments", func(a core.Action) (bool, runtime.Object, error) {
		if a.(core.PatchAction).GetPatchType() != types.JSONPatchType {
			return false, nil, nil
		}
		return true, nil, apierrors.NewInvalid(schema.GroupKind{Group: "apps", Kind: "Deployment"}, "a-deploy", field.ErrorList{
			field.Forbidden(field.NewPath("spec"), "ValidatingAdmissionPolicy 'no-json-patches' denied request"),
		})
	})
	_, err := c.syncHandler(ctx, keyOf(foo))
	if err == nil || !plan.IsRefusal(err) {
		t.Fatalf("got %v, want the refusal", err)
	}
	if ready := readyOf(t, appliedStatus(t, f.client.Actions())); ready.Reason != samplev1beta1.ReasonDeploymentApplyFailed ||
		!strings.Contains(ready.Message, "no-json-patches") {
		t.Errorf("Ready: %+v, want DeploymentApplyFailed quoting the policy", ready)
	}
}

// TestSyncDoesNotFightWhatTheAPIServerKeeps: a mutating admission policy
// rewrites our image on every write. The controller corrects once; the
// Deployment the API server returned (and whose event brings the Foo back)
// is not corrected again, for that spec, until someone else changes it or
// overriddenRetry has passed.
func TestSyncDoesNotFightWhatTheAPIServerKeeps(t *testing.T) {
	foo := newFoo("a", 2)
	dep := ownedDeployment(foo)
	withConvergedStatus(foo, dep, false)
	dep.Spec.Template.Spec.Containers[0].Image = "registry.internal/nginx:1.27"
	f := newFixture(t).withFoo(foo).withDeployment(dep)
	_, ctx := ktesting.NewTestContext(t)
	c := f.newController(ctx)
	kept := dep.DeepCopy()
	kept.ResourceVersion = "21"
	f.apiServerKeeps(kept)
	res, err := c.syncHandler(ctx, keyOf(foo))
	if err != nil {
		t.Fatal(err)
	}
	assertActions(t, "kube", f.kubeclient.Actions(), []string{"patch deployments a-deploy " + applyPatch})
	// The retry is on a timer of its own: with -resync-period=0 nothing
	// else would bring it.
	if res.requeueAfter != overriddenRetry {
		t.Errorf("requeue after %v, want the retry in %v", res.requeueAfter, overriddenRetry)
	}

	// Our write's event: the same Deployment, as the API server keeps it.
	f.kubeclient.ClearActions()
	f.deploymentChanged(kept, func(d *appsv1.Deployment) { d.ResourceVersion = kept.ResourceVersion })
	f.clock.Step(4 * time.Minute)
	res, err = c.syncHandler(ctx, keyOf(foo))
	if err != nil {
		t.Fatal(err)
	}
	assertActions(t, "kube", f.kubeclient.Actions(), nil)
	if res.requeueAfter != overriddenRetry-4*time.Minute {
		t.Errorf("requeue after %v, want the retry in %v", res.requeueAfter, overriddenRetry-4*time.Minute)
	}
	f.clock.Step(-4 * time.Minute)

	// Long after, the correction is tried once more (the policy may be
	// gone), then left alone again.
	f.clock.Step(overriddenRetry)
	if _, err := c.syncHandler(ctx, keyOf(foo)); err != nil {
		t.Fatal(err)
	}
	assertActions(t, "kube", f.kubeclient.Actions(), []string{"patch deployments a-deploy " + applyPatch})
	f.kubeclient.ClearActions()
	if _, err := c.syncHandler(ctx, keyOf(foo)); err != nil {
		t.Fatal(err)
	}
	assertActions(t, "kube", f.kubeclient.Actions(), nil)

	// Someone else changes it: corrected again.
	f.kubeclient.ClearActions()
	f.deploymentChanged(kept, func(d *appsv1.Deployment) { d.Spec.Replicas = ptr.To[int32](7) })
	if _, err := c.syncHandler(ctx, keyOf(foo)); err != nil {
		t.Fatal(err)
	}
	assertActions(t, "kube", f.kubeclient.Actions(), []string{"patch deployments a-deploy " + applyPatch})
	assertEvents(t, drainEvents(f.recorder), "Normal Scaled")
}
