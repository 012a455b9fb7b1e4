package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	appsv1apply "k8s.io/client-go/applyconfigurations/apps/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	samplev1beta1 "example.com/foo-controller/pkg/apis/samplecontroller/v1beta1"
	"example.com/foo-controller/pkg/metrics"
	"example.com/foo-controller/pkg/plan"
)

// syncHandler converges one Foo and says what should happen next (see
// syncResult). It reads only from the informer cache (it never modifies
// cached objects) and sends a request only for something that differs from
// what the Foo declares.
func (c *Controller) syncHandler(ctx context.Context, key cache.ObjectName) (syncResult, error) {
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "foo", klog.KRef(key.Namespace, key.Name))
	ctx = klog.NewContext(ctx, logger)
	start := c.clock.Now()
	defer func() { logger.V(4).Info("Finished syncing Foo", "duration", c.clock.Since(start)) }()

	foo, err := c.getFoo(key)
	if err != nil {
		return syncResult{}, err
	}
	if foo == nil {
		// Deleted. The garbage collector removes its Deployment (with the
		// Orphan policy, finalize removed the owner reference first).
		logger.V(4).Info("Foo no longer exists")
		c.statusPacer.Forget(key)
		c.pruned.Delete(key)
		c.overridden.Delete(key)
		c.applyFailures.Delete(key)
		c.heldEvents.Delete(key)
		c.changeEvents.Forget(key)
		return syncResult{}, nil
	}

	if foo.DeletionTimestamp != nil {
		return syncResult{}, c.finalize(ctx, foo)
	}
	foo, err = c.syncFinalizer(ctx, foo)
	if err != nil || foo == nil {
		return syncResult{}, err
	}
	obs, held, err := c.syncDeployment(ctx, foo)
	if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
		// The namespace is being deleted, and with it this Foo: nothing
		// can be created in it any more, and nobody is left to tell. No
		// status, no Event, no retry: the Foo's deletion ends it.
		logger.V(2).Info("Namespace is being deleted; not creating the Deployment", "deployment", foo.Spec.Deployment.Name)
		return syncResult{}, nil
	}
	if err != nil {
		if !isPermanent(err) && !c.persists(key, err) {
			return syncResult{}, err
		}
		// The API server refused the Deployment itself (quota, admission
		// policy, ...), or answers every try with an error of another kind
		// (an admission webhook it cannot call): the user must see why, on
		// the Foo. The error is still returned, so the apply is retried
		// with backoff. The condition's message names the Deployment
		// already: it quotes the API server's own words, not our wrapping
		// of them.
		obs.ApplyError = err
		var refusal *apierrors.StatusError
		if errors.As(err, &refusal) {
			obs.ApplyError = refusal
		}
		_, statusErr := c.syncStatus(ctx, foo, obs)
		return syncResult{}, errors.Join(err, statusErr)
	}
	c.applyFailures.Delete(key)
	if held.requeueAfter > 0 {
		// A correction is held back: the Deployment is about to be put
		// back, so there is nothing to prune or report from it yet.
		return held, nil
	}
	// Delete Deployments left from an earlier spec.deployment.name only once
	// the current one is ours and in place: while the new name is blocked,
	// the old Deployment keeps serving. A failed delete does not hold back
	// the status, which describes the current Deployment: it is returned
	// with the status write's error, and retried with backoff.
	var pruneErr error
	if !obs.Conflict && !obs.Waiting {
		pruneErr = c.pruneDeployments(ctx, foo)
	}
	res, err := c.syncStatus(ctx, foo, obs)
	if err := errors.Join(pruneErr, err); err != nil {
		return syncResult{}, err
	}
	return res.soonest(c.recheckUnseen(obs.Deployment)).soonest(c.retryOverridden(foo)).soonest(c.flushChanges(foo, obs.Deployment)), nil
}

// Event reasons. Events are recorded only when the controller changes
// something or a condition begins, never once per sync.
const (
	reasonCreated = "Created"
	reasonScaled  = "Scaled"
	reasonUpdated = "Updated"
	reasonAdopted = "Adopted"
	reasonPruned  = "Pruned"
	// reasonContested (a Warning) says that something else keeps changing
	// a Deployment the controller manages.
	reasonContested = "Contested"
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

// syncDeployment makes the Deployment named in foo's spec exist in the
// declared shape, unless that name belongs to someone else. On an error,
// the observation still holds the Deployment found, if any. A positive
// held.requeueAfter says that a correction is held back until then (see
// corrections): the observation is then empty, since the Deployment is
// about to be put back.
func (c *Controller) syncDeployment(ctx context.Context, foo *samplev1beta1.Foo) (obs plan.Observation, held syncResult, err error) {
	logger := klog.FromContext(ctx)
	dep, err := c.getDeployment(foo.Namespace, foo.Spec.Deployment.Name)
	if err != nil {
		return plan.Observation{}, syncResult{}, err
	}
	if dep == nil {
		if c.namespaceGoing(foo.Namespace) {
			// The API server would refuse it (NamespaceTerminating).
			logger.V(4).Info("Namespace is being deleted; not creating the Deployment")
			return plan.Observation{}, syncResult{}, nil
		}
		return c.createDeployment(ctx, foo)
	}

	ownership := plan.Classify(dep, foo)
	switch {
	case ownership == plan.Superseded || dep.DeletionTimestamp != nil:
		// Going away (its deletion event brings the Foo back to create it
		// anew). Never adopt or update an object that is being deleted.
		logger.V(4).Info("Waiting for the old Deployment to be deleted", "deployment", klog.KObj(dep))
		return plan.Observation{Deployment: dep, Waiting: true}, syncResult{}, nil
	case ownership == plan.Foreign:
		// Reported through the Ready condition (and a Warning when that
		// condition begins, in syncStatus); nothing to retry: the name
		// index brings the Foo back when that Deployment changes or goes.
		logger.V(4).Info("Deployment is not controlled by this Foo; leaving it alone", "deployment", klog.KObj(dep))
		return plan.Observation{Deployment: dep, Conflict: true}, syncResult{}, nil
	}

	key := cache.MetaObjectToName(foo)
	drift := plan.Drift(foo, dep)
	if len(drift) == 0 {
		// Nothing overridden any more (the policy went, or the Foo now
		// asks for what it sets): no retry to come back for.
		c.overridden.Delete(key)
		return plan.Observation{Deployment: dep}, syncResult{}, nil
	}
	if last, ok := c.overridden.Load(key); ok && last.(overridden).state == overriddenOf(foo, dep) &&
		c.clock.Since(last.(overridden).at) < overriddenRetry {
		// This is what the API server made of our last correction, for
		// this spec, and nobody has changed what we own since: correcting
		// it again would only be overridden again, and our own write's
		// event would bring us back here, forever.
		logger.V(4).Info("Deployment is as the API server keeps it; not correcting it again", "deployment", klog.KObj(dep), "drift", drift)
		return plan.Observation{Deployment: dep, Overridden: drift}, syncResult{}, nil
	}
	return c.correctDeployment(ctx, foo, dep, ownership, drift)
}

// createDeployment applies the Deployment the Foo declares, which creates
// it. If the cache is behind and a foreign Deployment of this name was just
// created, the apply fails instead of taking it over: it would have to
// change that Deployment's selector, which is immutable.
func (c *Controller) createDeployment(ctx context.Context, foo *samplev1beta1.Foo) (plan.Observation, syncResult, error) {
	created, err := c.applyDeployment(ctx, foo)
	if err != nil {
		return plan.Observation{}, syncResult{}, err
	}
	klog.FromContext(ctx).V(2).Info("Created Deployment", "deployment", klog.KObj(created))
	c.event(foo, created, corev1.EventTypeNormal, reasonCreated, "CreateDeployment",
		"Created Deployment %s with %d replicas", created.Name, plan.Replicas(foo))
	c.noteOverridden(ctx, foo, created)
	return plan.Observation{Deployment: created}, syncResult{}, nil
}

// correctDeployment puts back what drifted in our Deployment, as often as
// the corrections limiter allows, and tells the user once.
func (c *Controller) correctDeployment(ctx context.Context, foo *samplev1beta1.Foo, dep *plan.DeploymentView,
	ownership plan.Ownership, drift []string) (plan.Observation, syncResult, error) {
	logger := klog.FromContext(ctx)
	// Someone changed our Deployment. Put it back, but if they keep doing
	// so, only as often as the corrections limiter allows: the sync asks to
	// come back when the limiter has a token. Meanwhile the Deployment's status
	// describes a spec we are about to replace, so the Foo's status is
	// left as it is; and the user hears about the fight once, not once
	// per correction.
	fight := c.corrections.Reserve(foo.UID, foo.Generation, c.clock.Now())
	if fight.Wait > 0 {
		logger.V(2).Info("Deployment keeps being changed by someone else; delaying the next correction",
			"deployment", klog.KObj(dep), "drift", drift, "after", fight.Wait)
		metrics.CorrectionsDelayed.Inc()
		if fight.FirstRefusal {
			c.event(foo, dep, corev1.EventTypeWarning, reasonContested, "CorrectDeployment",
				"Deployment %s keeps being changed by another client (%v); putting it back at most once per %v",
				dep.Name, drift, correctionEvery)
		}
		return plan.Observation{}, requeueAfter(fight.Wait), nil
	}
	updated, wrote, err := c.putBack(ctx, foo, dep)
	if wrote {
		// Counted only if something was written: a write refused whole
		// (an invalid value on the Foo) is retried with the workqueue's
		// failure backoff, and is no fight.
		c.corrections.Made(foo.UID, foo.Generation, c.clock.Now())
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
	still := c.noteOverridden(ctx, foo, updated)
	if len(still) > 0 {
		drift = slices.DeleteFunc(drift, func(f string) bool { return slices.Contains(still, f) })
		if len(drift) == 0 {
			return plan.Observation{Deployment: updated, Overridden: still}, syncResult{}, nil
		}
	}
	logger.V(2).Info("Updated Deployment", "deployment", klog.KObj(updated), "drift", drift)
	switch {
	case fight.Contested:
		// Reported once, when the fight began.
	case ownership == plan.Orphaned:
		c.event(foo, updated, corev1.EventTypeNormal, reasonAdopted, "AdoptDeployment",
			"Adopted Deployment %s again after its owner reference was removed", updated.Name)
	case len(drift) == 1 && drift[0] == "replicas":
		c.tellChanged(foo, updated, replicasOf(dep), plan.Replicas(foo), nil)
	default:
		c.tellChanged(foo, updated, 0, 0, drift)
	}
	return plan.Observation{Deployment: updated, Overridden: still}, syncResult{}, nil
}

// noteOverridden remembers, after a write of ours, the fields the API
// server did not keep (see overriddenState), and returns them; a write it
// kept whole clears what was remembered.
func (c *Controller) noteOverridden(ctx context.Context, foo *samplev1beta1.Foo, written *plan.DeploymentView) []string {
	key := cache.MetaObjectToName(foo)
	still := plan.Drift(foo, written)
	if len(still) == 0 {
		c.overridden.Delete(key)
		return nil
	}
	klog.FromContext(ctx).V(2).Info("The API server did not keep some of our fields; a mutating webhook may override them",
		"deployment", klog.KObj(written), "fields", still)
	c.overridden.Store(key, overridden{state: overriddenOf(foo, written), at: c.clock.Now()})
	return still
}

// retryOverridden asks to sync foo again when a correction the API server
// did not keep is due to be tried once more (see overriddenRetry): without
// it, that retry would wait for a resync, and never come with
// -resync-period=0.
func (c *Controller) retryOverridden(foo *samplev1beta1.Foo) syncResult {
	last, ok := c.overridden.Load(cache.MetaObjectToName(foo))
	if !ok || last.(overridden).state.uid != foo.UID {
		return syncResult{}
	}
	return requeueAfter(max(overriddenRetry-c.clock.Since(last.(overridden).at), time.Second))
}

// applyDeployment server-side applies the Deployment foo declares. Force
// takes back fields another manager changed (that is the drift we correct);
// fields we do not declare keep their other owners.
func (c *Controller) applyDeployment(ctx context.Context, foo *samplev1beta1.Foo) (*plan.DeploymentView, error) {
	return c.apply(ctx, foo, plan.DesiredDeployment(foo))
}

// apply server-side applies a Deployment of foo's.
func (c *Controller) apply(ctx context.Context, foo *samplev1beta1.Foo, desired *appsv1apply.DeploymentApplyConfiguration) (*plan.DeploymentView, error) {
	dep, err := c.kubeclientset.AppsV1().Deployments(foo.Namespace).Apply(ctx, desired,
		metav1.ApplyOptions{FieldManager: controllerName, Force: true})
	if err != nil {
		return nil, fmt.Errorf("applying Deployment %s: %w", foo.Spec.Deployment.Name, err)
	}
	view := plan.NewDeploymentView(dep)
	c.deployments.Mutation(view)
	return view, nil
}

// putBack applies foo's Deployment over dep, which has drifted. An apply
// takes back every field we own, but it cannot remove a list entry that
// another writer owns: when someone re-keyed our "http" port, the API
// server refuses the apply (duplicate port name), or, with the port unset
// on the Foo, accepts it and leaves theirs. Such strays are removed by a
// JSON patch. After an accepted apply, only if removing them converges the
// Deployment (plan.StrayEntriesPatch): otherwise the API server is not
// keeping what we declare (a mutating admission policy), and
// syncDeployment reports that instead of fighting it. After a refused
// apply, the patch puts our entry in their place (plan.ReplaceStrayEntriesPatch)
// and the apply is sent again; if the API server rewrote our entry once
// more, the apply is sent without it (plan.DesiredDeploymentWithoutPorts),
// so that the rest is still put back and no pod template ever lacks the
// port.
func (c *Controller) putBack(ctx context.Context, foo *samplev1beta1.Foo, dep *plan.DeploymentView) (updated *plan.DeploymentView, wrote bool, err error) {
	updated, err = c.applyDeployment(ctx, foo)
	switch {
	case err == nil && (len(plan.Drift(foo, updated)) == 0 || !plan.RemovingStraysConverges(foo, updated)):
		return updated, true, nil
	case err == nil:
		updated, err = c.removeStrays(ctx, foo, updated, plan.StrayEntriesPatch)
		return updated, true, err
	case !apierrors.IsInvalid(err):
		return nil, false, err
	}
	if _, ok, _ := plan.StrayEntriesPatch(foo, dep); !ok {
		return nil, false, err // refused for another reason
	}
	replaced, err := c.removeStrays(ctx, foo, dep, plan.ReplaceStrayEntriesPatch)
	if err != nil {
		return nil, false, err
	}
	if slices.Contains(plan.Drift(foo, replaced), "containerPort") {
		klog.FromContext(ctx).V(2).Info("The API server rewrote the port we put back; applying the other fields without it",
			"deployment", klog.KObj(replaced))
		updated, err = c.apply(ctx, foo, plan.DesiredDeploymentWithoutPorts(foo))
		return updated, true, err
	}
	updated, err = c.applyDeployment(ctx, foo)
	return updated, true, err
}

// removeStrays removes the list entries of dep that foo does not declare
// and that are ours to keep absent, with the patch strayPatch makes
// (plan.StrayEntriesPatch, or ReplaceStrayEntriesPatch to put ours in
// their place), and returns dep as the API server then has it (dep itself
// when there is nothing to remove).
func (c *Controller) removeStrays(ctx context.Context, foo *samplev1beta1.Foo, dep *plan.DeploymentView,
	strayPatch func(*samplev1beta1.Foo, *plan.DeploymentView) ([]byte, bool, error)) (*plan.DeploymentView, error) {
	patch, ok, err := strayPatch(foo, dep)
	if err != nil || !ok {
		return dep, err
	}
	patched, err := c.kubeclientset.AppsV1().Deployments(dep.Namespace).Patch(ctx, dep.Name, types.JSONPatchType, patch,
		metav1.PatchOptions{FieldManager: controllerName})
	if plan.FailedTest(err) {
		// Not wrapped (%v): a failed "test" comes back as 422 Invalid, but
		// it means only that our copy is behind; the watch brings the
		// newer one. It is retried like any failed request, not reported
		// as a refused Deployment.
		return nil, fmt.Errorf("removing entries another writer left in Deployment %s: %v", dep.Name, err) //nolint:errorlint // not a refusal: see above
	}
	if err != nil {
		// Anything else is what it says: an admission policy refusing the
		// patch is reported on the Foo like a refused apply.
		return nil, fmt.Errorf("removing entries another writer left in Deployment %s: %w", dep.Name, err)
	}
	klog.FromContext(ctx).V(2).Info("Removed entries another writer left in our container", "deployment", klog.KObj(patched))
	view := plan.NewDeploymentView(patched)
	c.deployments.Mutation(view)
	return view, nil
}

// overriddenState identifies what the API server made of a correction it
// did not keep (a mutating admission policy rewrote our fields), for one
// spec of one Foo: the values of every field we own (plan.OwnedValues),
// so that the Deployment controller's status writes do not count as a
// change.
type overriddenState struct {
	uid        types.UID
	generation int64
	owned      string
}

func overriddenOf(foo *samplev1beta1.Foo, dep *plan.DeploymentView) overriddenState {
	return overriddenState{uid: foo.UID, generation: foo.Generation, owned: plan.OwnedValues(foo, dep)}
}

// overridden is what c.overridden holds: the state, and when it was seen.
type overridden struct {
	state overriddenState
	at    time.Time
}

// overriddenRetry is how long a correction the API server did not keep
// is left alone. Then it is tried once more (the sync asks to come back
// then: retryOverridden): if the policy that rewrote it is gone, the
// Deployment gets our fields back without anyone touching the Foo; if not,
// that is one more correction per Foo per period (one write, or three for
// a rewritten port: see putBack), with no rollout.
const overriddenRetry = 10 * time.Minute

// prunedSpec is what a Foo declared when pruneDeployments last finished for
// it.
type prunedSpec struct {
	uid            types.UID
	generation     int64
	deploymentName string
}

// pruneDeployments deletes the Deployments foo controls under a name it no
// longer declares (after spec.deployment.name changed).
//
// Looking is not free: the MutationCache's ByIndex also walks every copy
// of our recent writes (up to mutationCacheSize) on each call. Among those
// copies, only a new spec can leave a Deployment under another name (we
// create only under the declared one), so that walk is done once per spec
// of each Foo (and once per Foo after a restart), not on every sync. A
// leftover can also come from elsewhere (a Deployment restored from a
// backup with its owner reference, say): the informer's own index, a map
// lookup, shows those on every sync.
func (c *Controller) pruneDeployments(ctx context.Context, foo *samplev1beta1.Foo) error {
	key := cache.MetaObjectToName(foo)
	spec := prunedSpec{uid: foo.UID, generation: foo.Generation, deploymentName: foo.Spec.Deployment.Name}
	if last, ok := c.pruned.Load(key); ok && last.(prunedSpec) == spec && !c.leftoverIndexed(foo) {
		return nil
	}
	objs, err := c.deployments.ByIndex(deploymentByFooUID, string(foo.UID))
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
	c.pruned.Store(key, spec)
	return nil
}

// leftoverIndexed reports whether the informer holds a Deployment foo
// controls under a name other than the one it declares, and not already
// being deleted.
func (c *Controller) leftoverIndexed(foo *samplev1beta1.Foo) bool {
	keys, err := c.informedDeployments.IndexKeys(deploymentByFooUID, string(foo.UID))
	if err != nil {
		return true // look the slow way
	}
	current := cache.ObjectName{Namespace: foo.Namespace, Name: foo.Spec.Deployment.Name}.String()
	return slices.ContainsFunc(keys, func(k string) bool {
		if k == current {
			return false
		}
		obj, exists, err := c.informedDeployments.GetByKey(k)
		return err != nil || (exists && obj.(*plan.DeploymentView).DeletionTimestamp == nil)
	})
}

// isPermanent reports whether an error from applying the Deployment is the
// API server refusing that object (it will not change by itself), as
// opposed to a failure of the request (timeouts, unavailability, throttling,
// conflicts).
func isPermanent(err error) bool {
	return apierrors.IsInvalid(err) || apierrors.IsForbidden(err) || apierrors.IsBadRequest(err) ||
		apierrors.IsRequestEntityTooLargeError(err)
}

// reportAfterFailures is how many syncs in a row must fail with an answer
// that may lift by itself (see persists) before the Foo says so: with the
// queue's backoff (5 ms doubling), about 20 s of failures, past a
// webhook's restart.
const reportAfterFailures = 12

// persists counts the key's syncs in a row whose apply the API server
// answered with err, and reports whether it is time to say so on the Foo
// although it may lift by itself. Such an answer is any that is not about
// the API server's own load or our stale copy; the usual case is an
// admission webhook that cannot be called (500, "failed calling webhook")
// or that denies with a code of its own. Any other failure (an API server
// away or overloaded: 429, 503, 504; a conflict) starts the count again: a
// status write would add to the load, or the next sync fixes it.
func (c *Controller) persists(key cache.ObjectName, err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) || apierrors.IsConflict(err) || apierrors.IsTooManyRequests(err) ||
		apierrors.IsServiceUnavailable(err) || apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) {
		c.applyFailures.Delete(key)
		return false
	}
	// A key is synced by one worker at a time: no other goroutine updates
	// its count meanwhile.
	n := 1
	if last, ok := c.applyFailures.Load(key); ok {
		n += last.(int)
	}
	c.applyFailures.Store(key, n)
	return n >= reportAfterFailures
}

func replicasOf(dep *plan.DeploymentView) int32 {
	if dep.Spec.Replicas == nil {
		return 1
	}
	return *dep.Spec.Replicas
}
