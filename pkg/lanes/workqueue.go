package lanes

import "k8s.io/client-go/util/workqueue"

// Workqueue is a named rate-limiting workqueue whose storage is two lanes (twoLanes):
// client-go's, with AddExpedited beside Add.
type Workqueue[T comparable] struct {
	workqueue.TypedRateLimitingInterface[T]
	lanes *twoLanes[T]
}

// AddExpedited adds key ahead of the keys in the slow lane.
func (q Workqueue[T]) AddExpedited(key T) {
	q.lanes.Expedite(key)
	q.Add(key)
}

// NewWorkqueue builds the workqueue named name over two lanes. client-go has
// no constructor that takes both a rate limiter and the storage beneath
// the queue, so each of the three layers (rate limiting, delaying, the
// FIFO itself) is built with its own config, all with the same name,
// which names the workqueue metrics given by provider.
func NewWorkqueue[T comparable](name string, limiter workqueue.TypedRateLimiter[T], provider workqueue.MetricsProvider) Workqueue[T] {
	storage := newTwoLanes[T]()
	fifo := workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[T]{
		Name: name, Queue: storage, MetricsProvider: provider,
	})
	delaying := workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[T]{
		Name: name, Queue: fifo, MetricsProvider: provider,
	})
	return Workqueue[T]{workqueue.NewTypedRateLimitingQueueWithConfig(limiter,
		workqueue.TypedRateLimitingQueueConfig[T]{Name: name, DelayingQueue: delaying, MetricsProvider: provider}), storage}
}
