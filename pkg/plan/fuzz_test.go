package plan

import (
	"errors"
	"reflect"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	samplev1beta1 "example.com/foo-controller/pkg/apis/samplecontroller/v1beta1"
)

// fuzzObjects builds a Foo and a Deployment from arbitrary inputs: any
// names, images, counts (negative too), ownership and condition shapes.
func fuzzObjects(name, depName, image, ownerAPIVersion, ownerKind, condReason string, replicas, depReplicas,
	available, updated, observedGen int32, ownerIsFoo, controller, hasDep, conflict, waiting bool) (*samplev1beta1.Foo, Observation) {
	foo := &samplev1beta1.Foo{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID(name + "-uid"), Generation: int64(observedGen) + 1},
		Spec:       samplev1beta1.FooSpec{Deployment: samplev1beta1.DeploymentSpec{Name: depName, Image: image}},
	}
	if replicas >= 0 {
		foo.Spec.Deployment.Replicas = ptr.To(replicas)
	}
	foo.Status.Conditions = []metav1.Condition{{Type: samplev1beta1.ConditionReady, Status: metav1.ConditionFalse, Reason: condReason}}
	if !hasDep {
		return foo, Observation{Conflict: conflict, Waiting: waiting}
	}
	uid := types.UID("other")
	if ownerIsFoo {
		uid = foo.UID
	}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{
			Name: depName, Namespace: "ns", Generation: int64(observedGen),
			Labels:          map[string]string{FooUIDLabel: string(uid)},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: ownerAPIVersion, Kind: ownerKind, Name: name, UID: uid, Controller: ptr.To(controller)}},
		},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(depReplicas),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{FooUIDLabel: string(uid)}},
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: ContainerName, Image: image}}}},
		},
		Status: appsv1.DeploymentStatus{
			ObservedGeneration: int64(observedGen), Replicas: depReplicas, UpdatedReplicas: updated, AvailableReplicas: available,
			Conditions: []appsv1.DeploymentCondition{{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse, Reason: condReason}},
		},
	}
	obs := Observation{Deployment: NewDeploymentView(dep), Conflict: conflict, Waiting: waiting}
	if condReason == "refused" {
		obs.ApplyError = errors.New("refused")
	}
	return foo, obs
}

// FuzzDecisions: building the desired Deployment, classifying, measuring
// drift and computing the status never panic, are deterministic, and
// never modify their inputs. Seeds live in testdata/fuzz/FuzzDecisions;
// `go test` runs them, `go test -fuzz=FuzzDecisions ./pkg/plan/`
// searches for more.
func FuzzDecisions(f *testing.F) {
	f.Add("web", "web", "nginx:1.27", "samplecontroller.example.com/v1alpha1", "Foo", "", int32(2), int32(2), int32(2), int32(2), int32(1), true, true, true, false, false)
	f.Add("", "", "", "", "", "ProgressDeadlineExceeded", int32(-1), int32(0), int32(0), int32(0), int32(0), false, false, false, false, false)
	f.Add("a", "b", "x", "a/b/c", "Foo", "refused", int32(0), int32(-5), int32(9), int32(-1), int32(-3), true, false, true, true, true)
	f.Fuzz(func(t *testing.T, name, depName, image, ownerAPIVersion, ownerKind, condReason string, replicas, depReplicas,
		available, updated, observedGen int32, ownerIsFoo, controller, hasDep, conflict, waiting bool) {
		foo, obs := fuzzObjects(name, depName, image, ownerAPIVersion, ownerKind, condReason, replicas, depReplicas,
			available, updated, observedGen, ownerIsFoo, controller, hasDep, conflict, waiting)
		fooBefore := foo.DeepCopy()
		var depBefore *DeploymentView
		if obs.Deployment != nil {
			depBefore = obs.Deployment.DeepCopy()
		}
		now := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))

		st1, st2 := Status(foo, obs, now), Status(foo, obs, now)
		if !StatusEqual(st1, st2) {
			t.Fatalf("Status is not deterministic:\n%+v\n%+v", st1, st2)
		}
		if c := readyCondition(foo, obs); c.Reason == "" || c.Message == "" {
			t.Fatalf("Ready condition without reason or message: %+v", c)
		}
		_ = StatusApply(foo, st1)
		if !reflect.DeepEqual(DesiredDeployment(foo), DesiredDeployment(foo)) {
			t.Fatal("DesiredDeployment is not deterministic")
		}
		if obs.Deployment != nil {
			_ = Classify(obs.Deployment, foo)
			d1, d2 := Drift(foo, obs.Deployment), Drift(foo, obs.Deployment)
			if !reflect.DeepEqual(d1, d2) {
				t.Fatalf("Drift is not deterministic: %v %v", d1, d2)
			}
			_, _, _ = RemoveControllerRefPatch(obs.Deployment, foo.UID)
			if !reflect.DeepEqual(depBefore, obs.Deployment) {
				t.Fatal("a decision modified the Deployment")
			}
		}
		_, _, _ = FinalizerPatch(foo, conflict)
		if !reflect.DeepEqual(fooBefore, foo) {
			t.Fatal("a decision modified the Foo")
		}
	})
}
