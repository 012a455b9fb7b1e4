package main

import (
	"context"
	"fmt"
	"sync/atomic"

	"golang.org/x/sync/semaphore"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/tools/leaderelection"

	"example.com/foo-controller/pkg/leader"
	"example.com/foo-controller/pkg/metrics"
	"example.com/foo-controller/pkg/options"
	"example.com/foo-controller/pkg/shard"
)

// High availability: replicas that stand by for one leader, or that share
// the work out by namespace. A single replica needs neither; the
// controller itself is the same in every mode.

// runLeaderElected runs the workers only while this process holds the
// leader Lease. On a lost Lease, leader.Run cancels the syncs at once and
// returns leader.ErrLost; main then exits 1 so that the restarted process
// campaigns again as a standby (see docs/operations.md, "Losing the
// Lease").
func runLeaderElected(ctx context.Context, lc leader.Config, leaseClient kubernetes.Interface,
	health *leaderelection.HealthzAdaptor, run func(context.Context) error) error {
	lc.OnLeading = func(leading bool) {
		if leading {
			metrics.Leader.Set(1)
		} else {
			metrics.Leader.Set(0)
		}
	}
	return leader.Run(ctx, leaseClient, lc, health, func(ctx context.Context) error {
		// Rolled out over sharded replicas: they hand their slots over
		// once they see this Lease move; start when they have.
		shard.WaitForSlotsReleased(ctx, leaseClient, lc.LeaseName, lc.LeaseNamespace, lc.LeaseDuration, lc.RetryPeriod)
		if ctx.Err() != nil {
			return nil
		}
		return run(ctx)
	})
}

// writeGuardFor returns the guard of this process's writes: a shard
// member's (-shard-slots, also returned), the leader's fence (-leader-elect,
// set in lc), or none.
func writeGuardFor(o options.Options, lc *leader.Config, leaseClient kubernetes.Interface) (*shard.Member, writeGuard, error) {
	switch {
	case o.ShardSlots > 0:
		m, err := newMember(o, *lc, leaseClient)
		return m, m, err
	case o.LeaderElect:
		lc.Fence = leader.NewFence(*lc)
		return nil, lc.Fence, nil
	}
	return nil, nil, nil
}

// newMember makes this process a member of the shard group named by the
// leader Lease's flags (see docs/sharding.md).
func newMember(o options.Options, lc leader.Config, leaseClient kubernetes.Interface) (*shard.Member, error) {
	m, err := shard.NewMember(leaseClient, shard.Config{
		Group: lc.LeaseName, Namespace: lc.LeaseNamespace, Slots: shard.Slots(o.ShardSlots), Identity: lc.Identity,
		LeaseDuration: lc.LeaseDuration, RenewDeadline: lc.RenewDeadline, RetryPeriod: lc.RetryPeriod,
		Rebalance: o.ShardRebalance, RebalanceEvery: o.ShardEvery,
	})
	if err != nil {
		return nil, fmt.Errorf("joining the shard group: %w", err)
	}
	return m, nil
}

// runSharded runs this replica as a member of a shard group (-shard-slots):
// for each slot it holds, the same Controller as a single leader runs, over
// the slot's informers and a workqueue of its own, whose keys each hold
// one of the replica's -workers tokens (pkg/shard, docs/sharding.md).
func runSharded(ctx context.Context, o options.Options, member *shard.Member, cs *clients,
	recorder events.EventRecorder, namespaces coreinformers.NamespaceInformer, ready *atomic.Pointer[func() error]) error {
	return shard.RunSlots(ctx, member, shard.SlotsConfig{
		Name: controllerName, Kube: cs.kube, Foos: cs.foo, Namespace: o.Namespace, Resync: o.ResyncPeriod, Workers: o.Workers,
		NewController: func(ctx context.Context, inf shard.SlotInformers, queueName string, pool *semaphore.Weighted) (shard.SlotController, error) {
			q := newQueue(queueName)
			q.TypedRateLimitingInterface = shard.Pooled(ctx, q.TypedRateLimitingInterface, pool)
			c, err := newController(ctx, cs.kube, cs.foo, inf.Deployments, inf.Foos, recorder, q, WithNamespaces(namespaces))
			if err != nil {
				return nil, err
			}
			return c, nil
		},
	}, ready)
}
