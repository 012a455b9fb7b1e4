package main

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	samplev1beta1 "example.com/foo-controller/pkg/apis/samplecontroller/v1beta1"
	applyv1beta1 "example.com/foo-controller/pkg/generated/applyconfiguration/samplecontroller/v1beta1"
	"example.com/foo-controller/pkg/metrics"
	"example.com/foo-controller/pkg/plan"
)

// reasonStatusRepaired (a Warning) says that the status apply could not
// remove conditions that other field managers kept, and that the
// controller removed them itself.
const reasonStatusRepaired = "StatusRepaired"

// writeStatus server-side applies want as foo's status and returns the Foo
// as the API server then has it. When another field manager keeps a
// condition the apply removes (plan.WriteStatus), the controller removes
// it with a JSON patch, and the user is told: a Warning Event naming those
// managers (repeats folded into one, with a count), a log line, a metric.
func (c *Controller) writeStatus(ctx context.Context, foo *samplev1beta1.Foo, want samplev1beta1.FooStatus) (*samplev1beta1.Foo, error) {
	foos := c.fooclientset.SamplecontrollerV1beta1().Foos(foo.Namespace)
	updated, repair, err := plan.WriteStatus(foo, want, plan.StatusWrites{
		Manager: controllerName,
		Apply: func(cfg *applyv1beta1.FooApplyConfiguration) (*samplev1beta1.Foo, error) {
			return foos.ApplyStatus(ctx, cfg, metav1.ApplyOptions{FieldManager: controllerName, Force: true})
		},
		Get: func() (*samplev1beta1.Foo, error) { return foos.Get(ctx, foo.Name, metav1.GetOptions{}) },
		JSONPatch: func(patch []byte) (*samplev1beta1.Foo, error) {
			return foos.Patch(ctx, foo.Name, types.JSONPatchType, patch, metav1.PatchOptions{FieldManager: controllerName}, "status")
		},
	})
	if repair == nil {
		return updated, err
	}
	if err != nil {
		if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) && !plan.FailedTest(err) {
			metrics.StatusRepairs.WithLabelValues("failed").Inc()
		}
		return nil, err
	}
	metrics.StatusRepairs.WithLabelValues("repaired").Inc()
	klog.FromContext(ctx).Info("Removed status conditions that other field managers kept",
		"conditions", repair.Removed, "owners", repair.Owners, "refusedApply", repair.Refused)
	// Regarding the Foo without its resourceVersion: the events API folds
	// the same Event about the same object into one, with a count, so a
	// client that keeps applying our conditions costs one Event, not one per
	// repair. The note must stay within the API's 1024 bytes.
	unversioned := &samplev1beta1.Foo{TypeMeta: foo.TypeMeta, ObjectMeta: metav1.ObjectMeta{Namespace: foo.Namespace, Name: foo.Name, UID: foo.UID}}
	c.event(unversioned, nil, corev1.EventTypeWarning, reasonStatusRepaired, "WriteStatus", "%s", repair.Note(maxEventNote))
	return updated, nil
}

// maxEventNote is the longest note, in bytes, the events API takes.
const maxEventNote = 1024
