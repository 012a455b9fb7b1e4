package shard

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// ServerFilters reports whether the API server filters lists and watches
// by a shard selector, from a list of a built-in resource: a server that
// filters echoes the selector in the list's metadata.shardInfo; one
// without the feature (the ShardedListAndWatch gate off, or older than
// 1.36) drops the field it does not know and sends everything. The probe
// lists at most one object, with a selector over the whole hash space,
// through list (a generated client's List).
//
// Probe a built-in resource (Deployments): kube-apiserver 1.36 filters a
// custom resource's lists too but does not echo shardInfo for them
// (TestShardSelectorOnTheAPIServer), and the gate is one switch for the
// whole server. Whatever the answer, a sharded replica must filter what it
// receives as well (docs/sharding.md): during a rolling upgrade of a highly
// available control plane, one API server can filter and the next not.
func ServerFilters(ctx context.Context, list func(context.Context, metav1.ListOptions) (runtime.Object, error)) (bool, error) {
	all, err := Slots(1).Selector([]int{0})
	if err != nil {
		return false, err
	}
	opts := metav1.ListOptions{Limit: 1, ShardSelector: all.String()}
	obj, err := list(ctx, opts)
	if err != nil {
		return false, fmt.Errorf("probing for server-side sharding: %w", err)
	}
	sharded, ok := obj.(interface{ GetShardInfo() *metav1.ShardInfo })
	if !ok {
		return false, fmt.Errorf("probing for server-side sharding: %T has no list metadata", obj)
	}
	return sharded.GetShardInfo() != nil, nil
}
