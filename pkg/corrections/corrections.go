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
package corrections

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Limiter hands out correction permits per key. It is safe for concurrent
// use. The zero value is not usable; call New.
type Limiter[K comparable] struct {
	every time.Duration
	burst int

	mu   sync.Mutex
	keys map[K]*bucket
}

type bucket struct {
	generation int64
	tokens     *rate.Limiter
	contested  bool // a correction was refused since generation began
}

// Decision is the Limiter's answer to one request for a correction.
type Decision struct {
	// Wait is 0 when the correction may be made now (it has been counted),
	// else how long to wait before asking again.
	Wait time.Duration
	// Contested reports that a correction of this object has been refused
	// since its owner's generation began: something keeps changing it.
	Contested bool
	// FirstRefusal is set on the refusal that made it contested: the
	// moment to tell the user, once.
	FirstRefusal bool
}

// New returns a Limiter that allows burst corrections per key at once and
// then one every period.
func New[K comparable](every time.Duration, burst int) *Limiter[K] {
	return &Limiter[K]{every: every, burst: burst, keys: map[K]*bucket{}}
}

// Reserve asks to correct key's object, declared at generation, at now. A
// refused request costs nothing.
func (l *Limiter[K]) Reserve(key K, generation int64, now time.Time) Decision {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.keys[key]
	if b == nil || b.generation != generation {
		b = &bucket{generation: generation, tokens: rate.NewLimiter(rate.Every(l.every), l.burst)}
		l.keys[key] = b
	}
	r := b.tokens.ReserveN(now, 1)
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		first := !b.contested
		b.contested = true
		return Decision{Wait: d, Contested: true, FirstRefusal: first}
	}
	return Decision{Contested: b.contested}
}

// Forget drops key's bucket (its object is gone).
func (l *Limiter[K]) Forget(key K) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.keys, key)
}

// Len is the number of keys with a bucket.
func (l *Limiter[K]) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.keys)
}
