package main

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	samplev1beta1 "example.com/foo-controller/pkg/apis/samplecontroller/v1beta1"
	"example.com/foo-controller/pkg/plan"
)

func TestHandlersEnqueueTheRightFoos(t *testing.T) {
	a := newFoo("a", 1)
	b := newFoo("b", 1)
	b.Spec.Deployment.Name = "shared-name" // blocked by a foreign Deployment
	recreated := newFoo("c", 1)
	staleOwned := ownedDeployment(recreated)
	staleOwned.Name = "c-old-name"
	recreated.UID = "c-new-uid" // same name, new incarnation
	leftover := ownedDeployment(a)
	leftover.Name = "a-old-name"
	otherGroup := foreignDeployment("x")
	otherGroup.OwnerReferences = []metav1.OwnerReference{{
		APIVersion: "other.example.com/v1", Kind: "Foo", Name: "a", UID: a.UID, Controller: ptr.To(true),
	}}

	// The informer delivers what it caches of a Deployment.
	view := plan.NewDeploymentView
	tests := []struct {
		name string
		obj  any
		want []string
	}{
		{"owned Deployment", view(ownedDeployment(a)), []string{"default/a"}},
		{"owned Deployment under an old name (found by owner, not by name)", view(leftover), []string{"default/a"}},
		{"foreign Deployment with a wanted name", view(foreignDeployment("shared-name")), []string{"default/b"}},
		{"unrelated Deployment", view(foreignDeployment("unrelated")), nil},
		{"Deployment of a previous Foo incarnation", view(staleOwned), nil},
		{"owner of another API group", view(otherGroup), nil},
		{"tombstone", cache.DeletedFinalStateUnknown{Key: "default/a-deploy", Obj: view(ownedDeployment(a))}, []string{"default/a"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t).withFoo(a).withFoo(b).withFoo(recreated)
			_, ctx := ktesting.NewTestContext(t)
			c := f.newController(ctx)
			c.handleDeployment(tc.obj)
			assertQueue(t, c, tc.want)
		})
	}
}

func TestDeploymentUpdateHandler(t *testing.T) {
	a := newFoo("a", 1)
	f := newFixture(t).withFoo(a)
	_, ctx := ktesting.NewTestContext(t)
	c := f.newController(ctx)
	dep := plan.NewDeploymentView(ownedDeployment(a))
	dep.Name = "a-old-name" // so only the owner reference can lead to the Foo

	// Re-delivered unchanged (a relist): same resourceVersion, nothing new.
	c.handleDeploymentUpdate(dep, dep.DeepCopy())
	assertQueue(t, c, nil)

	// Controller reference removed: the old owner must hear of it.
	orphaned := dep.DeepCopy()
	orphaned.ResourceVersion = "21"
	orphaned.OwnerReferences = nil
	c.handleDeploymentUpdate(dep, orphaned)
	assertQueue(t, c, []string{"default/a"})
}

// TestDeploymentEventsJumpTheQueue: a Foo woken by its own Deployment is
// handed out before Foos waiting for their first sync; a Foo woken by a
// Deployment it only wants the name of is not.
func TestDeploymentEventsJumpTheQueue(t *testing.T) {
	deployed := newFoo("deployed", 1)
	blocked := newFoo("blocked", 1)
	blocked.Spec.Deployment.Name = "taken"
	f := newFixture(t).withFoo(deployed).withFoo(blocked)
	_, ctx := ktesting.NewTestContext(t)
	c := f.newController(ctx)
	for _, name := range []string{"new-1", "new-2"} {
		c.enqueueFoo(newFoo(name, 1))
	}
	c.handleDeployment(plan.NewDeploymentView(foreignDeployment("taken")))
	dep := plan.NewDeploymentView(ownedDeployment(deployed))
	available := dep.DeepCopy()
	available.ResourceVersion = bumpRV(dep.ResourceVersion)
	available.Status.AvailableReplicas = 1
	c.handleDeploymentUpdate(dep, available)
	assertQueue(t, c, []string{"default/deployed", "default/new-1", "default/new-2", "default/blocked"})
}

// TestResyncAddsAKeyInBackoffAtOnce: a resync re-delivers every Foo
// unchanged, and that adds its key at once even while it waits out a long
// failure backoff.
func TestResyncAddsAKeyInBackoffAtOnce(t *testing.T) {
	foo := newFoo("a", 1)
	f := newFixture(t).withFoo(foo)
	_, ctx := ktesting.NewTestContext(t)
	c := f.newController(ctx)
	for range 20 {
		c.workqueue.AddRateLimited(keyOf(foo)) // one delayed add, the earliest: 5 ms
	}
	key, _ := c.workqueue.Get()
	c.workqueue.Done(key)
	c.workqueue.AddRateLimited(key) // its 21st failure: back after 10 minutes
	if n := c.workqueue.Len(); n != 0 {
		t.Fatalf("queue length %d right after a rate-limited add, want 0", n)
	}
	c.handleFooUpdate(foo, foo)
	assertQueue(t, c, []string{"default/a"})
}

func TestFooHandlerEnqueuesTombstones(t *testing.T) {
	f := newFixture(t)
	_, ctx := ktesting.NewTestContext(t)
	c := f.newController(ctx)
	c.enqueueFoo(cache.DeletedFinalStateUnknown{Key: "default/gone", Obj: newFoo("gone", 1)})
	assertQueue(t, c, []string{"default/gone"})
}

// TestFooChangesJumpTheQueue: what a user asks of an existing Foo — a spec
// change (a new generation, as kubectl scale makes) or a deletion — is
// handed out before the first syncs of a burst of new Foos. A Foo update
// that changes neither (our own status write coming back) is not.
func TestFooChangesJumpTheQueue(t *testing.T) {
	f := newFixture(t)
	_, ctx := ktesting.NewTestContext(t)
	c := f.newController(ctx)
	for _, name := range []string{"new-1", "new-2"} {
		c.enqueueFoo(newFoo(name, 1))
	}
	updated := func(foo *samplev1beta1.Foo, change func(*samplev1beta1.Foo)) *samplev1beta1.Foo {
		out := foo.DeepCopy()
		out.ResourceVersion = bumpRV(foo.ResourceVersion)
		change(out)
		return out
	}
	statusOnly := newFoo("status-only", 1)
	c.handleFooUpdate(statusOnly, updated(statusOnly, func(foo *samplev1beta1.Foo) { foo.Status.AvailableReplicas = 1 }))
	scaled := newFoo("scaled", 1)
	c.handleFooUpdate(scaled, updated(scaled, func(foo *samplev1beta1.Foo) {
		foo.Spec.Deployment.Replicas = ptr.To[int32](3)
		foo.Generation++
	}))
	deleting := newFoo("deleting", 1)
	c.handleFooUpdate(deleting, updated(deleting, func(foo *samplev1beta1.Foo) {
		foo.DeletionTimestamp = ptr.To(metav1.NewTime(fixedNow))
	}))
	c.handleFooDelete(newFoo("deleted", 1))
	c.handleFooDelete(cache.DeletedFinalStateUnknown{Key: "default/missed", Obj: newFoo("missed", 1)})
	assertQueue(t, c, []string{"default/scaled", "default/deleting", "default/deleted", "default/missed",
		"default/new-1", "default/new-2", "default/status-only"})
}
