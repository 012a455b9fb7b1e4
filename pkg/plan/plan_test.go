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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	samplev1alpha1 "example.com/foo-controller/pkg/apis/samplecontroller/v1alpha1"
)

func testFoo() *samplev1alpha1.Foo {
	return &samplev1alpha1.Foo{
		ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns", UID: "uid-a", Generation: 3, ResourceVersion: "7"},
		Spec: samplev1alpha1.FooSpec{
			DeploymentName: "web", Replicas: ptr.To[int32](2), Image: "nginx:1.27",
			DeletionPolicy: samplev1alpha1.DeletionPolicyDelete,
		},
	}
}

func controllerRef(apiVersion, kind string, uid types.UID) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: "a", UID: uid, Controller: ptr.To(true)}
}

// rolledOut is the Deployment DesiredDeployment describes, as the API server
// would return it after a complete rollout.
func rolledOut(foo *samplev1alpha1.Foo) *appsv1.Deployment {
	r := Replicas(foo)
	container := corev1.Container{Name: ContainerName, Image: Image(foo)}
	if foo.Spec.ContainerPort != nil {
		container.Ports = []corev1.ContainerPort{{Name: PortName, ContainerPort: *foo.Spec.ContainerPort, Protocol: corev1.ProtocolTCP}}
	}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{
			Name: foo.Spec.DeploymentName, Namespace: foo.Namespace, Generation: 1,
			Labels:          Labels(foo),
			OwnerReferences: []metav1.OwnerReference{controllerRef("samplecontroller.example.com/v1alpha1", "Foo", foo.UID)},
		},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(r),
			Selector: &metav1.LabelSelector{MatchLabels: SelectorLabels(foo)},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: Labels(foo)},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{container}},
			},
		},
		Status: appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: r, UpdatedReplicas: r, ReadyReplicas: r, AvailableReplicas: r},
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
			if got := Classify(d, foo); got != tc.want {
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
		{"owner", func(d *appsv1.Deployment) { d.OwnerReferences = nil }, []string{"owner"}},
		{"several", func(d *appsv1.Deployment) {
			d.Spec.Replicas = ptr.To[int32](0)
			d.Spec.Template.Spec.Containers[0].Image = "x:1"
		}, []string{"replicas", "image"}},
		{"extra labels, containers and defaults are not ours", func(d *appsv1.Deployment) {
			d.Labels["extra"] = "1"
			d.Spec.Template.Labels["extra"] = "1"
			d.Spec.Template.Spec.Containers = append(d.Spec.Template.Spec.Containers, corev1.Container{Name: "side", Image: "b:1"})
			d.Spec.Template.Spec.Containers[0].TerminationMessagePath = "/dev/termination-log"
			d.Spec.RevisionHistoryLimit = ptr.To[int32](10)
		}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := rolledOut(foo)
			tc.mutate(d)
			if got := Drift(foo, d); !reflect.DeepEqual(got, tc.want) {
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
			foo.Spec.ContainerPort = tc.want
			d := rolledOut(foo)
			d.Spec.Template.Spec.Containers[0].Ports = tc.ports
			got := Drift(foo, d)
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
			foo.Spec.ContainerPort = tc.want
			d := rolledOut(foo)
			ours := d.Spec.Template.Spec.Containers[0]
			ours.Ports = tc.ports
			d.Spec.Template.Spec.Containers = []corev1.Container{ours}
			if tc.containers != nil {
				d.Spec.Template.Spec.Containers = tc.containers(ours)
			}
			patch, ok, err := StrayEntriesPatch(foo, d)
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
					if drifts := slices.Contains(Drift(foo, got), "containerPort"); drifts != missing {
						t.Errorf("after the patch: drift %v, want %v", Drift(foo, got), missing)
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
// StrayEntriesPatch, and our port is added in the same patch when it is
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
			foo.Spec.ContainerPort = tc.want
			d := rolledOut(foo)
			d.Spec.Template.Spec.Containers[0].Ports = tc.ports
			patch, ok, err := ReplaceStrayEntriesPatch(foo, d)
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
			if drift := Drift(foo, got); slices.Contains(drift, "containerPort") {
				t.Errorf("after the patch: drift %v", drift)
			}
		})
	}
}

// TestDesiredDeploymentWithoutPorts: everything DesiredDeployment declares
// but the ports.
func TestDesiredDeploymentWithoutPorts(t *testing.T) {
	foo := testFoo()
	foo.Spec.ContainerPort = ptr.To[int32](8080)
	full, without := DesiredDeployment(foo), DesiredDeploymentWithoutPorts(foo)
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
	foo.Spec.Replicas = nil
	foo.Spec.Image = ""
	if Replicas(foo) != 1 || Image(foo) != "nginx:1.27" {
		t.Errorf("defaults: replicas %d image %q", Replicas(foo), Image(foo))
	}
	foo.Spec.Replicas = ptr.To[int32](0)
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
	if drift := Drift(foo, &d); len(drift) != 0 {
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
	// Only owned fields: nothing the API server defaults.
	if d.Spec.Strategy.Type != "" || d.Spec.RevisionHistoryLimit != nil || d.Spec.Template.Spec.RestartPolicy != "" {
		t.Errorf("declares fields it does not own: %s", raw)
	}
}

func TestDesiredDeploymentContainerPort(t *testing.T) {
	foo := testFoo()
	foo.Spec.ContainerPort = ptr.To[int32](8080)
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
	if drift := Drift(foo, &d); len(drift) != 0 {
		t.Errorf("desired Deployment drifts from the Foo: %v", drift)
	}
}

func TestReadyCondition(t *testing.T) {
	foo := testFoo() // wants 2
	type want struct {
		status metav1.ConditionStatus
		reason string
	}
	progressing := want{metav1.ConditionFalse, samplev1alpha1.ReasonProgressing}
	tests := []struct {
		name     string
		dep      func() *appsv1.Deployment
		conflict bool
		want     want
	}{
		{"conflict", func() *appsv1.Deployment { return rolledOut(foo) }, true,
			want{metav1.ConditionFalse, samplev1alpha1.ReasonDeploymentConflict}},
		{"no Deployment", func() *appsv1.Deployment { return nil }, false, progressing},
		{"old Deployment going away", func() *appsv1.Deployment {
			d := rolledOut(foo)
			d.DeletionTimestamp = &metav1.Time{}
			return d
		}, false, progressing},
		{"generation not observed", func() *appsv1.Deployment {
			d := rolledOut(foo)
			d.Generation = 2
			return d
		}, false, progressing},
		{"progress deadline exceeded", func() *appsv1.Deployment {
			d := rolledOut(foo)
			d.Status.AvailableReplicas = 1
			d.Status.Conditions = []appsv1.DeploymentCondition{{
				Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse, Reason: "ProgressDeadlineExceeded",
			}}
			return d
		}, false, want{metav1.ConditionFalse, samplev1alpha1.ReasonProgressDeadlineExceeded}},
		{"not all updated", func() *appsv1.Deployment {
			d := rolledOut(foo)
			d.Status.UpdatedReplicas = 1
			return d
		}, false, progressing},
		{"old pods still running", func() *appsv1.Deployment {
			d := rolledOut(foo)
			d.Status.Replicas = 3
			return d
		}, false, progressing},
		{"not all available", func() *appsv1.Deployment {
			d := rolledOut(foo)
			d.Status.AvailableReplicas = 1
			return d
		}, false, progressing},
		{"all available", func() *appsv1.Deployment { return rolledOut(foo) }, false,
			want{metav1.ConditionTrue, samplev1alpha1.ReasonDeploymentAvailable}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dep := tc.dep()
			waiting := dep != nil && dep.DeletionTimestamp != nil
			c := ReadyCondition(foo, Observation{Deployment: dep, Conflict: tc.conflict, Waiting: waiting})
			if c.Type != samplev1alpha1.ConditionReady || c.Status != tc.want.status || c.Reason != tc.want.reason || c.Message == "" {
				t.Errorf("got %s %s/%s %q, want %s/%s", c.Type, c.Status, c.Reason, c.Message, tc.want.status, tc.want.reason)
			}
		})
	}

	failed := ReadyCondition(foo, Observation{ApplyError: errors.New("exceeded quota: pods=10")})
	if failed.Status != metav1.ConditionFalse || failed.Reason != samplev1alpha1.ReasonDeploymentApplyFailed ||
		!strings.Contains(failed.Message, "exceeded quota") {
		t.Errorf("apply failure: %+v", failed)
	}

	zero := testFoo()
	zero.Spec.Replicas = ptr.To[int32](0)
	if c := ReadyCondition(zero, Observation{Deployment: rolledOut(zero)}); c.Status != metav1.ConditionTrue {
		t.Errorf("a Foo scaled to zero with its Deployment at zero is Ready: got %s/%s", c.Status, c.Reason)
	}
}

func TestStatus(t *testing.T) {
	t0 := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	t1 := metav1.NewTime(t0.Add(time.Minute))
	foo := testFoo()
	dep := rolledOut(foo)

	st := Status(foo, Observation{Deployment: dep}, t0)
	if st.ObservedGeneration != 3 || st.Replicas != 2 || st.AvailableReplicas != 2 || st.ReadyReplicas != 2 ||
		st.Selector != FooUIDLabel+"=uid-a" {
		t.Fatalf("status: %+v", st)
	}
	ready := st.Conditions[0]
	if ready.Status != metav1.ConditionTrue || !ready.LastTransitionTime.Equal(&t0) || ready.ObservedGeneration != 3 {
		t.Fatalf("Ready: %+v", ready)
	}

	// Same observation later: identical status, so nothing to write.
	foo.Status = st
	again := Status(foo, Observation{Deployment: dep}, t1)
	if !StatusEqual(st, again) {
		t.Errorf("unchanged observation must give an equal status:\n%+v\n%+v", st, again)
	}

	// Availability drops: the condition flips and gets a new transition time.
	degraded := dep.DeepCopy()
	degraded.Status.AvailableReplicas = 1
	st2 := Status(foo, Observation{Deployment: degraded}, t1)
	if StatusEqual(st, st2) || st2.AvailableReplicas != 1 || !st2.Conditions[0].LastTransitionTime.Equal(&t1) {
		t.Errorf("after a flip: %+v", st2)
	}

	// A reason change without a status flip keeps the transition time.
	foo.Status = st2
	st3 := Status(foo, Observation{Deployment: degraded, Conflict: true}, metav1.NewTime(t1.Add(time.Hour)))
	if c := st3.Conditions[0]; c.Reason != samplev1alpha1.ReasonDeploymentConflict || !c.LastTransitionTime.Equal(&t1) {
		t.Errorf("reason change without flip: %+v", c)
	}
	if st3.Replicas != 0 || st3.AvailableReplicas != 0 {
		t.Errorf("a foreign Deployment's counts are not ours to report: %+v", st3)
	}

	// Conditions that others own are kept, and the input is not modified.
	foo.Status.Conditions = append(foo.Status.Conditions, metav1.Condition{Type: "Audited", Status: metav1.ConditionTrue, Reason: "X"})
	before := foo.DeepCopy()
	st4 := Status(foo, Observation{Deployment: dep}, t1)
	if len(st4.Conditions) != 2 {
		t.Errorf("other conditions must be kept: %+v", st4.Conditions)
	}
	if !reflect.DeepEqual(before, foo) {
		t.Error("Status modified its input")
	}
	apply := StatusApply(foo, st4)
	if len(apply.Status.Conditions) != 1 || *apply.Status.Conditions[0].Type != samplev1alpha1.ConditionReady {
		t.Errorf("status apply must carry only the conditions we own: %+v", apply.Status.Conditions)
	}
	if apply.ResourceVersion == nil || *apply.ResourceVersion != foo.ResourceVersion {
		t.Errorf("status apply must be preconditioned on the Foo's resourceVersion: %v", apply.ResourceVersion)
	}

	// Waiting for an old Deployment: no counts of it are reported.
	waiting := Status(foo, Observation{Deployment: dep, Waiting: true}, t1)
	if waiting.Replicas != 0 || waiting.Conditions[0].Reason != samplev1alpha1.ReasonProgressing {
		t.Errorf("waiting: %+v", waiting)
	}
}

func TestStatusApplyCarriesZeroes(t *testing.T) {
	foo := testFoo()
	raw, err := json.Marshal(StatusApply(foo, samplev1alpha1.FooStatus{ObservedGeneration: 3}))
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
		{"add to none", nil, true, true, []string{samplev1alpha1.OrphanFinalizer}},
		{"add beside others", []string{"x/y"}, true, true, []string{"x/y", samplev1alpha1.OrphanFinalizer}},
		{"already there", []string{samplev1alpha1.OrphanFinalizer}, true, false, nil},
		{"remove, keep others", []string{"x/y", samplev1alpha1.OrphanFinalizer}, false, true, []string{"x/y"}},
		{"remove the only one", []string{samplev1alpha1.OrphanFinalizer}, false, true, []string{}},
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
	foo.Spec.DeletionPolicy = samplev1alpha1.DeletionPolicyOrphan
	if !WantsOrphanFinalizer(foo) {
		t.Error("Orphan policy needs the finalizer")
	}
}

func TestFirstProgress(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	foo := testFoo()
	first := func(obs Observation) samplev1alpha1.FooStatus { return Status(foo, obs, now) }
	none := samplev1alpha1.FooStatus{}
	progressing := first(Observation{})
	halfway := func() *appsv1.Deployment {
		d := rolledOut(foo)
		d.Status.AvailableReplicas, d.Status.ReadyReplicas = 1, 1
		return d
	}()
	tests := []struct {
		name       string
		have, want samplev1alpha1.FooStatus
		first      bool
	}{
		{"no Deployment yet", none, progressing, true},
		{"a Deployment on its way", none, first(Observation{Deployment: halfway}), true},
		{"already available", none, first(Observation{Deployment: rolledOut(foo)}), false},
		{"a conflict", none, first(Observation{Deployment: rolledOut(foo), Conflict: true}), false},
		{"a refused Deployment", none, first(Observation{ApplyError: errors.New("quota exceeded")}), false},
		{"not the first status", progressing, first(Observation{Deployment: halfway}), false},
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
	statusAfter := func(have samplev1alpha1.FooStatus, dep *appsv1.Deployment) samplev1alpha1.FooStatus {
		f := foo.DeepCopy()
		f.Status = have
		return Status(f, Observation{Deployment: dep}, now)
	}
	none := samplev1alpha1.FooStatus{}
	progressing := statusAfter(none, rollingOut(0, 0))
	halfway := statusAfter(progressing, rollingOut(1, 0))
	available := statusAfter(halfway, rollingOut(2, 2))
	nextGen := foo.DeepCopy()
	nextGen.Generation++
	nextGen.Status = halfway

	tests := []struct {
		name       string
		have, want samplev1alpha1.FooStatus
		progress   bool
	}{
		{"first status", none, progressing, false},
		{"counts and message of a rollout", progressing, halfway, true},
		{"Ready flips", halfway, available, false},
		{"a new generation", halfway, Status(nextGen, Observation{Deployment: rollingOut(1, 0)}, now), false},
		{"a new reason", halfway, func() samplev1alpha1.FooStatus {
			f := foo.DeepCopy()
			f.Status = halfway
			return Status(f, Observation{ApplyError: errors.New("quota exceeded")}, now)
		}(), false},
		{"a conflict", halfway, func() samplev1alpha1.FooStatus {
			f := foo.DeepCopy()
			f.Status = halfway
			return Status(f, Observation{Deployment: rolledOut(foo), Conflict: true}, now)
		}(), false},
		{"counts of an available Foo", available, statusAfter(available, func() *appsv1.Deployment {
			d := rolledOut(foo)
			d.Status.Replicas, d.Status.UpdatedReplicas, d.Status.ReadyReplicas = 3, 3, 3 // one more, not yet available
			return d
		}()), true},
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
		foo.Spec.ContainerPort = tc.want
		d := rolledOut(foo)
		d.Spec.Template.Spec.Containers[0].Ports = tc.ports
		before := d.DeepCopy()
		if got := RemovingStraysConverges(foo, d); got != tc.ok {
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
	base := OwnedValues(foo, rolledOut(foo))
	same := []func(*appsv1.Deployment){
		func(d *appsv1.Deployment) { d.Status.ObservedGeneration = 9; d.ResourceVersion = "99" },
		func(d *appsv1.Deployment) { d.Labels["extra"] = "1" },
		func(d *appsv1.Deployment) { d.Spec.RevisionHistoryLimit = ptr.To[int32](3) },
	}
	for i, change := range same {
		d := rolledOut(foo)
		change(d)
		if got := OwnedValues(foo, d); got != base {
			t.Errorf("same %d: changed to %s", i, got)
		}
	}
	differ := []func(*appsv1.Deployment){
		func(d *appsv1.Deployment) { d.Spec.Replicas = ptr.To[int32](7) },
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
		if got := OwnedValues(foo, d); got == base {
			t.Errorf("differ %d: unchanged", i)
		}
	}
}
