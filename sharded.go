package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	appslisters "k8s.io/client-go/listers/apps/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"

	samplev1alpha1 "example.com/foo-controller/pkg/apis/samplecontroller/v1alpha1"
	"example.com/foo-controller/pkg/cachetrim"
	clientset "example.com/foo-controller/pkg/generated/clientset/versioned"
	foolisters "example.com/foo-controller/pkg/generated/listers/samplecontroller/v1alpha1"
	"example.com/foo-controller/pkg/metrics"
	"example.com/foo-controller/pkg/shard"
)

// runSharded runs this replica as a member of a shard group (-shard-slots):
// for each slot it holds, the same Controller as a single leader runs, over
// informers that list and watch that slot's namespaces only, with a
// workqueue of its own. A slot's controller is started when the member
// takes the slot and stopped, its in-flight syncs finished, before the
// member releases it (shard.Member.Run). See docs/sharding.md.
func runSharded(ctx context.Context, o options, member *shard.Member, kubeClient kubernetes.Interface,
	fooClient clientset.Interface, recorder events.EventRecorder, ready *atomic.Pointer[func() error]) error {
	logger := klog.FromContext(ctx)

	// Whether the API server filters decides what a slot costs: with the
	// filter, a slot's watches carry only its objects; without it (the
	// ShardedListAndWatch gate off), every slot's watches receive
	// everything, decode it and drop what is not theirs.
	filters, err := shard.ServerFilters(ctx, func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
		return kubeClient.AppsV1().Deployments(o.namespace).List(ctx, opts)
	})
	if err != nil {
		return err
	}
	if filters {
		metrics.ShardServerFiltering.Set(1)
	} else {
		metrics.ShardServerFiltering.Set(0)
		logger.Info("The API server does not filter lists and watches by shard (kube-apiserver 1.36+ with --feature-gates=ShardedListAndWatch=true does): each slot's watches receive every object and drop the others' on our side, so memory still divides among replicas but the decoding does not")
	}

	// One pool of -workers for every slot this replica holds: -workers
	// means what it means for one leader, and a slot with work gets the
	// workers the others leave (see WithWorkerPool).
	pool := semaphore.NewWeighted(int64(o.workers))
	var (
		mu sync.Mutex
		// controllers has an entry for every slot whose work runs, nil
		// until its controller is built.
		controllers = map[int]*Controller{}
	)
	readiness := func() error {
		mu.Lock()
		defer mu.Unlock()
		synced := map[int]func() bool{}
		for slot, c := range controllers {
			synced[slot] = func() bool { return c != nil && c.HasSynced() }
		}
		return shardReady(member.Joined(), synced)
	}
	ready.Store(&readiness)

	work := func(ctx context.Context, s shard.Slot) error {
		slot := s.Index
		sel, err := s.Selector()
		if err != nil {
			return err
		}
		queueName := fmt.Sprintf("%s-slot-%d", controllerName, slot)
		mu.Lock()
		controllers[slot] = nil // held, not ready until its caches sync
		metrics.ShardSlots.Set(float64(len(controllers)))
		mu.Unlock()
		defer func() {
			mu.Lock()
			delete(controllers, slot)
			metrics.ShardSlots.Set(float64(len(controllers)))
			mu.Unlock()
		}()
		keep := s.Keep
		deployments := newSlotInformer(&cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
				return kubeClient.AppsV1().Deployments(o.namespace).List(ctx, opts)
			},
			WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
				return kubeClient.AppsV1().Deployments(o.namespace).Watch(ctx, opts)
			},
		}, sel.String(), keep, &appsv1.Deployment{}, 0)
		foos := newSlotInformer(&cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
				return fooClient.SamplecontrollerV1alpha1().Foos(o.namespace).List(ctx, opts)
			},
			WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
				return fooClient.SamplecontrollerV1alpha1().Foos(o.namespace).Watch(ctx, opts)
			},
		}, sel.String(), keep, &samplev1alpha1.Foo{}, o.resyncPeriod)
		if err := countWatchErrors(deployments, foos); err != nil {
			return err
		}
		// The slot's load (its Foos per namespace), which the member
		// publishes for the re-cut of the slot boundaries.
		counted, err := countFoos(foos, s.Load)
		if err != nil {
			return err
		}
		defer func() { metrics.ShardFoos.Add(-float64(s.Load.Total())) }()
		c, err := NewController(ctx, kubeClient, fooClient,
			deploymentInformer{deployments}, fooInformer{foos}, recorder,
			WithQueueName(queueName), WithWorkerPool(pool))
		if err != nil {
			return err
		}
		// The slot's queue is shut down when Run returns: its series go
		// with it, rather than stay at their last value on a replica that
		// no longer holds the slot.
		defer metrics.ForgetQueue(queueName)
		mu.Lock()
		controllers[slot] = c
		mu.Unlock()

		informersCtx, stopInformers := context.WithCancel(context.WithoutCancel(ctx))
		var wg sync.WaitGroup
		wg.Go(func() { deployments.RunWithContext(informersCtx) })
		wg.Go(func() { foos.RunWithContext(informersCtx) })
		wg.Go(func() {
			if cache.WaitForCacheSync(informersCtx.Done(), counted.HasSynced) {
				s.Load.Ready()
			}
		})
		defer func() {
			stopInformers()
			waitAtMost(informerStopWait, wg.Wait)
		}()
		return c.Run(ctx, o.workers)
	}
	return member.Run(ctx, work)
}

// countFoos keeps load counting the Foos of each namespace in the slot's
// informer, and foo_controller_shard_foos with it.
func countFoos(foos cache.SharedIndexInformer, load *shard.Load) (cache.ResourceEventHandlerRegistration, error) {
	add := func(obj any, delta int) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		if m, err := meta.Accessor(obj); err == nil {
			load.Add(m.GetNamespace(), delta)
			metrics.ShardFoos.Add(float64(delta))
		}
	}
	return foos.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { add(obj, 1) },
		DeleteFunc: func(obj any) { add(obj, -1) },
	})
}

// shardReady is the sharded replica's readiness (/readyz): it has joined
// the group (its member Lease is created and it has neither left nor lost
// it), and the caches of every slot it holds have synced (synced: slot →
// whether its controller's caches have).
//
// A member holding no slot is ready: one of more replicas than slots, or
// one waiting for members of another slot count to leave (a rollout that
// changes -shard-slots) is a standby, as a leader-election standby is
// ready, and must be: a Deployment rollout waits for its new Pods to be
// ready before it stops old ones, and the old ones (another slot count)
// are what the new ones wait for, so "not ready while waiting" would stop
// such a rollout for good. How many slots are held shows in
// foo_controller_shard_slots instead. A slot just taken (its informers
// listing) makes the replica unready until its caches sync: the work it
// took over is not being done yet, and a rollout had better wait.
func shardReady(joined bool, synced map[int]func() bool) error {
	if !joined {
		return errors.New("not a member of the shard group (joining, or left)")
	}
	var waiting []int
	for slot, ok := range synced {
		if !ok() {
			waiting = append(waiting, slot)
		}
	}
	if len(waiting) > 0 {
		slices.Sort(waiting)
		return fmt.Errorf("caches of slots %v not synced yet", waiting)
	}
	return nil
}

// newSlotInformer builds an informer over one slot's objects (see
// shard.Filtered), trimmed as the single leader's are.
func newSlotInformer(lw cache.ListerWatcherWithContext, selector string, keep func(string) bool,
	example runtime.Object, resync time.Duration) cache.SharedIndexInformer {
	inf := cache.NewSharedIndexInformerWithOptions(&shard.Filtered{Next: lw, Selector: selector, Keep: keep}, example,
		cache.SharedIndexInformerOptions{ResyncPeriod: resync, Indexers: cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}})
	_ = inf.SetTransform(cachetrim.Transform) // not started yet: cannot fail
	return inf
}

// deploymentInformer and fooInformer give a slot's informers the shape
// NewController takes (the generated factories' informers).
type deploymentInformer struct{ cache.SharedIndexInformer }

func (i deploymentInformer) Informer() cache.SharedIndexInformer { return i.SharedIndexInformer }
func (i deploymentInformer) Lister() appslisters.DeploymentLister {
	return appslisters.NewDeploymentLister(i.GetIndexer())
}

type fooInformer struct{ cache.SharedIndexInformer }

func (i fooInformer) Informer() cache.SharedIndexInformer { return i.SharedIndexInformer }
func (i fooInformer) Lister() foolisters.FooLister        { return foolisters.NewFooLister(i.GetIndexer()) }
