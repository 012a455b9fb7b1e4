package shard

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	appsinformers "k8s.io/client-go/informers/apps/v1"
	"k8s.io/client-go/kubernetes"
	appslisters "k8s.io/client-go/listers/apps/v1"
	"k8s.io/client-go/tools/cache"

	samplev1beta1 "example.com/foo-controller/pkg/apis/samplecontroller/v1beta1"
	"example.com/foo-controller/pkg/cachetrim"
	clientset "example.com/foo-controller/pkg/generated/clientset/versioned"
	fooinformers "example.com/foo-controller/pkg/generated/informers/externalversions/samplecontroller/v1beta1"
	foolisters "example.com/foo-controller/pkg/generated/listers/samplecontroller/v1beta1"
	"example.com/foo-controller/pkg/metrics"
)

// SlotInformers are one slot's informers, in the shape the controller
// takes (the generated factories' informers): they list and watch the
// slot's objects only (see filtered), trimmed as the single leader's are,
// and the Foos' keep the slot's load, and foo_controller_shard_foos, up to
// date. Counted reports when the load is complete.
type SlotInformers struct {
	Deployments appsinformers.DeploymentInformer
	Foos        fooinformers.FooInformer
	Counted     cache.InformerSynced
}

// newSlotInformers builds them, not started, over namespace (all: "").
func newSlotInformers(kube kubernetes.Interface, foos clientset.Interface, namespace string, s Slot, resync time.Duration) (SlotInformers, error) {
	sel, err := s.Selector()
	if err != nil {
		return SlotInformers{}, err
	}
	deployments := newSlotInformer(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return kube.AppsV1().Deployments(namespace).List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return kube.AppsV1().Deployments(namespace).Watch(ctx, opts)
		},
	}, sel.String(), s.Keep, &appsv1.Deployment{}, 0)
	fooInf := newSlotInformer(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return foos.SamplecontrollerV1beta1().Foos(namespace).List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return foos.SamplecontrollerV1beta1().Foos(namespace).Watch(ctx, opts)
		},
	}, sel.String(), s.Keep, &samplev1beta1.Foo{}, resync)
	counted, err := countFoos(fooInf, s.load)
	if err != nil {
		return SlotInformers{}, err
	}
	return SlotInformers{Deployments: deploymentInformer{deployments}, Foos: fooInformer{fooInf}, Counted: counted.HasSynced}, nil
}

// newSlotInformer builds an informer over one slot's objects.
func newSlotInformer(lw cache.ListerWatcherWithContext, selector string, keep func(string) bool,
	example runtime.Object, resync time.Duration) cache.SharedIndexInformer {
	inf := cache.NewSharedIndexInformerWithOptions(&filtered{Next: lw, Selector: selector, Keep: keep}, example,
		cache.SharedIndexInformerOptions{ResyncPeriod: resync, Indexers: cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}})
	_ = inf.SetTransform(cachetrim.Transform) // not started yet: cannot fail
	return inf
}

// countFoos keeps load counting the Foos of each namespace in the slot's
// informer, and foo_controller_shard_foos with it.
func countFoos(foos cache.SharedIndexInformer, load *slotLoad) (cache.ResourceEventHandlerRegistration, error) {
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

// deploymentInformer and fooInformer give a slot's informers the shape of
// the generated factories' informers.
type deploymentInformer struct{ cache.SharedIndexInformer }

func (i deploymentInformer) Informer() cache.SharedIndexInformer { return i.SharedIndexInformer }
func (i deploymentInformer) Lister() appslisters.DeploymentLister {
	return appslisters.NewDeploymentLister(i.GetIndexer())
}

type fooInformer struct{ cache.SharedIndexInformer }

func (i fooInformer) Informer() cache.SharedIndexInformer { return i.SharedIndexInformer }
func (i fooInformer) Lister() foolisters.FooLister        { return foolisters.NewFooLister(i.GetIndexer()) }

// Ready is a sharded replica's readiness (/readyz): it has joined the
// group (its member Lease is created and it has neither left nor lost it),
// and the caches of every slot it holds have synced (synced: slot →
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
func Ready(joined bool, synced map[int]func() bool) error {
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
