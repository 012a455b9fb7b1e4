package main

import (
	"testing"

	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// TestFailedFoosWaitAtMostTheCap: the workqueue's retries wait at most
// failedRetryMax, however deep a key is in its backoff; client-go's
// default limiter would wait 1000 s (pkg/backoff's tests show the cap over
// 10,000 keys, and that the shared bucket keeps no debt past it).
func TestFailedFoosWaitAtMostTheCap(t *testing.T) {
	limiter, uncapped := retryLimiter(), workqueue.DefaultTypedControllerRateLimiter[cache.ObjectName]()
	key := cache.ObjectName{Namespace: testNS, Name: "always"}
	for range 30 {
		limiter.When(key)
		uncapped.When(key)
	}
	if got := limiter.When(key); got != failedRetryMax {
		t.Errorf("the 31st retry of one key waits %v, want %v", got, failedRetryMax)
	}
	if got := uncapped.When(key); got <= failedRetryMax {
		t.Errorf("without the cap the 31st retry waits %v: this test no longer shows what the cap is for", got)
	}
}
