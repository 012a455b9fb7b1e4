package main

import (
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	samplev1alpha1 "example.com/foo-controller/pkg/apis/samplecontroller/v1alpha1"
)

// scaleEventInterval is how often the Scaled Events that follow edits of
// one Foo may be recorded. A Foo edited in a storm (a script, an autoscaler
// gone wrong) would otherwise get an Event per scale: 754 objects for
// 2,000 edits in TestEditStorm, each a request, and `kubectl describe`
// showing only the flood. client-go aggregates neither: the events API's
// series keep the first note of a run of similar Events, and the core/v1
// correlator's spam filter drops the last ones (docs/design.md).
const scaleEventInterval = 2 * time.Second

// heldScale is what a Foo's held-back Scaled Event will tell: the scales
// made since the last one recorded.
type heldScale struct {
	uid      types.UID
	from, to int32
	scales   int
	since    time.Time
}

// tellScaled records that foo's Deployment was scaled from one count to
// another. A scale that follows an edit of the Foo (its status has not
// observed its generation yet) joins the ones held back since the last
// Event, told at most once per scaleEventInterval by flushScaled, so that
// the last one is always told. A scale that puts back someone else's change
// is told at once: the corrections limiter bounds those.
func (c *Controller) tellScaled(foo *samplev1alpha1.Foo, dep *appsv1.Deployment, from, to int32) {
	key := cache.MetaObjectToName(foo)
	v, held := c.heldScales.Load(key)
	if held && v.(heldScale).uid != foo.UID {
		held = false // a predecessor's
	}
	if !held && foo.Status.ObservedGeneration == foo.Generation {
		c.recorder.Eventf(foo, dep, corev1.EventTypeNormal, reasonScaled, "ScaleDeployment",
			"Scaled Deployment %s from %d to %d replicas", dep.Name, from, to)
		return
	}
	h := heldScale{uid: foo.UID, from: from, to: to, scales: 1, since: c.clock.Now()}
	if held {
		h.from, h.scales, h.since = v.(heldScale).from, v.(heldScale).scales+1, v.(heldScale).since
	}
	c.heldScales.Store(key, h)
}

// flushScaled records foo's held-back Scaled Event once its interval
// allows, or asks to come back then.
func (c *Controller) flushScaled(foo *samplev1alpha1.Foo, dep *appsv1.Deployment) syncResult {
	key := cache.MetaObjectToName(foo)
	v, ok := c.heldScales.Load(key)
	if !ok {
		return syncResult{}
	}
	h := v.(heldScale)
	if h.uid != foo.UID {
		c.heldScales.Delete(key)
		return syncResult{}
	}
	now := c.clock.Now()
	if wait := c.scaleEvents.Wait(key, now); wait > 0 {
		return requeueAfter(wait)
	}
	c.heldScales.Delete(key)
	c.scaleEvents.Wrote(key, now)
	var related runtime.Object
	if dep != nil {
		related = dep
	}
	note := fmt.Sprintf("Scaled Deployment %s from %d to %d replicas", foo.Spec.DeploymentName, h.from, h.to)
	if h.scales > 1 {
		note += fmt.Sprintf(" (%d scales in %v)", h.scales, now.Sub(h.since).Round(100*time.Millisecond))
	}
	c.recorder.Eventf(foo, related, corev1.EventTypeNormal, reasonScaled, "ScaleDeployment", "%s", note)
	return syncResult{}
}
