package plan

import (
	metav1apply "k8s.io/client-go/applyconfigurations/meta/v1"

	samplev1alpha1 "example.com/foo-controller/pkg/apis/samplecontroller/v1alpha1"
	applyv1alpha1 "example.com/foo-controller/pkg/generated/applyconfiguration/samplecontroller/v1alpha1"
)

// ownedConditions are the condition types this controller writes. Only these
// go into its status apply configuration: conditions other actors add stay
// theirs.
var ownedConditions = []string{samplev1alpha1.ConditionReady, samplev1alpha1.ConditionAvailable,
	samplev1alpha1.ConditionReconciling, samplev1alpha1.ConditionStalled}

// StatusApply is the server-side apply configuration of foo's status
// subresource for st. Server-side apply sends only the fields we own, never
// a stale copy of the rest of the object. It carries foo's resourceVersion
// as a precondition: a status computed from an older Foo — in the worst case
// from a deleted predecessor of the same name — is refused with a conflict
// rather than written over the newer one.
func StatusApply(foo *samplev1alpha1.Foo, st samplev1alpha1.FooStatus) *applyv1alpha1.FooApplyConfiguration {
	status := applyv1alpha1.FooStatus().
		WithObservedGeneration(st.ObservedGeneration).
		WithReplicas(st.Replicas).
		WithAvailableReplicas(st.AvailableReplicas).
		WithReadyReplicas(st.ReadyReplicas).
		WithSelector(st.Selector)
	for _, c := range st.Conditions {
		if !isOwnedCondition(c.Type) {
			continue
		}
		status.WithConditions(metav1apply.Condition().
			WithType(c.Type).
			WithStatus(c.Status).
			WithObservedGeneration(c.ObservedGeneration).
			WithLastTransitionTime(c.LastTransitionTime).
			WithReason(c.Reason).
			WithMessage(c.Message))
	}
	return applyv1alpha1.Foo(foo.Name, foo.Namespace).WithResourceVersion(foo.ResourceVersion).WithStatus(status)
}

func isOwnedCondition(t string) bool {
	for _, o := range ownedConditions {
		if o == t {
			return true
		}
	}
	return false
}
