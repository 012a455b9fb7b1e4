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

import (
	"sync"
	"time"
)

// Pacer remembers, per key, when its interval began: when a write was last
// made, or when a first write was first held back. It is safe for
// concurrent use. The zero value is not usable; call New.
type Pacer[K comparable] struct {
	interval time.Duration

	mu   sync.Mutex
	last map[K]time.Time
}

// New returns a Pacer that lets one held-back write per key through per
// interval.
func New[K comparable](interval time.Duration) *Pacer[K] {
	return &Pacer[K]{interval: interval, last: map[K]time.Time{}}
}

// Begin starts key's interval at now unless one is already running: a
// key's first write, held back, then waits like one that follows a write.
func (p *Pacer[K]) Begin(key K, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.last[key]; !ok {
		p.last[key] = now
	}
}

// Wait returns how long a write for key that may wait must still wait; 0
// when it may go now. A key with no interval running never waits.
func (p *Pacer[K]) Wait(key K, now time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	last, ok := p.last[key]
	if !ok {
		return 0
	}
	return max(0, p.interval-now.Sub(last))
}

// Wrote records a write for key at now: its next interval begins.
func (p *Pacer[K]) Wrote(key K, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.last[key] = now
}

// Forget drops key (its object is gone).
func (p *Pacer[K]) Forget(key K) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.last, key)
}

// Len is the number of keys remembered.
func (p *Pacer[K]) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.last)
}
