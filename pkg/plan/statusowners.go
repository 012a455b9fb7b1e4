package plan

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	samplev1beta1 "example.com/foo-controller/pkg/apis/samplecontroller/v1beta1"
	applyv1beta1 "example.com/foo-controller/pkg/generated/applyconfiguration/samplecontroller/v1beta1"
	"example.com/foo-controller/pkg/trunc"
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
	// JSONPatch sends a JSON patch.
	JSONPatch func([]byte) (*samplev1beta1.Foo, error)
}

// StatusRepair says what WriteStatus had to remove, and who kept it.
type StatusRepair struct {
	// Refused is the API server's refusal of the first apply, or nil when
	// that apply was accepted and left the conditions in place.
	Refused error
	// Removed are the condition types removed by the JSON patch.
	Removed []string
	// Owners are the other field managers that owned fields of them
	// (staleConditionOwners).
	Owners []string
}

// Note is the Warning Event that tells the user of the repair: the
// conditions removed, why the apply could not, the owners named (at most
// three, then a count), within maxBytes (the events API takes 1024).
func (r StatusRepair) Note(maxBytes int) string {
	how := "the apply left them in place"
	if r.Refused != nil {
		how = "the apply was refused as invalid"
	}
	owners := r.Owners
	if len(owners) > 3 {
		owners = append(owners[:3:3], fmt.Sprintf("%d more", len(owners)-3))
	}
	named := strings.Join(owners, ", ")
	if named == "" {
		named = "none named"
	}
	return trunc.Bytes(fmt.Sprintf("Removed conditions %v that other field managers kept (%s; owners: %s): a client cleared the managed fields, the API server dropped them (an update while the conversion webhook was down), or another client applies them; see docs/troubleshooting.md",
		r.Removed, how, named), maxBytes)
}

// WriteStatus makes want foo's status, and returns the Foo as the API
// server then has it, and a StatusRepair when the apply alone could not
// write it. It applies; when the apply succeeds but leaves a condition of
// ours that want does not have (statusKept), or is refused as invalid,
// that condition is removed with a JSON patch (staleConditionsPatch),
// which no ownership can block, and the apply is sent again if it had been
// refused. The patch only removes, so it leaves the controller owning
// nothing through it: an Update entry of ours owning a condition would block
// a later apply the same way. Any other error is returned as it is.
func WriteStatus(foo *samplev1beta1.Foo, want samplev1beta1.FooStatus, w StatusWrites) (*samplev1beta1.Foo, *StatusRepair, error) {
	applied, err := w.Apply(StatusApply(foo, want))
	if err == nil && statusKept(applied.Status, want) {
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
	patch, removed, err := staleConditionsPatch(live, want)
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
	repair.Removed, repair.Owners = removed, staleConditionOwners(live, removed, w.Manager)
	patched, err := w.JSONPatch(patch)
	if err != nil {
		return nil, repair, fmt.Errorf("removing status conditions %v that field managers %v keep: %w", removed, repair.Owners, err)
	}
	if repair.Refused != nil {
		if patched, err = w.Apply(StatusApply(foo, want)); err != nil {
			return nil, repair, fmt.Errorf("applying the status after removing conditions %v: %w", removed, err)
		}
	}
	if !statusKept(patched.Status, want) {
		return nil, repair, errors.New("the status is still not as computed after removing the conditions other managers kept")
	}
	return patched, repair, nil
}

// statusKept reports whether got holds everything of want that the
// controller writes: the counts, the generation, the selector, and each of
// the controller's conditions, present with the same values when want has
// it and absent when it does not. Conditions of other types are not its
// own, and are not compared.
func statusKept(got, want samplev1beta1.FooStatus) bool {
	if got.ObservedGeneration != want.ObservedGeneration || got.Replicas != want.Replicas ||
		got.AvailableReplicas != want.AvailableReplicas || got.ReadyReplicas != want.ReadyReplicas ||
		got.Selector != want.Selector {
		return false
	}
	for _, t := range ownedConditions {
		g, w := meta.FindStatusCondition(got.Conditions, t), meta.FindStatusCondition(want.Conditions, t)
		if (g == nil) != (w == nil) || (g != nil && !equality.Semantic.DeepEqual(asStored(*g), asStored(*w))) {
			return false
		}
	}
	return true
}

// asStored is c as the API server stores it: lastTransitionTime in whole
// seconds. want may carry a fraction from the cached Foo, where another
// writer put it; the apply sends, and the server keeps, the second only.
func asStored(c metav1.Condition) metav1.Condition {
	c.LastTransitionTime = c.LastTransitionTime.Rfc3339Copy()
	return c
}

// staleConditionsPatch returns a JSON patch for foo's status subresource
// that removes the controller's conditions that foo has and want does not,
// and their types; nothing when there are none. Each removal is by index,
// after a test that the entry there is still of that type: a list changed
// meanwhile fails the patch (422, a failed test; FailedTest) rather than
// lose another entry. Nothing else is sent, so every other condition stays
// byte for byte as its writer stored it (a merge patch would send the list
// whole, re-encoded: a timestamp with a fraction or an offset would come
// back changed, and owned by us).
func staleConditionsPatch(foo *samplev1beta1.Foo, want samplev1beta1.FooStatus) ([]byte, []string, error) {
	var ops []map[string]any
	var removed []string
	for i := len(foo.Status.Conditions) - 1; i >= 0; i-- { // from the end: a removal shifts what follows
		c := foo.Status.Conditions[i]
		if !isOwnedCondition(c.Type) || meta.FindStatusCondition(want.Conditions, c.Type) != nil {
			continue
		}
		path := fmt.Sprintf("/status/conditions/%d", i)
		ops = append(ops, map[string]any{"op": "test", "path": path + "/type", "value": c.Type}, map[string]any{"op": "remove", "path": path})
		removed = append(removed, c.Type)
	}
	if len(removed) == 0 {
		return nil, nil, nil
	}
	slices.Reverse(removed)
	patch, err := json.Marshal(ops)
	return patch, removed, err
}

// staleConditionOwners returns the field managers of foo, but for self's
// apply, that own fields of its conditions of the given types, sorted, as
// "manager (operation)". An entry that cannot be read is skipped.
func staleConditionOwners(foo *samplev1beta1.Foo, types []string, self string) []string {
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
