package plan

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	samplev1beta1 "example.com/foo-controller/pkg/apis/samplecontroller/v1beta1"
	applyv1beta1 "example.com/foo-controller/pkg/generated/applyconfiguration/samplecontroller/v1beta1"
)

// A server-side apply removes a field only when no other field manager owns
// it. Two managers that set a field to the same value both own it, and the
// API server gives a manager called before-first-apply every field of an
// object whose managed fields are empty (a client cleared them, or the API
// server dropped them: it does on an update it cannot convert them for,
// with the conversion webhook down). So the controller's status apply may
// be unable to remove a condition it no longer reports: the condition
// stays, whole, or, when the other manager owns only some of its fields,
// what is left is invalid and every such apply is refused. WriteStatus
// gets out of both. See docs/conditions.md, "When the status cannot be
// applied".

// StatusWrites are the requests WriteStatus makes, on one Foo's status
// subresource (Get on the Foo).
type StatusWrites struct {
	// Manager is the field manager Apply writes as.
	Manager string
	// Apply server-side applies the configuration, forcing conflicts.
	Apply func(*applyv1beta1.FooApplyConfiguration) (*samplev1beta1.Foo, error)
	// Get reads the Foo from the API server.
	Get func() (*samplev1beta1.Foo, error)
	// MergePatch sends a JSON merge patch.
	MergePatch func([]byte) (*samplev1beta1.Foo, error)
}

// StatusRepair says what WriteStatus had to remove, and who kept it.
type StatusRepair struct {
	// Refused is the API server's refusal of the first apply, or nil when
	// that apply was accepted and left the conditions in place.
	Refused error
	// Removed are the condition types removed by the merge patch.
	Removed []string
	// Owners are the other field managers that owned fields of them
	// (StaleConditionOwners).
	Owners []string
}

// WriteStatus makes want foo's status, and returns the Foo as the API
// server then has it, and a StatusRepair when the apply alone could not
// write it. It applies; when the apply succeeds but leaves a condition of
// ours that want does not have (StatusKept), or is refused as invalid,
// that condition is removed with a merge patch (StaleConditionsPatch),
// which no ownership can block, and the apply is sent again if it had been
// refused. The patch only removes, so it leaves the controller owning
// nothing through it: an Update entry of ours owning a condition would block
// a later apply the same way. Any other error is returned as it is.
func WriteStatus(foo *samplev1beta1.Foo, want samplev1beta1.FooStatus, w StatusWrites) (*samplev1beta1.Foo, *StatusRepair, error) {
	applied, err := w.Apply(StatusApply(foo, want))
	if err == nil && StatusKept(applied.Status, want) {
		return applied, nil, nil
	}
	if err != nil && !apierrors.IsInvalid(err) {
		return nil, nil, err
	}
	repair := &StatusRepair{Refused: err}
	live := applied
	if err != nil {
		// Nothing was written; the cached Foo has no managed fields, and
		// may be behind.
		if live, err = w.Get(); err != nil {
			return nil, nil, fmt.Errorf("%w; reading the Foo to remove what another manager keeps: %w", repair.Refused, err)
		}
	}
	patch, removed, err := StaleConditionsPatch(live, want)
	if err != nil {
		return nil, nil, err
	}
	if len(removed) == 0 {
		// Not a kept condition: what else could keep an apply from writing
		// is a mutating admission webhook on Foos, which a patch would not
		// get past either.
		if repair.Refused != nil {
			return nil, nil, repair.Refused
		}
		return nil, nil, fmt.Errorf("the status apply was accepted, but the API server holds %+v, not %+v", applied.Status, want)
	}
	repair.Removed, repair.Owners = removed, StaleConditionOwners(live, removed, w.Manager)
	patched, err := w.MergePatch(patch)
	if err != nil {
		return nil, repair, fmt.Errorf("removing status conditions %v that field managers %v keep: %w", removed, repair.Owners, err)
	}
	if repair.Refused != nil {
		if patched, err = w.Apply(StatusApply(foo, want)); err != nil {
			return nil, repair, fmt.Errorf("applying the status after removing conditions %v: %w", removed, err)
		}
	}
	if !StatusKept(patched.Status, want) {
		return nil, repair, errors.New("the status is still not as computed after removing the conditions other managers kept")
	}
	return patched, repair, nil
}

// StatusKept reports whether got holds everything of want that the
// controller writes: the counts, the generation, the selector, and each of
// the controller's conditions, present with the same values when want has
// it and absent when it does not. Conditions of other types are not its
// own, and are not compared.
func StatusKept(got, want samplev1beta1.FooStatus) bool {
	if got.ObservedGeneration != want.ObservedGeneration || got.Replicas != want.Replicas ||
		got.AvailableReplicas != want.AvailableReplicas || got.ReadyReplicas != want.ReadyReplicas ||
		got.Selector != want.Selector {
		return false
	}
	for _, t := range ownedConditions {
		g, w := meta.FindStatusCondition(got.Conditions, t), meta.FindStatusCondition(want.Conditions, t)
		if (g == nil) != (w == nil) || (g != nil && !equality.Semantic.DeepEqual(*g, *w)) {
			return false
		}
	}
	return true
}

// StaleConditionsPatch returns a JSON merge patch for foo's status
// subresource that removes the controller's conditions that foo has and
// want does not, and their types; nothing when there are none. A merge
// patch replaces the list whole, so it holds every other condition as foo
// has it, and carries foo's resourceVersion: it fails with a conflict,
// rather than undo a change made meanwhile, when foo is not the latest.
func StaleConditionsPatch(foo *samplev1beta1.Foo, want samplev1beta1.FooStatus) ([]byte, []string, error) {
	kept := []metav1.Condition{}
	var removed []string
	for _, c := range foo.Status.Conditions {
		if isOwnedCondition(c.Type) && meta.FindStatusCondition(want.Conditions, c.Type) == nil {
			removed = append(removed, c.Type)
			continue
		}
		kept = append(kept, c)
	}
	if len(removed) == 0 {
		return nil, nil, nil
	}
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": foo.ResourceVersion},
		"status":   map[string]any{"conditions": kept},
	})
	return patch, removed, err
}

// StaleConditionOwners returns the field managers of foo, but for self's
// apply, that own fields of its conditions of the given types, sorted, as
// "manager (operation)". An entry that cannot be read is skipped.
func StaleConditionOwners(foo *samplev1beta1.Foo, types []string, self string) []string {
	var owners []string
	for _, e := range foo.ManagedFields {
		if e.FieldsV1 == nil || (e.Manager == self && e.Operation == metav1.ManagedFieldsOperationApply) {
			continue
		}
		var fields struct {
			Status struct {
				Conditions map[string]json.RawMessage `json:"f:conditions"`
			} `json:"f:status"`
		}
		if json.Unmarshal(e.FieldsV1.GetRawBytes(), &fields) != nil {
			continue
		}
		id := fmt.Sprintf("%s (%s)", e.Manager, e.Operation)
		for _, t := range types {
			key, _ := json.Marshal(map[string]string{"type": t})
			if _, ok := fields.Status.Conditions["k:"+string(key)]; ok && !slices.Contains(owners, id) {
				owners = append(owners, id)
			}
		}
	}
	slices.Sort(owners)
	return owners
}
