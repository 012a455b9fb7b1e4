package plan

import (
	metav1apply "k8s.io/client-go/applyconfigurations/meta/v1"

	samplev1beta1 "example.com/foo-controller/pkg/apis/samplecontroller/v1beta1"
	applyv1beta1 "example.com/foo-controller/pkg/generated/applyconfiguration/samplecontroller/v1beta1"
)

// ownedConditions are the condition types this controller writes. Only these
// go into its status apply configuration: conditions other actors add stay
// theirs.
var ownedConditions = []string{samplev1beta1.ConditionReady, samplev1beta1.ConditionAvailable,
	samplev1beta1.ConditionReconciling, samplev1beta1.ConditionStalled}

// StatusApply is the server-side apply configuration of foo's status
// subresource for st. Server-side apply sends only the fields we own, never
// a stale copy of the rest of the object, and it carries no resourceVersion
// precondition: a status is computed from the cached Foo, which is always a
// little behind a Foo being edited, so under churn every preconditioned
// write would be refused (851 of 863 in TestEditStorm) and the status would
// lag the most exactly when it is watched. One worker syncs a key at a
// time, from a cache that only moves forward, so one process's writes never
// take observedGeneration back. What the precondition also refused, and
// what may now land once before the next sync (which the write's own watch
// event brings) replaces it: a status computed from a Foo's deleted
// predecessor of the same name; a write sent by an old leader just before
// its fence closed and delayed past its successor's; a sync that read the
// informer's older copy after our own write's copy expired from the
// MutationCache (a watch stalled for over a minute). See docs/design.md.
func StatusApply(foo *samplev1beta1.Foo, st samplev1beta1.FooStatus) *applyv1beta1.FooApplyConfiguration {
	status := applyv1beta1.FooStatus().
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
	return applyv1beta1.Foo(foo.Name, foo.Namespace).WithStatus(status)
}

func isOwnedCondition(t string) bool {
	for _, o := range ownedConditions {
		if o == t {
			return true
		}
	}
	return false
}
