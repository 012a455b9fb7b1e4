package main

import (
	"time"

	"golang.org/x/time/rate"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"example.com/foo-controller/pkg/lanes"
	"example.com/foo-controller/pkg/metrics"
)

// newQueue builds the workqueue over storage (the two lanes). client-go has
// no constructor that takes both a rate limiter and the storage beneath the
// queue, so each of the three layers — rate limiting, delaying, the FIFO
// itself — is built with its own config, all with the same name, which
// names the workqueue metrics (pkg/metrics' provider, given explicitly so
// that ForgetQueue can remove them when a sharded slot's queue stops).
//
// Retry policy: a key whose sync fails is retried after 5ms, 10ms, 20ms,
// ... doubling up to maxRetryDelay, and all retries together are limited
// to 10/s with bursts of 100 (client-go's default controller rate limiter,
// whose cap is 1000 s). A sync that is done resets the key's backoff. A
// new event or a resync adds the key at once, whatever its backoff.
func newQueue(name string, storage *lanes.Queue[cache.ObjectName]) workqueue.TypedRateLimitingInterface[cache.ObjectName] {
	fifo := workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[cache.ObjectName]{
		Name: name, Queue: storage, MetricsProvider: metrics.QueueMetrics,
	})
	delaying := workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[cache.ObjectName]{
		Name: name, Queue: fifo, MetricsProvider: metrics.QueueMetrics,
	})
	return workqueue.NewTypedRateLimitingQueueWithConfig(retryLimiter(),
		workqueue.TypedRateLimitingQueueConfig[cache.ObjectName]{Name: name, DelayingQueue: delaying, MetricsProvider: metrics.QueueMetrics})
}

// maxRetryDelay bounds how long a Foo whose sync failed waits for its next
// try, and so how long it stays failed once the cause is gone (an outage
// ended, a quota raised): nothing else brings it back sooner, since the
// resync is hours apart (flags.go). client-go's default is 1000 s.
const maxRetryDelay = 5 * time.Minute

// retryLimiter is client-go's default controller rate limiter with the
// per-key backoff capped at maxRetryDelay.
func retryLimiter() workqueue.TypedRateLimiter[cache.ObjectName] {
	return workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[cache.ObjectName](5*time.Millisecond, maxRetryDelay),
		&workqueue.TypedBucketRateLimiter[cache.ObjectName]{Limiter: rate.NewLimiter(rate.Limit(10), 100)},
	)
}
