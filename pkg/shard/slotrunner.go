package shard

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	clientset "example.com/foo-controller/pkg/generated/clientset/versioned"
	"example.com/foo-controller/pkg/metrics"
)

// SlotController is a slot's controller: the same one a single leader
// runs, over the slot's informers.
type SlotController interface {
	// Run syncs with workers until ctx ends, then returns once its
	// in-flight syncs are done.
	Run(ctx context.Context, workers int) error
	HasSynced() bool
}

// SlotsConfig is what RunSlots needs.
type SlotsConfig struct {
	// Name is the controller's name: slot N's workqueue is "Name-slot-N".
	Name string
	Kube kubernetes.Interface
	Foos clientset.Interface
	// Namespace is the namespace watched ("": all), Resync the Foo
	// informers' resync period, Workers the replica's -workers.
	Namespace string
	Resync    time.Duration
	Workers   int
	// NewController builds a slot's controller over its informers, with
	// a workqueue of its own named queueName, whose keys each hold one of
	// pool's tokens while synced (Pooled).
	NewController func(ctx context.Context, inf SlotInformers, queueName string, pool *semaphore.Weighted) (SlotController, error)
}

// RunSlots runs this replica as member of its shard group: for each slot
// it holds, a controller (cfg.NewController) over informers that list and
// watch that slot's namespaces only. A slot's controller is started when
// the member takes the slot and stopped, its in-flight syncs finished,
// before the member releases it (Member.Run). ready is set to the
// replica's readiness (Ready). See docs/sharding.md.
func RunSlots(ctx context.Context, member *Member, cfg SlotsConfig, ready *atomic.Pointer[func() error]) error {
	// Whether the API server filters decides what a slot costs: with the
	// filter, a slot's watches carry only its objects; without it (the
	// ShardedListAndWatch gate off), every slot's watches receive
	// everything, decode it and drop what is not theirs.
	filters, err := ServerFilters(ctx, func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
		return cfg.Kube.AppsV1().Deployments(cfg.Namespace).List(ctx, opts)
	})
	if err != nil {
		return err
	}
	if filters {
		metrics.ShardServerFiltering.Set(1)
	} else {
		metrics.ShardServerFiltering.Set(0)
		klog.FromContext(ctx).Info("The API server does not filter lists and watches by shard (kube-apiserver 1.36+ with --feature-gates=ShardedListAndWatch=true does): each slot's watches receive every object and drop the others' on our side, so memory still divides among replicas but the decoding does not")
	}
	r := &slotRunner{cfg: cfg, controllers: map[int]SlotController{},
		// One pool of -workers for every slot this replica holds: -workers
		// means what it means for one leader, and a slot with work gets
		// the workers the others leave (see Pooled).
		pool: semaphore.NewWeighted(int64(cfg.Workers))}
	readiness := func() error { return r.ready(member) }
	ready.Store(&readiness)
	return member.Run(ctx, r.run)
}

// slotRunner runs the controller of each slot this replica holds.
type slotRunner struct {
	cfg  SlotsConfig
	pool *semaphore.Weighted

	mu sync.Mutex
	// controllers has an entry for every slot whose work runs, nil until
	// its controller is built.
	controllers map[int]SlotController
}

// ready is the replica's readiness: joined, and every slot it runs synced.
func (r *slotRunner) ready(member *Member) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	synced := map[int]func() bool{}
	for slot, c := range r.controllers {
		synced[slot] = func() bool { return c != nil && c.HasSynced() }
	}
	return Ready(member.Joined(), synced)
}

// slotInformersStopWait bounds how long a slot's informers are waited for
// when it goes (a reflector backing off ignores its stop channel until the
// backoff ends).
const slotInformersStopWait = 2 * time.Second

// run is the slot's work (Work): its informers, which list and watch the
// slot's namespaces only, and the controller over them, until the slot
// must go.
func (r *slotRunner) run(ctx context.Context, s Slot) error {
	slot := s.Index
	queueName := fmt.Sprintf("%s-slot-%d", r.cfg.Name, slot)
	r.setController(slot, nil) // held, not ready until its caches sync
	defer r.forget(slot)
	inf, err := newSlotInformers(r.cfg.Kube, r.cfg.Foos, r.cfg.Namespace, s, r.cfg.Resync)
	if err != nil {
		return err
	}
	deployments, foos := inf.Deployments.Informer(), inf.Foos.Informer()
	if err := metrics.CountWatchErrors(map[string]cache.SharedIndexInformer{"deployments": deployments, "foos": foos}); err != nil {
		return err
	}
	defer func() { metrics.ShardFoos.Add(-float64(s.load.Total())) }()
	c, err := r.cfg.NewController(ctx, inf, queueName, r.pool)
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
			s.load.Ready()
		}
	})
	defer func() {
		stopInformers()
		stopped := make(chan struct{})
		go func() { wg.Wait(); close(stopped) }()
		select {
		case <-stopped:
		case <-time.After(slotInformersStopWait):
		}
	}()
	return c.Run(ctx, r.cfg.Workers)
}

func (r *slotRunner) setController(slot int, c SlotController) {
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
