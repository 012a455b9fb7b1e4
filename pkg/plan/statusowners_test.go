package plan

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	samplev1beta1 "example.com/foo-controller/pkg/apis/samplecontroller/v1beta1"
)

func cond(typ string, status metav1.ConditionStatus, reason string) metav1.Condition {
	return metav1.Condition{Type: typ, Status: status, Reason: reason, Message: reason + " message", ObservedGeneration: 2}
}

func condAt(c metav1.Condition, at metav1.Time) metav1.Condition {
	c.LastTransitionTime = at
	return c
}

func readyStatus() samplev1beta1.FooStatus {
	at := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 500_000_000, time.UTC)) // a fraction, as a cached condition can hold
	return samplev1beta1.FooStatus{ObservedGeneration: 2, Replicas: 3, AvailableReplicas: 3, ReadyReplicas: 3, Selector: "app=a",
		Conditions: []metav1.Condition{
			condAt(cond(samplev1beta1.ConditionReady, metav1.ConditionTrue, samplev1beta1.ReasonDeploymentAvailable), at),
			condAt(cond(samplev1beta1.ConditionAvailable, metav1.ConditionTrue, samplev1beta1.ReasonMinimumReplicasAvailable), at),
		}}
}

func TestStatusKept(t *testing.T) {
	reconciling := cond(samplev1beta1.ConditionReconciling, metav1.ConditionTrue, samplev1beta1.ReasonWaitingForReplicas)
	foreign := cond("example.com/Audited", metav1.ConditionTrue, "Audited")
	for _, tc := range []struct {
		name   string
		change func(got *samplev1beta1.FooStatus)
		kept   bool
	}{
		{"the same", func(*samplev1beta1.FooStatus) {}, true},
		{"conditions in another order", func(got *samplev1beta1.FooStatus) { slices.Reverse(got.Conditions) }, true},
		{"another writer's condition beside ours", func(got *samplev1beta1.FooStatus) { got.Conditions = append(got.Conditions, foreign) }, true},
		// The two ways an apply fails to write what it sent.
		{"a condition we removed is still there", func(got *samplev1beta1.FooStatus) { got.Conditions = append(got.Conditions, reconciling) }, false},
		{"a condition kept with other values", func(got *samplev1beta1.FooStatus) { got.Conditions[0].Message = "old" }, false},
		{"one of ours missing", func(got *samplev1beta1.FooStatus) { got.Conditions = got.Conditions[:1] }, false},
		{"a count at another value", func(got *samplev1beta1.FooStatus) { got.AvailableReplicas = 2 }, false},
		{"the generation", func(got *samplev1beta1.FooStatus) { got.ObservedGeneration = 1 }, false},
		{"the selector", func(got *samplev1beta1.FooStatus) { got.Selector = "" }, false},
		// The API server keeps whole seconds; want may carry a fraction
		// from a cached condition another writer set.
		{"a fraction of a second the server does not keep", func(got *samplev1beta1.FooStatus) {
			got.Conditions[0].LastTransitionTime = metav1.NewTime(got.Conditions[0].LastTransitionTime.Add(-500 * time.Millisecond).Truncate(time.Second))
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := readyStatus()
			tc.change(&got)
			if kept := statusKept(got, readyStatus()); kept != tc.kept {
				t.Errorf("statusKept = %t, want %t", kept, tc.kept)
			}
		})
	}
}

// TestStaleConditionsPatch: the patch removes the controller's conditions
// that want lacks, and nothing else: every other condition byte for byte as
// stored (a timestamp with a fraction and an offset, which Go's types would
// re-encode, included); the counts and the rest untouched; a list changed
// meanwhile fails its test instead of losing another entry.
func TestStaleConditionsPatch(t *testing.T) {
	const foreign = `{"type":"example.com/Audited","status":"True","observedGeneration":0,"lastTransitionTime":"2026-01-02T05:04:05.25+02:00","reason":"Audited","message":"someone else's"}`
	reconciling := `{"type":"Reconciling","status":"True","observedGeneration":2,"lastTransitionTime":"2026-01-02T03:04:05Z","reason":"WaitingForReplicas","message":"1 of 3"}`
	partial := `{"type":"Stalled","status":"True"}` // what a co-owner can leave
	ready := `{"type":"Ready","status":"True","observedGeneration":2,"lastTransitionTime":"2026-01-02T03:04:05Z","reason":"DeploymentAvailable","message":"3 of 3"}`
	available := `{"type":"Available","status":"True","observedGeneration":2,"lastTransitionTime":"2026-01-02T03:04:05Z","reason":"MinimumReplicasAvailable","message":"3 of 3"}`
	foo := func(conditions ...string) []byte {
		return []byte(`{"metadata":{"name":"a","resourceVersion":"42"},"status":{"observedGeneration":1,"replicas":9,"conditions":[` + strings.Join(conditions, ",") + `]}}`)
	}
	want := readyStatus()
	for _, tc := range []struct {
		name          string
		have, after   []byte
		removed       []string
		changedBefore []byte // the Foo changed meanwhile: the patch must fail
	}{
		{name: "nothing to remove", have: foo(ready, foreign, available)},
		{name: "Reconciling kept whole, another writer's condition", have: foo(ready, reconciling, foreign, available),
			after: foo(ready, foreign, available), removed: []string{samplev1beta1.ConditionReconciling}},
		{name: "both, one of them partial, apart", have: foo(reconciling, foreign, partial, ready, available),
			after: foo(foreign, ready, available), removed: []string{samplev1beta1.ConditionReconciling, samplev1beta1.ConditionStalled}},
		{name: "the list changed meanwhile", have: foo(ready, reconciling, available), removed: []string{samplev1beta1.ConditionReconciling},
			changedBefore: foo(reconciling, ready, available)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var typed samplev1beta1.Foo
			if err := json.Unmarshal(tc.have, &typed); err != nil {
				t.Fatal(err)
			}
			patch, removed, err := staleConditionsPatch(&typed, want)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(removed, tc.removed) {
				t.Fatalf("removed %q, want %q", removed, tc.removed)
			}
			if tc.removed == nil {
				if patch != nil {
					t.Errorf("a patch with nothing to remove: %s", patch)
				}
				return
			}
			ops, err := jsonpatch.DecodePatch(patch)
			if err != nil {
				t.Fatal(err)
			}
			if tc.changedBefore != nil {
				if _, err := ops.Apply(tc.changedBefore); err == nil {
					t.Errorf("patch %s applied to a list changed meanwhile", patch)
				}
				return
			}
			got, err := ops.Apply(tc.have)
			if err != nil {
				t.Fatal(err)
			}
			// Compared as JSON values decoded without our types: the
			// other conditions exactly as stored.
			var gotV, wantV any
			_ = json.Unmarshal(got, &gotV)
			_ = json.Unmarshal(tc.after, &wantV)
			if !equality.Semantic.DeepEqual(gotV, wantV) {
				t.Errorf("after the patch:\n%s\nwant\n%s", got, tc.after)
			}
		})
	}
}

func TestStaleConditionOwners(t *testing.T) {
	entry := func(manager string, op metav1.ManagedFieldsOperationType, fields string) metav1.ManagedFieldsEntry {
		return metav1.ManagedFieldsEntry{Manager: manager, Operation: op, FieldsV1: metav1.NewFieldsV1(fields)}
	}
	const reconciling = `{"f:status":{"f:conditions":{"k:{\"type\":\"Reconciling\"}":{".":{},"f:status":{}}}}}`
	const ready = `{"f:status":{"f:conditions":{"k:{\"type\":\"Ready\"}":{".":{}}}}}`
	foo := &samplev1beta1.Foo{ObjectMeta: metav1.ObjectMeta{ManagedFields: []metav1.ManagedFieldsEntry{
		entry("foo-controller", metav1.ManagedFieldsOperationApply, reconciling), // its own apply: not a co-owner
		entry("foo-controller", metav1.ManagedFieldsOperationUpdate, reconciling),
		entry("status-auditor", metav1.ManagedFieldsOperationApply, reconciling),
		entry("before-first-apply", metav1.ManagedFieldsOperationUpdate, ready), // another condition
		entry("kubectl", metav1.ManagedFieldsOperationUpdate, `{"f:spec":{}}`),
		entry("broken", metav1.ManagedFieldsOperationUpdate, `not json`),
		{Manager: "empty"},
	}}}
	got := staleConditionOwners(foo, []string{samplev1beta1.ConditionReconciling, samplev1beta1.ConditionStalled}, "foo-controller")
	if want := []string{"foo-controller (Update)", "status-auditor (Apply)"}; !slices.Equal(got, want) {
		t.Errorf("staleConditionOwners = %q, want %q", got, want)
	}
}
