// Package changeevents paces the Events that tell a user what the
// controller changed in an object after the user edited its owner.
//
// A Foo edited in a storm (a script, an autoscaler gone wrong) would
// otherwise get a Scaled or Updated Event per change: 754 objects for
// 2,000 edits in the integration test TestEditStorm, each a request, and
// `kubectl describe` showing only the flood. client-go aggregates neither
// as needed: the events API's series keep the first note of a run of
// similar Events, and the core/v1 correlator's spam filter drops the last
// ones (docs/design.md). A Held tells the first change at once and the
// rest at most once per interval, all of them together, so that the newest
// Event always tells the last change.
package changeevents

import (
	"fmt"
	"slices"
	"time"

	"example.com/foo-controller/pkg/pacer"
)

// Reasons of the Events told.
const (
	reasonScaled  = "Scaled"
	reasonUpdated = "Updated"
)

// Change is one change the controller made to an object: a scale from
// From to To replicas (Fields nil), or an update of Fields.
type Change struct {
	Object   string // the object's name, for the notes
	From, To int32
	Fields   []string
}

// Event is one Event to record.
type Event struct {
	Reason, Action, Note string
}

// Held is one owner's change Events held back, and their pacing (the zero
// value: none held, none told). Its user keeps it with whatever else it
// remembers of the owner and must not share it between goroutines.
type Held struct {
	pace pacer.Pacer
	held *held
}

// held is what the held Events will tell.
type held struct {
	subject any // the owner as last seen: the Events' subject
	object  string
	// Scaled: from the count before the first held scale to the last.
	from, to int32
	scales   int
	// Updated: every field changed by the held updates.
	fields  []string
	updates int
	since   time.Time
}

// Tell takes a change of subject's object. A change that follows an edit
// of the owner (edited) is held with the others since the last Event, to
// be told by Flush; otherwise it is told at once, after anything held: the
// Events to record are returned, in order.
func (h *Held) Tell(subject any, c Change, edited bool, now time.Time) []Event {
	if !edited {
		out := h.take(now)
		if c.Fields == nil {
			return append(out, Event{reasonScaled, "ScaleDeployment", fmt.Sprintf("Scaled Deployment %s from %d to %d replicas", c.Object, c.From, c.To)})
		}
		return append(out, Event{reasonUpdated, "UpdateDeployment", fmt.Sprintf("Updated Deployment %s: %v", c.Object, c.Fields)})
	}
	next := held{since: now}
	if h.held != nil {
		next = *h.held
	}
	next.subject, next.object = subject, c.Object
	if c.Fields == nil {
		if next.scales == 0 {
			next.from = c.From
		}
		next.to = c.To
		next.scales++
	} else {
		for _, f := range c.Fields {
			if !slices.Contains(next.fields, f) {
				next.fields = append(next.fields, f)
			}
		}
		next.updates++
	}
	h.held = &next
	return nil
}

// Flush returns the held Events once interval has passed since the last
// were told (the first at once), or else how long to wait.
func (h *Held) Flush(interval time.Duration, now time.Time) ([]Event, time.Duration) {
	if h.held == nil {
		return nil, 0
	}
	if wait := h.pace.Wait(interval, now); wait > 0 {
		return nil, wait
	}
	return h.take(now), 0
}

// Subject is the owner the held Events are about (nil when none are held):
// to tell them at shutdown, with Flush(0, now).
func (h *Held) Subject() any {
	if h.held == nil {
		return nil
	}
	return h.held.subject
}

// take returns the held Events, the update before the scale, and starts a
// new interval.
func (h *Held) take(now time.Time) []Event {
	c := h.held
	if c == nil {
		return nil
	}
	h.held = nil
	h.pace.Wrote(now)
	var out []Event
	took := now.Sub(c.since).Round(100 * time.Millisecond)
	if c.updates > 0 {
		note := fmt.Sprintf("Updated Deployment %s: %v", c.object, c.fields)
		if c.updates > 1 {
			note += fmt.Sprintf(", through %d updates in %v", c.updates, took)
		}
		out = append(out, Event{reasonUpdated, "UpdateDeployment", note})
	}
	if c.scales > 0 {
		note := fmt.Sprintf("Scaled Deployment %s from %d to %d replicas", c.object, c.from, c.to)
		if c.scales > 1 {
			note += fmt.Sprintf(", through %d scales in %v", c.scales, took)
		}
		out = append(out, Event{reasonScaled, "ScaleDeployment", note})
	}
	return out
}
