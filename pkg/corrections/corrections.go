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
// so the next fight is reported again.
//
// A Limiter holds no state: each object's Fight lives with whatever else
// the caller remembers of that object, and goes with it.
package corrections

import (
	"time"

	"golang.org/x/time/rate"
)

// Limiter hands out correction permits: burst at once, then one every
// period, per object. Its state per object is a Fight, which the caller
// keeps (the zero Fight: never corrected) and must not share between
// goroutines.
//
// Keep a Fight per object, not per name: a deleted and recreated owner is
// a new object, and must not inherit its predecessor's drained bucket or
// fight.
type Limiter struct {
	every time.Duration
	burst int
}

// Fight is one object's corrections so far (the zero value: none).
type Fight struct {
	generation int64
	tokens     *rate.Limiter
	// quiet is when the fight is over: burst periods after the last
	// correction, or after the time a refused one was told to come back.
	// The bucket is full by then, but a full bucket is not enough: a
	// refused correction is still needed until it is made, and with burst
	// 1 the retry that continues a fight finds the bucket full again.
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

// New returns a Limiter that allows burst corrections per object at once
// and then one every period. A burst below 1 counts as 1.
func New(every time.Duration, burst int) Limiter {
	return Limiter{every: every, burst: max(burst, 1)}
}

// Reserve asks whether the object of fight f, declared at generation, may
// be corrected at now. It takes no token: call Made once the correction is
// made.
func (l Limiter) Reserve(f *Fight, generation int64, now time.Time) Decision {
	l.begin(f, generation, now)
	// Asked, then given back at once: rate's way to look without taking.
	r := f.tokens.ReserveN(now, 1)
	wait := r.DelayFrom(now)
	r.CancelAt(now)
	if wait <= 0 {
		return Decision{Contested: f.contested}
	}
	first := !f.contested
	f.contested = true
	f.quiet = later(f.quiet, now.Add(wait+l.window()))
	return Decision{Wait: wait, Contested: true, FirstRefusal: first}
}

// Made counts a correction of f's object, declared at generation, made at
// now, after Reserve allowed it.
func (l Limiter) Made(f *Fight, generation int64, now time.Time) {
	if f.tokens == nil || f.generation != generation {
		// The owner changed since Reserve. A fight that Reserve saw is
		// kept even if it ended while the write was in flight.
		l.begin(f, generation, now)
	}
	f.tokens.ReserveN(now, 1)
	f.quiet = later(f.quiet, now.Add(l.window()))
}

// begin makes f a full bucket with no fight if the object was never
// corrected, its owner changed, or the fight (if any) is over.
func (l Limiter) begin(f *Fight, generation int64, now time.Time) {
	if f.tokens == nil || f.generation != generation || !now.Before(f.quiet) {
		*f = Fight{generation: generation, tokens: rate.NewLimiter(rate.Every(l.every), l.burst)}
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// window is how long a bucket takes to refill from empty: burst periods.
func (l Limiter) window() time.Duration { return time.Duration(l.burst) * l.every }
