package caches

import (
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	samplev1beta1 "example.com/foo-controller/pkg/apis/samplecontroller/v1beta1"
	"example.com/foo-controller/pkg/plan"
)

func TestIndexes(t *testing.T) {
	owned := func(apiVersion, kind string, controller bool) *plan.DeploymentView {
		return &plan.DeploymentView{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "d",
			OwnerReferences: []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: "foo", UID: "uid-1", Controller: ptr.To(controller)}}}}
	}
	foo := func(name string) *samplev1beta1.Foo {
		f := &samplev1beta1.Foo{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "foo"}}
		f.Spec.Deployment.Name = name
		return f
	}
	for _, tc := range []struct {
		name  string
		index func(any) ([]string, error)
		obj   any
		want  []string
	}{
		{"a Foo, by the name it declares", indexFooByDeploymentName, foo("web"), []string{"ns/web"}},
		{"a Foo declaring no name", indexFooByDeploymentName, foo(""), nil},
		{"not a Foo", indexFooByDeploymentName, owned("samplecontroller.example.com/v1beta1", "Foo", true), nil},
		{"a Deployment a Foo controls", indexDeploymentByFooUID, owned("samplecontroller.example.com/v1beta1", "Foo", true), []string{"uid-1"}},
		{"controlled through the other served version", indexDeploymentByFooUID, owned("samplecontroller.example.com/v1alpha1", "Foo", true), []string{"uid-1"}},
		{"owned but not controlled", indexDeploymentByFooUID, owned("samplecontroller.example.com/v1beta1", "Foo", false), nil},
		{"controlled by a Foo of another group", indexDeploymentByFooUID, owned("other.example.com/v1", "Foo", true), nil},
		{"not a Deployment view", indexDeploymentByFooUID, foo("web"), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.index(tc.obj)
			if err != nil || !slices.Equal(got, tc.want) {
				t.Errorf("got %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

func TestWaitAtMost(t *testing.T) {
	if !waitAtMost(time.Second, func() {}, func() {}) {
		t.Error("two functions that return at once: waitAtMost = false, want true")
	}
	block := make(chan struct{})
	defer close(block)
	if waitAtMost(10*time.Millisecond, func() {}, func() { <-block }) {
		t.Error("a function that blocks: waitAtMost = true, want false")
	}
}
