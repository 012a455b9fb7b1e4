package main

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	samplev1beta1 "example.com/foo-controller/pkg/apis/samplecontroller/v1beta1"
	"example.com/foo-controller/pkg/corrections"
	"example.com/foo-controller/pkg/metrics"
	"example.com/foo-controller/pkg/plan"
)

const (
	// correctionBurst and correctionEvery limit how often a Foo's
	// Deployment is put back while its Foo stays the same: a few one-off
	// edits (kubectl scale, kubectl edit) are undone at once, but a client
	// that keeps changing it gets one answer per second, not one per
	// change (see pkg/corrections and docs/reliability.md).
	correctionBurst = 5
	correctionEvery = time.Second
)

// correctionLimit is every Foo's limit; each Foo's fight so far is in its
// record.
var correctionLimit = corrections.New(correctionEvery, correctionBurst)

// reserveCorrection asks whether foo's Deployment may be put back now. If
// not, the sync comes back when it may (Wait): meanwhile the Deployment's
// status describes a spec we are about to replace, so the Foo's status is
// left as it is, and the user hears of the fight once (a Contested
// Warning), not once per correction.
func (c *Controller) reserveCorrection(ctx context.Context, foo *samplev1beta1.Foo, rec *record,
	dep *plan.DeploymentView, drift []string) corrections.Decision {
	fight := correctionLimit.Reserve(&rec.fight, foo.Generation, c.clock.Now())
	if fight.Wait > 0 {
		klog.FromContext(ctx).V(2).Info("Deployment keeps being changed by someone else; delaying the next correction",
			"deployment", klog.KObj(dep), "drift", drift, "after", fight.Wait)
		metrics.CorrectionsDelayed.Inc()
		if fight.FirstRefusal {
			c.event(foo, dep, corev1.EventTypeWarning, reasonContested, "CorrectDeployment",
				"Deployment %s keeps being changed by another client (%v); putting it back at most once per %v",
				dep.Name, drift, correctionEvery)
		}
	}
	return fight
}

// correctionMade counts a correction that wrote something. A write refused
// whole (an invalid value on the Foo) is retried with the workqueue's
// failure backoff, and is no fight.
func (c *Controller) correctionMade(foo *samplev1beta1.Foo, rec *record) {
	correctionLimit.Made(&rec.fight, foo.Generation, c.clock.Now())
}

// overriddenRetry is how long a correction the API server did not keep
// is left alone (corrections.Overridden). Then it is tried once more (the
// sync asks to come back then: retryOverridden): if the policy that
// rewrote it is gone, the Deployment gets our fields back without anyone
// touching the Foo; if not, that is one more correction per Foo per period
// (one write, or three for a rewritten port: see putBack), with no
// rollout.
const overriddenRetry = 10 * time.Minute

// keptOverridden reports whether dep is what the API server made of our
// last correction, for this spec, with nothing we own changed since: then
// it is left as it is.
func (c *Controller) keptOverridden(ctx context.Context, foo *samplev1beta1.Foo, rec *record, dep *plan.DeploymentView, drift []string) bool {
	if !rec.overridden.Kept(foo.Generation, plan.OwnedValues(foo, dep), c.clock.Now(), overriddenRetry) {
		return false
	}
	klog.FromContext(ctx).V(4).Info("Deployment is as the API server keeps it; not correcting it again", "deployment", klog.KObj(dep), "drift", drift)
	return true
}

// noteOverridden remembers, after a write of ours, the fields the API
// server did not keep, and returns them; a write it kept whole clears what
// was remembered.
func (c *Controller) noteOverridden(ctx context.Context, foo *samplev1beta1.Foo, rec *record, written *plan.DeploymentView) []string {
	still := plan.Drift(foo, written)
	if len(still) == 0 {
		rec.overridden.Clear()
		return nil
	}
	klog.FromContext(ctx).V(2).Info("The API server did not keep some of our fields; a mutating webhook may override them",
		"deployment", klog.KObj(written), "fields", still)
	rec.overridden.Note(foo.Generation, plan.OwnedValues(foo, written), c.clock.Now())
	return still
}

// retryOverridden asks to sync again when a correction the API server did
// not keep is due to be tried once more: without it, that retry would
// wait for a resync, and never come with -resync-period=0.
func (c *Controller) retryOverridden(rec *record) syncResult {
	return requeueAfter(rec.overridden.RetryIn(c.clock.Now(), overriddenRetry, time.Second))
}
