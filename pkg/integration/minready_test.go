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

// TestMinReadySeconds walks spec.deployment.minReadySeconds, the field only
// v1beta1 has, through the real API server: declared, it is the
// Deployment's, with progressDeadlineSeconds ten minutes beyond (the API
// server wants it above), and another writer's value of either is put
// back; at 700, past the default deadline of 600, the Deployment is
// accepted; written through v1alpha1's annotation, it arrives too; unset,
// the deadline is released and the API server's default returns, and
// another writer's deadline stays, until a minReadySeconds above it
// replaces it in the same apply. Replicas 0: nothing waits minReadySeconds to become
// available.
func TestMinReadySeconds(t *testing.T) {
	t.Parallel()
	s := newScenario(t)
	s.startController()
	foo := newFoo("web", "web", 0)
	foo.Spec.Deployment.MinReadySeconds = 30
	s.createFoo(foo)
	deployment := func(minReady, deadline int32) {
		t.Helper()
		s.eventuallyDeployment(30*time.Second, "web", fmt.Sprintf("minReadySeconds %d, progressDeadlineSeconds %d", minReady, deadline), func(dep *appsv1.Deployment) (bool, string) {
			got := fmt.Sprintf("minReadySeconds %d, progressDeadlineSeconds %d", dep.Spec.MinReadySeconds, ptr.Deref(dep.Spec.ProgressDeadlineSeconds, -1))
			return dep.Spec.MinReadySeconds == minReady && ptr.Deref(dep.Spec.ProgressDeadlineSeconds, -1) == deadline, got
		})
	}
	setMinReady := func(seconds int32) {
		t.Helper()
		s.updateFoo("web", func(f *samplev1beta1.Foo) { f.Spec.Deployment.MinReadySeconds = seconds })
	}
	deployment(30, 630)
	s.waitConverged("web", time.Minute)

	s.editDeployment("web", func(d *appsv1.Deployment) { d.Spec.MinReadySeconds = 5 })
	deployment(30, 630)

	setMinReady(700)
	deployment(700, 1300)
	s.waitConverged("web", time.Minute) // not stalled: the API server took it
	s.editDeployment("web", func(d *appsv1.Deployment) { d.Spec.ProgressDeadlineSeconds = ptr.To[int32](900) })
	deployment(700, 1300)

	setMinReady(100)
	deployment(100, 700)

	// A v1alpha1 client sets it in the annotation that carries it.
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"45"}}}`, samplev1alpha1.MinReadySecondsAnnotation)
	if _, err := s.foos.SamplecontrollerV1alpha1().Foos(s.ns).Patch(s.ctx, "web", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	deployment(45, 645)

	setMinReady(0)
	deployment(0, 600)
	s.waitConverged("web", time.Minute)

	// Unset, the deadline is not the controller's: another writer's
	// stays; a minReadySeconds above it then replaces it in the same
	// apply, not refused for it.
	s.editDeployment("web", func(d *appsv1.Deployment) { d.Spec.ProgressDeadlineSeconds = ptr.To[int32](150) })
	time.Sleep(2 * time.Second)
	deployment(0, 150)
	setMinReady(300)
	deployment(300, 900)
	s.waitConverged("web", time.Minute)
}
