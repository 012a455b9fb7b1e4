package main

import (
	"time"

	"golang.org/x/time/rate"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"example.com/foo-controller/pkg/lanes"
	"example.com/foo-controller/pkg/metrics"
)

// queue is the workqueue, with a fast lane (pkg/lanes) for keys that
// addExpedited adds.
type queue struct {
	workqueue.TypedRateLimitingInterface[cache.ObjectName]
	lanes *lanes.Queue[cache.ObjectName]
}

// addExpedited adds key ahead of the keys waiting for a first sync.
func (q queue) addExpedited(key cache.ObjectName) {
	q.lanes.Expedite(key)
	q.Add(key)
}

// newQueue builds the named workqueue over two lanes. client-go has
// no constructor that takes both a rate limiter and the storage beneath the
// queue, so each of the three layers — rate limiting, delaying, the FIFO
// itself — is built with its own config, all with the same name, which
// names the workqueue metrics (pkg/metrics' provider, given explicitly so
// that ForgetQueue can remove them when a sharded slot's queue stops).
//
// Retry policy: a key whose sync fails is retried after 5ms, 10ms, 20ms,
// ... doubling, and all retries together are limited to 10/s with bursts
// of 100 (client-go's default controller rate limiter), but never later
// than failedRetryMax (retryLimiter). A sync that is done resets the key's backoff. A new
// event or a resync adds the key at once, whatever its backoff.
func newQueue(name string) queue {
	storage := lanes.New[cache.ObjectName]()
	fifo := workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[cache.ObjectName]{
		Name: name, Queue: storage, MetricsProvider: metrics.QueueMetrics,
	})
	delaying := workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[cache.ObjectName]{
		Name: name, Queue: fifo, MetricsProvider: metrics.QueueMetrics,
	})
	return queue{workqueue.NewTypedRateLimitingQueueWithConfig(retryLimiter(),
		workqueue.TypedRateLimitingQueueConfig[cache.ObjectName]{Name: name, DelayingQueue: delaying, MetricsProvider: metrics.QueueMetrics}), storage}
}

// failedRetryMax is the longest a Foo whose sync failed waits for its
// retry. client-go's default controller rate limiter grows one key's
// backoff to 1000 s, and makes all retries share 10/s, so after an outage
// that failed 100,000 Foos (a webhook down, a quota) the last of them
// would wait hours for its turn (100,000 / 10 s). With the cap, none waits
// more than 10 minutes once the cause is gone, and a Foo that keeps
// failing is tried every 10 minutes; the resync that bounded it before
// synced every cached Foo, and is now hours apart (pkg/options).
const failedRetryMax = 10 * time.Minute

// retryLimiter is client-go's default controller rate limiter (per key:
// 5 ms doubling; all keys: 10/s, bursts of 100), each delay at most
// failedRetryMax. A retry the shared 10/s would push past the cap does not
// take its place in it: the cap, not the queue of retries, decides, so an
// outage's retries leave no debt that would hold later failures back.
func retryLimiter() workqueue.TypedRateLimiter[cache.ObjectName] {
	return workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[cache.ObjectName](5*time.Millisecond, failedRetryMax),
		cappedBucket{rate.NewLimiter(rate.Limit(10), 100), failedRetryMax})
}

// cappedBucket is client-go's BucketRateLimiter, except that a delay
// over max gives its reservation back and is max.
type cappedBucket struct {
	*rate.Limiter
	max time.Duration
}

func (b cappedBucket) When(cache.ObjectName) time.Duration {
	r := b.Reserve()
	if d := r.Delay(); d <= b.max {
		return d
	}
	r.Cancel()
	return b.max
}

func (cappedBucket) NumRequeues(cache.ObjectName) int { return 0 }
func (cappedBucket) Forget(cache.ObjectName)          {}
