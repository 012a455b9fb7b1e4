//go:build integration

package integration

import (
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	samplev1alpha1 "example.com/foo-controller/pkg/apis/samplecontroller/v1alpha1"
	samplev1beta1 "example.com/foo-controller/pkg/apis/samplecontroller/v1beta1"
)

// TestRevisionHistoryLimit walks spec.deployment.revisionHistoryLimit, the
// worked example of docs/adding-a-field.md, through the real API server:
// set, it is the Deployment's and another writer's value is put back; 0
// is a value, not unset; written through v1alpha1's annotation, it
// arrives; unset, it is the Deployment's default (10), and another
// writer's value is still put back.
func TestRevisionHistoryLimit(t *testing.T) {
	t.Parallel()
	s := newScenario(t)
	s.startController()
	foo := newFoo("web", "web", 1)
	foo.Spec.Deployment.RevisionHistoryLimit = ptr.To[int32](3)
	s.createFoo(foo)
	deployment := func(want int32) {
		t.Helper()
		s.eventuallyDeployment(30*time.Second, "web", fmt.Sprintf("revisionHistoryLimit %d", want), func(dep *appsv1.Deployment) (bool, string) {
			got := ptr.Deref(dep.Spec.RevisionHistoryLimit, -1)
			return got == want, fmt.Sprintf("revisionHistoryLimit %d", got)
		})
	}
	set := func(limit *int32) {
		t.Helper()
		s.updateFoo("web", func(f *samplev1beta1.Foo) { f.Spec.Deployment.RevisionHistoryLimit = limit })
	}
	deployment(3)
	s.waitConverged("web", time.Minute)

	s.editDeployment("web", func(d *appsv1.Deployment) { d.Spec.RevisionHistoryLimit = ptr.To[int32](7) })
	deployment(3)
	s.waitConverged("web", time.Minute)

	set(ptr.To[int32](0))
	deployment(0)
	s.waitConverged("web", time.Minute)

	// A v1alpha1 client sets it in the annotation that carries it.
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"5"}}}`, samplev1alpha1.RevisionHistoryLimitAnnotation)
	if _, err := s.foos.SamplecontrollerV1alpha1().Foos(s.ns).Patch(s.ctx, "web", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	deployment(5)
	s.waitConverged("web", time.Minute)

	// Unset: the Deployment's default, still the controller's.
	set(nil)
	deployment(10)
	s.waitConverged("web", time.Minute)
	s.editDeployment("web", func(d *appsv1.Deployment) { d.Spec.RevisionHistoryLimit = ptr.To[int32](7) })
	deployment(10)
	s.waitConverged("web", time.Minute)
}
