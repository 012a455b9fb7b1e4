package main

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	samplev1beta1 "example.com/foo-controller/pkg/apis/samplecontroller/v1beta1"
	"example.com/foo-controller/pkg/changeevents"
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
// follow edits of one Foo may be recorded (pkg/changeevents says why).
const changeEventInterval = 2 * time.Second

// tellChanged records that the controller changed foo's Deployment. A
// change that follows an edit of the Foo (its status has not observed its
// generation yet) is held with the others since the last such Event and
// told by flushChanges, at most once per changeEventInterval; one that
// puts back someone else's is told at once (the corrections limiter bounds
// those).
func (c *Controller) tellChanged(foo *samplev1beta1.Foo, rec *record, dep *plan.DeploymentView, change changeevents.Change) {
	edited := foo.Status.ObservedGeneration != foo.Generation
	c.recordChanges(foo, dep, rec.changes.Tell(foo, change, edited, c.clock.Now()))
}

// flushChanges records foo's held Events once their interval allows, or
// asks to come back then.
func (c *Controller) flushChanges(foo *samplev1beta1.Foo, rec *record, dep *plan.DeploymentView) syncResult {
	told, wait := rec.changes.Flush(changeEventInterval, c.clock.Now())
	c.recordChanges(foo, dep, told)
	return requeueAfter(wait)
}

// flushAllChanges records every held Event now: at shutdown, so that the
// last change of each Foo is told before the process exits.
func (c *Controller) flushAllChanges() {
	now := c.clock.Now()
	c.memory.each(func(rec *record) {
		if foo, ok := rec.changes.Subject().(*samplev1beta1.Foo); ok {
			told, _ := rec.changes.Flush(0, now)
			c.recordChanges(foo, nil, told)
		}
	})
}

func (c *Controller) recordChanges(foo *samplev1beta1.Foo, dep *plan.DeploymentView, told []changeevents.Event) {
	for _, e := range told {
		c.event(foo, dep, corev1.EventTypeNormal, e.Reason, e.Action, "%s", e.Note)
	}
}
