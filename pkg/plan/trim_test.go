package plan

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"
	"unsafe"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"example.com/foo-controller/internal/proptest"
	samplev1beta1 "example.com/foo-controller/pkg/apis/samplecontroller/v1beta1"
)

// edits are what other writers (people, admission policies, the Deployment
// controller) do to a Deployment, including to fields this package does not
// read today: if it starts to, and NewDeploymentView drops them, the
// property below fails.
var edits = []struct {
	name string
	edit func(r *rand.Rand, d *appsv1.Deployment)
}{
	{"replicas", func(r *rand.Rand, d *appsv1.Deployment) { d.Spec.Replicas = ptr.To(r.Int32N(5)) }},
	{"revisionHistoryLimit", func(r *rand.Rand, d *appsv1.Deployment) {
		d.Spec.RevisionHistoryLimit = oneOf(r, nil, ptr.To[int32](0), ptr.To(r.Int32N(101)))
	}},
	{"image", func(r *rand.Rand, d *appsv1.Deployment) { ours(d, func(c *corev1.Container) { c.Image = "busybox:1" }) }},
	{"port added", func(r *rand.Rand, d *appsv1.Deployment) {
		ours(d, func(c *corev1.Container) {
			c.Ports = append(c.Ports, corev1.ContainerPort{
				Name: oneOf(r, "", PortName, "metrics"), ContainerPort: 1 + r.Int32N(3),
				Protocol: oneOf(r, corev1.ProtocolTCP, corev1.ProtocolUDP),
			})
		})
	}},
	{"ports removed", func(r *rand.Rand, d *appsv1.Deployment) { ours(d, func(c *corev1.Container) { c.Ports = nil }) }},
	{"port re-keyed", func(r *rand.Rand, d *appsv1.Deployment) {
		ours(d, func(c *corev1.Container) {
			for i := range c.Ports {
				c.Ports[i].ContainerPort++
			}
		})
	}},
	{"port protocol", func(r *rand.Rand, d *appsv1.Deployment) {
		ours(d, func(c *corev1.Container) {
			for i := range c.Ports {
				c.Ports[i].Protocol = corev1.ProtocolUDP
			}
		})
	}},
	{"host port", func(r *rand.Rand, d *appsv1.Deployment) {
		ours(d, func(c *corev1.Container) {
			for i := range c.Ports {
				c.Ports[i].HostPort = 8080
			}
		})
	}},
	{"sidecar first", func(r *rand.Rand, d *appsv1.Deployment) {
		s := &d.Spec.Template.Spec
		s.Containers = append([]corev1.Container{{Name: "sidecar", Image: "envoy:1",
			Ports: []corev1.ContainerPort{{Name: PortName, ContainerPort: 1, Protocol: corev1.ProtocolTCP}}}}, s.Containers...)
	}},
	{"container renamed", func(r *rand.Rand, d *appsv1.Deployment) { ours(d, func(c *corev1.Container) { c.Name = "main" }) }},
	{"container env, resources, pull policy", func(r *rand.Rand, d *appsv1.Deployment) {
		ours(d, func(c *corev1.Container) {
			c.Env = []corev1.EnvVar{{Name: "A", Value: "1"}}
			c.Resources.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}
			c.ImagePullPolicy = corev1.PullNever
			c.Command = []string{"sleep"}
		})
	}},
	{"label removed", func(r *rand.Rand, d *appsv1.Deployment) { delete(d.Labels, oneOf(r, FooUIDLabel, ManagedByLabel)) }},
	{"label changed", func(r *rand.Rand, d *appsv1.Deployment) {
		d.Labels = with(d.Labels, oneOf(r, FooUIDLabel, ManagedByLabel), "x")
	}},
	{"label added", func(r *rand.Rand, d *appsv1.Deployment) { d.Labels = with(d.Labels, "team", "a") }},
	{"template label changed", func(r *rand.Rand, d *appsv1.Deployment) {
		d.Spec.Template.Labels = with(d.Spec.Template.Labels, oneOf(r, FooUIDLabel, ManagedByLabel, "team"), "x")
	}},
	{"pod label changed or removed", func(r *rand.Rand, d *appsv1.Deployment) {
		// One of the keys the controller recorded as applied, or another.
		key := "team"
		if keys := strings.Split(d.Annotations[PodLabelsAnnotation], ","); keys[0] != "" {
			key = oneOf(r, keys...)
		}
		if r.IntN(2) == 0 {
			d.Spec.Template.Labels = with(d.Spec.Template.Labels, key, "x")
		} else {
			d.Spec.Template.Labels = without(d.Spec.Template.Labels, key)
		}
	}},
	{"pod label keys annotation", func(r *rand.Rand, d *appsv1.Deployment) {
		if r.IntN(2) == 0 {
			d.Annotations = without(d.Annotations, PodLabelsAnnotation)
		} else {
			d.Annotations = with(d.Annotations, PodLabelsAnnotation, oneOf(r, "", "team", "a,team"))
		}
	}},
	{"selector changed", func(r *rand.Rand, d *appsv1.Deployment) {
		d.Spec.Selector = &metav1.LabelSelector{MatchLabels: with(d.Spec.Selector.MatchLabels, "team", "a")}
	}},
	{"selector expression", func(r *rand.Rand, d *appsv1.Deployment) {
		d.Spec.Selector = d.Spec.Selector.DeepCopy()
		d.Spec.Selector.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: "a", Operator: metav1.LabelSelectorOpExists}}
	}},
	{"owner reference added first", func(r *rand.Rand, d *appsv1.Deployment) {
		d.OwnerReferences = append([]metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "c", UID: "u"}}, d.OwnerReferences...)
	}},
	{"owner references removed", func(r *rand.Rand, d *appsv1.Deployment) { d.OwnerReferences = nil }},
	{"not the controller", func(r *rand.Rand, d *appsv1.Deployment) {
		for i := range d.OwnerReferences {
			d.OwnerReferences[i].Controller = ptr.To(false)
		}
	}},
	{"owner UID", func(r *rand.Rand, d *appsv1.Deployment) {
		for i := range d.OwnerReferences {
			d.OwnerReferences[i].UID = "another"
		}
	}},
	{"annotations, finalizers", func(r *rand.Rand, d *appsv1.Deployment) {
		d.Annotations = map[string]string{"deployment.kubernetes.io/revision": "3"}
		d.Finalizers = []string{"example.com/keep"}
	}},
	{"deleting", func(r *rand.Rand, d *appsv1.Deployment) {
		// Whole seconds, as the API server serves it.
		d.DeletionTimestamp = ptr.To(metav1.NewTime(time.Now().Truncate(time.Second)))
	}},
	{"new generation", func(r *rand.Rand, d *appsv1.Deployment) { d.Generation++ }},
	{"strategy, pod spec", func(r *rand.Rand, d *appsv1.Deployment) {
		d.Spec.Strategy.Type = appsv1.RecreateDeploymentStrategyType
		d.Spec.Strategy.RollingUpdate = nil
		d.Spec.ProgressDeadlineSeconds = ptr.To[int32](1)
		d.Spec.Template.Spec.NodeSelector = map[string]string{"disk": "ssd"}
	}},
	{"status", func(r *rand.Rand, d *appsv1.Deployment) {
		n := func() int32 { return r.Int32N(4) }
		status := func() corev1.ConditionStatus { return oneOf(r, corev1.ConditionTrue, corev1.ConditionFalse) }
		d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation - r.Int64N(2),
			Replicas: n(), UpdatedReplicas: n(), ReadyReplicas: n(), AvailableReplicas: n(), UnavailableReplicas: n(),
			Conditions: []appsv1.DeploymentCondition{
				{Type: appsv1.DeploymentAvailable, Status: status(), Reason: "MinimumReplicasAvailable", Message: "m"},
				{Type: appsv1.DeploymentProgressing, Status: status(),
					Reason:  oneOf(r, "ProgressDeadlineExceeded", "NewReplicaSetAvailable", "ReplicaSetUpdated"),
					Message: "m", LastUpdateTime: metav1.Now()},
				{Type: appsv1.DeploymentReplicaFailure, Status: status(), Reason: "FailedCreate"},
			}}
	}},
}

// ours calls edit with the controller's container of d, if it has one.
func ours(d *appsv1.Deployment, edit func(c *corev1.Container)) {
	for i := range d.Spec.Template.Spec.Containers {
		if d.Spec.Template.Spec.Containers[i].Name == ContainerName {
			edit(&d.Spec.Template.Spec.Containers[i])
		}
	}
}

// with returns a copy of m with k set to v: maps of a Deployment may be
// shared (see NewDeploymentView), so an edit never writes into one.
func with(m map[string]string, k, v string) map[string]string {
	out := map[string]string{k: v}
	for mk, mv := range m {
		if mk != k {
			out[mk] = mv
		}
	}
	return out
}

// without returns a copy of m without k.
func without(m map[string]string, k string) map[string]string {
	out := map[string]string{}
	for mk, mv := range m {
		if mk != k {
			out[mk] = mv
		}
	}
	return out
}

func oneOf[T any](r *rand.Rand, choices ...T) T { return choices[r.IntN(len(choices))] }

// reads is everything the controller computes from a Deployment: this
// package's functions that take one, for each kind of observation, and the
// fields sync.go, finalize.go and handlers.go read directly.
func reads(foo *samplev1beta1.Foo, d *DeploymentView) map[string]any {
	now := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	out := map[string]any{
		"Drift":                   Drift(foo, d),
		"OwnedValues":             OwnedValues(foo, d),
		"removingStraysConverges": removingStraysConverges(foo, d),
		"Classify":                Classify(d, foo),
		"leftBehind":              leftBehind(d, foo),
		"ControllerFoo":           ControllerFoo(d),
		"IsControlledBy":          IsControlledBy(d, foo.UID),
		"meta": []any{d.Name, d.Namespace, d.UID, d.ResourceVersion, d.Generation,
			d.DeletionTimestamp, d.Spec.Replicas},
	}
	patch, ok, err := removeStrayEntriesPatch(foo, d)
	out["removeStrayEntriesPatch"] = []any{string(patch), ok, err}
	patch, ok, err = replaceStrayEntriesPatch(foo, d)
	out["replaceStrayEntriesPatch"] = []any{string(patch), ok, err}
	patch, ok, err = RemoveControllerRefPatch(d, foo.UID)
	out["RemoveControllerRefPatch"] = []any{string(patch), ok, err}
	for _, obs := range []Observation{{Deployment: d}, {Deployment: d, Conflict: true}, {Deployment: d, Waiting: true}} {
		out[fmt.Sprintf("Status(conflict=%v,waiting=%v)", obs.Conflict, obs.Waiting)] = Status(foo, obs, now)
	}
	return out
}

// decodedView is the Deployment's JSON decoded into a DeploymentView: every
// field the view type has, for every container and condition, with
// nothing left out by choice. The reads of NewDeploymentView's view must
// be the same.
func decodedView(t *testing.T, d *appsv1.Deployment) *DeploymentView {
	t.Helper()
	raw, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	v := &DeploymentView{}
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatal(err)
	}
	return v
}

// FuzzDeploymentViewHidesNothing: the controller reads the same from
// NewDeploymentView's view of a Deployment (what the informer caches) as
// from all of the Deployment that the view's type can hold, for a random
// Foo, the Deployment it declares (or another Foo's, or one of the same
// name and another UID) and random edits by other writers. The compiler
// keeps the controller from reading a field the type does not have; this
// keeps NewDeploymentView from leaving out, for some containers,
// conditions or annotations, what the reads depend on: if it did, a
// dropped value could hide a drift, and the controller would never put it
// back. It also checks that a view shares no memory with its Deployment
// and that DeepCopy copies it whole.
//
// `go test` runs 2,000 seeds; `go test -fuzz=FuzzDeploymentViewHidesNothing ./pkg/plan/`
// searches further.
func FuzzDeploymentViewHidesNothing(f *testing.F) {
	for seed := range uint64(2000) {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, seed uint64) {
		r := rand.New(rand.NewPCG(seed, 1))
		foo := proptest.Foo(r, "ns")
		owner := foo
		switch r.IntN(4) {
		case 0: // another Foo's Deployment
			owner = proptest.Foo(r, "ns")
		case 1: // the Deployment of a deleted Foo of the same name
			owner = foo.DeepCopy()
			owner.UID = types.UID(fmt.Sprintf("%s-old", foo.UID))
		}
		d, err := proptest.Served(DesiredDeployment(owner))
		if err != nil {
			t.Fatal(err)
		}
		var applied []string
		for range r.IntN(6) {
			e := edits[r.IntN(len(edits))]
			e.edit(r, d)
			applied = append(applied, e.name)
		}
		before, _ := json.Marshal(d)
		view := NewDeploymentView(d)
		if after, _ := json.Marshal(d); string(after) != string(before) {
			t.Fatalf("NewDeploymentView changed its argument")
		}
		want, got := reads(foo, decodedView(t, d)), reads(foo, view)
		for k := range want {
			if !reflect.DeepEqual(got[k], want[k]) {
				t.Errorf("edits %q: %s differs on the view:\n got: %#v\nwant: %#v", applied, k, got[k], want[k])
			}
		}
		// Nothing the Deployment holds is shared: the decoder's object
		// may be reused, and a DeepCopy of the view must be its own.
		viewJSON, _ := json.Marshal(view)
		copied := view.DeepCopy()
		scribble(reflect.ValueOf(d).Elem())
		scribble(reflect.ValueOf(copied).Elem())
		if after, _ := json.Marshal(view); string(after) != string(viewJSON) {
			t.Errorf("edits %q: writing over the Deployment and the view's DeepCopy changed the view:\n got: %s\nwant: %s",
				applied, after, viewJSON)
		}
		if !reflect.DeepEqual(view.DeepCopyObject(), view) {
			t.Errorf("edits %q: DeepCopyObject differs from the view", applied)
		}
	})
}

// scribble writes over every string, number and bool that v holds,
// through pointers, slices and maps (map values are replaced).
func scribble(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			scribble(v.Elem())
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Field(i).CanSet() {
				scribble(v.Field(i))
			}
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			scribble(v.Index(i))
		}
	case reflect.Map:
		for _, k := range v.MapKeys() {
			if v.Type().Elem().Kind() == reflect.String {
				v.SetMapIndex(k, reflect.ValueOf("scribbled").Convert(v.Type().Elem()))
			}
		}
	case reflect.String:
		v.SetString("scribbled")
	case reflect.Int, reflect.Int32, reflect.Int64:
		v.SetInt(-7)
	case reflect.Bool:
		v.SetBool(!v.Bool())
	}
}

// TestDeploymentViewDrops: the property above would hold for a view that
// kept everything; this shows how little it keeps.
func TestDeploymentViewDrops(t *testing.T) {
	foo := proptest.Foo(rand.New(rand.NewPCG(1, 1)), "ns")
	foo.Spec.Deployment.ContainerPort = ptr.To[int32](80)
	foo.Spec.Deployment.PodLabels = map[string]string{"team": "a"}
	foo.Spec.Deployment.MinReadySeconds = 30
	foo.Spec.Deployment.RevisionHistoryLimit = ptr.To[int32](2)
	d, err := proptest.Served(DesiredDeployment(foo))
	if err != nil {
		t.Fatal(err)
	}
	d.Status = appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 2, UpdatedReplicas: 2, ReadyReplicas: 1,
		AvailableReplicas: 1, UnavailableReplicas: 1, Conditions: []appsv1.DeploymentCondition{
			{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionFalse, Reason: "MinimumReplicasUnavailable", Message: "m"},
			{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, Reason: "ReplicaSetUpdated", Message: "m",
				LastUpdateTime: metav1.Now(), LastTransitionTime: metav1.Now()},
		}}
	d.Annotations["deployment.kubernetes.io/revision"] = "1" // beside ours
	d.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "foo-controller"}}
	d.Spec.Template.Spec.Containers = append(d.Spec.Template.Spec.Containers,
		corev1.Container{Name: "sidecar", Image: "envoy:1", Ports: []corev1.ContainerPort{{ContainerPort: 9901}}})
	c := NewDeploymentView(d)

	// What is left, as JSON, is exactly this:
	got, _ := json.Marshal(c)
	want := fmt.Sprintf(`{"metadata":{"name":%q,"namespace":"ns","uid":"00000000-0000-4000-8000-000000000001",`+
		`"resourceVersion":"1","generation":1,"labels":{%q:"foo-controller",%q:%q},"annotations":{%q:"team"},`+
		`"ownerReferences":[{"apiVersion":"samplecontroller.example.com/v1beta1","kind":"Foo","name":%q,"uid":%q,"controller":true,"blockOwnerDeletion":true}]},`+
		`"spec":{"replicas":%d,"minReadySeconds":30,"progressDeadlineSeconds":630,"revisionHistoryLimit":2,"selector":{"matchLabels":{%q:%q}},"template":{"metadata":{"labels":{%q:"foo-controller",%q:%q,"team":"a"}},`+
		`"spec":{"containers":[{"name":"app","image":%q,"ports":[{"name":"http","containerPort":80,"protocol":"TCP"}]},{"name":"sidecar"}]}}},`+
		`"status":{"observedGeneration":1,"replicas":2,"updatedReplicas":2,"readyReplicas":1,"availableReplicas":1,`+
		`"conditions":[{"type":"Available","status":"False","reason":"MinimumReplicasUnavailable"},`+
		`{"type":"Progressing","status":"True","reason":"ReplicaSetUpdated"}]}}`,
		d.Name, ManagedByLabel, FooUIDLabel, foo.UID, PodLabelsAnnotation, foo.Name, foo.UID, Replicas(foo), FooUIDLabel, foo.UID,
		ManagedByLabel, FooUIDLabel, foo.UID, Image(foo))
	if string(got) != want {
		t.Errorf("view:\n got: %s\nwant: %s", got, want)
	}
	// Without podLabels, the metadata's and the template's labels are equal.
	foo.Spec.Deployment.PodLabels = nil
	if d, err = proptest.Served(DesiredDeployment(foo)); err != nil {
		t.Fatal(err)
	}
	if c := NewDeploymentView(d); reflect.ValueOf(c.Labels).Pointer() != reflect.ValueOf(c.Spec.Template.Labels).Pointer() {
		t.Errorf("equal metadata and template labels are not one map")
	}
}

// Decoded objects each hold their own copy of every string; the cached
// ones share the copies of the strings that repeat, and are otherwise
// unchanged.
func TestCachedObjectsShareRepeatedStrings(t *testing.T) {
	same := func(what, a, b string) {
		t.Helper()
		if a != b || unsafe.StringData(a) != unsafe.StringData(b) {
			t.Errorf("%s: %q and %q are not one string", what, a, b)
		}
	}
	foo := proptest.Foo(rand.New(rand.NewPCG(2, 2)), "ns")
	foo.APIVersion, foo.Kind = "samplecontroller.example.com/v1beta1", "Foo"
	foo.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: "True", Reason: "DeploymentAvailable", Message: "1 of 1 replicas available"}}
	raw, _ := json.Marshal(foo)
	decode := func() *samplev1beta1.Foo {
		f := &samplev1beta1.Foo{}
		if err := json.Unmarshal(raw, f); err != nil {
			t.Fatal(err)
		}
		return f
	}
	a, b := CachedFoo(decode()), CachedFoo(decode())
	if got, _ := json.Marshal(a); string(got) != string(raw) {
		t.Errorf("CachedFoo changed the Foo:\n got: %s\nwant: %s", got, raw)
	}
	same("apiVersion", a.APIVersion, b.APIVersion)
	same("namespace", a.Namespace, b.Namespace)
	same("image", a.Spec.Deployment.Image, b.Spec.Deployment.Image)
	same("condition reason", a.Status.Conditions[0].Reason, b.Status.Conditions[0].Reason)
	same("condition message", a.Status.Conditions[0].Message, b.Status.Conditions[0].Message)

	dep, err := proptest.Served(DesiredDeployment(foo))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ = json.Marshal(dep)
	decodeDep := func() *DeploymentView {
		d := &appsv1.Deployment{}
		if err := json.Unmarshal(raw, d); err != nil {
			t.Fatal(err)
		}
		return NewDeploymentView(d)
	}
	c, d := decodeDep(), decodeDep()
	same("namespace", c.Namespace, d.Namespace)
	same("owner kind", c.OwnerReferences[0].Kind, d.OwnerReferences[0].Kind)
	same("image", c.Spec.Template.Spec.Containers[0].Image, d.Spec.Template.Spec.Containers[0].Image)
	for k := range c.Labels {
		for l := range d.Labels {
			if k == l {
				same("label key", k, l)
			}
		}
	}
}

// FuzzOwnedValuesSeesEveryDrift: two Deployments with the same OwnedValues
// have the same Drift, which is what the controller relies on to remember
// a correction the API server did not keep (corrections.Overridden, kept by corrections.go). A
// field that Drift compares and OwnedValues leaves out fails here, once
// edits touch it: a new field needs both, and an edit.
//
// `go test` runs 1,000 seeds; `go test -fuzz=FuzzOwnedValuesSeesEveryDrift ./pkg/plan/`
// searches further.
func FuzzOwnedValuesSeesEveryDrift(f *testing.F) {
	for seed := range uint64(1000) {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, seed uint64) {
		r := rand.New(rand.NewPCG(seed, 2))
		foo := proptest.Foo(r, "ns")
		served, err := proptest.Served(DesiredDeployment(foo))
		if err != nil {
			t.Fatal(err)
		}
		edited := served.DeepCopy()
		var applied []string
		for range 1 + r.IntN(3) {
			e := edits[r.IntN(len(edits))]
			e.edit(r, edited)
			applied = append(applied, e.name)
		}
		if OwnedValues(foo, NewDeploymentView(served)) == OwnedValues(foo, NewDeploymentView(edited)) && !reflect.DeepEqual(Drift(foo, NewDeploymentView(served)), Drift(foo, NewDeploymentView(edited))) {
			t.Errorf("edits %q change the drift from %q to %q, and not OwnedValues: %s",
				applied, Drift(foo, NewDeploymentView(served)), Drift(foo, NewDeploymentView(edited)), OwnedValues(foo, NewDeploymentView(edited)))
		}
	})
}
