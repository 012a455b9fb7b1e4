package main

import (
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"

	samplev1alpha1 "example.com/foo-controller/pkg/apis/samplecontroller/v1alpha1"
)

// TestScaledEventsFollowingEditsArePaced: the Scaled Events that follow
// edits of a Foo are told at most once per scaleEventInterval, the scales
// in between in one Event when the interval ends, so the last is always
// told; a scale that puts back someone else's change is told at once.
func TestScaledEventsFollowingEditsArePaced(t *testing.T) {
	foo := newFoo("a", 1)
	dep := ownedDeployment(foo)
	f := newFixture(t).withFoo(foo).withDeployment(dep)
	_, ctx := ktesting.NewTestContext(t)
	c := f.newController(ctx)
	edited := func(gen int64) *samplev1alpha1.Foo {
		e := foo.DeepCopy()
		e.Generation, e.Status.ObservedGeneration = gen, gen-1
		return e
	}
	flush := func(foo *samplev1alpha1.Foo, wantWait bool) {
		t.Helper()
		res := c.flushScaled(foo, dep)
		if (res.requeueAfter > 0) != wantWait || res.requeueAfter > scaleEventInterval {
			t.Fatalf("flush: requeue after %v, want a wait: %v (at most %v)", res.requeueAfter, wantWait, scaleEventInterval)
		}
	}

	// The first scale is told at once.
	c.tellScaled(edited(2), dep, 1, 2)
	flush(edited(2), false)
	assertEvents(t, drainEvents(f.recorder), "Normal Scaled Scaled Deployment a-deploy from 1 to 2 replicas")

	// Three more within the interval: held, the sync asked to come back.
	f.clock.Step(500 * time.Millisecond)
	c.tellScaled(edited(3), dep, 2, 3)
	flush(edited(3), true)
	f.clock.Step(500 * time.Millisecond)
	c.tellScaled(edited(4), dep, 3, 4)
	// A Foo whose status caught up meanwhile still joins what is held, so
	// that the last Event tells the last scale.
	caughtUp := edited(5)
	caughtUp.Status.ObservedGeneration = 5
	c.tellScaled(caughtUp, dep, 4, 1)
	flush(caughtUp, true)
	assertEvents(t, drainEvents(f.recorder))

	// The interval over: one Event for the three, timed from the first.
	f.clock.Step(scaleEventInterval - time.Second)
	flush(caughtUp, false)
	assertEvents(t, drainEvents(f.recorder), "Normal Scaled Scaled Deployment a-deploy from 2 to 1 replicas (3 scales in 1.5s)")
	flush(caughtUp, false)
	assertEvents(t, drainEvents(f.recorder))

	// Putting back someone else's change (the Foo unchanged): told at
	// once, each time; the corrections limiter bounds those.
	c.tellScaled(caughtUp, dep, 7, 1)
	c.tellScaled(caughtUp, dep, 7, 1)
	flush(caughtUp, false)
	assertEvents(t, drainEvents(f.recorder), "Normal Scaled Scaled Deployment a-deploy from 7 to 1 replicas",
		"Normal Scaled Scaled Deployment a-deploy from 7 to 1 replicas")

	// A Foo created again under the name does not tell its predecessor's.
	c.tellScaled(edited(6), dep, 1, 3)
	successor := edited(2)
	successor.UID = "a-successor"
	flush(successor, false)
	assertEvents(t, drainEvents(f.recorder))
}
