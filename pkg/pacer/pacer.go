// Package pacer spaces out writes that only report progress.
//
// During a rollout a Deployment's status changes several times before it is
// available, and a Foo's status that follows each change costs one request
// per change per Foo. Most of those changes only move replica counts; the
// controller writes the transitions that matter at once and lets a Pacer
// hold back the rest, so that one write carries several changes. A Pacer
// only tells how long to wait: the caller decides what may wait and comes
// back when told.
package pacer

import "time"

// Pacer is one object's pacing of one kind of write: when its interval
// began, at the last write or when a first write was first held back (the
// zero value: never). The caller keeps it with whatever else it remembers
// of the object, and must not share it between goroutines.
type Pacer struct {
	last time.Time
}

// Begin starts the interval at now unless one is already running: a first
// write, held back, then waits like one that follows a write.
func (p *Pacer) Begin(now time.Time) {
	if p.last.IsZero() {
		p.last = now
	}
}

// Wait is how long a held-back write must still wait at now for an
// interval of the given length to end: 0 if it may go out.
func (p Pacer) Wait(interval time.Duration, now time.Time) time.Duration {
	if p.last.IsZero() {
		return 0
	}
	return max(0, interval-now.Sub(p.last))
}

// Wrote records a write made at now: the next interval begins.
func (p *Pacer) Wrote(now time.Time) {
	p.last = now
}
