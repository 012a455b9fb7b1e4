package main

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	samplev1beta1 "example.com/foo-controller/pkg/apis/samplecontroller/v1beta1"
	"example.com/foo-controller/pkg/plan"
)

// statusProgressInterval is how long a status change that only moves progress
// (counts, messages, the reasons of a condition that stays as it is:
// plan.ProgressOnly) may wait to be written with the next one. A rollout
// changes the Deployment's status several times before it is available;
// writing each costs a request per change per Foo, and the transitions that
// matter (a condition flipping, a new generation, a new problem) are written
// at once anyway.
const statusProgressInterval = 2 * time.Second

// syncStatus writes foo's status through the status subresource, and only if
// it changed: an unchanged Foo costs no request. When the Stalled condition
// begins (a problem the user must act on, or that will not resolve by
// itself), or its reason or message changes, it records one Warning Event —
// after the write, so a failed write (retried) cannot repeat the Event. A
// write the pacer holds back is a requeue for when it may go out.
func (c *Controller) syncStatus(ctx context.Context, foo *samplev1beta1.Foo, rec *record, obs plan.Observation) (syncResult, error) {
	now := metav1.NewTime(c.clock.Now().Truncate(time.Second)) // the API stores seconds
	want := plan.Status(foo, obs, now)
	if plan.StatusEqual(foo.Status, want) {
		return syncResult{}, nil
	}
	if want.ObservedGeneration == foo.Status.ObservedGeneration && c.namespaceGoing(foo.Namespace) {
		// Its pods and Deployment are being deleted with it: each loss
		// would be a status write (and an Event) to a Foo about to go. An
		// edit of the Foo is still acknowledged: a stuck pod can hold a
		// namespace in deletion for as long as it likes.
		klog.FromContext(ctx).V(4).Info("Namespace is being deleted; not reporting")
		return syncResult{}, nil
	}
	deferrable := plan.ProgressOnly(foo.Status, want)
	if plan.FirstProgress(foo.Status, want) {
		// A new Foo: its first "progressing" waits like a progress-only
		// change, from this sync on.
		rec.statusPace.Begin(c.clock.Now())
		deferrable = true
	}
	if deferrable {
		// Only progress to report: write it together with whatever comes
		// next, at most every statusProgressInterval. The key comes back
		// then, unless a change worth writing at once brings it back earlier.
		if wait := rec.statusPace.Wait(statusProgressInterval, c.clock.Now()); wait > 0 {
			klog.FromContext(ctx).V(4).Info("Deferring a progress-only status update", "after", wait)
			return requeueAfter(wait), nil
		}
	}
	updated, err := c.writeStatus(ctx, foo, want)
	if apierrors.IsNotFound(err) {
		return syncResult{}, nil // deleted meanwhile; nothing left to report on
	}
	if err != nil {
		return syncResult{}, fmt.Errorf("writing status: %w", err)
	}
	c.foosLister.Mutation(trimmedFoo(updated)) // the next sync reads it, watched or not (section 6 of how-it-works)
	rec.statusPace.Wrote(c.clock.Now())

	ready := meta.FindStatusCondition(want.Conditions, samplev1beta1.ConditionReady)
	klog.FromContext(ctx).V(2).Info("Updated Foo status", "ready", ready.Status, "reason", ready.Reason,
		"availableReplicas", want.AvailableReplicas, "observedGeneration", want.ObservedGeneration)
	before := meta.FindStatusCondition(foo.Status.Conditions, samplev1beta1.ConditionStalled)
	after := meta.FindStatusCondition(want.Conditions, samplev1beta1.ConditionStalled)
	if after != nil && (before == nil || before.Reason != after.Reason || before.Message != after.Message) {
		c.event(foo, obs.Deployment, corev1.EventTypeWarning, after.Reason, "Reconcile", "%s", after.Message)
	}
	return syncResult{}, nil
}
