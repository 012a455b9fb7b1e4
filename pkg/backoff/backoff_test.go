package backoff

import (
	"fmt"
	"testing"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/client-go/util/workqueue"
)

const limit = 10 * time.Minute

// TestCappedWaitsAtMostTheCap: however many keys failed and however often,
// none waits longer than the cap for its retry: after an outage that
// failed 10,000 keys, the shared 10/s of client-go's default limiter alone
// would spread their retries over 1,000 s and more.
func TestCappedWaitsAtMostTheCap(t *testing.T) {
	const n = 10000
	limiter, uncapped := Capped[string](limit), workqueue.DefaultTypedControllerRateLimiter[string]()
	var longest, longestUncapped time.Duration
	for i := range n {
		key := fmt.Sprintf("foo-%d", i)
		for range 10 { // a long outage: each key deep in its backoff
			longest = max(longest, limiter.When(key))
			longestUncapped = max(longestUncapped, uncapped.When(key))
		}
	}
	if longest != limit {
		t.Errorf("the longest wait of %d failed keys is %v, want the cap, %v", n, longest, limit)
	}
	if longestUncapped <= limit {
		t.Errorf("without the cap the longest wait is %v: this test no longer shows what the cap is for", longestUncapped)
	}
	// One key failing for ever is tried every limit, not every 1000 s.
	for range 30 {
		limiter.When("always")
	}
	if got := limiter.When("always"); got != limit {
		t.Errorf("the 31st retry of one key waits %v, want %v", got, limit)
	}
	limiter.Forget("always")
	if got := limiter.NumRequeues("always"); got != 0 {
		t.Errorf("after Forget the key has %d requeues, want 0", got)
	}
}

// TestCappedKeepsNoDebt: the shared 10/s keeps no debt past the cap:
// 100,000 failures at once leave the bucket at most the cap's worth of
// tokens behind (6,000 for 10 minutes), not 99,900, so failures after the
// outage are not held back for hours.
func TestCappedKeepsNoDebt(t *testing.T) {
	bucket := cappedBucket[string]{rate.NewLimiter(rate.Limit(10), 100), limit}
	for range 100000 {
		bucket.When("a")
	}
	if owed, most := -bucket.Tokens(), limit.Seconds()*10+1; owed > most {
		t.Errorf("after 100,000 failures the bucket owes %.0f tokens, want at most %.0f", owed, most)
	}
}
