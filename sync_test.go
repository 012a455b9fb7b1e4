package main

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	core "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	samplev1beta1 "example.com/foo-controller/pkg/apis/samplecontroller/v1beta1"
	"example.com/foo-controller/pkg/caches"
	"example.com/foo-controller/pkg/ownwrites"
	"example.com/foo-controller/pkg/plan"
)

func TestSyncFooGoneDoesNothing(t *testing.T) {
	f := newFixture(t)
	kube, foos, evts, err := f.sync(cache.ObjectName{Namespace: testNS, Name: "missing"})
	if err != nil {
		t.Fatalf("sync of a deleted Foo: %v", err)
	}
	assertActions(t, "kube", kube, nil)
	assertActions(t, "foo", foos, nil)
	assertEvents(t, evts)
}

func TestSyncCreatesMissingDeployment(t *testing.T) {
	foo := newFoo("a", 3)
	f := newFixture(t).withFoo(foo)
	// The first status, "progressing", waits (TestSyncDefersANewFoosFirstStatus).
	kube, foos, evts, err := f.syncPaced(keyOf(foo))
	if err != nil {
		t.Fatal(err)
	}
	assertActions(t, "kube", kube, []string{"patch deployments a-deploy " + applyPatch})
	assertActions(t, "foo", foos, []string{"patch foos/status a " + applyPatch})
	assertEvents(t, evts, "Normal Created")

	d := appliedDeployment(t, kube)
	if got := d.Spec.Replicas; got == nil || *got != 3 {
		t.Errorf("replicas: got %v, want 3", got)
	}
	if got := d.Spec.Template.Spec.Containers; len(got) != 1 || got[0].Image != "nginx:1.27" || got[0].Name != plan.ContainerName {
		t.Errorf("containers: got %+v", got)
	}
	ref := metav1.GetControllerOf(d)
	if ref == nil || ref.UID != foo.UID || ref.Kind != "Foo" || ref.APIVersion != "samplecontroller.example.com/v1beta1" {
		t.Errorf("controller reference: got %+v", ref)
	}
	if got := d.Spec.Selector.MatchLabels[plan.FooUIDLabel]; got != string(foo.UID) {
		t.Errorf("selector must be unique to the Foo (its UID): got %q", got)
	}
	if got := d.Spec.Template.Labels[plan.FooUIDLabel]; got != string(foo.UID) {
		t.Errorf("pod template must carry the selector label: got %q", got)
	}

	st := appliedStatus(t, foos)
	if st.ObservedGeneration != foo.Generation {
		t.Errorf("observedGeneration: got %d, want %d", st.ObservedGeneration, foo.Generation)
	}
	// Not ready, for the reason Reconciling gives (the fake API server
	// sets no generation, so its new Deployment reads as observed, with no
	// pods yet: Scaling).
	rec := meta.FindStatusCondition(st.Conditions, samplev1beta1.ConditionReconciling)
	if rec == nil || rec.Status != metav1.ConditionTrue || meta.FindStatusCondition(st.Conditions, samplev1beta1.ConditionStalled) != nil {
		t.Fatalf("after create: want Reconciling, not Stalled: %+v", st.Conditions)
	}
	if c := readyOf(t, st); c.Status != metav1.ConditionFalse || c.Reason != rec.Reason {
		t.Errorf("Ready after create: got %s/%s, want False/%s", c.Status, c.Reason, rec.Reason)
	}
}

func TestSyncConvergedSendsNothing(t *testing.T) {
	foo := newFoo("a", 2)
	dep := ownedDeployment(foo)
	withConvergedStatus(foo, dep, false)
	f := newFixture(t).withFoo(foo).withDeployment(dep)
	kube, foos, evts, err := f.sync(keyOf(foo))
	if err != nil {
		t.Fatal(err)
	}
	assertActions(t, "kube", kube, nil)
	assertActions(t, "foo", foos, nil)
	assertEvents(t, evts)
}

func TestSyncIgnoresFieldsItDoesNotOwn(t *testing.T) {
	foo := newFoo("a", 2)
	dep := ownedDeployment(foo)
	withConvergedStatus(foo, dep, false)
	// Others may add labels, annotations and containers, and the API server
	// fills in defaults: none of that is drift.
	dep.Labels["team"] = "blue"
	dep.Annotations = map[string]string{"deployment.kubernetes.io/revision": "1"}
	dep.Spec.Template.Spec.Containers = append(dep.Spec.Template.Spec.Containers, corev1.Container{Name: "sidecar", Image: "busybox"})
	dep.Spec.Template.Spec.Containers[0].ImagePullPolicy = corev1.PullIfNotPresent
	f := newFixture(t).withFoo(foo).withDeployment(dep)
	kube, foos, _, err := f.sync(keyOf(foo))
	if err != nil {
		t.Fatal(err)
	}
	assertActions(t, "kube", kube, nil)
	assertActions(t, "foo", foos, nil)
}

func TestSyncScaledFooScalesDeployment(t *testing.T) {
	foo := newFoo("a", 2)
	dep := ownedDeployment(foo)
	withConvergedStatus(foo, dep, false)
	foo.Spec.Deployment.Replicas = ptr.To[int32](5) // kubectl scale foo/a --replicas=5
	foo.Generation = 2
	f := newFixture(t).withFoo(foo).withDeployment(dep)
	kube, foos, evts, err := f.sync(keyOf(foo))
	if err != nil {
		t.Fatal(err)
	}
	assertActions(t, "kube", kube, []string{"patch deployments a-deploy " + applyPatch})
	assertActions(t, "foo", foos, []string{"patch foos/status a " + applyPatch})
	assertEvents(t, evts, "Normal Scaled")
	if r := appliedDeployment(t, kube).Spec.Replicas; r == nil || *r != 5 {
		t.Errorf("applied replicas: got %v, want 5", r)
	}
	st := appliedStatus(t, foos)
	if st.ObservedGeneration != 2 {
		t.Errorf("observedGeneration: got %d, want 2", st.ObservedGeneration)
	}
}

func TestSyncRenameCreatesNewAndDeletesOld(t *testing.T) {
	foo := newFoo("a", 1)
	old := ownedDeployment(foo)
	withConvergedStatus(foo, old, false)
	foo.Spec.Deployment.Name = "a-renamed"
	foo.Generation = 2
	f := newFixture(t).withFoo(foo).withDeployment(old)
	kube, foos, evts, err := f.sync(keyOf(foo))
	if err != nil {
		t.Fatal(err)
	}
	assertActions(t, "kube", kube, []string{
		"patch deployments a-renamed " + applyPatch,
		"delete deployments a-deploy",
	})
	assertActions(t, "foo", foos, []string{"patch foos/status a " + applyPatch})
	assertEvents(t, evts, "Normal Created", "Normal Pruned")
	del := kube[1].(core.DeleteActionImpl)
	if p := del.DeleteOptions.Preconditions; p == nil || p.UID == nil || *p.UID != old.UID {
		t.Errorf("delete must be preconditioned on the old Deployment's UID, got %+v", p)
	}
}

// TestSyncRenameReportsStatusWhenThePruneFails: after a rename the new
// Deployment is in place before the old one is deleted. If that delete
// fails (an admission webhook or a missing RBAC rule refusing it, or a
// timeout), the status must still describe the new spec: otherwise the Foo
// keeps reporting the old generation, Ready from the old Deployment, for as
// long as the delete keeps failing. The error is still returned, so the
// delete is retried with backoff.
func TestSyncRenameReportsStatusWhenThePruneFails(t *testing.T) {
	foo := newFoo("a", 1)
	old := ownedDeployment(foo)
	withConvergedStatus(foo, old, false)
	foo.Spec.Deployment.Name = "a-renamed"
	foo.Generation = 2
	f := newFixture(t).withFoo(foo).withDeployment(old)
	_, ctx := ktesting.NewTestContext(t)
	c := f.newController(ctx)
	refusal := apierrors.NewForbidden(schema.GroupResource{Group: "apps", Resource: "deployments"}, "a-deploy",
		errors.New("admission webhook \"no-deletes\" denied the request"))
	f.kubeclient.PrependReactor("delete", "deployments", func(core.Action) (bool, runtime.Object, error) {
		return true, nil, refusal
	})
	if _, err := c.syncHandler(ctx, keyOf(foo)); !errors.Is(err, refusal) {
		t.Fatalf("the failed delete must be returned (for retry with backoff): %v", err)
	}
	assertActions(t, "foo", f.client.Actions(), []string{"patch foos/status a " + applyPatch})
	if st := appliedStatus(t, f.client.Actions()); st.ObservedGeneration != 2 {
		t.Errorf("observedGeneration: got %d, want 2", st.ObservedGeneration)
	}
	assertEvents(t, drainEvents(f.recorder), "Normal Created")

	// The retry deletes the old Deployment once the refusal lifts.
	f.kubeclient.ReactionChain = f.kubeclient.ReactionChain[1:]
	f.kubeclient.ClearActions()
	if _, err := c.syncHandler(ctx, keyOf(foo)); err != nil {
		t.Fatal(err)
	}
	assertActions(t, "kube", f.kubeclient.Actions(), []string{"delete deployments a-deploy"})
}

func TestSyncDoesNotPruneOthersDeployments(t *testing.T) {
	foo := newFoo("a", 1)
	dep := ownedDeployment(foo)
	withConvergedStatus(foo, dep, false)
	other := newFoo("b", 1)
	othersDep := ownedDeployment(other) // controlled by another Foo
	f := newFixture(t).withFoo(foo).withFoo(other).withDeployment(dep).withDeployment(othersDep)
	kube, _, _, err := f.sync(keyOf(foo))
	if err != nil {
		t.Fatal(err)
	}
	assertActions(t, "kube", kube, nil)
}

func TestSyncConflict(t *testing.T) {
	foreignFoo := newFoo("b", 1)
	foreignFoo.Spec.Deployment.Name = "a-deploy"
	otherGroupOwner := foreignDeployment("a-deploy")
	otherGroupOwner.OwnerReferences = []metav1.OwnerReference{{
		APIVersion: "other.example.com/v1", Kind: "Foo", Name: "a", UID: "a-uid", Controller: ptr.To(true),
	}}
	tests := []struct {
		name string
		dep  *appsv1.Deployment
	}{
		{"unowned Deployment", foreignDeployment("a-deploy")},
		{"controlled by another Foo", ownedDeployment(foreignFoo)},
		{"controlled by a Foo kind of another API group", otherGroupOwner},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			foo := newFoo("a", 1)
			f := newFixture(t).withFoo(foo).withDeployment(tc.dep)
			kube, foos, evts, err := f.sync(keyOf(foo))
			if err != nil {
				t.Fatalf("a conflict is permanent and must not return an error (it would hot-loop in backoff): %v", err)
			}
			assertActions(t, "kube", kube, nil) // the foreign object is untouched
			assertActions(t, "foo", foos, []string{"patch foos/status a " + applyPatch})
			assertEvents(t, evts, "Warning DeploymentConflict")
			c := readyOf(t, appliedStatus(t, foos))
			if c.Status != metav1.ConditionFalse || c.Reason != samplev1beta1.ReasonDeploymentConflict {
				t.Errorf("Ready: got %s/%s, want False/DeploymentConflict", c.Status, c.Reason)
			}
		})
	}
}

func TestSyncConflictAlreadyReportedIsSilent(t *testing.T) {
	foo := newFoo("a", 1)
	dep := foreignDeployment("a-deploy")
	withConvergedStatus(foo, dep, true)
	f := newFixture(t).withFoo(foo).withDeployment(dep)
	kube, foos, evts, err := f.sync(keyOf(foo))
	if err != nil {
		t.Fatal(err)
	}
	assertActions(t, "kube", kube, nil)
	assertActions(t, "foo", foos, nil)
	assertEvents(t, evts) // one Event per conflict, not one per sync
}

func TestSyncConflictKeepsOldDeploymentOnRename(t *testing.T) {
	foo := newFoo("a", 1)
	old := ownedDeployment(foo)
	foo.Spec.Deployment.Name = "taken"
	f := newFixture(t).withFoo(foo).withDeployment(old).withDeployment(foreignDeployment("taken"))
	kube, _, _, err := f.sync(keyOf(foo))
	if err != nil {
		t.Fatal(err)
	}
	// The new name is blocked: the old Deployment keeps serving.
	assertActions(t, "kube", kube, nil)
}

func TestSyncReadsItsOwnWrites(t *testing.T) {
	// Right after a sync created the Deployment and wrote status, the
	// informers have not seen either write yet. A second sync of the same
	// key (say, prompted by the Deployment's watch event racing the
	// Foo's) must not create it again, write status again or repeat the
	// Event. The Foo has a status from an earlier generation (its
	// Deployment deleted since), so that its status is written at once:
	// a new Foo's first one is held back (syncStatus).
	foo := newFoo("a", 2)
	foo.Generation, foo.Status.ObservedGeneration = 2, 1
	f := newFixture(t).withFoo(foo)
	_, ctx := ktesting.NewTestContext(t)
	c := f.newController(ctx)
	if _, err := c.syncHandler(ctx, keyOf(foo)); err != nil {
		t.Fatal(err)
	}
	if n := len(drainEvents(f.recorder)); n != 1 {
		t.Fatalf("first sync: %d events, want 1", n)
	}
	if st := appliedStatus(t, f.client.Actions()); st.ObservedGeneration != 2 {
		t.Fatalf("first sync wrote observedGeneration %d, want 2", st.ObservedGeneration)
	}
	f.kubeclient.ClearActions()
	f.client.ClearActions()
	if _, err := c.syncHandler(ctx, keyOf(foo)); err != nil {
		t.Fatal(err)
	}
	assertActions(t, "kube", f.kubeclient.Actions(), nil)
	assertActions(t, "foo", f.client.Actions(), nil)
	assertEvents(t, drainEvents(f.recorder))
}

// TestSyncRecreatesADeploymentDeletedRightAfterOurWrite: our copy of a
// Deployment we wrote is preferred to the informer's store for
// ownwrites.TTL, even when the store no longer has it. When the
// informer sees the Deployment deleted (kubectl delete deployment, a
// minute after we created it), handleDeploymentDelete drops that copy, so
// the sync the deletion brings creates it again at once instead of reading
// the copy and waiting for the recheck after unseenRecheckAfter.
func TestSyncRecreatesADeploymentDeletedRightAfterOurWrite(t *testing.T) {
	foo := newFoo("a", 1)
	f := newFixture(t).withFoo(foo)
	_, ctx := ktesting.NewTestContext(t)
	c := f.newController(ctx)
	if _, err := c.syncHandler(ctx, keyOf(foo)); err != nil {
		t.Fatal(err)
	}
	dep, err := f.kubeclient.AppsV1().Deployments(testNS).Get(ctx, "a-deploy", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The informer sees the create, then the user's delete: the store is
	// updated first, then the handler runs.
	if err := f.deploymentIndexer.Add(plan.NewDeploymentView(dep)); err != nil {
		t.Fatal(err)
	}
	if err := f.kubeclient.AppsV1().Deployments(testNS).Delete(ctx, "a-deploy", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := f.deploymentIndexer.Delete(plan.NewDeploymentView(dep)); err != nil {
		t.Fatal(err)
	}
	c.handleDeploymentDelete(plan.NewDeploymentView(dep))
	f.kubeclient.ClearActions()
	drainEvents(f.recorder)

	if _, err := c.syncHandler(ctx, keyOf(foo)); err != nil {
		t.Fatal(err)
	}
	assertActions(t, "kube", f.kubeclient.Actions(), []string{"patch deployments a-deploy " + applyPatch})
	assertEvents(t, drainEvents(f.recorder), "Normal Created")
}

func TestSyncWaitsForAnOldDeploymentToGo(t *testing.T) {
	recreated := newFoo("a", 1)
	predecessor := recreated.DeepCopy()
	predecessor.UID = "a-previous-uid"
	terminating := ownedDeployment(recreated)
	terminating.DeletionTimestamp = ptr.To(metav1.NewTime(fixedNow))
	terminating.Finalizers = []string{"foregroundDeletion"}
	tests := []struct {
		name string
		dep  *appsv1.Deployment
	}{
		{"left by a deleted Foo of the same name", ownedDeployment(predecessor)},
		{"being deleted", terminating},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			foo := recreated.DeepCopy()
			f := newFixture(t).withFoo(foo).withDeployment(tc.dep)
			kube, foos, evts, err := f.syncPaced(keyOf(foo))
			if err != nil {
				t.Fatal(err)
			}
			assertActions(t, "kube", kube, nil) // neither adopted nor updated
			assertActions(t, "foo", foos, []string{"patch foos/status a " + applyPatch})
			assertEvents(t, evts) // no Warning: it resolves by itself
			st := appliedStatus(t, foos)
			if c := readyOf(t, st); c.Reason != samplev1beta1.ReasonWaitingForOldDeployment || !strings.Contains(c.Message, `"`+tc.dep.Name+`"`) {
				t.Errorf("Ready: %s/%s %q, want the old Deployment %q named", c.Status, c.Reason, c.Message, tc.dep.Name)
			}
			// It resolves by itself: Reconciling, not Stalled.
			if c := meta.FindStatusCondition(st.Conditions, samplev1beta1.ConditionReconciling); c == nil || c.Status != metav1.ConditionTrue ||
				meta.FindStatusCondition(st.Conditions, samplev1beta1.ConditionStalled) != nil {
				t.Errorf("conditions: %+v", st.Conditions)
			}
		})
	}
}

// countingCache counts the scans of the Deployment index by Foo UID.
type countingCache struct {
	cache.MutationCache
	scans int
}

func (c *countingCache) ByIndex(name, key string) ([]any, error) {
	if name == caches.DeploymentByFooUID {
		c.scans++
	}
	return c.MutationCache.ByIndex(name, key)
}

// TestSyncPrunesOnlyAfterASpecChange: looking for Deployments left under an
// old name scans the index (and every copy of our own writes in the
// MutationCache), so it is done once per spec, not on every sync; a rename
// is a new spec, and its old Deployment is still deleted.
func TestSyncPrunesOnlyAfterASpecChange(t *testing.T) {
	foo := newFoo("a", 1)
	old := ownedDeployment(foo)
	withConvergedStatus(foo, old, false)
	f := newFixture(t).withFoo(foo).withDeployment(old)
	_, ctx := ktesting.NewTestContext(t)
	c := f.newController(ctx)
	counting := &countingCache{MutationCache: c.deploymentsLister.MutationCache}
	c.deploymentsLister.MutationCache = counting
	for i := range 3 {
		if _, err := c.syncHandler(ctx, keyOf(foo)); err != nil {
			t.Fatalf("sync %d: %v", i, err)
		}
	}
	if counting.scans != 1 {
		t.Errorf("3 syncs of an unchanged Foo scanned for old Deployments %d times, want 1", counting.scans)
	}
	assertActions(t, "kube", f.kubeclient.Actions(), nil)

	renamed := foo.DeepCopy()
	renamed.Spec.Deployment.Name = "a-renamed"
	renamed.Generation = 2
	if _, err := f.client.SamplecontrollerV1beta1().Foos(testNS).Update(ctx, renamed, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := f.fooIndexer.Update(renamed); err != nil {
		t.Fatal(err)
	}
	if _, err := c.syncHandler(ctx, keyOf(foo)); err != nil {
		t.Fatal(err)
	}
	assertActions(t, "kube", f.kubeclient.Actions(), []string{
		"patch deployments a-renamed " + applyPatch,
		"delete deployments a-deploy",
	})
}

// TestSyncPrunesALeftoverThatAppearsLater: the prune is skipped while the
// spec stays the same, but not for a Deployment the informer shows under
// another name controlled by this Foo (restored from a backup, say, owner
// reference and all): handleDeployment brings the Foo back for it, and the
// sync deletes it, as it would after a rename.
func TestSyncPrunesALeftoverThatAppearsLater(t *testing.T) {
	foo := newFoo("a", 1)
	dep := ownedDeployment(foo)
	withConvergedStatus(foo, dep, false)
	leftover := ownedDeployment(foo)
	leftover.Name, leftover.UID = "a-old-name", "a-old-name-uid"
	f := newFixture(t).withFoo(foo).withDeployment(dep)
	f.kubeobjects = append(f.kubeobjects, leftover) // in the API, not yet in the informer
	_, ctx := ktesting.NewTestContext(t)
	c := f.newController(ctx)
	if _, err := c.syncHandler(ctx, keyOf(foo)); err != nil {
		t.Fatal(err)
	}
	assertActions(t, "kube", f.kubeclient.Actions(), nil)

	if err := f.deploymentIndexer.Add(plan.NewDeploymentView(leftover)); err != nil {
		t.Fatal(err)
	}
	c.handleDeployment(plan.NewDeploymentView(leftover))
	assertQueue(t, c, []string{"default/a"})
	if _, err := c.syncHandler(ctx, keyOf(foo)); err != nil {
		t.Fatal(err)
	}
	assertActions(t, "kube", f.kubeclient.Actions(), []string{"delete deployments a-old-name"})
}

// TestSyncRechecksACreatedDeploymentTheInformerNeverSees: a Deployment we
// created is read from our own copy until the informer sees it. If it never
// does (created and deleted while the watch was down, say), the copy
// expires after ownwrites.TTL and nothing would bring the Foo back before
// a resync, which may be never (-resync-period=0). So while the informer has
// not seen it, the sync asks to come back just after the copy expires; that
// sync finds it missing and applies it again.
func TestSyncRechecksACreatedDeploymentTheInformerNeverSees(t *testing.T) {
	foo := newFoo("a", 1)
	f := newFixture(t).withFoo(foo)
	logger, ctx := ktesting.NewTestContext(t)
	c := f.newController(ctx)
	if _, err := c.syncHandler(ctx, keyOf(foo)); err != nil {
		t.Fatal(err)
	}
	assertActions(t, "kube", f.kubeclient.Actions(), []string{"patch deployments a-deploy " + applyPatch})
	// The held-back first status goes out; the informer still has not seen
	// the Deployment.
	f.clock.Step(statusProgressInterval)
	res, err := c.syncHandler(ctx, keyOf(foo))
	if err != nil {
		t.Fatal(err)
	}
	if res.requeueAfter <= ownwrites.TTL || res.requeueAfter > ownwrites.TTL+10*time.Second {
		t.Errorf("a Deployment known only from our own write: requeue after %v, want just after %v (ownwrites.TTL)",
			res.requeueAfter, ownwrites.TTL)
	}

	// The MutationCache expires copies by the wall clock, not the fake one;
	// a fresh cache over the same informer is what it holds after the TTL.
	f.clock.Step(res.requeueAfter)
	c.deploymentsLister = ownwrites.NewLister[*plan.DeploymentView](logger, f.deploymentIndexer, appsv1.Resource("deployments"), true)
	f.kubeclient.ClearActions()
	drainEvents(f.recorder)
	if _, err := c.syncHandler(ctx, keyOf(foo)); err != nil {
		t.Fatal(err)
	}
	assertActions(t, "kube", f.kubeclient.Actions(), []string{"patch deployments a-deploy " + applyPatch})
	assertEvents(t, drainEvents(f.recorder), "Normal Created")

	// Once the informer has it, the sync is done.
	dep, err := f.kubeclient.AppsV1().Deployments(testNS).Get(ctx, "a-deploy", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.deploymentIndexer.Add(plan.NewDeploymentView(dep)); err != nil {
		t.Fatal(err)
	}
	if res, err := c.syncHandler(ctx, keyOf(foo)); err != nil || res.requeueAfter != 0 {
		t.Errorf("the informer has the Deployment: got %+v, %v, want done", res, err)
	}
}

// TestSyncPruneOfADeploymentAlreadyGone: the old Deployment is in the cache
// but already deleted in the API (the cache is behind): its delete finds
// nothing, which is what the prune wanted, so the sync is done.
func TestSyncPruneOfADeploymentAlreadyGone(t *testing.T) {
	foo := newFoo("a", 1)
	old := ownedDeployment(foo)
	withConvergedStatus(foo, old, false)
	foo.Spec.Deployment.Name = "a-renamed"
	foo.Generation = 2
	f := newFixture(t).withFoo(foo)
	f.deployments = append(f.deployments, old) // in the cache only
	kube, _, evts, err := f.sync(keyOf(foo))
	if err != nil {
		t.Fatal(err)
	}
	assertActions(t, "kube", kube, []string{
		"patch deployments a-renamed " + applyPatch,
		"delete deployments a-deploy",
	})
	assertEvents(t, evts, "Normal Created") // no Pruned: we deleted nothing
}

// BenchmarkSyncConverged is what a resync costs per Foo: the sync of a
// converged Foo, which reads the caches, finds nothing to change and
// sends nothing. At N Foos, a resync makes N of these.
//
//	go test -run '^$' -bench SyncConverged -benchmem .
func BenchmarkSyncConverged(b *testing.B) {
	foo := newFoo("a", 2)
	dep := ownedDeployment(foo)
	withConvergedStatus(foo, dep, false)
	f := newFixture(b).withFoo(foo).withDeployment(dep)
	// The controller's own logging at its default verbosity: V(4) lines
	// are not formatted.
	ctx := klog.NewContext(context.Background(), logr.Discard())
	c := f.newController(ctx)
	f.kubeclient.ClearActions()
	f.client.ClearActions()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.syncHandler(ctx, keyOf(foo)); err != nil {
			b.Fatal(err)
		}
	}
	assertActions(b, "kube", f.kubeclient.Actions(), nil)
	assertActions(b, "foos", f.client.Actions(), nil)
}

// TestSyncDoesNotRecreateForAFooDeletedMeanwhile: the garbage collector
// deletes a Foo's Deployment once the Foo is gone, and the Deployment
// informer may tell us before the Foo informer does. The sync that
// deletion brings still finds the Foo in the cache; it must not create the
// Deployment again (nor tell the user it did), nor write its status, which
// would land on a successor of the same name: one GET says the Foo is
// gone. An edit of the Foo just before its deletion does not hide that.
// Someone deleting the Deployment of a Foo that still exists gets it back,
// after the same GET.
func TestSyncDoesNotRecreateForAFooDeletedMeanwhile(t *testing.T) {
	foos := schema.GroupVersionResource{Group: samplev1beta1.GroupVersion.Group, Version: samplev1beta1.GroupVersion.Version, Resource: "foos"}
	for _, tc := range []struct {
		name string
		// inAPI is the Foo the API server has by then: nil, gone.
		inAPI     func(foo *samplev1beta1.Foo) *samplev1beta1.Foo
		editFirst bool     // the cache sees an edit (generation 2) first
		wantKube  []string // nil: nothing created
		wantEvent []string
	}{
		{name: "the Foo is gone", inAPI: func(*samplev1beta1.Foo) *samplev1beta1.Foo { return nil }},
		{name: "the Foo is gone, edited just before", inAPI: func(*samplev1beta1.Foo) *samplev1beta1.Foo { return nil }, editFirst: true},
		{name: "another Foo of the same name replaced it", inAPI: func(foo *samplev1beta1.Foo) *samplev1beta1.Foo {
			next := newFoo(foo.Name, 1)
			next.UID = "a-successor-uid"
			return next
		}},
		{name: "the Foo is still there", inAPI: func(foo *samplev1beta1.Foo) *samplev1beta1.Foo { return foo },
			wantKube: []string{"patch deployments a-deploy " + applyPatch}, wantEvent: []string{"Normal Created"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			foo := newFoo("a", 1)
			dep := ownedDeployment(foo)
			withConvergedStatus(foo, dep, false)
			f := newFixture(t).withFoo(foo).withDeployment(dep)
			_, ctx := ktesting.NewTestContext(t)
			c := f.newController(ctx)
			if _, err := c.syncHandler(ctx, keyOf(foo)); err != nil { // converged: in place
				t.Fatal(err)
			}
			if tc.editFirst {
				edited := foo.DeepCopy()
				edited.Generation, edited.Spec.Deployment.Replicas = 2, ptr.To[int32](3)
				if err := f.fooIndexer.Update(edited); err != nil {
					t.Fatal(err)
				}
			}
			if live := tc.inAPI(foo); live != foo {
				if err := f.client.Tracker().Delete(foos, testNS, "a"); err != nil {
					t.Fatal(err)
				}
				if live != nil {
					if err := f.client.Tracker().Add(live); err != nil {
						t.Fatal(err)
					}
				}
			}
			if err := f.deploymentIndexer.Delete(plan.NewDeploymentView(dep)); err != nil {
				t.Fatal(err)
			}
			c.handleDeploymentDelete(plan.NewDeploymentView(dep))
			f.kubeclient.ClearActions()
			f.client.ClearActions()
			drainEvents(f.recorder)

			res, err := c.syncHandler(ctx, keyOf(foo))
			if err != nil {
				t.Fatal(err)
			}
			assertActions(t, "kube", f.kubeclient.Actions(), tc.wantKube)
			if tc.wantKube == nil && res != (syncResult{}) {
				t.Errorf("sync result %+v for a Foo deleted meanwhile, want done", res)
			}
			// The GET, and no status write: a converged Foo's status
			// stands, and a deleted one's would land on its successor.
			if got, want := describeAll(f.client.Actions()), []string{"get foos"}; !slices.Equal(got, want) {
				t.Errorf("foo actions %q, want %q", got, want)
			}
			assertEvents(t, drainEvents(f.recorder), tc.wantEvent...)
		})
	}
}
