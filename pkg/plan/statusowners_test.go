package plan

import (
	"encoding/json"
	"slices"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	samplev1beta1 "example.com/foo-controller/pkg/apis/samplecontroller/v1beta1"
)

func cond(typ string, status metav1.ConditionStatus, reason string) metav1.Condition {
	return metav1.Condition{Type: typ, Status: status, Reason: reason, Message: reason + " message", ObservedGeneration: 2}
}

func readyStatus() samplev1beta1.FooStatus {
	return samplev1beta1.FooStatus{ObservedGeneration: 2, Replicas: 3, AvailableReplicas: 3, ReadyReplicas: 3, Selector: "app=a",
		Conditions: []metav1.Condition{
			cond(samplev1beta1.ConditionReady, metav1.ConditionTrue, samplev1beta1.ReasonDeploymentAvailable),
			cond(samplev1beta1.ConditionAvailable, metav1.ConditionTrue, samplev1beta1.ReasonMinimumReplicasAvailable),
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
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := readyStatus()
			tc.change(&got)
			if kept := StatusKept(got, readyStatus()); kept != tc.kept {
				t.Errorf("StatusKept = %t, want %t", kept, tc.kept)
			}
		})
	}
}

// TestStaleConditionsPatch: the patch removes the controller's conditions
// that want lacks, and nothing else: the other conditions as they are,
// another writer's included; the counts and the rest untouched; the
// resourceVersion carried.
func TestStaleConditionsPatch(t *testing.T) {
	foreign := cond("example.com/Audited", metav1.ConditionTrue, "Audited")
	want := readyStatus()
	reconciling := cond(samplev1beta1.ConditionReconciling, metav1.ConditionTrue, samplev1beta1.ReasonWaitingForReplicas)
	partial := metav1.Condition{Type: samplev1beta1.ConditionStalled, Status: metav1.ConditionTrue} // what a co-owner can leave
	for _, tc := range []struct {
		name    string
		have    []metav1.Condition
		removed []string
	}{
		{"nothing to remove", append(readyStatus().Conditions, foreign), nil},
		{"Reconciling kept whole, another writer's condition", append(readyStatus().Conditions, reconciling, foreign), []string{samplev1beta1.ConditionReconciling}},
		{"both, one of them partial", append([]metav1.Condition{reconciling, foreign, partial}, readyStatus().Conditions...),
			[]string{samplev1beta1.ConditionReconciling, samplev1beta1.ConditionStalled}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			foo := &samplev1beta1.Foo{ObjectMeta: metav1.ObjectMeta{Name: "a", ResourceVersion: "42"},
				Status: samplev1beta1.FooStatus{ObservedGeneration: 1, Replicas: 9, Conditions: tc.have}}
			patch, removed, err := StaleConditionsPatch(foo, want)
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
			before, _ := json.Marshal(foo)
			after, err := jsonpatch.MergePatch(before, patch)
			if err != nil {
				t.Fatal(err)
			}
			var got samplev1beta1.Foo
			if err := json.Unmarshal(after, &got); err != nil {
				t.Fatal(err)
			}
			wantConditions := slices.DeleteFunc(slices.Clone(tc.have), func(c metav1.Condition) bool { return slices.Contains(tc.removed, c.Type) })
			if !equality.Semantic.DeepEqual(got.Status.Conditions, wantConditions) {
				t.Errorf("conditions after the patch:\n%+v\nwant\n%+v", got.Status.Conditions, wantConditions)
			}
			if got.Status.ObservedGeneration != 1 || got.Status.Replicas != 9 || got.ResourceVersion != "42" {
				t.Errorf("the patch changed more than the conditions: %+v", got.Status)
			}
			var sent struct {
				Metadata map[string]any `json:"metadata"`
				Status   map[string]any `json:"status"`
			}
			_ = json.Unmarshal(patch, &sent)
			if sent.Metadata["resourceVersion"] != "42" || len(sent.Metadata) != 1 || len(sent.Status) != 1 {
				t.Errorf("patch %s: want the resourceVersion and the conditions only", patch)
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
	got := StaleConditionOwners(foo, []string{samplev1beta1.ConditionReconciling, samplev1beta1.ConditionStalled}, "foo-controller")
	if want := []string{"foo-controller (Update)", "status-auditor (Apply)"}; !slices.Equal(got, want) {
		t.Errorf("StaleConditionOwners = %q, want %q", got, want)
	}
}
