package main

import (
	"errors"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	core "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"

	samplev1beta1 "example.com/foo-controller/pkg/apis/samplecontroller/v1beta1"
	"example.com/foo-controller/pkg/plan"
)

// TestSyncRepairsAStatusTheApplyCannotWrite: when the status apply
// succeeds without removing a condition (another manager co-owns all of
// it), that condition is removed with one JSON patch on the status
// subresource, which tests its type at its index; when the apply is refused as
// invalid (another manager co-owns part of it), the Foo is read, the
// condition removed, and the apply sent again. Either way the user gets
// one StatusRepaired Warning naming the other owners, and the metric
// counts it; a patch that fails too is returned for a retry with backoff,
// with no Event. plan's FuzzStatusWriteFromAnyOwnership drives the same
// procedure through the real field manager, and
// TestStatusWrittenWhateverTheManagedFields shows it on a real API server.
func TestSyncRepairsAStatusTheApplyCannotWrite(t *testing.T) {
	foos := schema.GroupKind{Group: samplev1beta1.GroupVersion.Group, Kind: "Foo"}
	refused := apierrors.NewInvalid(foos, "a", field.ErrorList{field.Required(field.NewPath("status", "conditions").Index(2).Child("message"), "")})
	for _, tc := range []struct {
		name       string
		apply      func(stored *samplev1beta1.Foo, n int) (*samplev1beta1.Foo, error) // the nth apply
		patchErr   error
		wantWrites []string
		wantErr    bool
		wantEvents []string
	}{
		{name: "apply refused as invalid",
			apply: func(stored *samplev1beta1.Foo, n int) (*samplev1beta1.Foo, error) {
				if n == 1 {
					return nil, refused
				}
				return appliedOver(stored), nil
			},
			wantWrites: []string{"get foos", "patch foos/status a " + string(types.JSONPatchType), "patch foos/status a " + applyPatch},
			wantEvents: []string{"Warning StatusRepaired"}},
		{name: "apply changed nothing",
			apply:      func(stored *samplev1beta1.Foo, _ int) (*samplev1beta1.Foo, error) { return stored, nil },
			wantWrites: []string{"patch foos/status a " + string(types.JSONPatchType)},
			wantEvents: []string{"Warning StatusRepaired"}},
		{name: "apply refused, and the patch too",
			apply:      func(*samplev1beta1.Foo, int) (*samplev1beta1.Foo, error) { return nil, refused },
			patchErr:   apierrors.NewServiceUnavailable("etcd is down"),
			wantWrites: []string{"get foos", "patch foos/status a " + string(types.JSONPatchType)},
			wantErr:    true},
		{name: "apply failed otherwise",
			apply: func(*samplev1beta1.Foo, int) (*samplev1beta1.Foo, error) {
				return nil, apierrors.NewServiceUnavailable("etcd is down")
			},
			wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			foo := newFoo("a", 2)
			dep := ownedDeployment(foo)
			withConvergedStatus(foo, dep, false)
			// Reconciling left over from the rollout, which another manager
			// co-owns: the Deployment is there, and it must go.
			meta.SetStatusCondition(&foo.Status.Conditions, metav1.Condition{Type: samplev1beta1.ConditionReconciling,
				Status: metav1.ConditionTrue, Reason: samplev1beta1.ReasonWaitingForReplicas, Message: "1 of 2 replicas available"})
			foo.Status.Conditions = append(foo.Status.Conditions, metav1.Condition{Type: "example.com/Audited",
				Status: metav1.ConditionTrue, Reason: "Audited", Message: "someone else's"})
			foo.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "before-first-apply", Operation: metav1.ManagedFieldsOperationUpdate,
				FieldsV1: metav1.NewFieldsV1(`{"f:spec":{},"f:status":{"f:conditions":{"k:{\"type\":\"Reconciling\"}":{".":{}}}}}`)}}
			f := newFixture(t).withFoo(foo).withDeployment(dep)
			_, ctx := ktesting.NewTestContext(t)
			c := f.newController(ctx)
			repairedBefore := counterValue(t, "foo_controller_status_repairs_total", "result=repaired")
			applies := 0
			f.client.PrependReactor("patch", "foos", func(a core.Action) (bool, runtime.Object, error) {
				p := a.(core.PatchAction)
				if p.GetPatchType() == types.JSONPatchType && tc.patchErr != nil {
					return true, nil, tc.patchErr
				}
				if p.GetPatchType() != types.ApplyPatchType {
					return false, nil, nil
				}
				stored, err := f.client.Tracker().Get(a.GetResource(), a.GetNamespace(), p.GetName())
				if err != nil {
					return true, nil, err
				}
				applies++
				got, err := tc.apply(stored.(*samplev1beta1.Foo), applies)
				return true, got, err
			})
			_, err := c.syncHandler(ctx, keyOf(foo))
			if (err != nil) != tc.wantErr {
				t.Fatalf("error %v, want one: %t", err, tc.wantErr)
			}
			if tc.patchErr != nil && !errors.Is(err, tc.patchErr) {
				t.Errorf("the patch's error must be returned: %v", err)
			}
			want := append([]string{"patch foos/status a " + applyPatch}, tc.wantWrites...)
			assertActions(t, "foo", f.client.Actions(), want)
			evts := drainEvents(f.recorder)
			assertEvents(t, evts, tc.wantEvents...)
			if tc.wantEvents == nil {
				return
			}
			if !strings.Contains(evts[0], "[Reconciling]") || !strings.Contains(evts[0], "before-first-apply (Update)") {
				t.Errorf("the Event must name the condition removed and who kept it: %q", evts[0])
			}
			if got := counterValue(t, "foo_controller_status_repairs_total", "result=repaired"); got != repairedBefore+1 {
				t.Errorf("status_repairs_total{result=repaired}: %v, want %v", got, repairedBefore+1)
			}
			var sent []byte
			for _, a := range f.client.Actions() {
				if p, ok := a.(core.PatchAction); ok && p.GetPatchType() == types.JSONPatchType {
					sent = p.GetPatch()
				}
			}
			// Reconciling is the third condition of the Foo's: tested, then
			// removed; nothing else.
			if want := `[{"op":"test","path":"/status/conditions/2/type","value":"Reconciling"},{"op":"remove","path":"/status/conditions/2"}]`; string(sent) != want {
				t.Errorf("patch %s, want %s", sent, want)
			}
			stored, err := f.client.Tracker().Get(schema.GroupVersionResource{Group: foos.Group, Version: "v1beta1", Resource: "foos"}, foo.Namespace, foo.Name)
			if err != nil {
				t.Fatal(err)
			}
			if c := meta.FindStatusCondition(stored.(*samplev1beta1.Foo).Status.Conditions, samplev1beta1.ConditionReconciling); c != nil {
				t.Errorf("Reconciling still stored after the repair: %+v", c)
			}
		})
	}
}

// appliedOver is what the API server makes of the controller's status
// apply over stored, as the fixture's reactor does it: the status it
// computes for a Deployment of two available replicas.
func appliedOver(stored *samplev1beta1.Foo) *samplev1beta1.Foo {
	out := stored.DeepCopy()
	dep := ownedDeployment(out)
	out.Status = plan.Status(out, plan.Observation{Deployment: plan.NewDeploymentView(dep)}, metav1.NewTime(fixedNow.Truncate(time.Second)))
	return out
}
