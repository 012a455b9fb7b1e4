package main

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	samplev1beta1 "example.com/foo-controller/pkg/apis/samplecontroller/v1beta1"
	"example.com/foo-controller/pkg/changeevents"
	"example.com/foo-controller/pkg/plan"
)

// TestChangeEventsFollowingEditsArePaced: the Scaled and Updated Events
// that follow edits of a Foo are told at most once per
// changeEventInterval, the changes in between in one Event each when the
// interval ends, so the newest tells the last change; a change that puts
// back someone else's is told at once, after what is held.
func TestChangeEventsFollowingEditsArePaced(t *testing.T) {
	foo := newFoo("a", 1)
	dep := ownedDeployment(foo)
	f := newFixture(t).withFoo(foo).withDeployment(dep)
	_, ctx := ktesting.NewTestContext(t)
	c := f.newController(ctx)
	edited := func(gen int64) *samplev1beta1.Foo {
		e := foo.DeepCopy()
		e.Generation, e.Status.ObservedGeneration = gen, gen-1
		return e
	}
	caughtUp := foo.DeepCopy()
	caughtUp.Generation, caughtUp.Status.ObservedGeneration = 9, 9
	flush := func(foo *samplev1beta1.Foo, wantWait bool) {
		t.Helper()
		res := c.flushChanges(foo, c.memory.of(foo), plan.NewDeploymentView(dep))
		if (res.requeueAfter > 0) != wantWait || res.requeueAfter > changeEventInterval {
			t.Fatalf("flush: requeue after %v, want a wait: %v (at most %v)", res.requeueAfter, wantWait, changeEventInterval)
		}
	}

	// The first change is told at once.
	c.tellChanged(edited(2), c.memory.of(edited(2)), plan.NewDeploymentView(dep), changeevents.Change{Object: dep.Name, From: 1, To: 2})
	flush(edited(2), false)
	assertEvents(t, drainEvents(f.recorder), "Normal Scaled Scaled Deployment a-deploy from 1 to 2 replicas")

	// More within the interval: held, the sync asked to come back.
	f.clock.Step(500 * time.Millisecond)
	c.tellChanged(edited(3), c.memory.of(edited(3)), plan.NewDeploymentView(dep), changeevents.Change{Object: dep.Name, From: 2, To: 3})
	flush(edited(3), true)
	f.clock.Step(500 * time.Millisecond)
	c.tellChanged(edited(4), c.memory.of(edited(4)), plan.NewDeploymentView(dep), changeevents.Change{Object: dep.Name, From: 3, To: 4})
	c.tellChanged(edited(5), c.memory.of(edited(5)), plan.NewDeploymentView(dep), changeevents.Change{Object: dep.Name, Fields: []string{"image"}})
	c.tellChanged(edited(6), c.memory.of(edited(6)), plan.NewDeploymentView(dep), changeevents.Change{Object: dep.Name, From: 4, To: 1})
	c.tellChanged(edited(7), c.memory.of(edited(7)), plan.NewDeploymentView(dep), changeevents.Change{Object: dep.Name, Fields: []string{"containerPort"}})
	flush(edited(7), true)
	assertEvents(t, drainEvents(f.recorder))

	// The interval over: one Event per reason, timed from the first held.
	f.clock.Step(time.Second)
	flush(edited(7), false)
	assertEvents(t, drainEvents(f.recorder),
		"Normal Updated Updated Deployment a-deploy: [image containerPort], through 2 updates in 1.5s",
		"Normal Scaled Scaled Deployment a-deploy from 2 to 1 replicas, through 3 scales in 1.5s")
	flush(edited(7), false)
	assertEvents(t, drainEvents(f.recorder))

	// Someone else's change put back (the Foo's status caught up): told at
	// once, each time, and after what was held, so the newest is the last.
	f.clock.Step(100 * time.Millisecond)
	c.tellChanged(edited(8), c.memory.of(edited(8)), plan.NewDeploymentView(dep), changeevents.Change{Object: dep.Name, From: 1, To: 3}) // held: within the interval
	c.tellChanged(caughtUp, c.memory.of(caughtUp), plan.NewDeploymentView(dep), changeevents.Change{Object: dep.Name, From: 9, To: 3})
	c.tellChanged(caughtUp, c.memory.of(caughtUp), plan.NewDeploymentView(dep), changeevents.Change{Object: dep.Name, Fields: []string{"image"}})
	flush(caughtUp, false)
	assertEvents(t, drainEvents(f.recorder),
		"Normal Scaled Scaled Deployment a-deploy from 1 to 3 replicas",
		"Normal Scaled Scaled Deployment a-deploy from 9 to 3 replicas",
		"Normal Updated Updated Deployment a-deploy: [image]")

	// A Foo created again under the name does not tell its predecessor's.
	c.tellChanged(edited(9), c.memory.of(edited(9)), plan.NewDeploymentView(dep), changeevents.Change{Object: dep.Name, From: 1, To: 3})
	successor := edited(2)
	successor.UID = "a-successor"
	flush(successor, false)
	assertEvents(t, drainEvents(f.recorder))

	// At shutdown, what is held is told.
	f.clock.Step(100 * time.Millisecond)
	c.tellChanged(edited(10), c.memory.of(edited(10)), plan.NewDeploymentView(dep), changeevents.Change{Object: dep.Name, From: 3, To: 5})
	c.tellChanged(edited(11), c.memory.of(edited(11)), plan.NewDeploymentView(dep), changeevents.Change{Object: dep.Name, From: 5, To: 6})
	c.flushAllChanges()
	assertEvents(t, drainEvents(f.recorder), "Normal Scaled Scaled Deployment a-deploy from 3 to 6 replicas, through 2 scales in 0s")
}

// TestNoEventsInANamespaceBeingDeleted: the API server refuses new
// objects in a namespace being deleted, and nobody is left to read them.
func TestNoEventsInANamespaceBeingDeleted(t *testing.T) {
	foo := newFoo("a", 1)
	foo.Status.ObservedGeneration = foo.Generation
	dep := ownedDeployment(foo)
	f := newFixture(t).withFoo(foo).withDeployment(dep).withNamespace(&corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{Name: testNS, DeletionTimestamp: ptr.To(metav1.NewTime(fixedNow))}})
	_, ctx := ktesting.NewTestContext(t)
	c := f.newController(ctx)
	c.tellChanged(foo, c.memory.of(foo), plan.NewDeploymentView(dep), changeevents.Change{Object: dep.Name, From: 7, To: 1})
	c.event(foo, plan.NewDeploymentView(dep), corev1.EventTypeWarning, "Test", "Test", "a warning")
	assertEvents(t, drainEvents(f.recorder))
}
