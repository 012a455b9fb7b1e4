package main

import (
	"testing"
	"time"
)

// TestResyncPeriod: the idle window follows the controller's resync
// period, so that it holds a pass whatever flags the run gives.
func TestResyncPeriod(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want time.Duration
	}{
		{nil, 10 * time.Minute},
		{[]string{"-workers=8"}, 10 * time.Minute},
		{[]string{"-resync-period=1m"}, time.Minute},
		{[]string{"--resync-period=90s", "-workers=8"}, 90 * time.Second},
		{[]string{"-resync-period=0"}, 10 * time.Minute}, // no resync: the window stays the default
		{[]string{"-resync-period=soon"}, 10 * time.Minute},
	} {
		if got := resyncPeriod(tc.args); got != tc.want {
			t.Errorf("resyncPeriod(%q) = %v, want %v", tc.args, got, tc.want)
		}
	}
}
