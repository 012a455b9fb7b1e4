package main

import (
	"time"

	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"example.com/foo-controller/pkg/backoff"
	"example.com/foo-controller/pkg/lanes"
	"example.com/foo-controller/pkg/metrics"
)

// queue is the workqueue: client-go's named rate-limiting workqueue, with
// a fast lane (pkg/lanes) for keys that AddExpedited adds.
type queue = lanes.Workqueue[cache.ObjectName]

// newQueue builds the workqueue. Its name names its metrics (pkg/metrics'
// provider, given explicitly so that ForgetQueue can remove them when a
// sharded slot's queue stops).
//
// Retry policy: a key whose sync fails is retried after 5ms, 10ms, 20ms,
// ... doubling, and all retries together are limited to 10/s with bursts
// of 100 (client-go's default controller rate limiter), but never later
// than failedRetryMax (pkg/backoff). A sync that is done resets the key's
// backoff. A new event or a resync adds the key at once, whatever its
// backoff.
func newQueue(name string) queue {
	return lanes.NewWorkqueue(name, retryLimiter(), metrics.QueueMetrics)
}

func retryLimiter() workqueue.TypedRateLimiter[cache.ObjectName] {
	return backoff.Capped[cache.ObjectName](failedRetryMax)
}

// failedRetryMax is the longest a Foo whose sync failed waits for its
// retry: after an outage that failed 100,000 Foos, none waits more than
// 10 minutes once the cause is gone, and a Foo that keeps failing is tried
// every 10 minutes. The resync that bounded it before synced every cached
// Foo, and is now hours apart (pkg/options).
const failedRetryMax = 10 * time.Minute
