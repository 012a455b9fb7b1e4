package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"golang.org/x/sync/semaphore"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"

	"example.com/foo-controller/pkg/metrics"
	"example.com/foo-controller/pkg/shard"
)

// runSharded runs this replica as a member of a shard group (-shard-slots):
// for each slot it holds, the same Controller as a single leader runs, over
// informers that list and watch that slot's namespaces only, with a
// workqueue of its own. A slot's controller is started when the member
// takes the slot and stopped, its in-flight syncs finished, before the
// member releases it (shard.Member.Run). See docs/sharding.md.
func runSharded(ctx context.Context, o options, member *shard.Member, cs *clients,
	recorder events.EventRecorder, namespaces coreinformers.NamespaceInformer, ready *atomic.Pointer[func() error]) error {
	logger := klog.FromContext(ctx)

	// Whether the API server filters decides what a slot costs: with the
	// filter, a slot's watches carry only its objects; without it (the
	// ShardedListAndWatch gate off), every slot's watches receive
	// everything, decode it and drop what is not theirs.
	filters, err := shard.ServerFilters(ctx, func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
		return cs.kube.AppsV1().Deployments(o.namespace).List(ctx, opts)
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

	r := &slotRunner{o: o, cs: cs, recorder: recorder, namespaces: namespaces, controllers: map[int]*Controller{},
		// One pool of -workers for every slot this replica holds: -workers
		// means what it means for one leader, and a slot with work gets
		// the workers the others leave (see shard.Pooled).
		pool: semaphore.NewWeighted(int64(o.workers))}
	readiness := func() error { return r.ready(member) }
	ready.Store(&readiness)
	return member.Run(ctx, r.run)
}

// slotRunner runs the controller of each slot this replica holds.
type slotRunner struct {
	o        options
	cs       *clients
	recorder events.EventRecorder
	// namespaces is the process's one namespaces informer, shared by the
	// slots.
	namespaces coreinformers.NamespaceInformer
	pool       *semaphore.Weighted

	mu sync.Mutex
	// controllers has an entry for every slot whose work runs, nil until
	// its controller is built.
	controllers map[int]*Controller
}

// ready is the replica's readiness: joined, and every slot it runs synced
// (see shard.Ready).
func (r *slotRunner) ready(member *shard.Member) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	synced := map[int]func() bool{}
	for slot, c := range r.controllers {
		synced[slot] = func() bool { return c != nil && c.HasSynced() }
	}
	return shard.Ready(member.Joined(), synced)
}

// run is the slot's work (shard.Work): its informers, which list and watch
// the slot's namespaces only, and the same Controller as a single leader
// runs over them, until the slot must go.
func (r *slotRunner) run(ctx context.Context, s shard.Slot) error {
	slot := s.Index
	queueName := fmt.Sprintf("%s-slot-%d", controllerName, slot)
	r.setController(slot, nil) // held, not ready until its caches sync
	defer r.forget(slot)
	inf, err := shard.NewSlotInformers(r.cs.kube, r.cs.foo, r.o.namespace, s, r.o.resyncPeriod)
	if err != nil {
		return err
	}
	deployments, foos := inf.Deployments.Informer(), inf.Foos.Informer()
	if err := countWatchErrors(map[string]cache.SharedIndexInformer{"deployments": deployments, "foos": foos}); err != nil {
		return err
	}
	defer func() { metrics.ShardFoos.Add(-float64(s.Load.Total())) }()
	// The slot's queue, named for it, holds one of the replica's pool of
	// tokens for each key it hands out (shard.Pooled).
	q := newQueue(queueName)
	q.TypedRateLimitingInterface = shard.Pooled(ctx, q.TypedRateLimitingInterface, r.pool)
	c, err := newController(ctx, r.cs.kube, r.cs.foo, inf.Deployments, inf.Foos, r.recorder, q, WithNamespaces(r.namespaces))
	if err != nil {
		return err
	}
	// The slot's queue is shut down when Run returns: its series go with
	// it, rather than stay at their last value on a replica that no
	// longer holds the slot.
	defer metrics.ForgetQueue(queueName)
	r.setController(slot, c)

	informersCtx, stopInformers := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Go(func() { deployments.RunWithContext(informersCtx) })
	wg.Go(func() { foos.RunWithContext(informersCtx) })
	wg.Go(func() {
		// The slot's load is published for the re-cut once complete.
		if cache.WaitForCacheSync(informersCtx.Done(), inf.Counted) {
			s.Load.Ready()
		}
	})
	defer func() {
		stopInformers()
		waitAtMost(informerStopWait, wg.Wait)
	}()
	return c.Run(ctx, r.o.workers)
}

func (r *slotRunner) setController(slot int, c *Controller) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.controllers[slot] = c
	metrics.ShardSlots.Set(float64(len(r.controllers)))
}

func (r *slotRunner) forget(slot int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.controllers, slot)
	metrics.ShardSlots.Set(float64(len(r.controllers)))
}
