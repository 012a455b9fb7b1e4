package main

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	appsinformers "k8s.io/client-go/informers/apps/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	samplev1alpha1 "example.com/foo-controller/pkg/apis/samplecontroller/v1alpha1"
	"example.com/foo-controller/pkg/cachetrim"
	"example.com/foo-controller/pkg/corrections"
	clientset "example.com/foo-controller/pkg/generated/clientset/versioned"
	informers "example.com/foo-controller/pkg/generated/informers/externalversions/samplecontroller/v1alpha1"
	"example.com/foo-controller/pkg/lanes"
	"example.com/foo-controller/pkg/metrics"
	"example.com/foo-controller/pkg/pacer"
	"example.com/foo-controller/pkg/plan"
)

const (
	// controllerName names the workqueue (and so its metrics), the field
	// manager of every write, and the source of Events.
	controllerName = "foo-controller"

	// fooByDeploymentName indexes Foos by "namespace/spec.deploymentName", so
	// an event on any Deployment — including one we do not own — finds the
	// Foos that want that name. That is how a Foo blocked by a foreign
	// Deployment is retried the moment that Deployment goes away, without
	// polling.
	fooByDeploymentName = "fooByDeploymentName"
	// deploymentByFooUID indexes Deployments by the UID of the Foo that
	// controls them, so a Foo finds all its Deployments (the current one and
	// any left from an old spec.deploymentName) without a List call.
	deploymentByFooUID = "deploymentByFooUID"

	// mutationCacheTTL bounds how long a copy of our own write is preferred
	// to the informer's (older) object: far longer than a watch event takes
	// to arrive, short enough that a lost event cannot mislead for long.
	mutationCacheTTL = time.Minute
	// mutationCacheSize is the number of recent writes remembered per
	// resource; past it the oldest are forgotten (and the informer cache,
	// perhaps a little stale, is read instead). Copies are trimmed like the
	// informer's objects (pkg/cachetrim), a few KB each.
	mutationCacheSize = 2048

	// shutdownGracePeriod bounds how long in-flight syncs may run after
	// shutdown begins (a request to an API server that stopped answering
	// would otherwise hold the process until it is killed). It fits within
	// a Pod's default 30s termination grace period.
	shutdownGracePeriod = 20 * time.Second

	// correctionBurst and correctionEvery limit how often a Foo's
	// Deployment is put back while its Foo stays the same: a few one-off
	// edits (kubectl scale, kubectl edit) are undone at once, but a client
	// that keeps changing it gets one answer per second, not one per
	// change (see pkg/corrections and docs/reliability.md).
	correctionBurst = 5
	correctionEvery = time.Second

	// statusProgressInterval is how long a status change that only moves
	// replica counts may wait to be written with the next one. A rollout
	// changes the Deployment's status several times before it is
	// available; writing each costs a request per change per Foo, and the
	// transitions that matter (Ready, a new generation, a new reason) are
	// written at once anyway.
	statusProgressInterval = 2 * time.Second
)

// Event reasons. Events are recorded only when the controller changes
// something or a condition begins, never once per sync.
const (
	reasonCreated  = "Created"
	reasonScaled   = "Scaled"
	reasonUpdated  = "Updated"
	reasonAdopted  = "Adopted"
	reasonPruned   = "Pruned"
	reasonOrphaned = "Orphaned"
	// reasonContested (a Warning) says that something else keeps changing
	// a Deployment the controller manages.
	reasonContested = "Contested"
)

// Controller keeps each Foo's Deployment in the declared shape and reports
// its state in the Foo's status.
//
// The loop: informers watch Foos and Deployments and keep a local cache;
// their event handlers only turn each change into the key (namespace/name)
// of the Foo it concerns and add it to the workqueue. Workers take keys off
// the queue and call syncHandler, which reads the Foo and its Deployment
// from the cache, compares them with what the Foo declares, and writes only
// the difference. Because syncHandler looks at the whole current state, not
// at what the event said (level-triggered), duplicate, merged or missed
// events do no harm: the next sync of the key puts everything right.
type Controller struct {
	kubeclientset kubernetes.Interface
	fooclientset  clientset.Interface

	// The caches the controller reads: the informers' stores seen through a
	// MutationCache that also holds the objects our own writes returned.
	// An informer learns of our write only when its watch event arrives; a
	// sync that ran in between would otherwise act on the old object again
	// (a second create, a second status write, a second Event). A cached
	// object newer than our copy always wins, and a copy expires after
	// mutationCacheTTL.
	deployments       cache.MutationCache
	deploymentsSynced cache.InformerSynced
	foos              cache.MutationCache
	foosSynced        cache.InformerSynced

	// workqueue serialises work per Foo: a key is never processed by two
	// workers at once, and a key added many times while waiting is
	// processed once. Failed keys come back through its rate limiter.
	workqueue workqueue.TypedRateLimitingInterface[cache.ObjectName]
	// lanes is the workqueue's storage: keys woken by their Deployment
	// (its status moved, or someone changed it) are expedited ahead of the
	// keys waiting for a first sync, so a burst of new Foos does not delay
	// reporting on the Foos already deployed.
	lanes *lanes.Queue[cache.ObjectName]
	// corrections bounds how often one Foo's Deployment is put back after
	// someone else changed it: correctionBurst at once, then one per
	// correctionEvery, afresh whenever the Foo's generation changes.
	corrections *corrections.Limiter[cache.ObjectName]
	// statusPacer holds back status writes that only move counts (see
	// plan.ProgressOnly) and a new Foo's first "progressing" (see
	// plan.FirstProgress) to one per statusProgressInterval per Foo.
	statusPacer *pacer.Pacer[cache.ObjectName]
	recorder    events.EventRecorder
	clock       clock.PassiveClock
}

// NewController wires the controller to the given informers. It registers
// indexes and event handlers, so it must be called before the informers are
// started.
func NewController(
	ctx context.Context,
	kubeclientset kubernetes.Interface,
	fooclientset clientset.Interface,
	deploymentInformer appsinformers.DeploymentInformer,
	fooInformer informers.FooInformer,
	recorder events.EventRecorder,
) (*Controller, error) {
	logger := klog.FromContext(ctx)

	if err := fooInformer.Informer().AddIndexers(cache.Indexers{fooByDeploymentName: indexFooByDeploymentName}); err != nil {
		return nil, fmt.Errorf("adding Foo index: %w", err)
	}
	if err := deploymentInformer.Informer().AddIndexers(cache.Indexers{deploymentByFooUID: indexDeploymentByFooUID}); err != nil {
		return nil, fmt.Errorf("adding Deployment index: %w", err)
	}

	queueLanes := lanes.New[cache.ObjectName]()
	c := &Controller{
		kubeclientset: kubeclientset,
		fooclientset:  fooclientset,
		deployments: cache.NewIntegerResourceVersionMutationCacheWithOptions(logger,
			deploymentInformer.Informer().GetIndexer(), cache.MutationCacheOptions{
				Indexer: deploymentInformer.Informer().GetIndexer(),
				TTL:     mutationCacheTTL, MaxCacheSize: mutationCacheSize,
				// We create Deployments: a created one must be visible before
				// the informer sees it, or the next sync creates it again.
				IncludeAdds: true,
			}),
		deploymentsSynced: deploymentInformer.Informer().HasSynced,
		foos: cache.NewIntegerResourceVersionMutationCacheWithOptions(logger,
			fooInformer.Informer().GetIndexer(), cache.MutationCacheOptions{
				Indexer: fooInformer.Informer().GetIndexer(),
				TTL:     mutationCacheTTL, MaxCacheSize: mutationCacheSize,
			}),
		foosSynced: fooInformer.Informer().HasSynced,
		// Retry policy: a key whose sync fails is retried after 5ms, 10ms,
		// 20ms, ... doubling up to 1000s, and all retries together are
		// limited to 10/s with bursts of 100 (client-go's default controller
		// rate limiter). A sync that is done resets the key's backoff. A new
		// event or a resync adds the key at once, whatever its backoff.
		workqueue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[cache.ObjectName](),
			workqueue.TypedRateLimitingQueueConfig[cache.ObjectName]{
				Name: controllerName,
				DelayingQueue: workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[cache.ObjectName]{
					Name: controllerName,
					Queue: workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[cache.ObjectName]{
						Name: controllerName, Queue: queueLanes,
					}),
				}),
			},
		),
		lanes:       queueLanes,
		corrections: corrections.New[cache.ObjectName](correctionEvery, correctionBurst),
		statusPacer: pacer.New[cache.ObjectName](statusProgressInterval),
		recorder:    recorder,
		clock:       clock.RealClock{},
	}

	logger.V(4).Info("Setting up event handlers")
	if _, err := fooInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueueFoo,
		UpdateFunc: func(_, newObj any) { c.enqueueFoo(newObj) },
		// A deleted Foo still gets a sync, which finds it gone and does
		// nothing: the handler stays trivial and the queue remains the only
		// place where work is decided.
		DeleteFunc: c.enqueueFoo,
	}); err != nil {
		return nil, fmt.Errorf("adding Foo event handler: %w", err)
	}
	if _, err := deploymentInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.handleDeployment,
		UpdateFunc: c.handleDeploymentUpdate,
		DeleteFunc: func(obj any) {
			if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tombstone.Obj
			}
			if dep, ok := obj.(*appsv1.Deployment); ok {
				// So that our copy of a Deployment we wrote does not
				// outlive the Deployment itself.
				c.deployments.OnDelete(dep)
			}
			c.handleDeployment(obj)
		},
	}); err != nil {
		return nil, fmt.Errorf("adding Deployment event handler: %w", err)
	}
	return c, nil
}

// Run waits for the informer caches to sync, starts workers, and blocks
// until ctx is cancelled. It then stops handing out keys, lets every
// in-flight sync finish, and returns once all workers have stopped.
func (c *Controller) Run(ctx context.Context, workers int) error {
	defer utilruntime.HandleCrashWithContext(ctx)
	logger := klog.FromContext(ctx)

	logger.Info("Starting Foo controller", "workers", workers)
	if !cache.WaitForNamedCacheSyncWithContext(ctx, c.deploymentsSynced, c.foosSynced) {
		c.workqueue.ShutDown()
		if ctx.Err() != nil {
			return nil // asked to stop before we started: a clean exit
		}
		return errors.New("informer caches did not sync")
	}

	// Syncs run under their own context: it survives the start of shutdown
	// (a sync cut off half-way would leave half a change behind) but is
	// cancelled shutdownGracePeriod later, so a hung request cannot hold
	// the process forever.
	syncCtx, cancelSyncs := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelSyncs()
	stopGrace := context.AfterFunc(ctx, func() { time.AfterFunc(shutdownGracePeriod, cancelSyncs) })
	defer stopGrace()

	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() { c.runWorker(ctx, syncCtx) })
	}
	logger.Info("Started workers")

	<-ctx.Done()
	logger.Info("Shutting down: finishing in-flight syncs")
	// ShutDown wakes workers blocked in Get; processNextWorkItem sees the
	// cancelled context and takes no new key.
	c.workqueue.ShutDown()
	wg.Wait()
	logger.Info("All workers stopped")
	return nil
}

// runWorker processes keys until the queue shuts down or ctx is cancelled.
// Syncs run under syncCtx (see Run).
func (c *Controller) runWorker(ctx, syncCtx context.Context) {
	for c.processNextWorkItem(ctx, syncCtx) {
	}
}

// processNextWorkItem takes one key off the queue and syncs it under
// syncCtx. It returns false when the worker should stop: the queue is shut
// down or ctx, the controller's lifetime, is over.
func (c *Controller) processNextWorkItem(ctx, syncCtx context.Context) bool {
	key, shutdown := c.workqueue.Get()
	if shutdown {
		return false
	}
	defer c.workqueue.Done(key)
	if ctx.Err() != nil {
		// Shutting down: leave the key; a new process's initial list will
		// sync it again.
		return false
	}
	start := time.Now()
	res, err := c.syncSafely(syncCtx, key)
	result := resultOf(err)
	metrics.ReconcileTotal.WithLabelValues(result).Inc()
	metrics.ReconcileDuration.WithLabelValues(result).Observe(time.Since(start).Seconds())
	c.handleErr(ctx, key, res, err)
	return true
}

// HasSynced reports whether both informer caches have synced.
func (c *Controller) HasSynced() bool { return c.deploymentsSynced() && c.foosSynced() }

// errPanic marks an error that stands for a recovered panic.
var errPanic = errors.New("panic in syncHandler")

func resultOf(err error) string {
	switch {
	case err == nil:
		return metrics.ResultSuccess
	case errors.Is(err, errPanic):
		return metrics.ResultPanic
	case apierrors.IsConflict(err):
		return metrics.ResultConflict
	default:
		return metrics.ResultError
	}
}

// syncSafely runs syncHandler, turning a panic into an error so that one bad
// object cannot crash the process and is retried with backoff instead.
func (c *Controller) syncSafely(ctx context.Context, key cache.ObjectName) (res syncResult, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %v\n%s", errPanic, r, debug.Stack())
		}
	}()
	return c.syncHandler(ctx, key)
}

// syncResult is what a sync asks to happen next. With the error that
// syncHandler returns beside it, it is the whole sync contract, and
// handleErr is the only code that acts on it (docs/sync-contract.md):
//
//   - Done: the zero syncResult and a nil error. The Foo is as converged as
//     the controller can make it now. Its failure backoff is reset; it is
//     synced again only when something it depends on changes (every such
//     thing is watched) or at the next resync.
//   - Requeue after d: requeueAfter > 0 and a nil error. Nothing failed, but
//     something is held back until a known time (a correction the
//     corrections limiter has no token for yet, a status write the pacer
//     holds back). The key comes back after d, or sooner if an event brings
//     it. Its failure backoff is reset, as for done.
//   - Transient error: a non-nil error (API unavailable, a write conflict on
//     a stale object, a panic). The key is retried with per-key exponential
//     backoff (see the rate limiter in NewController); the syncResult is
//     ignored.
//   - Permanent problem: one the user must fix (a Deployment name taken by
//     someone else) is reported as a condition and returns done: retrying
//     cannot fix it, so it must not spin in backoff. The exception is an
//     apply the API server refused (quota, admission): it is reported and
//     also returned as an error, since the refusal may lift without any
//     event the controller watches.
//
// When several parts of one sync ask to come back, the soonest wins.
type syncResult struct {
	// requeueAfter, when positive, asks for the next sync of the key after
	// this long.
	requeueAfter time.Duration
}

// requeueAfter is a syncResult asking to come back after d.
func requeueAfter(d time.Duration) syncResult { return syncResult{requeueAfter: d} }

// soonest combines two parts' wishes: the earlier requeue, if any.
func (r syncResult) soonest(o syncResult) syncResult {
	if r.requeueAfter <= 0 || (o.requeueAfter > 0 && o.requeueAfter < r.requeueAfter) {
		return o
	}
	return r
}

// handleErr does what a sync's result and error ask (see syncResult). It is
// the only code that schedules a key.
func (c *Controller) handleErr(ctx context.Context, key cache.ObjectName, res syncResult, err error) {
	if err == nil {
		c.workqueue.Forget(key)
		if res.requeueAfter > 0 {
			c.workqueue.AddAfter(key, res.requeueAfter)
		}
		return
	}
	logger := klog.FromContext(ctx)
	if apierrors.IsConflict(err) {
		// Expected now and then: we wrote from a cache that was one event
		// behind. The retry reads the newer object.
		logger.V(2).Info("Conflict syncing Foo; retrying", "foo", klog.KRef(key.Namespace, key.Name), "err", err)
	} else {
		logger.Error(err, "Error syncing Foo; retrying with backoff", "foo", klog.KRef(key.Namespace, key.Name),
			"retries", c.workqueue.NumRequeues(key))
	}
	c.workqueue.AddRateLimited(key)
}

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
		c.corrections.Forget(key)
		c.statusPacer.Forget(key)
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
	if err != nil {
		if !isPermanent(err) {
			return syncResult{}, err
		}
		// The API server refused the Deployment itself (quota, admission
		// policy, ...): the user must see why, on the Foo. The error is
		// still returned, so the apply is retried with backoff.
		obs.ApplyError = err
		_, statusErr := c.syncStatus(ctx, foo, obs)
		return syncResult{}, errors.Join(err, statusErr)
	}
	if held.requeueAfter > 0 {
		// A correction is held back: the Deployment is about to be put
		// back, so there is nothing to prune or report from it yet.
		return held, nil
	}
	// Delete Deployments left from an earlier spec.deploymentName only once
	// the current one is ours and in place: while the new name is blocked,
	// the old Deployment keeps serving.
	if !obs.Conflict && !obs.Waiting {
		if err := c.pruneDeployments(ctx, foo); err != nil {
			return syncResult{}, err
		}
	}
	return c.syncStatus(ctx, foo, obs)
}

// syncDeployment makes the Deployment named in foo's spec exist in the
// declared shape, unless that name belongs to someone else. A positive
// held.requeueAfter says that a correction is held back until then (see
// corrections): the observation is then empty, since the Deployment is
// about to be put back.
func (c *Controller) syncDeployment(ctx context.Context, foo *samplev1alpha1.Foo) (obs plan.Observation, held syncResult, err error) {
	logger := klog.FromContext(ctx)
	dep, err := c.getDeployment(foo.Namespace, foo.Spec.DeploymentName)
	if err != nil {
		return plan.Observation{}, syncResult{}, err
	}
	if dep == nil {
		// Apply creates it. If the cache is behind and a foreign Deployment
		// of this name was just created, the apply fails instead of taking
		// it over: it would have to change that Deployment's selector,
		// which is immutable.
		created, err := c.applyDeployment(ctx, foo)
		if err != nil {
			return plan.Observation{}, syncResult{}, err
		}
		logger.V(2).Info("Created Deployment", "deployment", klog.KObj(created))
		c.recorder.Eventf(foo, created, corev1.EventTypeNormal, reasonCreated, "CreateDeployment",
			"Created Deployment %s with %d replicas", created.Name, plan.Replicas(foo))
		return plan.Observation{Deployment: created}, syncResult{}, nil
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

	drift := plan.Drift(foo, dep)
	if len(drift) == 0 {
		return plan.Observation{Deployment: dep}, syncResult{}, nil
	}
	// Someone changed our Deployment. Put it back, but if they keep doing
	// so, only as often as the corrections limiter allows: the sync asks to
	// come back when the limiter has a token. Meanwhile the Deployment's status
	// describes a spec we are about to replace, so the Foo's status is
	// left as it is; and the user hears about the fight once, not once
	// per correction.
	key := cache.MetaObjectToName(foo)
	fight := c.corrections.Reserve(key, foo.Generation, c.clock.Now())
	if fight.Wait > 0 {
		logger.V(2).Info("Deployment keeps being changed by someone else; delaying the next correction",
			"deployment", klog.KObj(dep), "drift", drift, "after", fight.Wait)
		metrics.CorrectionsDelayed.Inc()
		if fight.FirstRefusal {
			c.recorder.Eventf(foo, dep, corev1.EventTypeWarning, reasonContested, "CorrectDeployment",
				"Deployment %s keeps being changed by another client (%v); putting it back at most once per %v",
				dep.Name, drift, correctionEvery)
		}
		return plan.Observation{}, requeueAfter(fight.Wait), nil
	}
	updated, err := c.applyDeployment(ctx, foo)
	if err != nil {
		return plan.Observation{}, syncResult{}, err
	}
	// Report only what the apply really fixed: a field that still differs
	// in the API server's answer is being set back by something else (a
	// mutating admission webhook, say), and an Event per sync for it would
	// be noise.
	if still := plan.Drift(foo, updated); len(still) > 0 {
		logger.V(2).Info("The API server did not keep some of our fields; a mutating webhook may override them",
			"deployment", klog.KObj(updated), "fields", still)
		drift = slices.DeleteFunc(drift, func(f string) bool { return slices.Contains(still, f) })
		if len(drift) == 0 {
			return plan.Observation{Deployment: updated}, syncResult{}, nil
		}
	}
	logger.V(2).Info("Updated Deployment", "deployment", klog.KObj(updated), "drift", drift)
	switch {
	case fight.Contested:
		// Reported once, when the fight began.
	case ownership == plan.Orphaned:
		c.recorder.Eventf(foo, updated, corev1.EventTypeNormal, reasonAdopted, "AdoptDeployment",
			"Adopted Deployment %s again after its owner reference was removed", updated.Name)
	case len(drift) == 1 && drift[0] == "replicas":
		c.recorder.Eventf(foo, updated, corev1.EventTypeNormal, reasonScaled, "ScaleDeployment",
			"Scaled Deployment %s from %d to %d replicas", updated.Name, replicasOf(dep), plan.Replicas(foo))
	default:
		c.recorder.Eventf(foo, updated, corev1.EventTypeNormal, reasonUpdated, "UpdateDeployment",
			"Updated Deployment %s: %v", updated.Name, drift)
	}
	return plan.Observation{Deployment: updated}, syncResult{}, nil
}

// applyDeployment server-side applies the Deployment foo declares. Force
// takes back fields another manager changed (that is the drift we correct);
// fields we do not declare keep their other owners.
func (c *Controller) applyDeployment(ctx context.Context, foo *samplev1alpha1.Foo) (*appsv1.Deployment, error) {
	dep, err := c.kubeclientset.AppsV1().Deployments(foo.Namespace).Apply(ctx, plan.DesiredDeployment(foo),
		metav1.ApplyOptions{FieldManager: controllerName, Force: true})
	if err != nil {
		return nil, fmt.Errorf("applying Deployment %s: %w", foo.Spec.DeploymentName, err)
	}
	c.deployments.Mutation(trimmed(dep))
	return dep, nil
}

// pruneDeployments deletes the Deployments foo controls under a name it no
// longer declares (after spec.deploymentName changed).
func (c *Controller) pruneDeployments(ctx context.Context, foo *samplev1alpha1.Foo) error {
	objs, err := c.deployments.ByIndex(deploymentByFooUID, string(foo.UID))
	if err != nil {
		return err
	}
	for _, obj := range objs {
		dep := obj.(*appsv1.Deployment)
		if dep.Name == foo.Spec.DeploymentName || dep.DeletionTimestamp != nil || !plan.IsControlledBy(dep, foo.UID) {
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
		c.recorder.Eventf(foo, dep, corev1.EventTypeNormal, reasonPruned, "DeleteDeployment",
			"Deleted Deployment %s: spec.deploymentName is now %s", dep.Name, foo.Spec.DeploymentName)
	}
	return nil
}

// syncStatus writes foo's status through the status subresource, and only if
// it changed: an unchanged Foo costs no request. When the Ready condition
// turns to a problem the user must act on, it records one Warning Event —
// after the write, so a failed write (retried) cannot repeat the Event. A
// write the pacer holds back is a requeue for when it may go out.
func (c *Controller) syncStatus(ctx context.Context, foo *samplev1alpha1.Foo, obs plan.Observation) (syncResult, error) {
	now := metav1.NewTime(c.clock.Now().Truncate(time.Second)) // the API stores seconds
	want := plan.Status(foo, obs, now)
	if plan.StatusEqual(foo.Status, want) {
		return syncResult{}, nil
	}
	key := cache.MetaObjectToName(foo)
	deferrable := plan.ProgressOnly(foo.Status, want)
	if plan.FirstProgress(foo.Status, want) {
		// A new Foo: its first "progressing" waits like a progress-only
		// change, from this sync on.
		c.statusPacer.Begin(key, c.clock.Now())
		deferrable = true
	}
	if deferrable {
		// Only progress to report: write it together with whatever comes
		// next, at most every statusProgressInterval. The key comes back
		// then, unless a change worth writing at once brings it back earlier.
		if wait := c.statusPacer.Wait(key, c.clock.Now()); wait > 0 {
			klog.FromContext(ctx).V(4).Info("Deferring a progress-only status update", "after", wait)
			return requeueAfter(wait), nil
		}
	}
	updated, err := c.fooclientset.SamplecontrollerV1alpha1().Foos(foo.Namespace).ApplyStatus(ctx,
		plan.StatusApply(foo, want), metav1.ApplyOptions{FieldManager: controllerName, Force: true})
	if apierrors.IsNotFound(err) {
		return syncResult{}, nil // deleted meanwhile; nothing left to report on
	}
	if err != nil {
		return syncResult{}, fmt.Errorf("writing status: %w", err)
	}
	c.foos.Mutation(trimmed(updated))
	c.statusPacer.Wrote(key, c.clock.Now())

	before := meta.FindStatusCondition(foo.Status.Conditions, samplev1alpha1.ConditionReady)
	after := meta.FindStatusCondition(want.Conditions, samplev1alpha1.ConditionReady)
	klog.FromContext(ctx).V(2).Info("Updated Foo status", "ready", after.Status, "reason", after.Reason,
		"availableReplicas", want.AvailableReplicas, "observedGeneration", want.ObservedGeneration)
	if warningReasons[after.Reason] && (before == nil || before.Reason != after.Reason || before.Message != after.Message) {
		var related runtime.Object
		if obs.Deployment != nil {
			related = obs.Deployment
		}
		c.recorder.Eventf(foo, related, corev1.EventTypeWarning, after.Reason, "Reconcile", "%s", after.Message)
	}
	return syncResult{}, nil
}

// warningReasons are the Ready reasons that need the user: each gets a
// Warning Event when it begins (or its message changes), never per sync.
var warningReasons = map[string]bool{
	samplev1alpha1.ReasonDeploymentConflict:       true,
	samplev1alpha1.ReasonDeploymentApplyFailed:    true,
	samplev1alpha1.ReasonProgressDeadlineExceeded: true,
}

// isPermanent reports whether an error from applying the Deployment is the
// API server refusing that object (it will not change by itself), as
// opposed to a failure of the request (timeouts, unavailability, throttling,
// conflicts).
func isPermanent(err error) bool {
	return apierrors.IsInvalid(err) || apierrors.IsForbidden(err) || apierrors.IsBadRequest(err) ||
		apierrors.IsRequestEntityTooLargeError(err)
}

// syncFinalizer adds the orphan finalizer to a Foo whose deletionPolicy is
// Orphan and removes it when the policy is Delete. It returns the Foo to go
// on with: the API server's answer if it patched, otherwise foo itself.
func (c *Controller) syncFinalizer(ctx context.Context, foo *samplev1alpha1.Foo) (*samplev1alpha1.Foo, error) {
	patch, needed, err := plan.FinalizerPatch(foo, plan.WantsOrphanFinalizer(foo))
	if err != nil || !needed {
		return foo, err
	}
	updated, err := c.fooclientset.SamplecontrollerV1alpha1().Foos(foo.Namespace).Patch(ctx, foo.Name,
		types.MergePatchType, patch, metav1.PatchOptions{FieldManager: controllerName})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("updating finalizers: %w", err)
	}
	c.foos.Mutation(trimmed(updated))
	klog.FromContext(ctx).V(2).Info("Updated finalizers", "finalizers", updated.Finalizers)
	return updated, nil
}

// finalize handles a Foo that is being deleted. Only a Foo holding our
// finalizer needs anything: with the Orphan policy, the controller first
// removes its owner reference from every Deployment it controls, and only
// then the finalizer. In that order a crash at any point is safe: the next
// sync finds the finalizer still there and repeats whatever is left (both
// steps are no-ops once done), and the garbage collector cannot delete the
// Deployment while the finalizer keeps the Foo in existence.
func (c *Controller) finalize(ctx context.Context, foo *samplev1alpha1.Foo) error {
	if !plan.HasOrphanFinalizer(foo) {
		return nil
	}
	if foo.Spec.DeletionPolicy == samplev1alpha1.DeletionPolicyOrphan {
		if err := c.orphanDeployments(ctx, foo); err != nil {
			return err
		}
	}
	patch, _, err := plan.FinalizerPatch(foo, false)
	if err != nil {
		return err
	}
	_, err = c.fooclientset.SamplecontrollerV1alpha1().Foos(foo.Namespace).Patch(ctx, foo.Name,
		types.MergePatchType, patch, metav1.PatchOptions{FieldManager: controllerName})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("removing finalizer: %w", err)
	}
	klog.FromContext(ctx).V(2).Info("Removed finalizer; the Foo can go")
	return nil
}

// orphanDeployments removes foo's controller reference from its Deployments.
// It lists them from the API server rather than the cache: a Deployment
// created moments ago may not be in the cache yet, and missing it here would
// let the garbage collector delete what the user asked to keep. This is the
// controller's only List call, made only while an Orphan Foo is terminating.
func (c *Controller) orphanDeployments(ctx context.Context, foo *samplev1alpha1.Foo) error {
	list, err := c.kubeclientset.AppsV1().Deployments(foo.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(plan.SelectorLabels(foo)).String(),
	})
	if err != nil {
		return fmt.Errorf("listing Deployments to orphan: %w", err)
	}
	// The label may have been removed by hand; the index still knows the
	// Deployments by their owner reference.
	deps := map[string]*appsv1.Deployment{}
	for i := range list.Items {
		deps[list.Items[i].Name] = &list.Items[i]
	}
	cached, err := c.deployments.ByIndex(deploymentByFooUID, string(foo.UID))
	if err != nil {
		return err
	}
	for _, obj := range cached {
		if dep := obj.(*appsv1.Deployment); deps[dep.Name] == nil {
			deps[dep.Name] = dep
		}
	}
	for _, dep := range deps {
		patch, needed, err := plan.RemoveControllerRefPatch(dep, foo.UID)
		if err != nil {
			return err
		}
		if !needed {
			continue
		}
		patched, err := c.kubeclientset.AppsV1().Deployments(dep.Namespace).Patch(ctx, dep.Name, types.JSONPatchType, patch,
			metav1.PatchOptions{FieldManager: controllerName})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("removing owner reference from Deployment %s: %w", dep.Name, err)
		}
		c.deployments.Mutation(trimmed(patched))
		klog.FromContext(ctx).V(2).Info("Orphaned Deployment", "deployment", klog.KObj(dep))
		c.recorder.Eventf(foo, dep, corev1.EventTypeNormal, reasonOrphaned, "OrphanDeployment",
			"Removed owner reference from Deployment %s (deletionPolicy Orphan); it is kept", dep.Name)
	}
	return nil
}

// enqueueFoo adds a Foo's key to the queue. It accepts the tombstone an
// informer hands to DeleteFunc when it missed the deletion itself.
func (c *Controller) enqueueFoo(obj any) {
	key, err := cache.DeletionHandlingObjectToName(obj)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	c.workqueue.Add(key)
}

// handleDeployment enqueues every Foo a Deployment event may concern: the
// Foo that controls it (checked by UID, so a recreated Foo of the same name
// is not confused with its predecessor) and the Foos that want its name
// (so a Foo blocked by a foreign Deployment notices when it changes or goes).
func (c *Controller) handleDeployment(obj any) {
	dep, ok := obj.(*appsv1.Deployment)
	if !ok {
		tombstone, ok := obj.(cache.DeletedFinalStateUnknown)
		if !ok {
			utilruntime.HandleError(fmt.Errorf("unexpected object type %T in Deployment handler", obj))
			return
		}
		if dep, ok = tombstone.Obj.(*appsv1.Deployment); !ok {
			utilruntime.HandleError(fmt.Errorf("unexpected tombstone object type %T in Deployment handler", tombstone.Obj))
			return
		}
	}
	if ref := plan.ControllerFoo(dep); ref != nil {
		foo, err := c.getFoo(cache.ObjectName{Namespace: dep.Namespace, Name: ref.Name})
		if err == nil && foo != nil && foo.UID == ref.UID {
			// Its Deployment exists and changed: report or repair before
			// starting on Foos that have no Deployment yet.
			key := cache.MetaObjectToName(foo)
			c.lanes.Expedite(key)
			c.workqueue.Add(key)
		}
	}
	foos, err := c.foos.ByIndex(fooByDeploymentName, dep.Namespace+"/"+dep.Name)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	for _, obj := range foos {
		c.workqueue.Add(cache.MetaObjectToName(obj.(*samplev1alpha1.Foo)))
	}
}

// handleDeploymentUpdate is handleDeployment for updates.
func (c *Controller) handleDeploymentUpdate(oldObj, newObj any) {
	oldDep, newDep := oldObj.(*appsv1.Deployment), newObj.(*appsv1.Deployment)
	if oldDep.ResourceVersion == newDep.ResourceVersion {
		// A periodic resync re-delivers unchanged objects; the Foo resync
		// already covers every Foo.
		return
	}
	// If the controller reference changed, the old controller must hear of
	// it too (it may have lost its Deployment).
	if !equalControllerRef(oldDep, newDep) {
		c.handleDeployment(oldDep)
	}
	c.handleDeployment(newDep)
}

func indexFooByDeploymentName(obj any) ([]string, error) {
	foo, ok := obj.(*samplev1alpha1.Foo)
	if !ok || foo.Spec.DeploymentName == "" {
		return nil, nil
	}
	return []string{foo.Namespace + "/" + foo.Spec.DeploymentName}, nil
}

func indexDeploymentByFooUID(obj any) ([]string, error) {
	dep, ok := obj.(*appsv1.Deployment)
	if !ok {
		return nil, nil
	}
	if ref := plan.ControllerFoo(dep); ref != nil {
		return []string{string(ref.UID)}, nil
	}
	return nil, nil
}

func equalControllerRef(a, b *appsv1.Deployment) bool {
	ra, rb := metav1.GetControllerOfNoCopy(a), metav1.GetControllerOfNoCopy(b)
	if ra == nil || rb == nil {
		return ra == rb
	}
	return ra.UID == rb.UID
}

// trimmed drops from a write's response what the caches never keep (see
// pkg/cachetrim) before it is remembered in a MutationCache.
func trimmed[T any](obj T) T {
	out, _ := cachetrim.Transform(obj)
	return out.(T)
}

// getFoo returns the cached Foo (nil if there is none). The object is
// shared with the cache: never modify it.
func (c *Controller) getFoo(key cache.ObjectName) (*samplev1alpha1.Foo, error) {
	obj, exists, err := c.foos.GetByKey(key.String())
	if err != nil || !exists {
		return nil, err
	}
	return obj.(*samplev1alpha1.Foo), nil
}

// getDeployment returns the cached Deployment (nil if there is none). The
// object is shared with the cache: never modify it.
func (c *Controller) getDeployment(namespace, name string) (*appsv1.Deployment, error) {
	obj, exists, err := c.deployments.GetByKey(cache.ObjectName{Namespace: namespace, Name: name}.String())
	if err != nil || !exists {
		return nil, err
	}
	return obj.(*appsv1.Deployment), nil
}

func replicasOf(dep *appsv1.Deployment) int32 {
	if dep.Spec.Replicas == nil {
		return 1
	}
	return *dep.Spec.Replicas
}
