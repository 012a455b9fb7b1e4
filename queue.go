package main

import (
	"context"
	"sync"
	"time"

	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

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
// ... doubling up to 1000s, and all retries together are limited to 10/s
// with bursts of 100 (client-go's default controller rate limiter). A sync
// that is done resets the key's backoff. A new event or a resync adds the
// key at once, whatever its backoff, and so does retryFailed.
func newQueue(name string, storage *lanes.Queue[cache.ObjectName]) workqueue.TypedRateLimitingInterface[cache.ObjectName] {
	fifo := workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[cache.ObjectName]{
		Name: name, Queue: storage, MetricsProvider: metrics.QueueMetrics,
	})
	delaying := workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[cache.ObjectName]{
		Name: name, Queue: fifo, MetricsProvider: metrics.QueueMetrics,
	})
	return workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[cache.ObjectName](),
		workqueue.TypedRateLimitingQueueConfig[cache.ObjectName]{Name: name, DelayingQueue: delaying, MetricsProvider: metrics.QueueMetrics})
}

// failedRetryEvery is how often every Foo whose last sync failed is
// retried at once, whatever its backoff. The backoff of one key grows to
// 1000 s, and all retries share 10/s, so after an outage that failed
// 100,000 Foos (a webhook down, a quota) the last of them would wait
// hours for its turn (100,000 / 10 s). With this, none waits more than 10
// minutes once the cause is gone, and it costs nothing while nothing
// fails: the resync that bounded it before synced every cached Foo, and
// is now hours apart (flags.go).
const failedRetryEvery = 10 * time.Minute

// failedKeys are the keys whose last sync failed (handleErr keeps it).
type failedKeys struct{ m sync.Map }

func (f *failedKeys) failed(key cache.ObjectName) { f.m.Store(key, struct{}{}) }
func (f *failedKeys) done(key cache.ObjectName)   { f.m.Delete(key) }

// retryFailedEvery calls retryFailed every period until ctx is done.
func (c *Controller) retryFailedEvery(ctx context.Context, period time.Duration) {
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if n := c.retryFailed(); n > 0 {
				// At the default level: an operator who just lifted a
				// quota or a policy sees the retry coming.
				klog.FromContext(ctx).Info("Retrying every Foo whose last sync failed", "foos", n, "every", period)
			}
		}
	}
}

// retryFailed adds every key whose last sync failed, at once, and returns
// how many.
func (c *Controller) retryFailed() int {
	n := 0
	c.failed.m.Range(func(k, _ any) bool {
		c.workqueue.Add(k.(cache.ObjectName))
		n++
		return true
	})
	return n
}
