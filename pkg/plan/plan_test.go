package plan

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	samplev1beta1 "example.com/foo-controller/pkg/apis/samplecontroller/v1beta1"
)

func testFoo() *samplev1beta1.Foo {
	return &samplev1beta1.Foo{
		ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns", UID: "uid-a", Generation: 3, ResourceVersion: "7"},
		Spec: samplev1beta1.FooSpec{
			Deployment:     samplev1beta1.DeploymentSpec{Name: "web", Replicas: ptr.To[int32](2), Image: "nginx:1.27"},
			DeletionPolicy: samplev1beta1.DeletionPolicyDelete,
		},
	}
}

func controllerRef(apiVersion, kind string, uid types.UID) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: "a", UID: uid, Controller: ptr.To(true)}
}

// rolledOut is the Deployment DesiredDeployment describes, as the API server
// would return it after a complete rollout.
func rolledOut(foo *samplev1beta1.Foo) *appsv1.Deployment {
	r := Replicas(foo)
	container := corev1.Container{Name: ContainerName, Image: Image(foo)}
	if foo.Spec.Deployment.ContainerPort != nil {
		container.Ports = []corev1.ContainerPort{{Name: PortName, ContainerPort: *foo.Spec.Deployment.ContainerPort, Protocol: corev1.ProtocolTCP}}
	}
	var annotations map[string]string
	if keys := podLabelKeys(foo); keys != "" {
		annotations = map[string]string{PodLabelsAnnotation: keys}
	}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{
			Name: foo.Spec.Deployment.Name, Namespace: foo.Namespace, Generation: 1,
			Labels: Labels(foo), Annotations: annotations,
			OwnerReferences: []metav1.OwnerReference{controllerRef("samplecontroller.example.com/v1beta1", "Foo", foo.UID)},
		},
		Spec: appsv1.DeploymentSpec{
			Replicas:             ptr.To(r),
			MinReadySeconds:      foo.Spec.Deployment.MinReadySeconds,
			RevisionHistoryLimit: ptr.To(RevisionHistoryLimit(foo)),
			Selector:             &metav1.LabelSelector{MatchLabels: SelectorLabels(foo)},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: TemplateLabels(foo)},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{container}},
			},
		},
		Status: appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: r, UpdatedReplicas: r, ReadyReplicas: r, AvailableReplicas: r,
			Conditions: []appsv1.DeploymentCondition{
				{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, Reason: "MinimumReplicasAvailable"},
				{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, Reason: "NewReplicaSetAvailable"},
			}},
	}
}

// withStatus returns a copy of d with its status counts (replicas, updated,
// available; ready as available) and Available condition set.
func withStatus(d *appsv1.Deployment, replicas, updated, available int32, isAvailable bool) *appsv1.Deployment {
	d = d.DeepCopy()
	d.Status.Replicas, d.Status.UpdatedReplicas = replicas, updated
	d.Status.AvailableReplicas, d.Status.ReadyReplicas = available, available
	for i := range d.Status.Conditions {
		if c := &d.Status.Conditions[i]; c.Type == appsv1.DeploymentAvailable {
			c.Status, c.Reason = corev1.ConditionFalse, "MinimumReplicasUnavailable"
			if isAvailable {
				c.Status, c.Reason = corev1.ConditionTrue, "MinimumReplicasAvailable"
			}
		}
	}
	return d
}

// unobserved returns a copy of d with a generation the Deployment
// controller has not observed yet.
func unobserved(d *appsv1.Deployment) *appsv1.Deployment {
	d = d.DeepCopy()
	d.Generation = d.Status.ObservedGeneration + 1
	return d
}

// TestLeftBehind: a Deployment an earlier Foo left (deletionPolicy:
// Orphan) is told apart from someone else's, for the conflict's message.
func TestLeftBehind(t *testing.T) {
	foo := testFoo()
	for _, tc := range []struct {
		name   string
		mutate func(*appsv1.Deployment)
		want   bool
	}{
		{"ours, controlled", func(*appsv1.Deployment) {}, false},
		{"orphaned by an earlier Foo", func(d *appsv1.Deployment) { d.OwnerReferences = nil; d.Labels[FooUIDLabel] = "earlier" }, true},
		{"orphaned by this Foo (adopted instead)", func(d *appsv1.Deployment) { d.OwnerReferences = nil }, false},
		{"another Foo's, still controlled", func(d *appsv1.Deployment) { d.Labels[FooUIDLabel] = "earlier" }, false},
		{"our UID label, another manager", func(d *appsv1.Deployment) {
			d.OwnerReferences = nil
			d.Labels = map[string]string{FooUIDLabel: "earlier", ManagedByLabel: "helm"}
		}, false},
		{"no labels", func(d *appsv1.Deployment) { d.OwnerReferences = nil; d.Labels = nil }, false},
	} {
		d := rolledOut(foo)
		tc.mutate(d)
		if got := leftBehind(NewDeploymentView(d), foo); got != tc.want {
			t.Errorf("%s: leftBehind = %v, want %v", tc.name, got, tc.want)
		}
	}
	if leftBehind(nil, foo) {
		t.Error("leftBehind(nil) = true")
	}
	left := rolledOut(foo)
	left.OwnerReferences, left.Labels[FooUIDLabel] = nil, "earlier"
	c := stalledCondition(foo, Observation{Deployment: NewDeploymentView(left), Conflict: true})
	if c == nil || c.Reason != samplev1beta1.ReasonDeploymentConflict || !strings.Contains(c.Message, "left by an earlier Foo") {
		t.Errorf("Stalled for an earlier Foo's orphan: %+v", c)
	}
}

func TestControllerFooAndClassify(t *testing.T) {
	foo := testFoo()
	tests := []struct {
		name   string
		mutate func(*appsv1.Deployment)
		want   Ownership
	}{
		{"controlled by the Foo", func(*appsv1.Deployment) {}, Owned},
		{"controlled by the Foo, named in v1alpha1 (written before v1beta1)", func(d *appsv1.Deployment) {
			d.OwnerReferences[0].APIVersion = "samplecontroller.example.com/v1alpha1"
		}, Owned},
		{"controlled by a deleted predecessor of the same name", func(d *appsv1.Deployment) {
			d.OwnerReferences = []metav1.OwnerReference{controllerRef("samplecontroller.example.com/v1alpha1", "Foo", "older-uid")}
		}, Superseded},
		{"controlled by another Foo", func(d *appsv1.Deployment) {
			ref := controllerRef("samplecontroller.example.com/v1alpha1", "Foo", "other-uid")
			ref.Name = "b"
			d.OwnerReferences = []metav1.OwnerReference{ref}
		}, Foreign},
		{"controlled by a Foo of another group", func(d *appsv1.Deployment) {
			d.OwnerReferences = []metav1.OwnerReference{controllerRef("other.example.com/v1alpha1", "Foo", foo.UID)}
		}, Foreign},
		{"controlled by another kind with the Foo's UID", func(d *appsv1.Deployment) {
			d.OwnerReferences = []metav1.OwnerReference{controllerRef("samplecontroller.example.com/v1alpha1", "Bar", foo.UID)}
		}, Foreign},
		{"malformed apiVersion", func(d *appsv1.Deployment) {
			d.OwnerReferences = []metav1.OwnerReference{controllerRef("a/b/c", "Foo", foo.UID)}
		}, Foreign},
		{"owner but not controller", func(d *appsv1.Deployment) {
			d.OwnerReferences[0].Controller = nil
		}, Orphaned},
		{"owner reference removed, our label and selector", func(d *appsv1.Deployment) { d.OwnerReferences = nil }, Orphaned},
		{"owner reference removed, label of another Foo", func(d *appsv1.Deployment) {
			d.OwnerReferences = nil
			d.Labels[FooUIDLabel] = "someone"
		}, Foreign},
		{"our label copied onto a Deployment with another selector", func(d *appsv1.Deployment) {
			d.OwnerReferences = nil
			d.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "x"}}
		}, Foreign},
		{"our label, selector with extra expressions", func(d *appsv1.Deployment) {
			d.OwnerReferences = nil
			d.Spec.Selector.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: "k", Operator: metav1.LabelSelectorOpExists}}
		}, Foreign},
		{"nothing of ours", func(d *appsv1.Deployment) {
			d.OwnerReferences = nil
			d.Labels = nil
		}, Foreign},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := rolledOut(foo)
			tc.mutate(d)
			if got := Classify(NewDeploymentView(d), foo); got != tc.want {
				t.Errorf("Classify: got %v, want %v", got, tc.want)
			}
			if got := IsControlledBy(d, foo.UID); got != (tc.want == Owned) {
				t.Errorf("IsControlledBy: got %v", got)
			}
		})
	}
}

func TestDrift(t *testing.T) {
	foo := testFoo()
	tests := []struct {
		name   string
		mutate func(*appsv1.Deployment)
		want   []string
	}{
		{"none", func(*appsv1.Deployment) {}, nil},
		{"replicas", func(d *appsv1.Deployment) { d.Spec.Replicas = ptr.To[int32](9) }, []string{"replicas"}},
		{"replicas unset", func(d *appsv1.Deployment) { d.Spec.Replicas = nil }, []string{"replicas"}},
		{"image", func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Image = "x:1" }, []string{"image"}},
		{"our container gone", func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers = nil }, []string{"image"}},
		{"labels", func(d *appsv1.Deployment) { d.Labels = map[string]string{"x": "y"} }, []string{"labels"}},
		{"template labels", func(d *appsv1.Deployment) { delete(d.Spec.Template.Labels, ManagedByLabel) }, []string{"template labels"}},
		{"minReadySeconds", func(d *appsv1.Deployment) { d.Spec.MinReadySeconds = 10 }, []string{"minReadySeconds"}},
		{"progressDeadlineSeconds not ours without minReadySeconds", func(d *appsv1.Deployment) { d.Spec.ProgressDeadlineSeconds = ptr.To[int32](90) }, nil},
		{"owner", func(d *appsv1.Deployment) { d.OwnerReferences = nil }, []string{"owner"}},
		{"owner named in v1alpha1 (written before v1beta1)", func(d *appsv1.Deployment) {
			d.OwnerReferences[0].APIVersion = "samplecontroller.example.com/v1alpha1"
		}, nil},
		{"several", func(d *appsv1.Deployment) {
			d.Spec.Replicas = ptr.To[int32](0)
			d.Spec.Template.Spec.Containers[0].Image = "x:1"
		}, []string{"replicas", "image"}},
		{"extra labels, containers and defaults are not ours", func(d *appsv1.Deployment) {
			d.Labels["extra"] = "1"
			d.Spec.Template.Labels["extra"] = "1"
			d.Spec.Template.Spec.Containers = append(d.Spec.Template.Spec.Containers, corev1.Container{Name: "side", Image: "b:1"})
			d.Spec.Template.Spec.Containers[0].TerminationMessagePath = "/dev/termination-log"
			d.Spec.Strategy.Type = appsv1.RecreateDeploymentStrategyType // no field of a Foo names it
		}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := rolledOut(foo)
			tc.mutate(d)
			if got := Drift(foo, NewDeploymentView(d)); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// TestDriftContainerPort: the "http" port of our container is compared by
// its whole server-side apply key (number and protocol) and its name, set
// or unset; ports of other names are someone else's.
// httpPort is the port spec.containerPort n declares; metrics is someone else's.
func httpPort(n int32) corev1.ContainerPort {
	return corev1.ContainerPort{Name: PortName, ContainerPort: n, Protocol: corev1.ProtocolTCP}
}

var metrics = corev1.ContainerPort{Name: "metrics", ContainerPort: 9100, Protocol: corev1.ProtocolTCP}

func TestDriftPodLabels(t *testing.T) {
	team := map[string]string{"team": "a"}
	both := map[string]string{"team": "a", "tier": "web"}
	tests := []struct {
		name     string
		want     map[string]string // spec.podLabels
		applied  map[string]string // the podLabels the Deployment was applied with
		template func(map[string]string) map[string]string
		drift    bool
	}{
		{"as declared", both, both, nil, false},
		{"none", nil, nil, nil, false},
		{"another writer's label beside", team, team, func(l map[string]string) map[string]string { return with(l, "x", "y") }, false},
		{"value changed by another writer", team, team, func(l map[string]string) map[string]string { return with(l, "team", "b") }, true},
		{"removed by another writer", team, team, func(l map[string]string) map[string]string { return without(l, "team") }, true},
		{"key added on the Foo", both, team, nil, true},
		{"value changed on the Foo", map[string]string{"team": "b"}, team, nil, true},
		// The key is still on the pod template, and nothing in the Foo
		// names it: only the recorded keys tell that it is ours to remove.
		{"key removed on the Foo", team, both, nil, true},
		{"all removed on the Foo", nil, team, nil, true},
		{"applied keys annotation removed", team, team, func(l map[string]string) map[string]string { return l }, true},
		{"a controller key in podLabels (stored before the rule)", map[string]string{ManagedByLabel: "x"}, nil, nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			foo := testFoo()
			foo.Spec.Deployment.PodLabels = tc.applied
			d := rolledOut(foo)
			if tc.template != nil {
				d.Spec.Template.Labels = tc.template(d.Spec.Template.Labels)
			}
			if tc.name == "applied keys annotation removed" {
				d.Annotations = nil
			}
			foo.Spec.Deployment.PodLabels = tc.want
			got := Drift(foo, NewDeploymentView(d))
			if want := []string(nil); tc.drift {
				want = []string{"podLabels"}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("Drift = %q, want %q", got, want)
				}
			} else if len(got) != 0 {
				t.Errorf("Drift = %q, want none", got)
			}
		})
	}
}

func TestDesiredDeploymentPodLabels(t *testing.T) {
	foo := testFoo()
	foo.Spec.Deployment.PodLabels = map[string]string{"tier": "web", "team": "", ManagedByLabel: "someone", FooUIDLabel: "other"}
	d := DesiredDeployment(foo)
	want := map[string]string{"tier": "web", "team": "", ManagedByLabel: managedByValue, FooUIDLabel: string(foo.UID)}
	if got := d.Spec.Template.Labels; !reflect.DeepEqual(got, want) {
		t.Errorf("template labels %v, want %v: the controller's own labels win", got, want)
	}
	if got := d.Labels; !reflect.DeepEqual(got, Labels(foo)) {
		t.Errorf("Deployment labels %v, want only the controller's %v", got, Labels(foo))
	}
	if got := d.Annotations; !reflect.DeepEqual(got, map[string]string{PodLabelsAnnotation: "team,tier"}) {
		t.Errorf("annotations %v, want the applied keys, sorted", got)
	}
	foo.Spec.Deployment.PodLabels = nil
	if got := DesiredDeployment(foo).Annotations; got != nil {
		t.Errorf("annotations %v without podLabels, want none (no write to existing Deployments on upgrade)", got)
	}
}

func TestDriftContainerPort(t *testing.T) {
	udp := httpPort(8080)
	udp.Protocol = corev1.ProtocolUDP
	renamed := httpPort(8080)
	renamed.Name = "web"
	tests := []struct {
		name  string
		want  *int32 // spec.containerPort
		ports []corev1.ContainerPort
		drift bool
	}{
		{"as declared", ptr.To[int32](8080), []corev1.ContainerPort{httpPort(8080)}, false},
		{"beside someone else's port", ptr.To[int32](8080), []corev1.ContainerPort{metrics, httpPort(8080)}, false},
		{"number changed", ptr.To[int32](8080), []corev1.ContainerPort{httpPort(7070)}, true},
		{"protocol changed", ptr.To[int32](8080), []corev1.ContainerPort{udp}, true},
		{"renamed", ptr.To[int32](8080), []corev1.ContainerPort{renamed}, true},
		{"missing", ptr.To[int32](8080), nil, true},
		{"a second http port", ptr.To[int32](8080), []corev1.ContainerPort{httpPort(8080), httpPort(7070)}, true},
		{"unset, none", nil, nil, false},
		{"unset, someone else's port", nil, []corev1.ContainerPort{metrics}, false},
		{"unset, http still there", nil, []corev1.ContainerPort{httpPort(8080)}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			foo := testFoo()
			foo.Spec.Deployment.ContainerPort = tc.want
			d := rolledOut(foo)
			d.Spec.Template.Spec.Containers[0].Ports = tc.ports
			got := Drift(foo, NewDeploymentView(d))
			if want := []string(nil); tc.drift {
				want = []string{"containerPort"}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("got %q, want %q", got, want)
				}
			} else if got != nil {
				t.Errorf("got %q, want none", got)
			}
		})
	}
}

// TestStrayEntriesPatch: the patch removes every "http" port of our
// container except the declared one, and nothing else; and it fails rather
// than remove the wrong entry when the lists have changed since.
func TestStrayEntriesPatch(t *testing.T) {
	side := corev1.Container{Name: "side", Image: "b:1", Ports: []corev1.ContainerPort{httpPort(80)}}
	tests := []struct {
		name       string
		want       *int32
		containers func(ours corev1.Container) []corev1.Container
		ports      []corev1.ContainerPort
		wantOK     bool
		after      []corev1.ContainerPort
	}{
		{"as declared", ptr.To[int32](8080), nil, []corev1.ContainerPort{httpPort(8080)}, false, nil},
		{"re-keyed by another writer", ptr.To[int32](9090), nil,
			[]corev1.ContainerPort{metrics, httpPort(7070)}, true, []corev1.ContainerPort{metrics}},
		{"ours kept, the stray removed", ptr.To[int32](9090), nil,
			[]corev1.ContainerPort{httpPort(7070), metrics, httpPort(9090)}, true, []corev1.ContainerPort{metrics, httpPort(9090)}},
		{"unset", nil, nil, []corev1.ContainerPort{httpPort(8080), metrics}, true, []corev1.ContainerPort{metrics}},
		{"unset, none of ours", nil, nil, []corev1.ContainerPort{metrics}, false, nil},
		{"our container second; another container's http is not ours", nil,
			func(ours corev1.Container) []corev1.Container { return []corev1.Container{side, ours} },
			[]corev1.ContainerPort{httpPort(8080)}, true, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			foo := testFoo()
			foo.Spec.Deployment.ContainerPort = tc.want
			d := rolledOut(foo)
			ours := d.Spec.Template.Spec.Containers[0]
			ours.Ports = tc.ports
			d.Spec.Template.Spec.Containers = []corev1.Container{ours}
			if tc.containers != nil {
				d.Spec.Template.Spec.Containers = tc.containers(ours)
			}
			patch, ok, err := removeStrayEntriesPatch(foo, NewDeploymentView(d))
			if err != nil || ok != tc.wantOK {
				t.Fatalf("ok %v err %v", ok, err)
			}
			if !ok {
				return
			}
			got := applyJSONPatch(t, d, patch)
			for _, c := range got.Spec.Template.Spec.Containers {
				switch c.Name {
				case ContainerName:
					if len(c.Ports)+len(tc.after) > 0 && !reflect.DeepEqual(c.Ports, tc.after) {
						t.Errorf("ports after the patch: %+v, want %+v", c.Ports, tc.after)
					}
					// What is left is for the apply to add, if anything.
					missing := tc.want != nil && !slices.Contains(c.Ports, httpPort(*tc.want))
					if drifts := slices.Contains(Drift(foo, NewDeploymentView(got)), "containerPort"); drifts != missing {
						t.Errorf("after the patch: drift %v, want %v", Drift(foo, NewDeploymentView(got)), missing)
					}
				default:
					if !reflect.DeepEqual(c.Ports, side.Ports) {
						t.Errorf("container %s changed: %+v", c.Name, c.Ports)
					}
				}
			}

			// If the port list changed meanwhile, a test op makes the
			// patch fail rather than remove another entry.
			moved := d.DeepCopy()
			for i := range moved.Spec.Template.Spec.Containers {
				c := &moved.Spec.Template.Spec.Containers[i]
				if c.Name == ContainerName {
					c.Ports = append([]corev1.ContainerPort{metrics}, c.Ports...)
				}
			}
			raw, _ := json.Marshal(moved)
			p, _ := jsonpatch.DecodePatch(patch)
			if _, err := p.Apply(raw); err == nil {
				t.Error("patch applied to a changed port list")
			}
		})
	}
}

// TestReplaceStrayEntriesPatch: the same strays are removed as by
// removeStrayEntriesPatch, and our port is added in the same patch when it is
// missing, so that the patched Deployment has no drift in its ports.
func TestReplaceStrayEntriesPatch(t *testing.T) {
	tests := []struct {
		name   string
		want   *int32
		ports  []corev1.ContainerPort
		wantOK bool
		after  []corev1.ContainerPort
	}{
		{"as declared", ptr.To[int32](8080), []corev1.ContainerPort{httpPort(8080)}, false, nil},
		{"re-keyed by another writer", ptr.To[int32](9090),
			[]corev1.ContainerPort{metrics, httpPort(7070)}, true, []corev1.ContainerPort{metrics, httpPort(9090)}},
		{"the only port re-keyed", ptr.To[int32](9090),
			[]corev1.ContainerPort{httpPort(7070)}, true, []corev1.ContainerPort{httpPort(9090)}},
		{"ours kept, the stray removed, nothing added", ptr.To[int32](9090),
			[]corev1.ContainerPort{httpPort(7070), metrics, httpPort(9090)}, true, []corev1.ContainerPort{metrics, httpPort(9090)}},
		{"unset: removed, nothing added", nil, []corev1.ContainerPort{httpPort(8080), metrics}, true, []corev1.ContainerPort{metrics}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			foo := testFoo()
			foo.Spec.Deployment.ContainerPort = tc.want
			d := rolledOut(foo)
			d.Spec.Template.Spec.Containers[0].Ports = tc.ports
			patch, ok, err := replaceStrayEntriesPatch(foo, NewDeploymentView(d))
			if err != nil || ok != tc.wantOK {
				t.Fatalf("ok %v err %v", ok, err)
			}
			if !ok {
				return
			}
			got := applyJSONPatch(t, d, patch)
			if p := got.Spec.Template.Spec.Containers[0].Ports; !reflect.DeepEqual(p, tc.after) {
				t.Errorf("ports after the patch: %+v, want %+v", p, tc.after)
			}
			if drift := Drift(foo, NewDeploymentView(got)); slices.Contains(drift, "containerPort") {
				t.Errorf("after the patch: drift %v", drift)
			}
		})
	}
}

// TestDesiredDeploymentWithoutPorts: everything DesiredDeployment declares
// but the ports.
func TestDesiredDeploymentWithoutPorts(t *testing.T) {
	foo := testFoo()
	foo.Spec.Deployment.ContainerPort = ptr.To[int32](8080)
	full, without := DesiredDeployment(foo), desiredDeploymentWithoutPorts(foo)
	if len(full.Spec.Template.Spec.Containers[0].Ports) != 1 || without.Spec.Template.Spec.Containers[0].Ports != nil {
		t.Fatalf("ports: full %+v, without %+v", full.Spec.Template.Spec.Containers[0].Ports, without.Spec.Template.Spec.Containers[0].Ports)
	}
	without.Spec.Template.Spec.Containers[0].Ports = full.Spec.Template.Spec.Containers[0].Ports
	if !reflect.DeepEqual(full, without) {
		t.Errorf("differs in more than the ports:\n%+v\n%+v", full, without)
	}
}

func TestDefaults(t *testing.T) {
	foo := testFoo()
	foo.Spec.Deployment.Replicas = nil
	foo.Spec.Deployment.Image = ""
	if Replicas(foo) != 1 || Image(foo) != "nginx:1.27" {
		t.Errorf("defaults: replicas %d image %q", Replicas(foo), Image(foo))
	}
	foo.Spec.Deployment.Replicas = ptr.To[int32](0)
	if Replicas(foo) != 0 {
		t.Errorf("an explicit 0 is not the default: got %d", Replicas(foo))
	}
}

func TestDesiredDeployment(t *testing.T) {
	foo := testFoo()
	raw, err := json.Marshal(DesiredDeployment(foo))
	if err != nil {
		t.Fatal(err)
	}
	var d appsv1.Deployment
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	if d.APIVersion != "apps/v1" || d.Kind != "Deployment" || d.Name != "web" || d.Namespace != "ns" {
		t.Errorf("identity: %s %s %s/%s", d.APIVersion, d.Kind, d.Namespace, d.Name)
	}
	// What it declares must not drift from itself, and must be controlled by foo.
	d.Status = appsv1.DeploymentStatus{}
	if drift := Drift(foo, NewDeploymentView(&d)); len(drift) != 0 {
		t.Errorf("desired Deployment drifts from the Foo: %v", drift)
	}
	ref := d.OwnerReferences[0]
	if !*ref.Controller || !*ref.BlockOwnerDeletion || ref.Name != "a" {
		t.Errorf("owner reference: %+v", ref)
	}
	if !reflect.DeepEqual(d.Spec.Selector.MatchLabels, map[string]string{FooUIDLabel: "uid-a"}) {
		t.Errorf("selector: %v", d.Spec.Selector.MatchLabels)
	}
	if p := d.Spec.Template.Spec.Containers[0].Ports; len(p) != 0 {
		t.Errorf("ports without spec.containerPort: %+v", p)
	}
	// minReadySeconds is the controller's even when the Foo leaves it
	// out: 0 is sent, and another writer's value is drift.
	if d.Spec.MinReadySeconds != 0 || !strings.Contains(string(raw), `"minReadySeconds":0`) {
		t.Errorf("minReadySeconds unset: want 0 declared, got %s", raw)
	}
	foo.Spec.Deployment.MinReadySeconds = 30
	if got := *DesiredDeployment(foo).Spec.MinReadySeconds; got != 30 {
		t.Errorf("minReadySeconds: got %d, want 30", got)
	}
	if got := DesiredDeployment(foo).Spec.ProgressDeadlineSeconds; got == nil || *got != 630 {
		t.Errorf("progressDeadlineSeconds for minReadySeconds 30: %v, want 630", got)
	}
	// Only owned fields: nothing the API server defaults that no field
	// of the Foo names.
	if d.Spec.Strategy.Type != "" || d.Spec.Template.Spec.RestartPolicy != "" {
		t.Errorf("declares fields it does not own: %s", raw)
	}
	// revisionHistoryLimit, as minReadySeconds: unset is the Deployment's
	// default, declared; 0 is a value.
	if d.Spec.RevisionHistoryLimit == nil || *d.Spec.RevisionHistoryLimit != 10 {
		t.Errorf("revisionHistoryLimit unset: want 10 declared, got %s", raw)
	}
	foo.Spec.Deployment.RevisionHistoryLimit = ptr.To[int32](0)
	if got := DesiredDeployment(foo).Spec.RevisionHistoryLimit; got == nil || *got != 0 {
		t.Errorf("revisionHistoryLimit 0: declared %v, want 0", got)
	}
}

// TestProgressDeadline: the API server refuses a Deployment whose
// progressDeadlineSeconds (600 by default) is not above minReadySeconds,
// so with a minReadySeconds the controller declares one, ten minutes
// above, and owns it: another value is drift. Without, it is not the
// controller's.
func TestProgressDeadline(t *testing.T) {
	for _, tc := range []struct {
		minReady int32
		want     *int32
	}{
		{0, nil}, {1, ptr.To[int32](601)}, {599, ptr.To[int32](1199)}, {600, ptr.To[int32](1200)}, {3600, ptr.To[int32](4200)},
	} {
		foo := testFoo()
		foo.Spec.Deployment.MinReadySeconds = tc.minReady
		if got := DesiredDeployment(foo).Spec.ProgressDeadlineSeconds; !ptr.Equal(got, tc.want) {
			t.Errorf("minReadySeconds %d: progressDeadlineSeconds %v, want %v", tc.minReady, ptr.Deref(got, -1), ptr.Deref(tc.want, -1))
		}
		d := rolledOut(foo)
		d.Spec.ProgressDeadlineSeconds = ptr.To[int32](600) // the API server's default
		if tc.want != nil {
			d.Spec.ProgressDeadlineSeconds = tc.want
		}
		if drift := Drift(foo, NewDeploymentView(d)); len(drift) != 0 {
			t.Errorf("minReadySeconds %d: drift %v from the Deployment it declares", tc.minReady, drift)
		}
		d.Spec.ProgressDeadlineSeconds = ptr.To[int32](7)
		drift := Drift(foo, NewDeploymentView(d))
		if got := slices.Contains(drift, "progressDeadlineSeconds"); got != (tc.want != nil) {
			t.Errorf("minReadySeconds %d, another writer's progressDeadlineSeconds: drift %v", tc.minReady, drift)
		}
	}
}

func TestDesiredDeploymentContainerPort(t *testing.T) {
	foo := testFoo()
	foo.Spec.Deployment.ContainerPort = ptr.To[int32](8080)
	raw, err := json.Marshal(DesiredDeployment(foo))
	if err != nil {
		t.Fatal(err)
	}
	var d appsv1.Deployment
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	// The protocol is sent: it is half of the key server-side apply
	// merges container ports by.
	want := []corev1.ContainerPort{{Name: PortName, ContainerPort: 8080, Protocol: corev1.ProtocolTCP}}
	if p := d.Spec.Template.Spec.Containers[0].Ports; !reflect.DeepEqual(p, want) {
		t.Errorf("ports: %+v, want %+v", p, want)
	}
	if drift := Drift(foo, NewDeploymentView(&d)); len(drift) != 0 {
		t.Errorf("desired Deployment drifts from the Foo: %v", drift)
	}
}

// conditionCases are the situations every condition function is tested
// in; each test states what its condition says in each.
func conditionCases(foo *samplev1beta1.Foo) map[string]Observation {
	done := rolledOut(foo) // 2 of 2, available
	going := done.DeepCopy()
	going.DeletionTimestamp = &metav1.Time{}
	pde := withStatus(done, 2, 2, 1, false)
	pde.Status.Conditions[1] = appsv1.DeploymentCondition{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse, Reason: "ProgressDeadlineExceeded"}
	return map[string]Observation{
		"rolled out":                {Deployment: NewDeploymentView(done)},
		"no Deployment yet":         {},
		"create refused":            {ApplyError: errors.New("exceeded quota: pods=10")},
		"update refused":            {Deployment: NewDeploymentView(done), ApplyError: errors.New("denied by policy")},
		"conflict":                  {Deployment: NewDeploymentView(done), Conflict: true},
		"old Deployment going away": {Deployment: NewDeploymentView(going), Waiting: true},
		"generation not observed":   {Deployment: NewDeploymentView(unobserved(done))},
		"just created": {Deployment: func() *DeploymentView {
			d := unobserved(done)
			d.Status = appsv1.DeploymentStatus{}
			return NewDeploymentView(d)
		}()},
		"rolling out, available":                   {Deployment: NewDeploymentView(withStatus(done, 3, 1, 2, true))},
		"rolling out, old pods remain":             {Deployment: NewDeploymentView(withStatus(done, 3, 2, 2, true))},
		"scaling up, available":                    {Deployment: NewDeploymentView(withStatus(done, 1, 1, 1, true))},
		"scaling up, unavailable":                  {Deployment: NewDeploymentView(withStatus(done, 1, 1, 1, false))},
		"scaling down":                             {Deployment: NewDeploymentView(withStatus(done, 3, 3, 3, true))},
		"pods not available yet":                   {Deployment: NewDeploymentView(withStatus(done, 2, 2, 1, true))},
		"unavailable, nothing to do":               {Deployment: NewDeploymentView(withStatus(done, 2, 2, 2, false))},
		"progress deadline exceeded":               {Deployment: NewDeploymentView(pde)},
		"progress deadline of an older generation": {Deployment: NewDeploymentView(unobserved(pde))},
		"replicas overridden":                      {Deployment: NewDeploymentView(withStatus(done, 1, 1, 1, true)), Overridden: []string{"replicas"}},
		"image overridden":                         {Deployment: NewDeploymentView(done), Overridden: []string{"image"}},
	}
}

// runConditionCases checks compute in every case of conditionCases against
// want, which must name them all; a zero wantCond (none) means no
// condition: Reconciling and Stalled are absent when not True.
func runConditionCases(t *testing.T, foo *samplev1beta1.Foo, want map[string]wantCond,
	compute func(Observation) *metav1.Condition) {
	t.Helper()
	cases := conditionCases(foo)
	for name := range cases {
		if _, ok := want[name]; !ok {
			t.Errorf("case %q has no expectation", name)
		}
	}
	for name, w := range want {
		t.Run(name, func(t *testing.T) {
			obs, ok := cases[name]
			if !ok {
				t.Fatalf("no case %q", name)
			}
			c := compute(obs)
			switch {
			case w.reason == "" && c != nil:
				t.Errorf("got %s %s/%s %q, want none", c.Type, c.Status, c.Reason, c.Message)
			case w.reason == "":
			case c == nil:
				t.Errorf("got none, want %s/%s", w.status, w.reason)
			case c.Status != w.status || c.Reason != w.reason || c.Message == "" || c.ObservedGeneration != foo.Generation:
				t.Errorf("got %s/%s %q at generation %d, want %s/%s at %d", c.Status, c.Reason, c.Message, c.ObservedGeneration,
					w.status, w.reason, foo.Generation)
			}
		})
	}
}

type wantCond = struct {
	status metav1.ConditionStatus
	reason string
}

var (
	none = wantCond{}
	tru  = func(reason string) wantCond { return wantCond{metav1.ConditionTrue, reason} }
	fals = func(reason string) wantCond { return wantCond{metav1.ConditionFalse, reason} }
)

func TestStalledCondition(t *testing.T) {
	foo := testFoo()
	runConditionCases(t, foo, map[string]wantCond{
		"rolled out":                   none,
		"no Deployment yet":            none,
		"create refused":               tru(samplev1beta1.ReasonDeploymentApplyFailed),
		"update refused":               tru(samplev1beta1.ReasonDeploymentApplyFailed),
		"conflict":                     tru(samplev1beta1.ReasonDeploymentConflict),
		"old Deployment going away":    none,
		"generation not observed":      none,
		"just created":                 none,
		"rolling out, available":       none,
		"rolling out, old pods remain": none,
		"scaling up, available":        none,
		"scaling up, unavailable":      none,
		"scaling down":                 none,
		"pods not available yet":       none,
		"unavailable, nothing to do":   none,
		"progress deadline exceeded":   tru(samplev1beta1.ReasonProgressDeadlineExceeded),
		// The Deployment controller resets it when it rolls out the new spec.
		"progress deadline of an older generation": none,
		"replicas overridden":                      tru(samplev1beta1.ReasonReplicasOverridden),
		// It rolls out and serves as the API server keeps it.
		"image overridden": none,
	}, func(obs Observation) *metav1.Condition { return stalledCondition(foo, obs) })

	// A stalled Foo scaled: until the Deployment controller observes the
	// new generation, Stalled is kept as it was, not removed and begun
	// again (which would be a second Warning for one incident).
	pde := conditionCases(foo)["progress deadline exceeded"]
	stalled := foo.DeepCopy()
	stalled.Status = Status(stalled, pde, metav1.Now())
	was := meta.FindStatusCondition(stalled.Status.Conditions, samplev1beta1.ConditionStalled)
	if was == nil {
		t.Fatal("no Stalled condition for an exceeded progress deadline")
	}
	scaled := stalled.DeepCopy()
	scaled.Generation++
	scaled.Spec.Deployment.Replicas = ptr.To[int32](5)
	notYet := Observation{Deployment: pde.Deployment.DeepCopy()}
	notYet.Deployment.Generation = notYet.Deployment.Status.ObservedGeneration + 1
	if got := stalledCondition(scaled, notYet); got == nil || !reflect.DeepEqual(*got, *was) {
		t.Errorf("Stalled of a stalled Foo whose new generation is not observed yet:\n got %+v\nwant %+v (as it was)", got, was)
	}
	if got := reconcilingCondition(scaled, notYet); got != nil {
		t.Errorf("Reconciling beside the kept Stalled: %+v", got)
	}

	failed := stalledCondition(foo, Observation{ApplyError: errors.New("exceeded quota: pods=10")})
	if !strings.Contains(failed.Message, "exceeded quota") {
		t.Errorf("the refusal's words must be in the message: %q", failed.Message)
	}
}

func TestReconcilingCondition(t *testing.T) {
	foo := testFoo()
	runConditionCases(t, foo, map[string]wantCond{
		"rolled out":                   none,
		"no Deployment yet":            tru(samplev1beta1.ReasonCreating),
		"create refused":               none, // stalled instead: never both
		"update refused":               none,
		"conflict":                     none,
		"old Deployment going away":    tru(samplev1beta1.ReasonWaitingForOldDeployment),
		"generation not observed":      tru(samplev1beta1.ReasonDeploymentNotObserved),
		"just created":                 tru(samplev1beta1.ReasonDeploymentNotObserved),
		"rolling out, available":       tru(samplev1beta1.ReasonRollingOut),
		"rolling out, old pods remain": tru(samplev1beta1.ReasonRollingOut),
		"scaling up, available":        tru(samplev1beta1.ReasonScaling),
		"scaling up, unavailable":      tru(samplev1beta1.ReasonScaling),
		"scaling down":                 tru(samplev1beta1.ReasonScaling),
		"pods not available yet":       tru(samplev1beta1.ReasonWaitingForReplicas),
		// Every replica is there and available by count; only the
		// Deployment's condition lags: Ready says it, not Reconciling.
		"unavailable, nothing to do":               none,
		"progress deadline exceeded":               none,
		"progress deadline of an older generation": tru(samplev1beta1.ReasonDeploymentNotObserved),
		"replicas overridden":                      none,
		"image overridden":                         none,
	}, func(obs Observation) *metav1.Condition { return reconcilingCondition(foo, obs) })
}

func TestAvailableCondition(t *testing.T) {
	foo := testFoo()
	nodep := fals(samplev1beta1.ReasonNoDeployment)
	up, down := tru(samplev1beta1.ReasonMinimumReplicasAvailable), fals(samplev1beta1.ReasonMinimumReplicasUnavailable)
	runConditionCases(t, foo, map[string]wantCond{
		"rolled out":                               up,
		"no Deployment yet":                        nodep,
		"create refused":                           nodep,
		"update refused":                           up, // the Deployment we could not change still serves
		"conflict":                                 nodep,
		"old Deployment going away":                nodep,
		"generation not observed":                  up, // still serving meanwhile
		"just created":                             down,
		"rolling out, available":                   up,
		"rolling out, old pods remain":             up,
		"scaling up, available":                    up,
		"scaling up, unavailable":                  down,
		"scaling down":                             up,
		"pods not available yet":                   up,
		"unavailable, nothing to do":               down,
		"progress deadline exceeded":               down,
		"progress deadline of an older generation": down,
		"replicas overridden":                      up,
		"image overridden":                         up,
	}, func(obs Observation) *metav1.Condition { c := availableCondition(foo, obs); return &c })

	zero := testFoo()
	zero.Spec.Deployment.Replicas = ptr.To[int32](0)
	if c := readyCondition(zero, Observation{Deployment: NewDeploymentView(rolledOut(zero))}); c.Status != metav1.ConditionTrue {
		t.Errorf("a Foo scaled to zero with its Deployment at zero is Ready: got %s/%s", c.Status, c.Reason)
	}
}

func TestReadyCondition(t *testing.T) {
	foo := testFoo()
	ready := tru(samplev1beta1.ReasonDeploymentAvailable)
	runConditionCases(t, foo, map[string]wantCond{
		"rolled out":                   ready,
		"no Deployment yet":            fals(samplev1beta1.ReasonCreating),
		"create refused":               fals(samplev1beta1.ReasonDeploymentApplyFailed),
		"update refused":               fals(samplev1beta1.ReasonDeploymentApplyFailed),
		"conflict":                     fals(samplev1beta1.ReasonDeploymentConflict),
		"old Deployment going away":    fals(samplev1beta1.ReasonWaitingForOldDeployment),
		"generation not observed":      fals(samplev1beta1.ReasonDeploymentNotObserved), // not Ready before either: see below
		"just created":                 fals(samplev1beta1.ReasonDeploymentNotObserved),
		"rolling out, available":       fals(samplev1beta1.ReasonRollingOut),
		"rolling out, old pods remain": fals(samplev1beta1.ReasonRollingOut),
		// A scale that keeps the Deployment available does not touch Ready.
		"scaling up, available":                    ready,
		"scaling up, unavailable":                  fals(samplev1beta1.ReasonScaling),
		"scaling down":                             ready,
		"pods not available yet":                   ready,
		"unavailable, nothing to do":               fals(samplev1beta1.ReasonDeploymentUnavailable),
		"progress deadline exceeded":               fals(samplev1beta1.ReasonProgressDeadlineExceeded),
		"progress deadline of an older generation": fals(samplev1beta1.ReasonDeploymentNotObserved),
		"replicas overridden":                      fals(samplev1beta1.ReasonReplicasOverridden),
		"image overridden":                         ready,
	}, func(obs Observation) *metav1.Condition { c := readyCondition(foo, obs); return &c })
}

// TestReadyConditionKeptUntilObserved: while the Deployment controller has
// not observed the new generation, a scale and a new template look alike.
// A Ready that was True stays exactly as it was, generation included, so
// that it neither flips on a scale nor tells kubectl wait that the new
// generation is ready.
func TestReadyConditionKeptUntilObserved(t *testing.T) {
	t0 := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	foo := testFoo()
	foo.Status = Status(foo, Observation{Deployment: NewDeploymentView(rolledOut(foo))}, t0)
	was := *meta.FindStatusCondition(foo.Status.Conditions, samplev1beta1.ConditionReady)

	next := foo.DeepCopy()
	next.Generation++
	next.Spec.Deployment.Replicas = ptr.To[int32](3)
	dep := unobserved(rolledOut(foo))
	dep.Spec.Replicas = ptr.To[int32](3)
	if got := readyCondition(next, Observation{Deployment: NewDeploymentView(dep)}); !reflect.DeepEqual(got, was) {
		t.Errorf("Ready while the new generation is not observed:\n got %+v\nwant %+v (as it was)", got, was)
	}
	// A problem is not kept waiting.
	if got := readyCondition(next, Observation{Deployment: NewDeploymentView(dep), ApplyError: errors.New("denied")}); got.Status != metav1.ConditionFalse {
		t.Errorf("a refused apply while not observed: %+v", got)
	}
	// A Deployment the Deployment controller never saw is not the one
	// that was Ready (a new spec.deploymentName).
	fresh := unobserved(rolledOut(next))
	fresh.Status = appsv1.DeploymentStatus{}
	if got := readyCondition(next, Observation{Deployment: NewDeploymentView(fresh)}); got.Status != metav1.ConditionFalse {
		t.Errorf("a new Deployment: %+v", got)
	}
	// Observed: a scale that kept it available, Ready at the new generation.
	scaled := withStatus(rolledOut(next), 2, 2, 2, true)
	if got := readyCondition(next, Observation{Deployment: NewDeploymentView(scaled)}); got.Status != metav1.ConditionTrue || got.ObservedGeneration != next.Generation {
		t.Errorf("after the scale is observed: %+v", got)
	}
}

func TestStatus(t *testing.T) {
	t0 := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	t1 := metav1.NewTime(t0.Add(time.Minute))
	foo := testFoo()
	dep := rolledOut(foo)

	st := Status(foo, Observation{Deployment: NewDeploymentView(dep)}, t0)
	if st.ObservedGeneration != 3 || st.Replicas != 2 || st.AvailableReplicas != 2 || st.ReadyReplicas != 2 ||
		st.Selector != FooUIDLabel+"=uid-a" {
		t.Fatalf("status: %+v", st)
	}
	types := func(st samplev1beta1.FooStatus) []string {
		var out []string
		for _, c := range st.Conditions {
			out = append(out, c.Type+"="+string(c.Status))
		}
		return out
	}
	// Converged: Ready and Available, nothing abnormal.
	if got := types(st); !reflect.DeepEqual(got, []string{"Ready=True", "Available=True"}) {
		t.Fatalf("conditions of a converged Foo: %v", got)
	}
	ready := st.Conditions[0]
	if ready.Status != metav1.ConditionTrue || !ready.LastTransitionTime.Equal(&t0) || ready.ObservedGeneration != 3 {
		t.Fatalf("Ready: %+v", ready)
	}

	// Same observation later: identical status, so nothing to write.
	foo.Status = st
	again := Status(foo, Observation{Deployment: NewDeploymentView(dep)}, t1)
	if !StatusEqual(st, again) {
		t.Errorf("unchanged observation must give an equal status:\n%+v\n%+v", st, again)
	}

	// A scale that keeps the Deployment available: Reconciling appears,
	// Ready and Available keep their lastTransitionTime.
	scaling := withStatus(dep, 1, 1, 1, true)
	st2 := Status(foo, Observation{Deployment: NewDeploymentView(scaling)}, t1)
	if got := types(st2); !reflect.DeepEqual(got, []string{"Ready=True", "Available=True", "Reconciling=True"}) {
		t.Errorf("conditions while scaling: %v", got)
	}
	for _, c := range st2.Conditions[:2] {
		if !c.LastTransitionTime.Equal(&t0) {
			t.Errorf("%s moved on a scale that kept the Deployment available: %+v", c.Type, c)
		}
	}
	if c := meta.FindStatusCondition(st2.Conditions, samplev1beta1.ConditionReconciling); !c.LastTransitionTime.Equal(&t1) {
		t.Errorf("Reconciling began at %v, want %v", c.LastTransitionTime, t1)
	}

	// Availability lost: Ready flips and gets a new transition time.
	degraded := withStatus(dep, 2, 2, 1, false)
	st3 := Status(foo, Observation{Deployment: NewDeploymentView(degraded)}, t1)
	if StatusEqual(st, st3) || st3.AvailableReplicas != 1 || !meta.FindStatusCondition(st3.Conditions, samplev1beta1.ConditionReady).LastTransitionTime.Equal(&t1) {
		t.Errorf("after a flip: %+v", st3)
	}

	// A conflict: Stalled, and Reconciling goes. A reason change without a
	// status flip keeps the transition time.
	foo.Status = st3
	st4 := Status(foo, Observation{Deployment: NewDeploymentView(degraded), Conflict: true}, metav1.NewTime(t1.Add(time.Hour)))
	if got := types(st4); !reflect.DeepEqual(got, []string{"Ready=False", "Available=False", "Stalled=True"}) {
		t.Errorf("conditions of a conflict: %v", got)
	}
	if c := st4.Conditions[0]; c.Reason != samplev1beta1.ReasonDeploymentConflict || !c.LastTransitionTime.Equal(&t1) {
		t.Errorf("reason change without flip: %+v", c)
	}
	if st4.Replicas != 0 || st4.AvailableReplicas != 0 {
		t.Errorf("a foreign Deployment's counts are not ours to report: %+v", st4)
	}
	// Resolved: Stalled is removed, not set to False.
	foo.Status = st4
	if got := types(Status(foo, Observation{Deployment: NewDeploymentView(dep)}, t1)); !reflect.DeepEqual(got, []string{"Ready=True", "Available=True"}) {
		t.Errorf("conditions once the conflict is gone: %v", got)
	}

	// Conditions that others own are kept, and the input is not modified.
	foo.Status.Conditions = append(foo.Status.Conditions, metav1.Condition{Type: "Audited", Status: metav1.ConditionTrue, Reason: "X"})
	before := foo.DeepCopy()
	st5 := Status(foo, Observation{Deployment: NewDeploymentView(scaling)}, t1)
	if len(st5.Conditions) != 4 {
		t.Errorf("other conditions must be kept: %v", types(st5))
	}
	if !reflect.DeepEqual(before, foo) {
		t.Error("Status modified its input")
	}
	apply := StatusApply(foo, st5)
	var applied []string
	for _, c := range apply.Status.Conditions {
		applied = append(applied, *c.Type)
	}
	if !reflect.DeepEqual(applied, []string{"Ready", "Available", "Reconciling"}) {
		t.Errorf("status apply must carry only the conditions we own: %v", applied)
	}
	if apply.ResourceVersion != nil {
		t.Errorf("status apply must not be preconditioned on the Foo's resourceVersion (it loses to every edit): %v", *apply.ResourceVersion)
	}

	// Waiting for an old Deployment: no counts of it are reported.
	waiting := Status(foo, Observation{Deployment: NewDeploymentView(dep), Waiting: true}, t1)
	if waiting.Replicas != 0 || meta.FindStatusCondition(waiting.Conditions, samplev1beta1.ConditionReconciling).Reason != samplev1beta1.ReasonWaitingForOldDeployment {
		t.Errorf("waiting: %+v", waiting)
	}
}

// TestStatusEqualIgnoresConditionOrder: the API server may hold our
// conditions in another order than Status appends them; that is not a
// change to write (a write per sync would be a hot loop).
func TestStatusEqualIgnoresConditionOrder(t *testing.T) {
	foo := testFoo()
	st := Status(foo, Observation{Deployment: NewDeploymentView(withStatus(rolledOut(foo), 1, 1, 1, true))}, metav1.Now())
	reordered := st.DeepCopy()
	slices.Reverse(reordered.Conditions)
	if !StatusEqual(st, *reordered) {
		t.Error("the same conditions in another order must be equal")
	}
	changed := reordered.DeepCopy()
	changed.Conditions[0].Message = "other"
	if StatusEqual(st, *changed) {
		t.Error("a changed condition must not be equal")
	}
	fewer := st.DeepCopy()
	fewer.Conditions = fewer.Conditions[:2]
	if StatusEqual(st, *fewer) || StatusEqual(*fewer, st) {
		t.Error("a missing condition must not be equal")
	}
}

func TestStatusApplyCarriesZeroes(t *testing.T) {
	foo := testFoo()
	raw, err := json.Marshal(StatusApply(foo, samplev1beta1.FooStatus{ObservedGeneration: 3}))
	if err != nil {
		t.Fatal(err)
	}
	// A count of zero must be sent, not omitted: omitting a field we own
	// would make server-side apply delete it instead of setting it to 0.
	var m struct {
		Status map[string]any `json:"status"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"replicas", "availableReplicas", "readyReplicas"} {
		if v, ok := m.Status[f]; !ok || v != float64(0) {
			t.Errorf("status.%s: got %v in %s", f, v, raw)
		}
	}
}

func TestFinalizerPatch(t *testing.T) {
	tests := []struct {
		name     string
		have     []string
		want     bool
		wantOK   bool
		wantList []string
	}{
		{"add to none", nil, true, true, []string{samplev1beta1.OrphanFinalizer}},
		{"add beside others", []string{"x/y"}, true, true, []string{"x/y", samplev1beta1.OrphanFinalizer}},
		{"already there", []string{samplev1beta1.OrphanFinalizer}, true, false, nil},
		{"remove, keep others", []string{"x/y", samplev1beta1.OrphanFinalizer}, false, true, []string{"x/y"}},
		{"remove the only one", []string{samplev1beta1.OrphanFinalizer}, false, true, []string{}},
		{"nothing to remove", []string{"x/y"}, false, false, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			foo := testFoo()
			foo.Finalizers = tc.have
			patch, ok, err := FinalizerPatch(foo, tc.want)
			if err != nil || ok != tc.wantOK {
				t.Fatalf("ok %v err %v", ok, err)
			}
			if !ok {
				return
			}
			var p struct {
				Metadata struct {
					ResourceVersion string    `json:"resourceVersion"`
					Finalizers      *[]string `json:"finalizers"`
				} `json:"metadata"`
			}
			if err := json.Unmarshal(patch, &p); err != nil {
				t.Fatal(err)
			}
			if p.Metadata.ResourceVersion != "7" {
				t.Errorf("the patch must carry the resourceVersion it was computed from: %s", patch)
			}
			if p.Metadata.Finalizers == nil || !reflect.DeepEqual(*p.Metadata.Finalizers, tc.wantList) {
				t.Errorf("finalizers: got %s, want %q", patch, tc.wantList)
			}
		})
	}
}

func TestRemoveControllerRefPatch(t *testing.T) {
	gv := "samplecontroller.example.com/v1alpha1"
	other := metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "c", UID: "cm-uid"}
	ours := controllerRef(gv, "Foo", "uid-a")
	nonController := ours
	nonController.Controller = nil

	tests := []struct {
		name   string
		refs   []metav1.OwnerReference
		wantOK bool
		want   []metav1.OwnerReference
	}{
		{"only ours", []metav1.OwnerReference{ours}, true, []metav1.OwnerReference{}},
		{"ours second", []metav1.OwnerReference{other, ours}, true, []metav1.OwnerReference{other}},
		{"not a controller reference", []metav1.OwnerReference{nonController}, false, nil},
		{"none", nil, false, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", OwnerReferences: tc.refs}}
			patch, ok, err := RemoveControllerRefPatch(d, "uid-a")
			if err != nil || ok != tc.wantOK {
				t.Fatalf("ok %v err %v", ok, err)
			}
			if !ok {
				return
			}
			got := applyJSONPatch(t, d, patch)
			if len(got.OwnerReferences) != len(tc.want) || (len(tc.want) > 0 && !reflect.DeepEqual(got.OwnerReferences, tc.want)) {
				t.Errorf("after patch: %+v, want %+v", got.OwnerReferences, tc.want)
			}

			// If the list changed meanwhile, the test op makes the patch fail
			// rather than remove another reference.
			moved := d.DeepCopy()
			moved.OwnerReferences = append([]metav1.OwnerReference{other}, moved.OwnerReferences...)
			raw, _ := json.Marshal(moved)
			p, _ := jsonpatch.DecodePatch(patch)
			if _, err := p.Apply(raw); err == nil {
				t.Error("patch applied to a changed owner list")
			}
		})
	}
}

func applyJSONPatch(t *testing.T, d *appsv1.Deployment, patch []byte) *appsv1.Deployment {
	t.Helper()
	raw, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	p, err := jsonpatch.DecodePatch(patch)
	if err != nil {
		t.Fatal(err)
	}
	out, err := p.Apply(raw)
	if err != nil {
		t.Fatalf("applying %s: %v", patch, err)
	}
	var got appsv1.Deployment
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	return &got
}

func TestWantsOrphanFinalizer(t *testing.T) {
	foo := testFoo()
	if WantsOrphanFinalizer(foo) {
		t.Error("Delete policy needs no finalizer")
	}
	foo.Spec.DeletionPolicy = samplev1beta1.DeletionPolicyOrphan
	if !WantsOrphanFinalizer(foo) {
		t.Error("Orphan policy needs the finalizer")
	}
}

func TestFirstProgress(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	foo := testFoo()
	first := func(obs Observation) samplev1beta1.FooStatus { return Status(foo, obs, now) }
	none := samplev1beta1.FooStatus{}
	progressing := first(Observation{})
	halfway := withStatus(rolledOut(foo), 2, 2, 1, false)
	tests := []struct {
		name       string
		have, want samplev1beta1.FooStatus
		first      bool
	}{
		{"no Deployment yet", none, progressing, true},
		{"a Deployment on its way", none, first(Observation{Deployment: NewDeploymentView(halfway)}), true},
		{"already available", none, first(Observation{Deployment: NewDeploymentView(rolledOut(foo))}), false},
		{"a conflict", none, first(Observation{Deployment: NewDeploymentView(rolledOut(foo)), Conflict: true}), false},
		{"a refused Deployment", none, first(Observation{ApplyError: errors.New("quota exceeded")}), false},
		{"not the first status", progressing, first(Observation{Deployment: NewDeploymentView(halfway)}), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := FirstProgress(tt.have, tt.want); got != tt.first {
				t.Errorf("FirstProgress = %v, want %v", got, tt.first)
			}
		})
	}
}

func TestProgressOnly(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	foo := testFoo()
	rollingOut := func(updated, available int32) *appsv1.Deployment {
		d := rolledOut(foo)
		d.Status.UpdatedReplicas, d.Status.AvailableReplicas, d.Status.ReadyReplicas = updated, available, available
		return d
	}
	// statusAfter is the status the controller computes from dep for a
	// Foo whose current status is have.
	statusAfter := func(have samplev1beta1.FooStatus, dep *appsv1.Deployment) samplev1beta1.FooStatus {
		f := foo.DeepCopy()
		f.Status = have
		return Status(f, Observation{Deployment: NewDeploymentView(dep)}, now)
	}
	none := samplev1beta1.FooStatus{}
	progressing := statusAfter(none, rollingOut(0, 0))
	halfway := statusAfter(progressing, rollingOut(1, 0))
	available := statusAfter(halfway, rollingOut(2, 2))
	nextGen := foo.DeepCopy()
	nextGen.Generation++
	nextGen.Status = halfway
	// foo wants 2; its Deployment has 3 (a scale down), 2 available.
	scaling := statusAfter(available, withStatus(rolledOut(foo), 3, 3, 2, true))
	refused := func() samplev1beta1.FooStatus {
		f := foo.DeepCopy()
		f.Status = halfway
		return Status(f, Observation{ApplyError: errors.New("quota exceeded")}, now)
	}()
	// A scale to 3 whose generation the Deployment controller has not
	// observed yet: Ready is kept at the generation it was computed at;
	// then observed.
	scaled := foo.DeepCopy()
	scaled.Generation++
	scaled.Spec.Deployment.Replicas = ptr.To[int32](3)
	scaled.Status = available
	notObserved := Status(scaled, Observation{Deployment: NewDeploymentView(unobserved(rolledOut(foo)))}, now)
	scaled.Status = notObserved
	observedScale := Status(scaled, Observation{Deployment: NewDeploymentView(withStatus(rolledOut(scaled), 2, 2, 2, true))}, now)

	tests := []struct {
		name       string
		have, want samplev1beta1.FooStatus
		progress   bool
	}{
		{"first status", none, progressing, false},
		{"counts and message of a rollout", progressing, halfway, true},
		{"Ready flips", halfway, available, false},
		{"a new generation", halfway, Status(nextGen, Observation{Deployment: NewDeploymentView(rollingOut(1, 0))}, now), false},
		{"a new reason", halfway, func() samplev1beta1.FooStatus {
			f := foo.DeepCopy()
			f.Status = halfway
			return Status(f, Observation{ApplyError: errors.New("quota exceeded")}, now)
		}(), false},
		{"a conflict", halfway, func() samplev1beta1.FooStatus {
			f := foo.DeepCopy()
			f.Status = halfway
			return Status(f, Observation{Deployment: NewDeploymentView(rolledOut(foo)), Conflict: true}, now)
		}(), false},
		// Once Reconciling is there, how far the scale has got is progress;
		// its beginning and its end are not.
		{"a scale begins on an available Foo", available, scaling, false},
		{"counts of a scale", scaling, statusAfter(scaling, withStatus(rolledOut(foo), 3, 3, 3, true)), true},
		{"a scale ends", scaling, statusAfter(scaling, rolledOut(foo)), false},
		{"Ready catches up with a scale's generation", notObserved, observedScale, true},
		{"Available flips", scaling, statusAfter(scaling, withStatus(rolledOut(foo), 3, 3, 1, false)), false},
		{"a new problem's message", refused, func() samplev1beta1.FooStatus {
			f := foo.DeepCopy()
			f.Status = refused
			return Status(f, Observation{ApplyError: errors.New("quota exceeded again")}, now)
		}(), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if StatusEqual(tc.have, tc.want) {
				t.Fatalf("the case must be a change:\n%+v", tc.want)
			}
			if got := ProgressOnly(tc.have, tc.want); got != tc.progress {
				t.Errorf("ProgressOnly = %v, want %v\nhave %+v\nwant %+v", got, tc.progress, tc.have, tc.want)
			}
		})
	}
}

func TestFailedTest(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want bool
	}{
		// What the API server answers to a JSON patch whose test fails.
		{"failed test", apierrors.NewGenericServerResponse(http.StatusUnprocessableEntity, "", schema.GroupResource{}, "",
			"testing value /spec/template/spec/containers/0/ports/0/containerPort failed: test failed", 0, false), true},
		{"wrapped", fmt.Errorf("patching: %w", apierrors.NewGenericServerResponse(http.StatusUnprocessableEntity, "", schema.GroupResource{}, "", "", 0, false)), true},
		{"refused by validation or a policy", apierrors.NewInvalid(schema.GroupKind{Group: "apps", Kind: "Deployment"}, "web", field.ErrorList{
			field.Forbidden(field.NewPath("spec"), "denied")}), false},
		{"conflict", apierrors.NewConflict(schema.GroupResource{Group: "apps", Resource: "deployments"}, "web", errors.New("stale")), false},
		{"not an API error", errors.New("connection refused"), false},
		{"nil", nil, false},
	}
	for _, tc := range tests {
		if got := FailedTest(tc.err); got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestRemovingStraysConverges: removing strays is worth a write after an
// accepted apply only when it leaves nothing to change; not when what we
// declare was rewritten (by a mutating admission policy, say).
func TestRemovingStraysConverges(t *testing.T) {
	tests := []struct {
		name  string
		want  *int32
		ports []corev1.ContainerPort
		ok    bool
	}{
		{"unset, someone else's http", nil, []corev1.ContainerPort{metrics, httpPort(8080)}, true},
		{"ours rewritten: removing it leaves ours missing", ptr.To[int32](80), []corev1.ContainerPort{httpPort(8080)}, false},
		{"nothing stray", ptr.To[int32](80), []corev1.ContainerPort{httpPort(80)}, false},
	}
	for _, tc := range tests {
		foo := testFoo()
		foo.Spec.Deployment.ContainerPort = tc.want
		d := rolledOut(foo)
		d.Spec.Template.Spec.Containers[0].Ports = tc.ports
		before := d.DeepCopy()
		if got := removingStraysConverges(foo, NewDeploymentView(d)); got != tc.ok {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.ok)
		}
		if !reflect.DeepEqual(d, before) {
			t.Errorf("%s: modified its input", tc.name)
		}
	}
}

// TestOwnedValues: the same drift, the same value; status and other
// owners' fields do not change it, ours do.
func TestOwnedValues(t *testing.T) {
	foo := testFoo()
	base := OwnedValues(foo, NewDeploymentView(rolledOut(foo)))
	same := []func(*appsv1.Deployment){
		func(d *appsv1.Deployment) { d.Status.ObservedGeneration = 9; d.ResourceVersion = "99" },
		func(d *appsv1.Deployment) { d.Labels["extra"] = "1" },
		func(d *appsv1.Deployment) { d.Spec.Strategy.Type = appsv1.RecreateDeploymentStrategyType },
	}
	for i, change := range same {
		d := rolledOut(foo)
		change(d)
		if got := OwnedValues(foo, NewDeploymentView(d)); got != base {
			t.Errorf("same %d: changed to %s", i, got)
		}
	}
	differ := []func(*appsv1.Deployment){
		func(d *appsv1.Deployment) { d.Spec.Replicas = ptr.To[int32](7) },
		func(d *appsv1.Deployment) { d.Spec.RevisionHistoryLimit = ptr.To[int32](3) }, // ours, set or not: the default
		func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Image = "x:1" },
		func(d *appsv1.Deployment) {
			d.Spec.Template.Spec.Containers[0].Ports = []corev1.ContainerPort{httpPort(1)}
		},
		func(d *appsv1.Deployment) { d.Labels[ManagedByLabel] = "someone" },
		func(d *appsv1.Deployment) { delete(d.Spec.Template.Labels, ManagedByLabel) },
		func(d *appsv1.Deployment) { d.OwnerReferences = nil },
	}
	for i, change := range differ {
		d := rolledOut(foo)
		change(d)
		if got := OwnedValues(foo, NewDeploymentView(d)); got == base {
			t.Errorf("differ %d: unchanged", i)
		}
	}
}

// TestDriftRevisionHistoryLimit: the field is the controller's whether
// the Foo sets it or not: unset is the Deployment's default (10), so
// another writer's value is drift; 0 is a value.
func TestDriftRevisionHistoryLimit(t *testing.T) {
	for _, tc := range []struct {
		foo, dep *int32
		want     []string
	}{
		{nil, ptr.To[int32](10), nil},
		{nil, ptr.To[int32](3), []string{"revisionHistoryLimit"}},
		{nil, nil, []string{"revisionHistoryLimit"}},
		{ptr.To[int32](5), ptr.To[int32](5), nil},
		{ptr.To[int32](5), ptr.To[int32](10), []string{"revisionHistoryLimit"}},
		{ptr.To[int32](0), ptr.To[int32](0), nil},
		{ptr.To[int32](0), ptr.To[int32](10), []string{"revisionHistoryLimit"}},
		{ptr.To[int32](0), nil, []string{"revisionHistoryLimit"}},
	} {
		foo := testFoo()
		foo.Spec.Deployment.RevisionHistoryLimit = tc.foo
		d := rolledOut(foo)
		d.Spec.RevisionHistoryLimit = tc.dep
		if got := Drift(foo, NewDeploymentView(d)); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Foo %v, Deployment %v: drift %q, want %q", ptr.Deref(tc.foo, -1), ptr.Deref(tc.dep, -1), got, tc.want)
		}
	}
}
