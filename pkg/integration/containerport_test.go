//go:build integration

package integration

import (
	"fmt"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	samplev1alpha1 "example.com/foo-controller/pkg/apis/samplecontroller/v1alpha1"
	"example.com/foo-controller/pkg/plan"
)

// TestContainerPort walks spec.containerPort through the life a Service
// needs from it, on the real API server, where server-side apply keys
// container ports by containerPort and protocol (not by name): set on the
// Foo, changed on the Foo, changed, re-keyed, removed and added to by
// another writer on the Deployment, unset on the Foo. After each step the
// Deployment's container has exactly the ports it should, and the
// controller reached it without a retry loop: no more than one refused
// request per step.
func TestContainerPort(t *testing.T) {
	t.Parallel()
	s := newScenario(t)
	s.startController()
	foo := newFoo("web", "web", 1)
	foo.Spec.ContainerPort = ptr.To[int32](8080)
	s.createFoo(foo)

	http := func(n int32) corev1.ContainerPort {
		return corev1.ContainerPort{Name: plan.PortName, ContainerPort: n, Protocol: corev1.ProtocolTCP}
	}
	metrics := corev1.ContainerPort{Name: "metrics", ContainerPort: 9100, Protocol: corev1.ProtocolTCP}
	// edit changes the Deployment as `kubectl edit` does: an Update under
	// another field manager.
	edit := func(change func(*appsv1.Deployment)) {
		t.Helper()
		for {
			dep, err := s.getDeployment("web")
			if err != nil {
				t.Fatal(err)
			}
			change(dep)
			_, err = s.kube.AppsV1().Deployments(s.ns).Update(s.ctx, dep, metav1.UpdateOptions{FieldManager: "kubectl-edit"})
			if apierrors.IsConflict(err) {
				continue
			}
			if err != nil {
				t.Fatalf("edit: %v", err)
			}
			return
		}
	}
	ports := func(d *appsv1.Deployment) *[]corev1.ContainerPort { return &d.Spec.Template.Spec.Containers[0].Ports }

	steps := []struct {
		name   string
		change func()
		want   []corev1.ContainerPort
	}{
		{"set on the Foo", func() {}, []corev1.ContainerPort{http(8080)}},
		{"changed on the Foo", func() {
			s.updateFoo("web", func(f *samplev1alpha1.Foo) { f.Spec.ContainerPort = ptr.To[int32](9090) })
		}, []corev1.ContainerPort{http(9090)}},
		// The trap: the entry keyed 9090 is gone, one keyed 7070 owned by
		// kubectl-edit holds the name "http"; an apply alone is refused
		// (duplicate name) forever.
		{"number changed by another writer", func() {
			edit(func(d *appsv1.Deployment) { (*ports(d))[0].ContainerPort = 7070 })
		}, []corev1.ContainerPort{http(9090)}},
		{"protocol changed by another writer", func() {
			edit(func(d *appsv1.Deployment) { (*ports(d))[0].Protocol = corev1.ProtocolUDP })
		}, []corev1.ContainerPort{http(9090)}},
		{"renamed by another writer", func() {
			edit(func(d *appsv1.Deployment) { (*ports(d))[0].Name = "web" })
		}, []corev1.ContainerPort{http(9090)}},
		{"removed by another writer", func() {
			edit(func(d *appsv1.Deployment) { *ports(d) = nil })
		}, []corev1.ContainerPort{http(9090)}},
		// A port of another name is not ours: it stays, through the
		// Foo's changes too.
		{"another port added by another writer", func() {
			edit(func(d *appsv1.Deployment) { *ports(d) = append(*ports(d), metrics) })
		}, []corev1.ContainerPort{http(9090), metrics}},
		{"unset on the Foo", func() {
			s.updateFoo("web", func(f *samplev1alpha1.Foo) { f.Spec.ContainerPort = nil })
		}, []corev1.ContainerPort{metrics}},
		// With the field unset, "http" in our container is still ours to
		// keep absent; an apply cannot remove what it does not own.
		{"http added by another writer while unset", func() {
			edit(func(d *appsv1.Deployment) { *ports(d) = append(*ports(d), http(8081)) })
		}, []corev1.ContainerPort{metrics}},
	}
	for _, step := range steps {
		start := time.Now()
		step.change()
		s.eventually(time.Minute, step.name+": the container's ports", func() (bool, string) {
			dep, err := s.getDeployment("web")
			if err != nil {
				return false, err.Error()
			}
			got := *ports(dep)
			return slices.Equal(got, step.want), fmt.Sprintf("ports %+v, want %+v", got, step.want)
		})
		s.waitConverged("web", time.Minute)
		took := time.Since(start)
		// Settled: a further second brings no more attempts.
		time.Sleep(time.Second)
		var refused []auditEvent
		for _, e := range s.controllerRequests(start, time.Now()) {
			if e.ResponseStatus != nil && e.ResponseStatus.Code >= 400 && e.Verb != "watch" {
				refused = append(refused, e)
			}
		}
		if len(refused) > 1 {
			t.Errorf("%s: %d refused requests, want at most 1:%s", step.name, len(refused), summarize(refused))
		}
		t.Logf("%s: put right in %v, %d refused request(s)", step.name, took.Round(time.Millisecond), len(refused))
	}
	if ev := s.fooEvents("web"); ev["Contested"] != 0 {
		t.Errorf("events %v: one-off edits are not a fight", ev)
	}
}
