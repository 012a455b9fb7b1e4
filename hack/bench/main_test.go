package main

import (
	"strings"
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

// TestByMethodListsMethodsOnly: the table's "by method" part lists the
// per-method figures, not the idle totals that share their prefix.
func TestByMethodListsMethodsOnly(t *testing.T) {
	var b strings.Builder
	printTable(&b, report{N: 1, Median: figures{
		"converge_PATCH_per_foo": 2, "idle_GET_per_min": 0.2,
		"idle_requests_per_min": 0.2, "idle_writes_per_min": 0, "idle_cpu_pct": 0.4,
	}})
	_, byMethod, _ := strings.Cut(b.String(), "by method:")
	for _, want := range []string{"converge_PATCH_per_foo", "idle_GET_per_min"} {
		if !strings.Contains(byMethod, want) {
			t.Errorf("by method lacks %s:\n%s", want, byMethod)
		}
	}
	for _, not := range []string{"idle_requests_per_min", "idle_writes_per_min", "idle_cpu_pct"} {
		if strings.Contains(byMethod, not) {
			t.Errorf("by method lists %s:\n%s", not, byMethod)
		}
	}
}
