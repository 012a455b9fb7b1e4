package main

import (
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	samplev1beta1 "example.com/foo-controller/pkg/apis/samplecontroller/v1beta1"
	"example.com/foo-controller/pkg/plan"
)

// event records an Event about foo, unless its namespace is being deleted:
// the API server refuses new objects there, and nobody is left to read it.
func (c *Controller) event(foo *samplev1beta1.Foo, related *plan.DeploymentView, eventtype, reason, action, note string, args ...any) {
	if c.namespaceGoing(foo.Namespace) {
		return
	}
	var rel runtime.Object
	if related != nil {
		rel = related.Reference()
	}
	c.recorder.Eventf(foo, rel, eventtype, reason, action, note, args...)
}

// changeEventInterval is how often the Scaled and Updated Events that
// follow edits of one Foo may be recorded. A Foo edited in a storm (a
// script, an autoscaler gone wrong) would otherwise get an Event per
// change: 754 objects for 2,000 edits in TestEditStorm, each a request, and
// `kubectl describe` showing only the flood. client-go aggregates neither
// as needed: the events API's series keep the first note of a run of
// similar Events, and the core/v1 correlator's spam filter drops the last
// ones (docs/design.md).
const changeEventInterval = 2 * time.Second

// heldChanges are a Foo's Scaled and Updated Events held back: what they
// will tell, and the Foo as last seen (the Events' subject).
type heldChanges struct {
	foo *samplev1beta1.Foo
	// Scaled: from the count before the first held scale to the last.
	from, to int32
	scales   int
	// Updated: every field changed by the held updates.
	fields  []string
	updates int
	since   time.Time
}

// tellChanged records that foo's Deployment was scaled (to != from) or
// updated (fields). A change that follows an edit of the Foo (its status
// has not observed its generation yet) is held with the others since the
// last such Event, and told by flushChanges at most once per
// changeEventInterval, the first at once: the newest Event always tells the
// last change. A change that puts back someone else's is told at once,
// after anything held (the corrections limiter bounds those).
func (c *Controller) tellChanged(foo *samplev1beta1.Foo, rec *record, dep *plan.DeploymentView, from, to int32, fields []string) {
	if foo.Status.ObservedGeneration == foo.Generation {
		if h := rec.held; h != nil {
			now := c.clock.Now()
			rec.held = nil
			rec.eventPace.Wrote(now)
			c.recordHeld(h, dep, now)
		}
		if fields == nil {
			c.event(foo, dep, corev1.EventTypeNormal, reasonScaled, "ScaleDeployment",
				"Scaled Deployment %s from %d to %d replicas", dep.Name, from, to)
		} else {
			c.event(foo, dep, corev1.EventTypeNormal, reasonUpdated, "UpdateDeployment",
				"Updated Deployment %s: %v", dep.Name, fields)
		}
		return
	}
	next := heldChanges{since: c.clock.Now()}
	if rec.held != nil {
		next = *rec.held
	}
	next.foo = foo
	if fields == nil {
		if next.scales == 0 {
			next.from = from
		}
		next.to = to
		next.scales++
	} else {
		for _, f := range fields {
			if !slices.Contains(next.fields, f) {
				next.fields = append(next.fields, f)
			}
		}
		next.updates++
	}
	rec.held = &next
}

// flushChanges records foo's held Events once their interval allows, or
// asks to come back then.
func (c *Controller) flushChanges(foo *samplev1beta1.Foo, rec *record, dep *plan.DeploymentView) syncResult {
	if rec.held == nil {
		return syncResult{}
	}
	now := c.clock.Now()
	if wait := rec.eventPace.Wait(changeEventInterval, now); wait > 0 {
		return requeueAfter(wait)
	}
	h := rec.held
	rec.held = nil
	rec.eventPace.Wrote(now)
	c.recordHeld(h, dep, now)
	return syncResult{}
}

// flushAllChanges records every held Event now: at shutdown, so that the
// last change of each Foo is told before the process exits.
func (c *Controller) flushAllChanges() {
	now := c.clock.Now()
	for _, h := range c.memory.heldEvents() {
		c.recordHeld(h, nil, now)
	}
}

// recordHeld records held Events, the update before the scale.
func (c *Controller) recordHeld(h *heldChanges, dep *plan.DeploymentView, now time.Time) {
	name, took := h.foo.Spec.Deployment.Name, now.Sub(h.since).Round(100*time.Millisecond)
	if h.updates > 0 {
		note := fmt.Sprintf("Updated Deployment %s: %v", name, h.fields)
		if h.updates > 1 {
			note += fmt.Sprintf(", through %d updates in %v", h.updates, took)
		}
		c.event(h.foo, dep, corev1.EventTypeNormal, reasonUpdated, "UpdateDeployment", "%s", note)
	}
	if h.scales > 0 {
		note := fmt.Sprintf("Scaled Deployment %s from %d to %d replicas", name, h.from, h.to)
		if h.scales > 1 {
			note += fmt.Sprintf(", through %d scales in %v", h.scales, took)
		}
		c.event(h.foo, dep, corev1.EventTypeNormal, reasonScaled, "ScaleDeployment", "%s", note)
	}
}
