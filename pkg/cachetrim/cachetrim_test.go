package cachetrim

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"example.com/foo-controller/pkg/plan"
)

func fat() *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Name:          "d",
		Annotations:   map[string]string{lastApplied: `{"big":"json"}`, "keep": "me"},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
		Labels:        map[string]string{"app": "x"},
	}}
}

func TestTransform(t *testing.T) {
	out, err := Transform(fat())
	if err != nil {
		t.Fatal(err)
	}
	d := out.(*corev1.ConfigMap)
	if d.ManagedFields != nil {
		t.Error("managedFields kept")
	}
	if _, ok := d.Annotations[lastApplied]; ok {
		t.Error("last-applied annotation kept")
	}
	if d.Annotations["keep"] != "me" || d.Labels["app"] != "x" || d.Name != "d" {
		t.Errorf("dropped more than it should: %+v", d.ObjectMeta)
	}
}

func TestTransformLeavesOtherValues(t *testing.T) {
	if out, err := Transform("not an object"); err != nil || out != "not an object" {
		t.Errorf("got %v, %v", out, err)
	}
}

// A Deployment is replaced by what the controller reads of it; what that
// is, and that it hides no drift, is tested with plan.NewDeploymentView.
func TestTransformCutsDeployments(t *testing.T) {
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "d", Annotations: map[string]string{"a": "b"}},
		Spec:       appsv1.DeploymentSpec{RevisionHistoryLimit: new(int32)},
	}
	out, err := Transform(dep)
	if err != nil {
		t.Fatal(err)
	}
	d, ok := out.(*plan.DeploymentView)
	if !ok || d.Name != "d" || d.Annotations != nil {
		t.Errorf("got %+v", d)
	}
}
