package plan

import (
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	samplev1alpha1 "example.com/foo-controller/pkg/apis/samplecontroller/v1alpha1"
)

// Observation is what the controller found when it reconciled a Foo.
type Observation struct {
	// Deployment is the Foo's Deployment as last seen (nil if none exists).
	Deployment *appsv1.Deployment
	// Conflict is set when a Deployment of the wanted name exists and is
	// not the Foo's; Deployment is then that foreign object.
	Conflict bool
	// Waiting is set when the Deployment of the wanted name is going away
	// (being deleted, or left by a deleted predecessor of this Foo for the
	// garbage collector); the controller recreates it once it is gone.
	Waiting bool
	// ApplyError is the API server's refusal of the Deployment, if any.
	ApplyError error
}

// Status computes the status foo should have. It starts from foo's current
// conditions so that a condition whose status has not changed keeps its
// lastTransitionTime; now is used only for conditions that transition.
// The result is deterministic, so comparing it with the current status
// (StatusEqual) tells whether there is anything to write.
func Status(foo *samplev1alpha1.Foo, obs Observation, now metav1.Time) samplev1alpha1.FooStatus {
	st := samplev1alpha1.FooStatus{
		ObservedGeneration: foo.Generation,
		Selector:           labels.SelectorFromSet(SelectorLabels(foo)).String(),
		Conditions:         cloneConditions(foo.Status.Conditions),
	}
	if dep := obs.Deployment; dep != nil && !obs.Conflict && !obs.Waiting {
		st.Replicas = dep.Status.Replicas
		st.AvailableReplicas = dep.Status.AvailableReplicas
		st.ReadyReplicas = dep.Status.ReadyReplicas
	}
	ready := ReadyCondition(foo, obs)
	ready.ObservedGeneration = foo.Generation
	ready.LastTransitionTime = now
	// SetStatusCondition keeps the existing lastTransitionTime unless the
	// condition's status flips.
	meta.SetStatusCondition(&st.Conditions, ready)
	return st
}

// ReadyCondition is the Ready condition for what was observed (without
// timestamps or generation, which Status fills in).
func ReadyCondition(foo *samplev1alpha1.Foo, obs Observation) metav1.Condition {
	c := metav1.Condition{Type: samplev1alpha1.ConditionReady, Status: metav1.ConditionFalse}
	dep := obs.Deployment
	want := Replicas(foo)
	switch {
	case obs.ApplyError != nil:
		c.Reason = samplev1alpha1.ReasonDeploymentApplyFailed
		c.Message = fmt.Sprintf("Deployment %q could not be applied: %v", foo.Spec.DeploymentName, obs.ApplyError)
	case obs.Conflict:
		c.Reason = samplev1alpha1.ReasonDeploymentConflict
		c.Message = fmt.Sprintf("Deployment %q already exists and is not controlled by this Foo; delete or rename it, or choose another spec.deploymentName", foo.Spec.DeploymentName)
	case dep == nil:
		c.Reason = samplev1alpha1.ReasonProgressing
		c.Message = fmt.Sprintf("Deployment %q does not exist yet", foo.Spec.DeploymentName)
	case obs.Waiting:
		c.Reason = samplev1alpha1.ReasonProgressing
		c.Message = fmt.Sprintf("waiting for the old Deployment %q to be deleted before creating it again", dep.Name)
	case dep.Status.ObservedGeneration < dep.Generation:
		c.Reason = samplev1alpha1.ReasonProgressing
		c.Message = fmt.Sprintf("waiting for the Deployment controller to observe generation %d of Deployment %q", dep.Generation, dep.Name)
	case progressDeadlineExceeded(dep):
		c.Reason = samplev1alpha1.ReasonProgressDeadlineExceeded
		c.Message = fmt.Sprintf("Deployment %q exceeded its progress deadline: %d of %d replicas available", dep.Name, dep.Status.AvailableReplicas, want)
	case dep.Status.UpdatedReplicas < want, dep.Status.Replicas > dep.Status.UpdatedReplicas, dep.Status.AvailableReplicas < want:
		c.Reason = samplev1alpha1.ReasonProgressing
		c.Message = fmt.Sprintf("%d of %d replicas updated, %d available", dep.Status.UpdatedReplicas, want, dep.Status.AvailableReplicas)
	default:
		c.Status = metav1.ConditionTrue
		c.Reason = samplev1alpha1.ReasonDeploymentAvailable
		c.Message = fmt.Sprintf("%d of %d replicas available", dep.Status.AvailableReplicas, want)
	}
	return c
}

func progressDeadlineExceeded(dep *appsv1.Deployment) bool {
	for _, c := range dep.Status.Conditions {
		if c.Type == appsv1.DeploymentProgressing && c.Status == corev1.ConditionFalse && c.Reason == "ProgressDeadlineExceeded" {
			return true
		}
	}
	return false
}

// ProgressOnly reports whether want differs from have only in how far a
// rollout has got: the replica counts and the Ready message, with the same
// generation, Ready status and reason. A rollout produces many such changes
// and nobody acts on them, so the controller writes them at most every so
// often; any other change (a new generation, Ready flipping, a new reason)
// is written at once.
func ProgressOnly(have, want samplev1alpha1.FooStatus) bool {
	if have.ObservedGeneration != want.ObservedGeneration || have.Selector != want.Selector ||
		len(have.Conditions) != len(want.Conditions) {
		return false
	}
	h := meta.FindStatusCondition(have.Conditions, samplev1alpha1.ConditionReady)
	w := meta.FindStatusCondition(want.Conditions, samplev1alpha1.ConditionReady)
	return h != nil && w != nil && h.Status == w.Status && h.Reason == w.Reason &&
		h.ObservedGeneration == w.ObservedGeneration
}

// FirstProgress reports whether want is the first status of a Foo (have is
// empty: nothing was ever written) and says only that its Deployment is on
// its way. An empty status already tells a reader that the controller has
// not reported yet, so this one can wait and be written with whatever comes
// next, like a progress-only change; during a burst of new Foos that halves
// the controller's requests before every Deployment exists. A first status
// that says anything else (Ready, or a problem) is written at once.
func FirstProgress(have, want samplev1alpha1.FooStatus) bool {
	if have.ObservedGeneration != 0 || len(have.Conditions) != 0 {
		return false
	}
	w := meta.FindStatusCondition(want.Conditions, samplev1alpha1.ConditionReady)
	return w != nil && w.Status == metav1.ConditionFalse && w.Reason == samplev1alpha1.ReasonProgressing
}

// StatusEqual reports whether two statuses are the same, so that the
// controller writes status only when something in it changed.
func StatusEqual(a, b samplev1alpha1.FooStatus) bool {
	return equality.Semantic.DeepEqual(a, b)
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
