package pacer

import (
	"testing"
	"time"
)

func TestPacer(t *testing.T) {
	const interval = 2 * time.Second
	t0 := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	type step struct {
		op   string // "begin", "wrote" or "wait"
		at   time.Duration
		want time.Duration // for "wait"
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"a new object never waits", []step{{"wait", 0, 0}}},
		{"after a write, the rest of the interval", []step{
			{"wrote", 0, 0}, {"wait", 0, interval}, {"wait", 500 * time.Millisecond, 1500 * time.Millisecond},
			{"wait", interval, 0}, {"wait", 3 * interval, 0},
		}},
		{"a new write starts a new interval", []step{
			{"wrote", 0, 0}, {"wrote", interval, 0}, {"wait", interval + time.Second, time.Second},
		}},
		{"begin starts an interval", []step{{"begin", 0, 0}, {"wait", time.Second, time.Second}}},
		{"begin does not restart a running interval", []step{
			{"begin", 0, 0}, {"begin", time.Second, 0}, {"wait", time.Second, time.Second},
			{"wrote", 5 * time.Second, 0}, {"begin", 6 * time.Second, 0}, {"wait", 6 * time.Second, time.Second},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var p Pacer
			for i, s := range tc.steps {
				now := t0.Add(s.at)
				switch s.op {
				case "begin":
					p.Begin(now)
				case "wrote":
					p.Wrote(now)
				case "wait":
					if got := p.Wait(interval, now); got != s.want {
						t.Errorf("step %d: Wait at +%v = %v, want %v", i, s.at, got, s.want)
					}
				}
			}
		})
	}
}
