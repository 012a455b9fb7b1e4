package corrections

import (
	"testing"
	"time"
)

func TestOverridden(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	const retry = 10 * time.Minute
	var o Overridden
	if o.Kept(1, "x", t0, retry) || o.RetryIn(t0, retry, time.Second) != 0 {
		t.Fatal("nothing noted: nothing kept, no retry")
	}
	o.Note(1, "x", t0)
	for _, tc := range []struct {
		name       string
		generation int64
		owned      string
		at         time.Duration
		want       bool
	}{
		{"as noted", 1, "x", time.Minute, true},
		{"another spec", 2, "x", time.Minute, false},
		{"someone changed what we own", 1, "y", time.Minute, false},
		{"just before the retry", 1, "x", retry - time.Nanosecond, true},
		{"due for a retry", 1, "x", retry, false},
	} {
		if got := o.Kept(tc.generation, tc.owned, t0.Add(tc.at), retry); got != tc.want {
			t.Errorf("%s: Kept = %v, want %v", tc.name, got, tc.want)
		}
	}
	if got := o.RetryIn(t0.Add(time.Minute), retry, time.Second); got != 9*time.Minute {
		t.Errorf("RetryIn a minute after = %v, want 9m", got)
	}
	if got := o.RetryIn(t0.Add(time.Hour), retry, time.Second); got != time.Second {
		t.Errorf("RetryIn long after = %v, want the least wait, 1s", got)
	}
	o.Clear()
	if o.Kept(1, "x", t0, retry) {
		t.Error("cleared, still kept")
	}
}
