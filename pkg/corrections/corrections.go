// Package corrections limits how often the controller rewrites an object
// that something else keeps changing.
//
// Putting back a changed Deployment is a successful sync, not an error, so
// the workqueue's failure backoff never applies to it: without a limit, a
// client that keeps resetting a field (a script, or another controller
// that reacts to our writes as fast as we react to its) would be answered
// write for write, at the speed of the fight. A Limiter gives each object a
// token bucket for corrections instead: the first few are immediate, then
// at most one per period, and a change of what the owner declares (its
// generation) starts afresh, so a user's edits are never delayed.
//
// Only corrections that were made take a token (Made): a write the API
// server refused (an invalid value on the owner, an admission webhook
// saying no) changed nothing anyone could be fighting over, and its
// retries are paced by the workqueue's failure backoff instead.
//
// A fight ends once no correction was needed for burst periods (the bucket
// is full again by then): the object is then treated as never fought over,
// so the next fight is reported again, and its bucket is dropped, so the
// Limiter holds only the objects corrected recently.
package corrections

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Limiter hands out correction permits per key. It is safe for concurrent
// use. The zero value is not usable; call New.
//
// Key by the owner's UID, not its name: a deleted and recreated owner is a
// new object, and must not inherit its predecessor's drained bucket or
// fight. Keys need not be forgotten: a bucket whose fight is over is dropped by
// the next sweep.
type Limiter[K comparable] struct {
	every time.Duration
	burst int

	mu        sync.Mutex
	keys      map[K]*bucket
	lastSweep time.Time
}

type bucket struct {
	generation int64
	tokens     *rate.Limiter
	// quiet is when the fight is over and the bucket can be dropped: burst
	// periods after the last correction, or after the time a refused one
	// was told to come back. The bucket is full by then, but a full bucket
	// is not enough: a refused correction is still needed until it is
	// made, and with burst 1 the retry that continues a fight finds the
	// bucket full again.
	quiet     time.Time
	contested bool // a correction was refused since the fight began
}

// Decision is the Limiter's answer to one request for a correction.
type Decision struct {
	// Wait is 0 when the correction may be made now (call Made once it
	// is), else how long to wait before asking again.
	Wait time.Duration
	// Contested reports that a correction of this object has been refused
	// in the current fight: something keeps changing it. A fight ends when
	// the owner's generation changes, or once no correction was needed
	// for burst periods.
	Contested bool
	// FirstRefusal is set on the refusal that began the fight: the moment
	// to tell the user, once per fight.
	FirstRefusal bool
}

// New returns a Limiter that allows burst corrections per key at once and
// then one every period. A burst below 1 counts as 1.
func New[K comparable](every time.Duration, burst int) *Limiter[K] {
	return &Limiter[K]{every: every, burst: max(burst, 1), keys: map[K]*bucket{}}
}

// Reserve asks whether key's object, declared at generation, may be
// corrected at now. It takes no token: call Made once the correction is
// made.
func (l *Limiter[K]) Reserve(key K, generation int64, now time.Time) Decision {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sweep(now)
	b := l.bucket(key, generation, now)
	// Asked, then given back at once: rate's way to look without taking.
	r := b.tokens.ReserveN(now, 1)
	wait := r.DelayFrom(now)
	r.CancelAt(now)
	if wait <= 0 {
		return Decision{Contested: b.contested}
	}
	first := !b.contested
	b.contested = true
	b.quiet = later(b.quiet, now.Add(wait+l.window()))
	return Decision{Wait: wait, Contested: true, FirstRefusal: first}
}

// Made counts a correction of key's object, declared at generation, made
// at now, after Reserve allowed it.
func (l *Limiter[K]) Made(key K, generation int64, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.keys[key]
	if b == nil || b.generation != generation {
		// Swept, or the owner changed, since Reserve. A fight that Reserve
		// saw is kept even if it ended while the write was in flight.
		b = l.bucket(key, generation, now)
	}
	b.tokens.ReserveN(now, 1)
	b.quiet = later(b.quiet, now.Add(l.window()))
}

// bucket is key's bucket for generation at now: a full one, with no
// fight, if the object was never corrected, its owner changed, or the
// fight (if any) is over.
func (l *Limiter[K]) bucket(key K, generation int64, now time.Time) *bucket {
	b := l.keys[key]
	if b == nil || b.generation != generation || !now.Before(b.quiet) {
		b = &bucket{generation: generation, tokens: rate.NewLimiter(rate.Every(l.every), l.burst)}
		l.keys[key] = b
	}
	return b
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// window is how long a bucket takes to refill from empty: burst periods.
func (l *Limiter[K]) window() time.Duration { return time.Duration(l.burst) * l.every }

// sweep drops the buckets whose fight is over at now, at most once a
// window. Such a bucket is the same as none, so this changes no decision;
// it bounds the map by the keys corrected within about two windows of now,
// at the cost of one pass over them per window. Times from callers that
// read the clock before taking the lock may go slightly backwards; that
// only delays a sweep.
func (l *Limiter[K]) sweep(now time.Time) {
	if now.Sub(l.lastSweep) < l.window() {
		return
	}
	l.lastSweep = now
	for k, b := range l.keys {
		if !now.Before(b.quiet) {
			delete(l.keys, k)
		}
	}
}

// Len is the number of keys with a bucket, including some whose fight is
// over and that the next sweep drops.
func (l *Limiter[K]) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.keys)
}
