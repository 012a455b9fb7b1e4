package main

import (
	"context"
	"sync/atomic"

	"golang.org/x/sync/semaphore"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/tools/events"

	"example.com/foo-controller/pkg/options"
	"example.com/foo-controller/pkg/replicas"
	"example.com/foo-controller/pkg/shard"
)

// runSharded runs this replica as a member of a shard group (-shard-slots):
// for each slot it holds, the same Controller as a single leader runs, over
// the slot's informers and a workqueue of its own, whose keys each hold
// one of the replica's -workers tokens (pkg/shard, docs/sharding.md).
func runSharded(ctx context.Context, o options.Options, member *shard.Member, cs *replicas.Clients,
	recorder events.EventRecorder, namespaces coreinformers.NamespaceInformer, ready *atomic.Pointer[func() error]) error {
	return shard.RunSlots(ctx, member, shard.SlotsConfig{
		Name: controllerName, Kube: cs.Kube, Foos: cs.Foo, Namespace: o.Namespace, Resync: o.ResyncPeriod, Workers: o.Workers,
		NewController: func(ctx context.Context, inf shard.SlotInformers, queueName string, pool *semaphore.Weighted) (shard.SlotController, error) {
			q := newQueue(queueName)
			q.TypedRateLimitingInterface = shard.Pooled(ctx, q.TypedRateLimitingInterface, pool)
			c, err := newController(ctx, cs.Kube, cs.Foo, inf.Deployments, inf.Foos, recorder, q, WithNamespaces(namespaces))
			if err != nil {
				return nil, err
			}
			return c, nil
		},
	}, ready)
}
