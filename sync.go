package main

import (
	"context"
	"errors"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	appsv1apply "k8s.io/client-go/applyconfigurations/apps/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	samplev1beta1 "example.com/foo-controller/pkg/apis/samplecontroller/v1beta1"
	"example.com/foo-controller/pkg/caches"
	"example.com/foo-controller/pkg/changeevents"
	"example.com/foo-controller/pkg/plan"
)

// syncHandler converges one Foo and says what should happen next (see
// syncResult). It reads the Foo and its Deployment from the informer caches
// (never modifying cached objects; the few reads from the API server are named
// where they are made: deletedMeanwhile, orphanDeployments, writeStatus) and
// sends a request only for something that differs from what the Foo declares.
// In order: the Foo; its deletion and finalizer; its Deployment, created if
// missing, checked to be ours, put back where it drifted; Deployments left
// under an old name; the status; when to look again. What a production concern
// adds is one named call, explained where it is defined.
func (c *Controller) syncHandler(ctx context.Context, key cache.ObjectName) (syncResult, error) {
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "foo", klog.KRef(key.Namespace, key.Name))
	ctx = klog.NewContext(ctx, logger)
	start := c.clock.Now()
	defer func() { logger.V(4).Info("Finished syncing Foo", "duration", c.clock.Since(start)) }()

	// The Foo, from the cache: shared with it, never modified.
	foo, err := c.foosLister.In(key.Namespace).Get(key.Name)
	if apierrors.IsNotFound(err) {
		// Deleted. The garbage collector removes its Deployment (with the
		// Orphan policy, finalize removed the owner reference first).
		logger.V(4).Info("Foo no longer exists")
		c.memory.forget(key)
		return syncResult{}, nil
	}
	if err != nil {
		return syncResult{}, err
	}
	rec := c.memory.of(foo) // what we remember of it between syncs (memory.go)

	if foo.DeletionTimestamp != nil {
		return syncResult{}, c.finalize(ctx, foo)
	}
	if foo, err = c.syncFinalizer(ctx, foo); err != nil || foo == nil { // nil: gone meanwhile
		return syncResult{}, err
	}

	obs, held, err := c.syncDeployment(ctx, foo, rec)
	switch {
	case apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
		// The namespace is being deleted, and with it this Foo: nothing
		// can be created in it any more, and nobody is left to tell. No
		// status, no Event, no retry: the Foo's deletion ends it.
		logger.V(2).Info("Namespace is being deleted; not creating the Deployment", "deployment", foo.Spec.Deployment.Name)
		return syncResult{}, nil
	case errors.Is(err, errDeletedMeanwhile):
		// Its Deployment went with it (the garbage collector): nothing to
		// create, and nothing to report on.
		return syncResult{}, nil
	case c.mustReport(rec, err): // failures.go
		// The API server refused the Deployment (quota, admission policy),
		// or keeps failing it: the user must see why, on the Foo. The
		// error is still returned, so the apply is retried with backoff.
		_, statusErr := c.syncStatus(ctx, foo, rec, plan.Refused(obs, err))
		return syncResult{}, errors.Join(err, statusErr)
	case err != nil:
		return syncResult{}, err
	case held.requeueAfter > 0:
		// A correction is held back (corrections.go): the Deployment is
		// about to be put back, so there is nothing to prune or report
		// from it yet.
		return held, nil
	}

	// Delete Deployments left from an earlier spec.deployment.name only once
	// the current one is ours and in place: while the new name is blocked,
	// the old Deployment keeps serving. A failed delete does not hold back
	// the status, which describes the current Deployment: it is returned
	// with the status write's error, and retried with backoff.
	var pruneErr error
	if !obs.Conflict && !obs.Waiting {
		pruneErr = c.pruneDeployments(ctx, foo, rec)
	}
	res, err := c.syncStatus(ctx, foo, rec, obs)
	if err := errors.Join(pruneErr, err); err != nil {
		return syncResult{}, err
	}
	return c.lookAgain(foo, rec, obs.Deployment, res), nil
}

// lookAgain is the sync's one decision about when to come back, the
// soonest of what waits for a known time: a status write the pacer held
// back (res), a Deployment the informer has not seen yet (caches.go), a
// correction the API server did not keep (corrections.go), Events held back
// (events.go). Nothing waiting: done, until a watched change.
func (c *Controller) lookAgain(foo *samplev1beta1.Foo, rec *record, dep *plan.DeploymentView, res syncResult) syncResult {
	return res.soonest(c.recheckUnseen(dep)).soonest(c.retryOverridden(rec)).soonest(c.flushChanges(foo, rec, dep))
}

// Event reasons. Events are recorded only when the controller changes
// something or a condition begins, never once per sync.
const (
	reasonCreated = "Created"
	reasonAdopted = "Adopted"
	reasonPruned  = "Pruned"
	// reasonContested (a Warning) says that something else keeps changing
	// a Deployment the controller manages.
	reasonContested = "Contested"
)

// syncDeployment makes the Deployment named in foo's spec exist in the
// declared shape, unless that name belongs to someone else. On an error,
// the observation still holds the Deployment found, if any. A positive
// held.requeueAfter says that a correction is held back until then (see
// corrections.go): the observation is then empty, since the Deployment is
// about to be put back.
func (c *Controller) syncDeployment(ctx context.Context, foo *samplev1beta1.Foo, rec *record) (obs plan.Observation, held syncResult, err error) {
	logger := klog.FromContext(ctx)
	dep, err := c.deploymentsLister.In(foo.Namespace).Get(foo.Spec.Deployment.Name)
	if apierrors.IsNotFound(err) {
		if c.namespaceGoing(foo.Namespace) {
			// The API server would refuse it (NamespaceTerminating).
			logger.V(4).Info("Namespace is being deleted; not creating the Deployment")
			return plan.Observation{}, syncResult{}, nil
		}
		if err := c.deletedMeanwhile(ctx, foo, rec); err != nil { // caches.go
			return plan.Observation{}, syncResult{}, err
		}
		return c.createDeployment(ctx, foo, rec)
	}
	if err != nil {
		return plan.Observation{}, syncResult{}, err
	}

	ownership := plan.Classify(dep, foo)
	switch {
	case ownership == plan.Superseded || dep.DeletionTimestamp != nil:
		// Going away (its deletion event brings the Foo back to create it
		// anew). Never adopt or update an object that is being deleted.
		logger.V(4).Info("Waiting for the old Deployment to be deleted", "deployment", klog.KObj(dep))
		return plan.Observation{Deployment: dep, Waiting: true}, syncResult{}, nil
	case ownership == plan.Foreign:
		// Reported through the Ready and Stalled conditions (and a Warning
		// when Stalled begins, in syncStatus); nothing to retry: the name
		// index brings the Foo back when that Deployment changes or goes.
		logger.V(4).Info("Deployment is not controlled by this Foo; leaving it alone", "deployment", klog.KObj(dep))
		return plan.Observation{Deployment: dep, Conflict: true}, syncResult{}, nil
	}

	drift := plan.Drift(foo, dep)
	if len(drift) == 0 {
		rec.overridden.Clear() // nothing overridden any more: no retry to come back for
		return plan.Observation{Deployment: dep}, syncResult{}, nil
	}
	if c.keptOverridden(ctx, foo, rec, dep, drift) { // corrections.go
		// The API server rewrote our last correction, and nobody changed
		// anything since: correcting it again would only be rewritten
		// again, and our own write's event would bring us back, forever.
		return plan.Observation{Deployment: dep, Overridden: drift}, syncResult{}, nil
	}
	return c.correctDeployment(ctx, foo, rec, dep, ownership, drift)
}

// createDeployment applies the Deployment the Foo declares, which creates
// it. If the cache is behind and a foreign Deployment of this name was just
// created, the apply fails instead of taking it over: it would have to
// change that Deployment's selector, which is immutable.
func (c *Controller) createDeployment(ctx context.Context, foo *samplev1beta1.Foo, rec *record) (plan.Observation, syncResult, error) {
	created, err := c.applyDeployment(ctx, foo)
	if err != nil {
		return plan.Observation{}, syncResult{}, err
	}
	klog.FromContext(ctx).V(2).Info("Created Deployment", "deployment", klog.KObj(created))
	c.event(foo, created, corev1.EventTypeNormal, reasonCreated, "CreateDeployment",
		"Created Deployment %s with %d replicas", created.Name, plan.Replicas(foo))
	c.noteOverridden(ctx, foo, rec, created) // a mutating policy may rewrite it at once (corrections.go)
	return plan.Observation{Deployment: created}, syncResult{}, nil
}

// correctDeployment puts back what drifted in our Deployment and tells the
// user once.
func (c *Controller) correctDeployment(ctx context.Context, foo *samplev1beta1.Foo, rec *record, dep *plan.DeploymentView,
	ownership plan.Ownership, drift []string) (plan.Observation, syncResult, error) {
	// Someone changed our Deployment: put it back, but if they keep doing
	// so, only as often as the corrections limiter allows (corrections.go).
	fight := c.reserveCorrection(ctx, foo, rec, dep, drift)
	if fight.Wait > 0 {
		return plan.Observation{}, requeueAfter(fight.Wait), nil
	}
	updated, wrote, err := c.putBack(ctx, foo, dep)
	if wrote {
		c.correctionMade(foo, rec)
	}
	if err != nil {
		// The Deployment we failed to change still serves: if the API
		// server refused the change, the status reports that Deployment
		// beside the refusal, not zero replicas.
		return plan.Observation{Deployment: dep}, syncResult{}, err
	}
	// Report only what the apply really fixed: a field that still differs
	// in the API server's answer is being set back by something else (a
	// mutating admission webhook, say), and an Event per sync for it would
	// be noise.
	still := c.noteOverridden(ctx, foo, rec, updated)
	if len(still) > 0 {
		drift = slices.DeleteFunc(drift, func(f string) bool { return slices.Contains(still, f) })
		if len(drift) == 0 {
			return plan.Observation{Deployment: updated, Overridden: still}, syncResult{}, nil
		}
	}
	klog.FromContext(ctx).V(2).Info("Updated Deployment", "deployment", klog.KObj(updated), "drift", drift)
	switch {
	case fight.Contested:
		// Reported once, when the fight began.
	case ownership == plan.Orphaned:
		c.event(foo, updated, corev1.EventTypeNormal, reasonAdopted, "AdoptDeployment",
			"Adopted Deployment %s again after its owner reference was removed", updated.Name)
	case len(drift) == 1 && drift[0] == "replicas":
		c.tellChanged(foo, rec, updated, changeevents.Change{Object: updated.Name, From: replicasOf(dep), To: plan.Replicas(foo)})
	default:
		c.tellChanged(foo, rec, updated, changeevents.Change{Object: updated.Name, Fields: drift})
	}
	return plan.Observation{Deployment: updated, Overridden: still}, syncResult{}, nil
}

// applyDeployment server-side applies the Deployment foo declares. Force
// takes back fields another manager changed (that is the drift we correct);
// fields we do not declare keep their other owners.
func (c *Controller) applyDeployment(ctx context.Context, foo *samplev1beta1.Foo) (*plan.DeploymentView, error) {
	return c.apply(ctx, foo, plan.DesiredDeployment(foo))
}

// apply server-side applies a Deployment of foo's, and remembers the
// answer in front of the cache (see ownwrites.Lister).
func (c *Controller) apply(ctx context.Context, foo *samplev1beta1.Foo, desired *appsv1apply.DeploymentApplyConfiguration) (*plan.DeploymentView, error) {
	dep, err := c.kubeclientset.AppsV1().Deployments(foo.Namespace).Apply(ctx, desired,
		metav1.ApplyOptions{FieldManager: controllerName, Force: true})
	if err != nil {
		return nil, fmt.Errorf("applying Deployment %s: %w", foo.Spec.Deployment.Name, err)
	}
	view := plan.NewDeploymentView(dep)
	c.deploymentsLister.Mutation(view) // read before the informer has it
	return view, nil
}

// putBack applies foo's Deployment over dep, which has drifted, and also
// removes the list entries another writer left that an apply cannot
// (plan.PutBack says how).
func (c *Controller) putBack(ctx context.Context, foo *samplev1beta1.Foo, dep *plan.DeploymentView) (*plan.DeploymentView, bool, error) {
	return plan.PutBack(klog.FromContext(ctx), foo, dep, plan.DeploymentWrites{
		Apply: func(desired *appsv1apply.DeploymentApplyConfiguration) (*plan.DeploymentView, error) {
			return c.apply(ctx, foo, desired)
		},
		JSONPatch: func(name string, patch []byte) (*plan.DeploymentView, error) {
			patched, err := c.kubeclientset.AppsV1().Deployments(foo.Namespace).Patch(ctx, name, types.JSONPatchType, patch,
				metav1.PatchOptions{FieldManager: controllerName})
			if err != nil {
				return nil, err
			}
			view := plan.NewDeploymentView(patched)
			c.deploymentsLister.Mutation(view)
			return view, nil
		},
	})
}

// pruneDeployments deletes the Deployments foo controls under a name it no
// longer declares (after spec.deployment.name changed). Looking costs a
// walk of our recent writes (caches.go, needPrune), so it is done once per
// spec, or when the informer shows a leftover.
func (c *Controller) pruneDeployments(ctx context.Context, foo *samplev1beta1.Foo, rec *record) error {
	if !c.needPrune(foo, rec) {
		return nil
	}
	objs, err := c.deploymentsLister.ByIndex(caches.DeploymentByFooUID, string(foo.UID))
	if err != nil {
		return err
	}
	for _, obj := range objs {
		dep := obj.(*plan.DeploymentView)
		if dep.Name == foo.Spec.Deployment.Name || dep.DeletionTimestamp != nil || !plan.IsControlledBy(dep, foo.UID) {
			continue
		}
		// The UID precondition makes sure we delete exactly the object we
		// decided about, not a same-named successor.
		err := c.kubeclientset.AppsV1().Deployments(dep.Namespace).Delete(ctx, dep.Name, metav1.DeleteOptions{
			Preconditions: &metav1.Preconditions{UID: &dep.UID},
		})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("deleting old Deployment %s: %w", dep.Name, err)
		}
		klog.FromContext(ctx).V(2).Info("Deleted old Deployment", "deployment", klog.KObj(dep))
		c.event(foo, dep, corev1.EventTypeNormal, reasonPruned, "DeleteDeployment",
			"Deleted Deployment %s: spec.deployment.name is now %s", dep.Name, foo.Spec.Deployment.Name)
	}
	rec.pruned = prunedOf(foo)
	return nil
}

func replicasOf(dep *plan.DeploymentView) int32 {
	if dep.Spec.Replicas == nil {
		return 1
	}
	return *dep.Spec.Replicas
}
