package corrections

import "time"

// Overridden is what the API server made of an object's last correction
// when it did not keep it (a mutating admission policy or webhook rewrote
// the fields written), for one generation of the owner (the zero value:
// none). Such a correction is reported, not fought: correcting it again
// would only be rewritten again, and the write's own watch event would
// bring the controller back, forever. It is tried once more after a
// while, in case the policy is gone.
//
// Owned is whatever identifies the values of every field the controller
// owns, so that writes of fields it does not own (the status) do not count
// as a change.
type Overridden struct {
	generation int64
	owned      string
	at         time.Time
}

// Note remembers, at now, that a correction for generation left the
// owned values owned.
func (o *Overridden) Note(generation int64, owned string, now time.Time) {
	*o = Overridden{generation: generation, owned: owned, at: now}
}

// Clear forgets: the last write was kept, or nothing differs any more.
func (o *Overridden) Clear() { *o = Overridden{} }

// Kept reports whether the object, at generation with owned values owned,
// is still what the API server made of the last correction, less than
// retry ago: then it is left as it is.
func (o Overridden) Kept(generation int64, owned string, now time.Time, retry time.Duration) bool {
	return !o.at.IsZero() && o.generation == generation && o.owned == owned && now.Sub(o.at) < retry
}

// RetryIn is how long until the correction is due to be tried again, at
// least minWait; 0 when none was overridden.
func (o Overridden) RetryIn(now time.Time, retry, minWait time.Duration) time.Duration {
	if o.at.IsZero() {
		return 0
	}
	return max(retry-now.Sub(o.at), minWait)
}
