package main

import (
	"context"
	"time"

	"k8s.io/klog/v2"

	samplev1beta1 "example.com/foo-controller/pkg/apis/samplecontroller/v1beta1"
	"example.com/foo-controller/pkg/plan"
)

// A correction the API server accepts but does not keep (a mutating
// admission policy or webhook rewrites our fields) is reported, not
// fought: the Foo's Ready condition names the fields, and the controller
// tries again only every overriddenRetry, or when something changes.

// overridden is what the API server made of our last correction that it
// did not keep, for one spec (generation) of a Foo: the values of every
// field we own (plan.OwnedValues), so that the Deployment controller's
// status writes do not count as a change; and when it was seen.
type overridden struct {
	generation int64
	owned      string
	at         time.Time
}

// overriddenRetry is how long a correction the API server did not keep
// is left alone. Then it is tried once more (the sync asks to come back
// then: retryOverridden): if the policy that rewrote it is gone, the
// Deployment gets our fields back without anyone touching the Foo; if not,
// that is one more correction per Foo per period (one write, or three for
// a rewritten port: see putBack), with no rollout.
const overriddenRetry = 10 * time.Minute

// keptOverridden reports whether dep is what the API server made of our
// last correction, for this spec, recently, with nothing we own changed
// since: then it is left as it is.
func (c *Controller) keptOverridden(ctx context.Context, foo *samplev1beta1.Foo, rec *record, dep *plan.DeploymentView, drift []string) bool {
	last := rec.overridden
	if last == nil || last.generation != foo.Generation || last.owned != plan.OwnedValues(foo, dep) ||
		c.clock.Since(last.at) >= overriddenRetry {
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
		rec.overridden = nil
		return nil
	}
	klog.FromContext(ctx).V(2).Info("The API server did not keep some of our fields; a mutating webhook may override them",
		"deployment", klog.KObj(written), "fields", still)
	rec.overridden = &overridden{generation: foo.Generation, owned: plan.OwnedValues(foo, written), at: c.clock.Now()}
	return still
}

// retryOverridden asks to sync again when a correction the API server did
// not keep is due to be tried once more (see overriddenRetry): without it,
// that retry would wait for a resync, and never come with
// -resync-period=0.
func (c *Controller) retryOverridden(rec *record) syncResult {
	if rec.overridden == nil {
		return syncResult{}
	}
	return requeueAfter(max(overriddenRetry-c.clock.Since(rec.overridden.at), time.Second))
}
