package main

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	appsinformers "k8s.io/client-go/informers/apps/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	samplev1beta1 "example.com/foo-controller/pkg/apis/samplecontroller/v1beta1"
	"example.com/foo-controller/pkg/caches"
	"example.com/foo-controller/pkg/cachetrim"
	clientset "example.com/foo-controller/pkg/generated/clientset/versioned"
	informers "example.com/foo-controller/pkg/generated/informers/externalversions/samplecontroller/v1beta1"
	"example.com/foo-controller/pkg/metrics"
	"example.com/foo-controller/pkg/ownwrites"
	"example.com/foo-controller/pkg/plan"
)

// controllerName names the workqueue (and so its metrics), the field
// manager of every write, and the source of Events.
const controllerName = "foo-controller"

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

	// The caches the controller reads, each a typed lister with the
	// objects our own writes returned in front (pkg/ownwrites), and whether
	// the informer behind it has synced.
	deploymentsLister ownwrites.Lister[*plan.DeploymentView]
	deploymentsSynced cache.InformerSynced
	foosLister        ownwrites.Lister[*samplev1beta1.Foo]
	foosSynced        cache.InformerSynced
	// namespaces, when set (WithNamespaces), tells which namespaces are
	// being deleted: nothing is reported to the Foos in one but a new
	// generation (see namespaceGoing).
	namespaces       corelisters.NamespaceLister
	namespacesSynced cache.InformerSynced

	// workqueue serialises work per Foo: a key is never processed by two
	// workers at once, and a key added many times while waiting is
	// processed once. Failed keys come back through its rate limiter.
	// Keys woken by their Deployment (its status moved, or someone changed
	// it) or by a user's request (a new generation, a deletion) are
	// expedited ahead of the keys waiting for a first sync, so a burst of
	// new Foos does not delay the Foos already deployed (handlers.go,
	// pkg/lanes).
	workqueue queue
	// memory is what the controller remembers of each Foo between syncs:
	// one record per Foo, dropped when the Foo goes (memory.go).
	memory   *memory
	recorder events.EventRecorder
	clock    clock.PassiveClock
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
	opts ...ControllerOption,
) (*Controller, error) {
	return newController(ctx, kubeclientset, fooclientset, deploymentInformer, fooInformer, recorder, newQueue(controllerName), opts...)
}

// newController is NewController over the given queue: a sharded replica's
// slots each have their own (sharded.go).
func newController(ctx context.Context, kubeclientset kubernetes.Interface, fooclientset clientset.Interface,
	deploymentInformer appsinformers.DeploymentInformer, fooInformer informers.FooInformer,
	recorder events.EventRecorder, workqueue queue, opts ...ControllerOption) (*Controller, error) {
	logger := klog.FromContext(ctx)
	var cc controllerConfig
	for _, o := range opts {
		o(&cc)
	}

	// Every read of the Deployment cache expects what cachetrim keeps of a
	// Deployment (a plan.DeploymentView), so the transform is set here,
	// for whichever informer the caller built; the informer's generated
	// Lister() would expect *appsv1.Deployment, so the lister is ours
	// (ownwrites.NewLister).
	if err := deploymentInformer.Informer().SetTransform(cachetrim.Transform); err != nil {
		return nil, fmt.Errorf("caching Deployments as plan.DeploymentView: %w", err)
	}
	if err := caches.AddIndexers(deploymentInformer.Informer(), fooInformer.Informer()); err != nil {
		return nil, err
	}
	c := &Controller{
		kubeclientset: kubeclientset,
		fooclientset:  fooclientset,
		// We create Deployments: a created one must be visible before the
		// informer sees it, or the next sync creates it again.
		deploymentsLister: ownwrites.NewLister[*plan.DeploymentView](logger, deploymentInformer.Informer().GetIndexer(), appsv1.Resource("deployments"), true),
		deploymentsSynced: deploymentInformer.Informer().HasSynced,
		foosLister:        ownwrites.NewLister[*samplev1beta1.Foo](logger, fooInformer.Informer().GetIndexer(), samplev1beta1.Resource("foos"), false),
		foosSynced:        fooInformer.Informer().HasSynced,
		workqueue:         workqueue,
		memory:            newMemory(),
		recorder:          recorder,
		clock:             clock.RealClock{},
		namespacesSynced:  func() bool { return true },
	}
	if cc.namespaces != nil {
		c.namespaces, c.namespacesSynced = cc.namespaces.Lister(), cc.namespaces.Informer().HasSynced
	}

	logger.V(4).Info("Setting up event handlers")
	if err := c.addEventHandlers(deploymentInformer.Informer(), fooInformer.Informer()); err != nil {
		return nil, err
	}
	return c, nil
}

// ControllerOption changes a default of NewController.
type ControllerOption func(*controllerConfig)

type controllerConfig struct {
	namespaces coreinformers.NamespaceInformer
}

// WithNamespaces gives the controller an informer of the namespaces its Foos
// live in (default: none), so that it writes nothing to the Foos of a
// namespace being deleted but a new generation's status: their pods and
// Deployments go first, and each change would otherwise be reported to a Foo
// about to go too.
func WithNamespaces(informer coreinformers.NamespaceInformer) ControllerOption {
	return func(c *controllerConfig) { c.namespaces = informer }
}

// shutdownGracePeriod bounds how long in-flight syncs may run after
// shutdown begins (a request to an API server that stopped answering would
// otherwise hold the process until it is killed). It fits within a Pod's
// default 30s termination grace period.
const shutdownGracePeriod = 20 * time.Second

// Run waits for the informer caches to sync, starts workers, and blocks
// until ctx is done. It then stops handing out keys and returns once all
// workers have stopped: after letting in-flight syncs finish when ctx was
// simply cancelled (SIGTERM), after cancelling them at once when it ended
// for another cause (leader.ErrLost).
func (c *Controller) Run(ctx context.Context, workers int) error {
	defer utilruntime.HandleCrashWithContext(ctx)
	logger := klog.FromContext(ctx)

	logger.Info("Starting Foo controller", "workers", workers)
	if !cache.WaitForNamedCacheSyncWithContext(ctx, c.deploymentsSynced, c.foosSynced, c.namespacesSynced) {
		c.workqueue.ShutDown()
		if ctx.Err() != nil {
			return nil // asked to stop before we started: a clean exit
		}
		return errors.New("informer caches did not sync")
	}

	// Syncs run under their own context. When ctx is simply cancelled (a
	// SIGTERM), it survives the start of shutdown (a sync cut off half-way
	// would leave half a change behind) but is cancelled
	// shutdownGracePeriod later, so a hung request cannot hold the process
	// forever. When ctx ends for any other cause (leader.ErrLost: a standby
	// may be writing already), in-flight syncs are cancelled at once.
	syncCtx, cancelSyncs := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelSyncs()
	stopGrace := context.AfterFunc(ctx, func() {
		if !errors.Is(context.Cause(ctx), context.Canceled) {
			cancelSyncs()
			return
		}
		time.AfterFunc(shutdownGracePeriod, cancelSyncs)
	})
	defer stopGrace()

	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() { c.runWorker(ctx, syncCtx) })
	}
	logger.Info("Started workers")

	<-ctx.Done()
	if cause := context.Cause(ctx); !errors.Is(cause, context.Canceled) {
		logger.Info("Stopping: in-flight syncs cancelled", "cause", cause)
	} else {
		logger.Info("Shutting down: finishing in-flight syncs")
	}
	// ShutDown wakes workers blocked in Get; processNextWorkItem sees the
	// cancelled context and takes no new key.
	c.workqueue.ShutDown()
	wg.Wait()
	if errors.Is(context.Cause(ctx), context.Canceled) {
		// Told now rather than lost: the sender waits for them at exit.
		// (After a lost Lease, Events are dropped.)
		c.flushAllChanges()
	}
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
//     something waits for a known time (a correction the corrections
//     limiter has no token for yet, a status write the pacer holds back, a
//     Deployment the informer has not seen). The key comes back after d, or
//     sooner if an event brings it. Its failure backoff is kept: waiting
//     proves nothing about what failed before, and a correction the API
//     server keeps refusing must back off, not retry every second.
//   - Transient error: a non-nil error (API unavailable, a write conflict on
//     a stale object, a panic). The key is retried with per-key exponential
//     backoff, never later than failedRetryMax (see newQueue); the
//     syncResult is ignored.
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
// the only code that schedules a key after a sync (the event handlers add
// keys when something changes).
func (c *Controller) handleErr(ctx context.Context, key cache.ObjectName, res syncResult, err error) {
	if err == nil {
		if res.requeueAfter > 0 {
			c.workqueue.AddAfter(key, res.requeueAfter)
			return
		}
		c.workqueue.Forget(key)
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

// HasSynced reports whether the informer caches have synced: Foos,
// Deployments and, when given, namespaces.
func (c *Controller) HasSynced() bool {
	return c.deploymentsSynced() && c.foosSynced() && c.namespacesSynced()
}
