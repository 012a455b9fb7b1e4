package shard

import (
	"context"

	"golang.org/x/sync/semaphore"
	"k8s.io/client-go/util/workqueue"
)

// Pooled wraps a slot's workqueue so that a key taken from it holds one of
// pool's tokens until it is Done. A replica runs a controller per slot it
// holds, each with -workers workers, over one pool of -workers tokens: the
// replica never syncs more than -workers Foos at once, and a slot with work
// gets every token the others leave. The pool's waiters are served in
// order, so busy slots share it evenly. A worker waiting for a token when
// ctx ends gets shutdown, and leaves the key for the slot's next holder.
func Pooled[T comparable](ctx context.Context, q workqueue.TypedRateLimitingInterface[T], pool *semaphore.Weighted) workqueue.TypedRateLimitingInterface[T] {
	return pooled[T]{TypedRateLimitingInterface: q, ctx: ctx, pool: pool}
}

type pooled[T comparable] struct {
	workqueue.TypedRateLimitingInterface[T]
	ctx  context.Context
	pool *semaphore.Weighted
}

func (q pooled[T]) Get() (T, bool) {
	key, shutdown := q.TypedRateLimitingInterface.Get()
	if shutdown {
		return key, true
	}
	if q.pool.Acquire(q.ctx, 1) != nil {
		q.TypedRateLimitingInterface.Done(key)
		return key, true
	}
	return key, false
}

func (q pooled[T]) Done(key T) {
	q.pool.Release(1)
	q.TypedRateLimitingInterface.Done(key)
}
