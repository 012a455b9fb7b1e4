//go:build integration

package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"

	samplev1beta1 "example.com/foo-controller/pkg/apis/samplecontroller/v1beta1"
	"example.com/foo-controller/pkg/plan"
)

// fooGVR is the version the controller works in, and kubectl's default;
// fooV1alpha1GVR the first version, still served.
var (
	fooGVR         = schema.GroupVersionResource{Group: samplev1beta1.GroupName, Version: "v1beta1", Resource: "foos"}
	fooV1alpha1GVR = schema.GroupVersionResource{Group: samplev1beta1.GroupName, Version: "v1alpha1", Resource: "foos"}
)

func TestCreateConverges(t *testing.T) {
	t.Parallel()
	s := newScenario(t)
	s.startController()
	start := time.Now()
	foo := s.createFoo(newFoo("web", "web-deploy", 2))

	s.waitConverged("web", time.Minute)
	t.Logf("converged in %v", time.Since(start).Round(time.Millisecond))

	// The audit log sees the controller's requests (the counting that
	// other tests rely on to show silence works), and converging one Foo
	// costs the expected writes: create the Deployment, report status.
	reqs := s.controllerRequests(start.Add(-time.Second), time.Now())
	writes := writesOf(reqs)
	t.Logf("requests to converge one Foo: %d (%d writes)%s", len(reqs), len(writes), summarize(reqs))
	got := summarize(writes)
	for _, want := range []string{"patch deployments web-deploy", "patch foos/status web", "create events"} {
		if !strings.Contains(got, want) {
			t.Errorf("expected a %q request among the controller's writes:%s", want, got)
		}
	}

	dep, err := s.getDeployment("web-deploy")
	if err != nil {
		t.Fatal(err)
	}
	ref := metav1.GetControllerOf(dep)
	if ref == nil || ref.UID != foo.UID || ref.Kind != "Foo" || ref.APIVersion != "samplecontroller.example.com/v1beta1" ||
		!ptr.Deref(ref.BlockOwnerDeletion, false) {
		t.Errorf("owner reference: %+v", ref)
	}
	// Defaults from the CRD schema reached the Deployment.
	if img := dep.Spec.Template.Spec.Containers[0].Image; img != "nginx:1.27" {
		t.Errorf("defaulted image: got %q", img)
	}
	s.eventually(time.Minute, "2 Running pods", func() (bool, string) {
		n := s.runningPods(foo)
		return n == 2, fmt.Sprintf("%d Running", n)
	})

	// What a user scripting against the Foo relies on.
	if out, err := s.kubectl("wait", "--for=condition=Ready", "foo/web", "--timeout=30s"); err != nil {
		t.Errorf("kubectl wait --for=condition=Ready: %v: %s", err, out)
	}
	out, err := s.kubectl("get", "foos")
	if err != nil || !strings.Contains(out, "DEPLOYMENT") || !regexpMatch(`web\s+web-deploy\s+2\s+2\s+True\s+DeploymentAvailable\s`, out) {
		t.Errorf("printer columns: %v\n%s", err, out)
	}
	if ev := s.fooEvents("web"); ev["Created"] != 1 {
		t.Errorf("events: %v, want one Created", ev)
	}
	// The Event names the Deployment it is about (the cache holds a
	// plan.DeploymentView, which has no kind: the reference is built).
	list, err := s.kube.EventsV1().Events(s.ns).List(s.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range list.Items {
		if e.Regarding.Name == "web" && e.Reason == "Created" {
			if r := e.Related; r == nil || r.Kind != "Deployment" || r.APIVersion != "apps/v1" || r.Name != "web-deploy" ||
				r.Namespace != s.ns || r.UID != dep.UID {
				t.Errorf("the Created Event's related object: %+v, want the Deployment web-deploy (UID %s)", r, dep.UID)
			}
		}
	}
}

func TestScaleSubresource(t *testing.T) {
	t.Parallel()
	s := newScenario(t)
	s.startController()
	foo := s.createFoo(newFoo("web", "web", 1))
	s.waitConverged("web", time.Minute)

	if out, err := s.kubectl("scale", "foo/web", "--replicas=3"); err != nil {
		t.Fatalf("kubectl scale: %v: %s", err, out)
	}
	s.waitConverged("web", time.Minute)
	dep, err := s.getDeployment("web")
	if err != nil || *dep.Spec.Replicas != 3 {
		t.Fatalf("Deployment replicas after scale: %v %v", err, dep)
	}
	s.eventually(time.Minute, "3 Running pods", func() (bool, string) {
		n := s.runningPods(foo)
		return n == 3, fmt.Sprintf("%d Running", n)
	})

	// The scale subresource reports what an autoscaler needs.
	scale, err := s.dyn.Resource(fooGVR).Namespace(s.ns).Get(s.ctx, "web", metav1.GetOptions{}, "scale")
	if err != nil {
		t.Fatal(err)
	}
	specReplicas, _, _ := unstructured.NestedInt64(scale.Object, "spec", "replicas")
	statusReplicas, _, _ := unstructured.NestedInt64(scale.Object, "status", "replicas")
	selector, _, _ := unstructured.NestedString(scale.Object, "status", "selector")
	if specReplicas != 3 || statusReplicas != 3 || selector != plan.FooUIDLabel+"="+string(foo.UID) {
		t.Errorf("scale subresource: spec %d status %d selector %q", specReplicas, statusReplicas, selector)
	}
	if ev := s.fooEvents("web"); ev["Scaled"] != 1 {
		t.Errorf("events: %v, want one Scaled", ev)
	}
}

func TestDriftIsCorrected(t *testing.T) {
	t.Parallel()
	s := newScenario(t)
	s.startController()
	s.createFoo(newFoo("web", "web", 2))
	s.waitConverged("web", time.Minute)

	edits := []struct {
		name string
		edit func(*appsv1.Deployment)
	}{
		{"replicas", func(d *appsv1.Deployment) { d.Spec.Replicas = ptr.To[int32](5) }},
		{"image", func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Image = "httpd:2.4" }},
		{"labels", func(d *appsv1.Deployment) { d.Labels[plan.ManagedByLabel] = "someone-else" }},
		{"owner reference", func(d *appsv1.Deployment) { d.OwnerReferences = nil }},
	}
	for _, e := range edits {
		s.editDeployment("web", e.edit)
		start := time.Now()
		s.waitConverged("web", time.Minute)
		t.Logf("%s drift put back in %v", e.name, time.Since(start).Round(time.Millisecond))
	}
}

func TestRenameDeployment(t *testing.T) {
	t.Parallel()
	s := newScenario(t)
	s.startController()
	s.createFoo(newFoo("web", "old-name", 1))
	s.waitConverged("web", time.Minute)

	s.updateFoo("web", func(f *samplev1beta1.Foo) { f.Spec.Deployment.Name = "new-name" })
	s.waitConverged("web", time.Minute)
	s.eventually(time.Minute, "the old Deployment to be deleted", func() (bool, string) {
		_, err := s.getDeployment("old-name")
		return apierrors.IsNotFound(err), fmt.Sprintf("get old-name: %v", err)
	})
	// Events are sent after the delete, asynchronously.
	s.eventually(30*time.Second, "Created×2 and Pruned×1 Events", func() (bool, string) {
		ev := s.fooEvents("web")
		return ev["Pruned"] == 1 && ev["Created"] == 2, fmt.Sprintf("events %v", ev)
	})
}

// TestLeftoverRestoredLaterIsPruned: a Deployment controlled by the Foo
// under a name it no longer declares, put back after the rename was done
// (restored from a backup, owner reference and all), is deleted like the
// one the rename left, although the Foo's spec has not changed since.
func TestLeftoverRestoredLaterIsPruned(t *testing.T) {
	t.Parallel()
	s := newScenario(t)
	s.startController()
	s.createFoo(newFoo("web", "new-name", 1))
	s.waitConverged("web", time.Minute)
	foo, err := s.getFoo("web")
	if err != nil {
		t.Fatal(err)
	}

	restored := foo.DeepCopy()
	restored.Spec.Deployment.Name = "old-name"
	if _, err := s.kube.AppsV1().Deployments(s.ns).Apply(s.ctx, plan.DesiredDeployment(restored),
		metav1.ApplyOptions{FieldManager: "restore"}); err != nil {
		t.Fatal(err)
	}
	s.eventually(30*time.Second, "the restored leftover to be deleted", func() (bool, string) {
		_, err := s.getDeployment("old-name")
		return apierrors.IsNotFound(err), fmt.Sprintf("get old-name: %v", err)
	})
	// Events are sent after the delete, asynchronously.
	s.eventually(30*time.Second, "one Pruned Event", func() (bool, string) {
		ev := s.fooEvents("web")
		return ev["Pruned"] == 1, fmt.Sprintf("events %v", ev)
	})
	s.waitConverged("web", time.Minute)
}

func TestConflictWithForeignDeployment(t *testing.T) {
	t.Parallel()
	s := newScenario(t)
	foreign := foreignDeployment("taken")
	foreign, err := s.kube.AppsV1().Deployments(s.ns).Create(s.ctx, foreign, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.startController()
	s.createFoo(newFoo("web", "taken", 2))

	s.eventually(time.Minute, "Ready=False/DeploymentConflict", func() (bool, string) {
		foo, err := s.getFoo("web")
		if err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(foo.Status.Conditions, samplev1beta1.ConditionReady)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == samplev1beta1.ReasonDeploymentConflict &&
			foo.Status.ObservedGeneration == foo.Generation, fmt.Sprintf("%+v", foo.Status)
	})

	// A permanent condition must not spin: count every request the
	// controller sends for this namespace over a minute.
	const window = 60 * time.Second
	from := time.Now()
	time.Sleep(window)
	reqs := s.controllerRequests(from, time.Now())
	t.Logf("requests from the controller over %v of conflict: %d%s", window, len(reqs), summarize(reqs))
	if len(reqs) > 3 {
		t.Errorf("controller sent %d requests in %v for a blocked Foo, want at most 3:%s", len(reqs), window, summarize(reqs))
	}

	after, err := s.getDeployment("taken")
	if err != nil {
		t.Fatal(err)
	}
	if after.ResourceVersion != foreign.ResourceVersion && (len(after.OwnerReferences) > 0 || after.Labels[plan.FooUIDLabel] != "" ||
		*after.Spec.Replicas != 1 || after.Spec.Template.Spec.Containers[0].Image != "busybox:1.36") {
		t.Errorf("the foreign Deployment was modified: %+v", after)
	}
	if ev := s.fooEvents("web"); ev[samplev1beta1.ReasonDeploymentConflict] != 1 {
		t.Errorf("events: %v, want exactly one DeploymentConflict", ev)
	}

	// The owner of the name gives it up: the Foo converges by itself,
	// prompted by the Deployment's deletion event, not by polling.
	if err := s.kube.AppsV1().Deployments(s.ns).Delete(s.ctx, "taken", metav1.DeleteOptions{
		PropagationPolicy: ptr.To(metav1.DeletePropagationForeground),
	}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	s.waitConverged("web", 2*time.Minute)
	t.Logf("converged %v after the foreign Deployment was deleted", time.Since(start).Round(time.Millisecond))
}

func TestDeletionPolicies(t *testing.T) {
	t.Parallel()
	s := newScenario(t)
	s.startController()

	s.createFoo(newFoo("deleted", "deleted", 1))
	orphan := newFoo("orphan", "kept", 1)
	orphan.Spec.DeletionPolicy = samplev1beta1.DeletionPolicyOrphan
	s.createFoo(orphan)
	changedMind := newFoo("changed-mind", "changed-mind", 1)
	changedMind.Spec.DeletionPolicy = samplev1beta1.DeletionPolicyOrphan
	s.createFoo(changedMind)
	s.waitConverged("deleted", time.Minute)
	s.waitConverged("orphan", time.Minute)
	s.waitConverged("changed-mind", time.Minute)

	// Orphan, then back to Delete: the finalizer goes again.
	s.eventually(time.Minute, "the orphan finalizer on changed-mind", func() (bool, string) {
		f, err := s.getFoo("changed-mind")
		return err == nil && len(f.Finalizers) == 1, fmt.Sprintf("%v %v", err, f)
	})
	s.updateFoo("changed-mind", func(f *samplev1beta1.Foo) { f.Spec.DeletionPolicy = samplev1beta1.DeletionPolicyDelete })
	s.eventually(time.Minute, "the finalizer to be removed from changed-mind", func() (bool, string) {
		f, err := s.getFoo("changed-mind")
		return err == nil && len(f.Finalizers) == 0, fmt.Sprintf("%v %v", err, f)
	})

	foo, err := s.getFoo("orphan")
	if err != nil {
		t.Fatal(err)
	}
	if len(foo.Finalizers) != 1 || foo.Finalizers[0] != samplev1beta1.OrphanFinalizer {
		t.Errorf("an Orphan Foo must hold the finalizer: %v", foo.Finalizers)
	}
	deletedFoo, err := s.getFoo("deleted")
	if err != nil {
		t.Fatal(err)
	}
	if len(deletedFoo.Finalizers) != 0 {
		t.Errorf("a Delete Foo needs no finalizer: %v", deletedFoo.Finalizers)
	}

	for _, name := range []string{"deleted", "orphan", "changed-mind"} {
		if err := s.foos.SamplecontrollerV1beta1().Foos(s.ns).Delete(s.ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	s.eventually(time.Minute, "the Foos to be gone", func() (bool, string) {
		list, err := s.foos.SamplecontrollerV1beta1().Foos(s.ns).List(s.ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		return len(list.Items) == 0, fmt.Sprintf("%d Foos left", len(list.Items))
	})
	s.eventually(time.Minute, "the Delete Foo's Deployment to be garbage-collected", func() (bool, string) {
		_, err := s.getDeployment("deleted")
		return apierrors.IsNotFound(err), fmt.Sprintf("%v", err)
	})
	s.eventually(time.Minute, "changed-mind's Deployment to be garbage-collected", func() (bool, string) {
		_, err := s.getDeployment("changed-mind")
		return apierrors.IsNotFound(err), fmt.Sprintf("%v", err)
	})
	kept, err := s.getDeployment("kept")
	if err != nil {
		t.Fatalf("the Orphan Foo's Deployment must be kept: %v", err)
	}
	if len(kept.OwnerReferences) != 0 {
		t.Errorf("the kept Deployment still has owners: %+v", kept.OwnerReferences)
	}
	// It stays: give the garbage collector time to act if it were going to.
	time.Sleep(3 * time.Second)
	if _, err := s.getDeployment("kept"); err != nil {
		t.Errorf("the kept Deployment went away: %v", err)
	}

	// The same Foo created again meets the Deployment its predecessor
	// left. It selects the old Foo's pods (by UID) and a selector cannot
	// change, so it is not adopted: the Foo says so and what to do, and
	// converges once the user deletes it.
	again := newFoo("orphan", "kept", 1)
	again.Spec.DeletionPolicy = samplev1beta1.DeletionPolicyOrphan
	s.createFoo(again)
	s.waitNotReady("orphan", samplev1beta1.ReasonDeploymentConflict, "left by an earlier Foo", time.Minute)
	if d, err := s.getDeployment("kept"); err != nil || d.Labels[plan.FooUIDLabel] != kept.Labels[plan.FooUIDLabel] {
		t.Fatalf("the earlier Foo's Deployment must be left as it was: %v", err)
	}
	if err := s.kube.AppsV1().Deployments(s.ns).Delete(s.ctx, "kept", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	s.waitConverged("orphan", time.Minute)
}

func TestInvalidFoosAreRejected(t *testing.T) {
	t.Parallel()
	s := newScenario(t)
	s.startController()

	spec := func(kv ...any) map[string]any {
		m := map[string]any{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
	tests := []struct {
		name      string
		spec      map[string]any // nil: no spec at all
		wantField string         // the message must name this field
	}{
		{"no spec", nil, "spec"},
		{"missing deploymentName", spec("replicas", 1), "spec.deploymentName"},
		{"empty deploymentName", spec("deploymentName", ""), "spec.deploymentName"},
		{"deploymentName not DNS-1123", spec("deploymentName", "Bad_Name"), "spec.deploymentName"},
		{"deploymentName too long", spec("deploymentName", strings.Repeat("a", 64)), "spec.deploymentName"},
		{"deploymentName of the wrong type", spec("deploymentName", 5), "spec.deploymentName"},
		{"negative replicas", spec("deploymentName", "d", "replicas", -1), "spec.replicas"},
		{"too many replicas", spec("deploymentName", "d", "replicas", 101), "spec.replicas"},
		{"replicas of the wrong type", spec("deploymentName", "d", "replicas", "three"), "spec.replicas"},
		{"unknown deletionPolicy", spec("deploymentName", "d", "deletionPolicy", "Keep"), "spec.deletionPolicy"},
		{"image with :latest", spec("deploymentName", "d", "image", "nginx:latest"), "spec.image"},
		{"image with whitespace", spec("deploymentName", "d", "image", "nginx 1.27"), "spec.image"},
		{"empty image", spec("deploymentName", "d", "image", ""), "spec.image"},
		{"containerPort 0", spec("deploymentName", "d", "containerPort", 0), "spec.containerPort"},
		{"containerPort above 65535", spec("deploymentName", "d", "containerPort", 65536), "spec.containerPort"},
		{"podLabels with the controller's selector key", spec("deploymentName", "d", "podLabels", map[string]any{"samplecontroller.example.com/foo-uid": "x"}), "spec.podLabels"},
		{"podLabels with the controller's managed-by key", spec("deploymentName", "d", "podLabels", map[string]any{"app.kubernetes.io/managed-by": "me"}), "spec.podLabels"},
		{"podLabels key not a label key", spec("deploymentName", "d", "podLabels", map[string]any{"bad key!": "x"}), "spec.podLabels"},
		{"podLabels key name too long", spec("deploymentName", "d", "podLabels", map[string]any{strings.Repeat("a", 64): "x"}), "spec.podLabels"},
		{"podLabels value too long", spec("deploymentName", "d", "podLabels", map[string]any{"a": strings.Repeat("v", 64)}), "spec.podLabels"},
		{"too many podLabels", spec("deploymentName", "d", "podLabels", manyLabels(33)), "spec.podLabels"},
		{"unknown field", spec("deploymentName", "d", "replicaz", 2), "spec.replicaz"},
	}
	for i, tc := range tests {
		obj := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "samplecontroller.example.com/v1alpha1",
			"kind":       "Foo",
			"metadata":   map[string]any{"name": fmt.Sprintf("bad-%d", i)},
		}}
		if tc.spec != nil {
			obj.Object["spec"] = tc.spec
		}
		// Strict field validation is what kubectl asks for by default.
		_, err := s.dyn.Resource(fooV1alpha1GVR).Namespace(s.ns).Create(s.ctx, obj, metav1.CreateOptions{FieldValidation: "Strict"})
		switch {
		case err == nil:
			t.Errorf("%s: accepted", tc.name)
		case !apierrors.IsInvalid(err) && !apierrors.IsBadRequest(err):
			t.Errorf("%s: want Invalid or BadRequest, got %v", tc.name, err)
		case !strings.Contains(err.Error(), tc.wantField):
			t.Errorf("%s: message does not name %s: %v", tc.name, tc.wantField, err)
		default:
			t.Logf("%s: %v", tc.name, err)
		}
	}

	// Nothing was created for them, and the controller made nothing.
	time.Sleep(2 * time.Second)
	foos, err := s.foos.SamplecontrollerV1beta1().Foos(s.ns).List(s.ctx, metav1.ListOptions{})
	if err != nil || len(foos.Items) != 0 {
		t.Errorf("Foos stored: %v %v", err, foos)
	}
	deps, err := s.kube.AppsV1().Deployments(s.ns).List(s.ctx, metav1.ListOptions{})
	if err != nil || len(deps.Items) != 0 {
		t.Errorf("Deployments created: %v %v", err, deps)
	}
}

func TestIdleMeansSilent(t *testing.T) {
	t.Parallel()
	s := newScenario(t)
	const resync = 5 * time.Second
	s.startController("-resync-period=" + resync.String())
	const n = 50
	names := s.createFoos("foo", n)
	start := time.Now()
	s.waitAllConverged(names, 3*time.Minute)
	t.Logf("%d Foos converged in %v", n, time.Since(start).Round(time.Millisecond))
	// Let the last status writes' own watch events pass through.
	time.Sleep(2 * time.Second)

	window := 3*resync + time.Second
	syncsBefore := len(s.controller.logLines("Finished syncing Foo"))
	from := time.Now()
	time.Sleep(window)
	reqs := s.controllerRequests(from, time.Now())
	syncs := len(s.controller.logLines("Finished syncing Foo")) - syncsBefore
	writes := writesOf(reqs)
	t.Logf("over %v idle: %d syncs (resyncs of %d Foos), %d requests, %d writes%s", window, syncs, n, len(reqs), len(writes), summarize(reqs))
	// Silence must come from syncs that found nothing to do, not from
	// syncs that did not happen.
	if syncs < 2*n {
		t.Errorf("only %d syncs in %v: the resyncs did not run", syncs, window)
	}
	if len(writes) != 0 {
		t.Errorf("controller wrote while idle:%s", summarize(writes))
	}
}

func TestRestartMidway(t *testing.T) {
	t.Parallel()
	s := newScenario(t)
	const n = 100
	// The Foos exist before the first controller starts, and it talks
	// through a slow link, so that the crash surely lands part-way. (With
	// the Foos created one by one while it ran, it kept up with them and
	// had created nearly all 100 Deployments, often all, before the wait
	// below even began: the test then showed the restart of a converged
	// controller, not of one interrupted mid-burst.)
	names := s.createFoos("foo", n)
	slowKC := proxyToAPIServer(t, s.cl, 20*time.Millisecond).kubeconfigVia(t, s.cl.ctrlKC)
	first := s.startController("-kubeconfig=" + slowKC)
	// Kill the controller (no graceful shutdown: a crash) part-way through.
	s.waitForDeployments(n/4, 2*time.Minute)
	first.kill()
	s.requireMidBurst(n, "the SIGKILL")

	s.startController()
	start := time.Now()
	s.waitAllConverged(names, 3*time.Minute)
	t.Logf("all %d converged %v after the restart", n, time.Since(start).Round(time.Millisecond))

	// No duplicates, no orphans: exactly one Deployment per Foo, each
	// controlled by its Foo.
	s.eventually(time.Minute, "the invariants", s.invariants)
	if all, err := s.kube.AppsV1().Deployments(s.ns).List(s.ctx, metav1.ListOptions{}); err != nil || len(all.Items) != n {
		t.Errorf("want %d Deployments for %d Foos: %d, %v", n, n, len(all.Items), err)
	}
}

func TestRecreateUnderTheSameName(t *testing.T) {
	t.Parallel()
	s := newScenario(t)
	s.startController()
	first := s.createFoo(newFoo("web", "web", 1))
	s.waitConverged("web", time.Minute)

	// Delete and recreate at once: the old Deployment, controlled by the
	// deleted Foo, is still there until the garbage collector removes it.
	if err := s.foos.SamplecontrollerV1beta1().Foos(s.ns).Delete(s.ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	s.eventually(time.Minute, "the first Foo to be gone", func() (bool, string) {
		_, err := s.getFoo("web")
		return apierrors.IsNotFound(err), fmt.Sprintf("%v", err)
	})
	second := s.createFoo(newFoo("web", "web", 2))
	start := time.Now()
	s.waitConverged("web", 2*time.Minute)
	t.Logf("the recreated Foo converged in %v", time.Since(start).Round(time.Millisecond))

	dep, err := s.getDeployment("web")
	if err != nil {
		t.Fatal(err)
	}
	if !plan.IsControlledBy(dep, second.UID) || plan.IsControlledBy(dep, first.UID) {
		t.Errorf("the Deployment must be the new Foo's: %+v", dep.OwnerReferences)
	}
	// Waiting for the garbage collector is not a conflict.
	if ev := s.fooEvents("web"); ev[samplev1beta1.ReasonDeploymentConflict] != 0 {
		t.Errorf("events: %v: a recreated Foo must not report a conflict with its predecessor's Deployment", ev)
	}
}

func manyLabels(n int) map[string]any {
	out := map[string]any{}
	for i := range n {
		out[fmt.Sprintf("k%d", i)] = "v"
	}
	return out
}
