// Package backoff is the controller's retry policy for failed syncs:
// client-go's default controller rate limiter, each delay capped.
//
// client-go's default grows one key's backoff to 1000 s and makes all
// retries share 10/s. After an outage that failed 100,000 keys (a webhook
// down, a quota) the last of them would wait hours for its turn
// (100,000 / 10 s). Capped keeps both, and no delay exceeds its cap.
package backoff

import (
	"time"

	"golang.org/x/time/rate"
	"k8s.io/client-go/util/workqueue"
)

// Capped is client-go's default controller rate limiter (per key: 5 ms
// doubling; all keys: 10/s, bursts of 100), each delay at most max. A
// retry the shared 10/s would push past the cap does not take its place
// in it: the cap, not the queue of retries, decides, so an outage's
// retries leave no debt that would hold later failures back.
func Capped[T comparable](max time.Duration) workqueue.TypedRateLimiter[T] {
	return workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[T](5*time.Millisecond, max),
		cappedBucket[T]{rate.NewLimiter(rate.Limit(10), 100), max})
}

// cappedBucket is client-go's BucketRateLimiter, except that a delay
// over max gives its reservation back and is max.
type cappedBucket[T comparable] struct {
	*rate.Limiter
	max time.Duration
}

func (b cappedBucket[T]) When(T) time.Duration {
	r := b.Reserve()
	if d := r.Delay(); d <= b.max {
		return d
	}
	r.Cancel()
	return b.max
}

func (cappedBucket[T]) NumRequeues(T) int { return 0 }
func (cappedBucket[T]) Forget(T)          {}
