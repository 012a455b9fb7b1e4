package plan

import (
	"fmt"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	samplev1beta1 "example.com/foo-controller/pkg/apis/samplecontroller/v1beta1"
)

// The conditions Status computes, each from what the sync observed, and
// which status changes may wait to be written with the next
// (ProgressOnly, FirstProgress). docs/conditions.md says what each means.

// stalledCondition is the Stalled condition (True) when something that
// retrying will not fix keeps the Foo from its declared state, or nil.
// kstatus reports such a Foo as Failed.
func stalledCondition(foo *samplev1beta1.Foo, obs Observation) *metav1.Condition {
	c := &metav1.Condition{Type: samplev1beta1.ConditionStalled, Status: metav1.ConditionTrue, ObservedGeneration: foo.Generation}
	dep := obs.Deployment
	switch {
	case obs.ApplyError != nil:
		c.Reason = samplev1beta1.ReasonDeploymentApplyFailed
		c.Message = fmt.Sprintf("Deployment %q could not be applied: %v", foo.Spec.Deployment.Name, obs.ApplyError)
	case obs.Conflict && leftBehind(dep, foo):
		// Most often a Foo deleted with deletionPolicy: Orphan and created
		// again. Its pods are selected by the earlier Foo's UID, and a
		// selector cannot change, so it cannot be adopted.
		c.Reason = samplev1beta1.ReasonDeploymentConflict
		c.Message = fmt.Sprintf("Deployment %q was left by an earlier Foo that no longer owns it (deleted with deletionPolicy: Orphan, or --cascade=orphan) and selects that Foo's pods; a selector cannot change, so this Foo cannot adopt it: delete it (its pods go with it), or choose another spec.deployment.name", foo.Spec.Deployment.Name)
	case obs.Conflict:
		c.Reason = samplev1beta1.ReasonDeploymentConflict
		c.Message = fmt.Sprintf("Deployment %q already exists and is not controlled by this Foo; delete or rename it, or choose another spec.deployment.name", foo.Spec.Deployment.Name)
	case !isOurs(obs):
		return nil
	case slices.Contains(obs.Overridden, "replicas"):
		// Only replicas: an image pinned to a digest or a renumbered port
		// still rolls out and serves, and the Foo reports that Deployment
		// as it is; a replica count the API server will not keep is never
		// reached, and Reconciling would say so forever.
		c.Reason = samplev1beta1.ReasonReplicasOverridden
		c.Message = fmt.Sprintf("the API server keeps Deployment %q at other replicas than declared (a mutating admission policy or webhook); change the policy, or declare what it allows", dep.Name)
	case observed(dep) && progressDeadlineExceeded(dep):
		// Only for the generation it was observed at: a new pod template
		// starts a new rollout, and its deadline with it.
		c.Reason = samplev1beta1.ReasonProgressDeadlineExceeded
		// No counts here (Available has them): a Stalled message that
		// changes is a new Warning Event.
		c.Message = fmt.Sprintf("Deployment %q exceeded its progress deadline", dep.Name)
	case progressDeadlineExceeded(dep):
		// A new generation the Deployment controller has not observed yet:
		// a scale keeps the exceeded deadline, a new template resets it,
		// and which it is shows only once observed. Meanwhile the Foo stays
		// as reported, like Ready (readyCondition): a scale of a stalled
		// Foo is not a new incident, with a Warning of its own.
		if was := meta.FindStatusCondition(foo.Status.Conditions, samplev1beta1.ConditionStalled); was != nil &&
			was.Status == metav1.ConditionTrue && was.Reason == samplev1beta1.ReasonProgressDeadlineExceeded {
			kept := *was
			return &kept
		}
		return nil
	default:
		return nil
	}
	return c
}

// reconcilingCondition is the Reconciling condition (True) while the
// Deployment is on its way to what the Foo declares — created, rolled
// out, scaled, or waited for — or nil once it is there. It is nil while
// the Foo is stalled too: kstatus reads whichever of the two comes first,
// so they are never True together. Like kstatus's rules for a Deployment,
// it asks for every declared replica updated and available.
func reconcilingCondition(foo *samplev1beta1.Foo, obs Observation) *metav1.Condition {
	return reconciling(foo, obs, stalledCondition(foo, obs))
}

// reconciling is reconcilingCondition given the Stalled condition.
func reconciling(foo *samplev1beta1.Foo, obs Observation, stalled *metav1.Condition) *metav1.Condition {
	if stalled != nil {
		return nil
	}
	c := &metav1.Condition{Type: samplev1beta1.ConditionReconciling, Status: metav1.ConditionTrue, ObservedGeneration: foo.Generation}
	dep := obs.Deployment
	want := Replicas(foo)
	switch {
	case dep == nil:
		c.Reason = samplev1beta1.ReasonCreating
		c.Message = fmt.Sprintf("Deployment %q does not exist yet", foo.Spec.Deployment.Name)
	case obs.Waiting:
		c.Reason = samplev1beta1.ReasonWaitingForOldDeployment
		c.Message = fmt.Sprintf("waiting for the old Deployment %q to be deleted before creating it again", foo.Spec.Deployment.Name)
	case !observed(dep):
		c.Reason = samplev1beta1.ReasonDeploymentNotObserved
		c.Message = fmt.Sprintf("waiting for the Deployment controller to observe generation %d of Deployment %q", dep.Generation, dep.Name)
	case dep.Status.Replicas > dep.Status.UpdatedReplicas:
		c.Reason = samplev1beta1.ReasonRollingOut
		c.Message = fmt.Sprintf("%d of %d replicas updated, %d available", dep.Status.UpdatedReplicas, want, dep.Status.AvailableReplicas)
	case dep.Status.Replicas != want || dep.Status.UpdatedReplicas < want:
		c.Reason = samplev1beta1.ReasonScaling
		c.Message = fmt.Sprintf("%d of %d replicas, %d available", dep.Status.Replicas, want, dep.Status.AvailableReplicas)
	case dep.Status.AvailableReplicas < want:
		c.Reason = samplev1beta1.ReasonWaitingForReplicas
		c.Message = fmt.Sprintf("%d of %d replicas available", dep.Status.AvailableReplicas, want)
	default:
		return nil
	}
	return c
}

// availableCondition mirrors the Deployment's own Available condition
// (minimum availability, as its strategy's maxUnavailable allows), so
// that it moves exactly when the Deployment's does: not on a scale that
// keeps enough pods serving.
func availableCondition(foo *samplev1beta1.Foo, obs Observation) metav1.Condition {
	c := metav1.Condition{Type: samplev1beta1.ConditionAvailable, Status: metav1.ConditionFalse, ObservedGeneration: foo.Generation,
		Reason: samplev1beta1.ReasonNoDeployment}
	dep := obs.Deployment
	switch {
	case obs.Conflict:
		c.Message = fmt.Sprintf("Deployment %q is not this Foo's", foo.Spec.Deployment.Name)
	case obs.Waiting:
		c.Message = fmt.Sprintf("the old Deployment %q is being deleted", foo.Spec.Deployment.Name)
	case dep == nil:
		c.Message = fmt.Sprintf("Deployment %q does not exist", foo.Spec.Deployment.Name)
	default:
		c.Reason = samplev1beta1.ReasonMinimumReplicasUnavailable
		c.Message = fmt.Sprintf("%d of %d replicas available", dep.Status.AvailableReplicas, Replicas(foo))
		if deploymentAvailable(dep) {
			c.Status, c.Reason = metav1.ConditionTrue, samplev1beta1.ReasonMinimumReplicasAvailable
		}
	}
	return c
}

// readyCondition is the Ready condition for what was observed (without
// lastTransitionTime, which Status fills in): True when the Deployment is
// available (availableCondition), runs only the current pod template, and
// nothing is stalled. It does not wait for every replica of a scale
// (Reconciling does): a scale that keeps the Deployment available leaves
// Ready True, and its lastTransitionTime where it was. A new pod template
// makes it False until the rollout has replaced every old pod, so that
// `kubectl wait --for=condition=Ready` after an apply waits for the rollout.
//
// Until the Deployment controller has observed the Deployment's latest
// generation, a scale and a rollout look alike; a Ready that was True is
// then kept as it was, with the generation it was computed at (which
// kubectl wait reads), rather than flipped on a guess.
func readyCondition(foo *samplev1beta1.Foo, obs Observation) metav1.Condition {
	stalled := stalledCondition(foo, obs)
	return ready(foo, obs, stalled, reconciling(foo, obs, stalled), availableCondition(foo, obs))
}

// ready is readyCondition given the other three conditions.
func ready(foo *samplev1beta1.Foo, obs Observation, stalled, rec *metav1.Condition, avail metav1.Condition) metav1.Condition {
	c := metav1.Condition{Type: samplev1beta1.ConditionReady, Status: metav1.ConditionFalse, ObservedGeneration: foo.Generation}
	if stalled != nil {
		c.Reason, c.Message = stalled.Reason, stalled.Message
		return c
	}
	dep := obs.Deployment
	if isOurs(obs) && !observed(dep) && dep.Status.ObservedGeneration > 0 {
		if was := meta.FindStatusCondition(foo.Status.Conditions, samplev1beta1.ConditionReady); was != nil && was.Status == metav1.ConditionTrue {
			return *was
		}
	}
	switch {
	case rec != nil && rec.Reason != samplev1beta1.ReasonScaling && rec.Reason != samplev1beta1.ReasonWaitingForReplicas:
		c.Reason, c.Message = rec.Reason, rec.Message
	case avail.Status != metav1.ConditionTrue && rec != nil:
		c.Reason, c.Message = rec.Reason, rec.Message
	case avail.Status != metav1.ConditionTrue:
		c.Reason, c.Message = samplev1beta1.ReasonDeploymentUnavailable, avail.Message
	default:
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, samplev1beta1.ReasonDeploymentAvailable, avail.Message
	}
	return c
}

func deploymentAvailable(dep *DeploymentView) bool {
	for _, c := range dep.Status.Conditions {
		if c.Type == appsv1.DeploymentAvailable {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func progressDeadlineExceeded(dep *DeploymentView) bool {
	for _, c := range dep.Status.Conditions {
		if c.Type == appsv1.DeploymentProgressing && c.Status == corev1.ConditionFalse && c.Reason == "ProgressDeadlineExceeded" {
			return true
		}
	}
	return false
}

// ProgressOnly reports whether want differs from have only in how far
// things have got: counts, messages, the reasons of Reconciling and of a
// Ready that stays as it is, and the generation a condition was computed
// at — with the same generation, and no condition appearing, going or
// changing its status, and the same Stalled. A rollout or a scale
// produces many such changes and nobody acts on them, so the controller
// writes them at most every so often; any other change (a new
// generation, a condition flipping, a new problem) is written at once.
func ProgressOnly(have, want samplev1beta1.FooStatus) bool {
	if have.ObservedGeneration != want.ObservedGeneration || have.Selector != want.Selector ||
		len(have.Conditions) != len(want.Conditions) {
		return false
	}
	for _, w := range want.Conditions {
		h := meta.FindStatusCondition(have.Conditions, w.Type)
		if h == nil || h.Status != w.Status {
			return false
		}
		if w.Type == samplev1beta1.ConditionStalled && (h.Reason != w.Reason || h.Message != w.Message) {
			return false
		}
	}
	return true
}

// FirstProgress reports whether want is the first status of a Foo (have is
// empty: nothing was ever written) and says only that its Deployment is on
// its way. An empty status already tells a reader that the controller has
// not reported yet, so this one can wait and be written with whatever comes
// next, like a progress-only change; during a burst of new Foos that halves
// the controller's requests before every Deployment exists. A first status
// that says anything else (Ready, or a problem) is written at once.
func FirstProgress(have, want samplev1beta1.FooStatus) bool {
	if have.ObservedGeneration != 0 || len(have.Conditions) != 0 {
		return false
	}
	w := meta.FindStatusCondition(want.Conditions, samplev1beta1.ConditionReady)
	return w != nil && w.Status == metav1.ConditionFalse &&
		meta.FindStatusCondition(want.Conditions, samplev1beta1.ConditionStalled) == nil
}
