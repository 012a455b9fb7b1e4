package plan

import (
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	samplev1beta1 "example.com/foo-controller/pkg/apis/samplecontroller/v1beta1"
)

// Observation is what the controller found when it reconciled a Foo.
type Observation struct {
	// Deployment is the Foo's Deployment as last seen (nil if none exists).
	Deployment *DeploymentView
	// Conflict is set when a Deployment of the wanted name exists and is
	// not the Foo's; Deployment is then that foreign object.
	Conflict bool
	// Waiting is set when the Deployment of the wanted name is going away
	// (being deleted, or left by a deleted predecessor of this Foo for the
	// garbage collector); the controller recreates it once it is gone.
	// The sync sets it with that Deployment, found by the wanted name
	// (TestSyncWaitsForAnOldDeploymentToGo); the conditions name the
	// wanted name, which is that Deployment's, so that they never need it
	// (FuzzDecisions builds Waiting without one).
	Waiting bool
	// ApplyError is the API server's refusal of the Deployment, if any.
	ApplyError error
	// Overridden are the fields (as Drift names them) that the API server
	// keeps at other values than the Foo declares: our correction was
	// accepted and rewritten (a mutating admission policy or webhook).
	Overridden []string
}

// Status computes the status foo should have. It starts from foo's current
// conditions so that a condition whose status has not changed keeps its
// lastTransitionTime; now is used only for conditions that transition.
// Reconciling and Stalled are removed when they are not True (kstatus:
// absent means false). The result is deterministic, so comparing it with
// the current status (StatusEqual) tells whether there is anything to write.
func Status(foo *samplev1beta1.Foo, obs Observation, now metav1.Time) samplev1beta1.FooStatus {
	st := samplev1beta1.FooStatus{
		ObservedGeneration: foo.Generation,
		Selector:           labels.SelectorFromSet(SelectorLabels(foo)).String(),
		Conditions:         cloneConditions(foo.Status.Conditions),
	}
	if isOurs(obs) {
		dep := obs.Deployment
		st.Replicas = dep.Status.Replicas
		st.AvailableReplicas = dep.Status.AvailableReplicas
		st.ReadyReplicas = dep.Status.ReadyReplicas
	}
	set := func(c metav1.Condition) {
		c.LastTransitionTime = now
		// SetStatusCondition keeps the existing lastTransitionTime unless
		// the condition's status flips.
		meta.SetStatusCondition(&st.Conditions, c)
	}
	// Each condition once: Ready is derived from the other three, and a
	// converged Foo's status is computed at every sync, resyncs included.
	stalled := stalledCondition(foo, obs)
	rec := reconciling(foo, obs, stalled)
	avail := availableCondition(foo, obs)
	set(ready(foo, obs, stalled, rec, avail))
	set(avail)
	for _, abnormal := range []struct {
		typ string
		c   *metav1.Condition
	}{
		{samplev1beta1.ConditionReconciling, rec},
		{samplev1beta1.ConditionStalled, stalled},
	} {
		if abnormal.c == nil {
			meta.RemoveStatusCondition(&st.Conditions, abnormal.typ)
		} else {
			set(*abnormal.c)
		}
	}
	return st
}

// isOurs reports whether obs holds a Deployment that is the Foo's own and
// in place: one whose status describes the Foo.
func isOurs(obs Observation) bool {
	return obs.Deployment != nil && !obs.Conflict && !obs.Waiting
}

// observed reports whether the Deployment controller has observed dep's
// latest generation: until it has, dep's status describes an older spec.
func observed(dep *DeploymentView) bool {
	return dep.Status.ObservedGeneration >= dep.Generation
}

// StatusEqual reports whether two statuses are the same, so that the
// controller writes status only when something in it changed.
// Conditions are compared by type, in any order: the API server may keep
// them in another order than we computed, and that is no change.
func StatusEqual(a, b samplev1beta1.FooStatus) bool {
	ac, bc := a.Conditions, b.Conditions
	a.Conditions, b.Conditions = nil, nil
	if !equality.Semantic.DeepEqual(a, b) || len(ac) != len(bc) {
		return false
	}
	for _, c := range ac {
		if o := meta.FindStatusCondition(bc, c.Type); o == nil || !equality.Semantic.DeepEqual(c, *o) {
			return false
		}
	}
	return true
}

func cloneConditions(in []metav1.Condition) []metav1.Condition {
	if in == nil {
		return nil
	}
	out := make([]metav1.Condition, len(in))
	for i := range in {
		in[i].DeepCopyInto(&out[i])
	}
	return out
}
