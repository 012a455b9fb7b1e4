package cachetrim

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

func fat() *appsv1.Deployment {
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{
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
	d := out.(*appsv1.Deployment)
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

func TestTransformTombstone(t *testing.T) {
	out, err := Transform(cache.DeletedFinalStateUnknown{Key: "ns/d", Obj: fat()})
	if err != nil {
		t.Fatal(err)
	}
	tomb := out.(cache.DeletedFinalStateUnknown)
	if tomb.Key != "ns/d" || tomb.Obj.(*appsv1.Deployment).ManagedFields != nil {
		t.Errorf("tombstone: %+v", tomb)
	}
}

func TestTransformLeavesOtherValues(t *testing.T) {
	if out, err := Transform("not an object"); err != nil || out != "not an object" {
		t.Errorf("got %v, %v", out, err)
	}
}
