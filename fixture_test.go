package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	kubeinformers "k8s.io/client-go/informers"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	core "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	samplev1beta1 "example.com/foo-controller/pkg/apis/samplecontroller/v1beta1"
	"example.com/foo-controller/pkg/generated/clientset/versioned/fake"
	informers "example.com/foo-controller/pkg/generated/informers/externalversions"
	"example.com/foo-controller/pkg/metrics"
	"example.com/foo-controller/pkg/plan"
)

var fixedNow = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

// fixture builds a Controller over fake clientsets whose informer indexers
// are filled directly (the informers are never started), runs one sync, and
// compares the API actions the controller sent with the expected ones.
type fixture struct {
	t testing.TB

	kubeclient *k8sfake.Clientset
	client     *fake.Clientset
	recorder   *events.FakeRecorder
	// ordered is every action sent to either fake API, in order, for
	// assertions about the order of requests across the two.
	ordered []string

	// Objects in the informer caches.
	foos        []*samplev1beta1.Foo
	deployments []*appsv1.Deployment
	namespaces  []*corev1.Namespace
	// Objects in the fake API servers (usually the same as the caches).
	kubeobjects []runtime.Object
	objects     []runtime.Object
	// The informers' indexers, for tests that play later watch events.
	fooIndexer, deploymentIndexer cache.Indexer
	// clock is the controller's clock, at fixedNow until a test steps it.
	clock *testingclock.FakeClock
	// lastRV counts the watch events played by deploymentChanged.
	lastRV int
}

func newFixture(t testing.TB) *fixture {
	return &fixture{t: t}
}

// withFoo puts foo in the cache and the fake API.
func (f *fixture) withFoo(foo *samplev1beta1.Foo) *fixture {
	f.foos = append(f.foos, foo)
	f.objects = append(f.objects, foo)
	return f
}

// withDeployment puts dep in the cache and the fake API.
// withNamespace puts ns in the namespaces informer (a namespace absent
// from it is taken as not being deleted).
func (f *fixture) withNamespace(ns *corev1.Namespace) *fixture {
	f.namespaces = append(f.namespaces, ns)
	return f
}

func (f *fixture) withDeployment(dep *appsv1.Deployment) *fixture {
	f.deployments = append(f.deployments, dep)
	f.kubeobjects = append(f.kubeobjects, dep)
	return f
}

// apiServerKeeps answers every Deployment apply with kept, as the API
// server does when an admission policy rewrites what we send.
func (f *fixture) apiServerKeeps(kept *appsv1.Deployment) {
	f.kubeclient.PrependReactor("patch", "deployments", func(core.Action) (bool, runtime.Object, error) {
		return true, kept.DeepCopy(), nil
	})
}

func (f *fixture) newController(ctx context.Context) *Controller {
	f.t.Helper()
	f.client = fake.NewClientset(f.objects...)
	f.kubeclient = k8sfake.NewClientset(f.kubeobjects...)
	f.recorder = events.NewFakeRecorder(100)
	f.ordered = nil
	record := func(a core.Action) (bool, runtime.Object, error) {
		f.ordered = append(f.ordered, describe(a))
		return false, nil, nil
	}
	f.kubeclient.PrependReactor("*", "*", record)
	// The generated fake has no OpenAPI schema for Foo, so its object
	// tracker cannot perform a server-side apply. This reactor does what the
	// API server does with our status apply, as far as these tests need:
	// replace the status, bump the resourceVersion. The integration tests show the real thing.
	f.client.PrependReactor("patch", "foos", func(a core.Action) (bool, runtime.Object, error) {
		p := a.(core.PatchAction)
		if p.GetPatchType() != types.ApplyPatchType {
			return false, nil, nil
		}
		obj, err := f.client.Tracker().Get(a.GetResource(), a.GetNamespace(), p.GetName())
		if err != nil {
			return true, nil, err
		}
		stored := obj.(*samplev1beta1.Foo).DeepCopy()
		var applied samplev1beta1.Foo
		if err := json.Unmarshal(p.GetPatch(), &applied); err != nil {
			return true, nil, err
		}
		stored.Status = applied.Status
		stored.ResourceVersion = bumpRV(stored.ResourceVersion)
		return true, stored, f.client.Tracker().Update(a.GetResource(), stored, stored.Namespace)
	})
	f.client.PrependReactor("*", "*", record)

	i := informers.NewSharedInformerFactory(f.client, 0)
	k8sI := kubeinformers.NewSharedInformerFactory(f.kubeclient, 0)
	c, err := NewController(ctx, f.kubeclient, f.client,
		k8sI.Apps().V1().Deployments(), i.Samplecontroller().V1beta1().Foos(), f.recorder,
		WithNamespaces(k8sI.Core().V1().Namespaces()))
	if err != nil {
		f.t.Fatalf("NewController: %v", err)
	}
	f.clock = testingclock.NewFakeClock(fixedNow)
	c.clock = f.clock
	f.fooIndexer = i.Samplecontroller().V1beta1().Foos().Informer().GetIndexer()
	f.deploymentIndexer = k8sI.Apps().V1().Deployments().Informer().GetIndexer()

	for _, foo := range f.foos {
		if err := i.Samplecontroller().V1beta1().Foos().Informer().GetIndexer().Add(foo); err != nil {
			f.t.Fatal(err)
		}
	}
	for _, ns := range f.namespaces {
		if err := k8sI.Core().V1().Namespaces().Informer().GetIndexer().Add(ns); err != nil {
			f.t.Fatal(err)
		}
	}
	for _, d := range f.deployments {
		// What the informer keeps of it (pkg/cachetrim).
		if err := k8sI.Apps().V1().Deployments().Informer().GetIndexer().Add(plan.NewDeploymentView(d)); err != nil {
			f.t.Fatal(err)
		}
	}
	return c
}

// sync runs syncHandler once for the key and returns its error together
// with the actions sent to each fake API and the events recorded. It also
// fails the test if the sync modified any object in the informer caches.
func (f *fixture) sync(key cache.ObjectName) (kubeActions, fooActions []core.Action, evts []string, err error) {
	f.t.Helper()
	_, ctx := ktesting.NewTestContext(f.t)
	c := f.newController(ctx)
	before := f.snapshotCaches()
	_, err = c.syncHandler(ctx, key)
	if after := f.snapshotCaches(); !equality.Semantic.DeepEqual(before, after) {
		f.t.Errorf("the sync modified objects in the informer cache")
	}
	return f.kubeclient.Actions(), f.client.Actions(), drainEvents(f.recorder), err
}

// syncPaced is sync for a new Foo, whose first status waits
// statusProgressInterval: it syncs, lets the interval pass and syncs again,
// and returns what both syncs sent and recorded.
func (f *fixture) syncPaced(key cache.ObjectName) (kubeActions, fooActions []core.Action, evts []string, err error) {
	f.t.Helper()
	_, ctx := ktesting.NewTestContext(f.t)
	c := f.newController(ctx)
	before := f.snapshotCaches()
	if _, err = c.syncHandler(ctx, key); err == nil {
		f.clock.Step(statusProgressInterval)
		_, err = c.syncHandler(ctx, key)
	}
	if after := f.snapshotCaches(); !equality.Semantic.DeepEqual(before, after) {
		f.t.Errorf("the sync modified objects in the informer cache")
	}
	return f.kubeclient.Actions(), f.client.Actions(), drainEvents(f.recorder), err
}

func (f *fixture) snapshotCaches() []runtime.Object {
	var out []runtime.Object
	for _, indexer := range []cache.Indexer{f.fooIndexer, f.deploymentIndexer} {
		keys := indexer.ListKeys()
		slices.Sort(keys)
		for _, key := range keys {
			obj, _, _ := indexer.GetByKey(key)
			out = append(out, obj.(runtime.Object).DeepCopyObject())
		}
	}
	return out
}

// deploymentChanged plays a watch event on the Deployment informer: dep,
// changed by change (another writer, or the Deployment's own rollout), at
// a resourceVersion newer than any before, so that it wins over our own
// writes' copies in the MutationCache.
func (f *fixture) deploymentChanged(dep *appsv1.Deployment, change func(*appsv1.Deployment)) {
	f.t.Helper()
	f.lastRV++
	d := dep.DeepCopy()
	d.ResourceVersion = strconv.Itoa(1000 + f.lastRV)
	change(d)
	if err := f.deploymentIndexer.Update(plan.NewDeploymentView(d)); err != nil {
		f.t.Fatal(err)
	}
}

func bumpRV(rv string) string {
	n, _ := strconv.Atoi(rv)
	return strconv.Itoa(n + 1)
}

func drainEvents(r *events.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-r.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

const testNS = "default"

func newFoo(name string, replicas int32) *samplev1beta1.Foo {
	return &samplev1beta1.Foo{
		TypeMeta: metav1.TypeMeta{APIVersion: samplev1beta1.GroupVersion.String(), Kind: "Foo"},
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: testNS, UID: types.UID(name + "-uid"),
			Generation: 1, ResourceVersion: "10",
		},
		Spec: samplev1beta1.FooSpec{
			Deployment: samplev1beta1.DeploymentSpec{
				Name:     name + "-deploy",
				Replicas: ptr.To(replicas),
				Image:    "nginx:1.27",
			},
			DeletionPolicy: samplev1beta1.DeletionPolicyDelete,
		},
	}
}

// ownedDeployment is the Deployment the controller would create for foo,
// fully rolled out.
func ownedDeployment(foo *samplev1beta1.Foo) *appsv1.Deployment {
	r := plan.Replicas(foo)
	return &appsv1.Deployment{
		TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{
			Name: foo.Spec.Deployment.Name, Namespace: foo.Namespace, UID: types.UID(foo.Spec.Deployment.Name + "-uid"),
			Generation: 1, ResourceVersion: "20",
			Labels: plan.Labels(foo), Annotations: plan.DesiredDeployment(foo).Annotations,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: samplev1beta1.GroupVersion.String(), Kind: "Foo",
				Name: foo.Name, UID: foo.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Spec: appsv1.DeploymentSpec{
			Replicas:             ptr.To(r),
			MinReadySeconds:      foo.Spec.Deployment.MinReadySeconds,
			RevisionHistoryLimit: ptr.To(plan.RevisionHistoryLimit(foo)),
			Selector:             &metav1.LabelSelector{MatchLabels: plan.SelectorLabels(foo)},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: plan.TemplateLabels(foo)},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: plan.ContainerName, Image: plan.Image(foo), Ports: ports(foo),
				}}},
			},
		},
		Status: appsv1.DeploymentStatus{
			ObservedGeneration: 1, Replicas: r, UpdatedReplicas: r, ReadyReplicas: r, AvailableReplicas: r,
			Conditions: []appsv1.DeploymentCondition{
				{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, Reason: "MinimumReplicasAvailable"},
				{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, Reason: "NewReplicaSetAvailable"},
			},
		},
	}
}

// setCounts sets dep's status counts (ready as available) and its
// Available condition, as the Deployment controller would report them.
func setCounts(dep *appsv1.Deployment, replicas, updated, available int32, isAvailable bool) {
	dep.Status.Replicas, dep.Status.UpdatedReplicas = replicas, updated
	dep.Status.ReadyReplicas, dep.Status.AvailableReplicas = available, available
	c := appsv1.DeploymentCondition{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionFalse, Reason: "MinimumReplicasUnavailable"}
	if isAvailable {
		c.Status, c.Reason = corev1.ConditionTrue, "MinimumReplicasAvailable"
	}
	for i := range dep.Status.Conditions {
		if dep.Status.Conditions[i].Type == appsv1.DeploymentAvailable {
			dep.Status.Conditions[i] = c
			return
		}
	}
	dep.Status.Conditions = append(dep.Status.Conditions, c)
}

// ports are the container ports the API server holds for foo's
// spec.containerPort.
func ports(foo *samplev1beta1.Foo) []corev1.ContainerPort {
	if foo.Spec.Deployment.ContainerPort == nil {
		return nil
	}
	return []corev1.ContainerPort{{Name: plan.PortName, ContainerPort: *foo.Spec.Deployment.ContainerPort, Protocol: corev1.ProtocolTCP}}
}

func foreignDeployment(name string) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: testNS, UID: "foreign-uid", ResourceVersion: "30",
			Labels: map[string]string{"app": "someone-else"},
		},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "someone-else"}},
		},
	}
}

// withConvergedStatus sets the status the controller would have written for
// foo with dep (or with a conflict when conflict is set).
func withConvergedStatus(foo *samplev1beta1.Foo, dep *appsv1.Deployment, conflict bool) *samplev1beta1.Foo {
	foo.Status = plan.Status(foo, plan.Observation{Deployment: plan.NewDeploymentView(dep), Conflict: conflict},
		metav1.NewTime(fixedNow.Add(-time.Hour)))
	return foo
}

func keyOf(foo *samplev1beta1.Foo) cache.ObjectName {
	return cache.ObjectName{Namespace: foo.Namespace, Name: foo.Name}
}

// describe renders an action as "verb resource[/subresource] name [patchtype]"
// so that whole action lists compare in one readable assertion.
func describe(a core.Action) string {
	res := a.GetResource().Resource
	if a.GetSubresource() != "" {
		res += "/" + a.GetSubresource()
	}
	s := a.GetVerb() + " " + res
	switch a := a.(type) {
	case core.PatchAction:
		s += " " + a.GetName() + " " + string(a.GetPatchType())
	case core.DeleteAction:
		s += " " + a.GetName()
	case core.CreateAction:
		if m, err := metaOf(a.GetObject()); err == nil {
			s += " " + m.GetName()
		}
	}
	return s
}

func metaOf(obj runtime.Object) (metav1.Object, error) {
	m, ok := obj.(metav1.Object)
	if !ok {
		return nil, fmt.Errorf("%T has no metadata", obj)
	}
	return m, nil
}

func describeAll(actions []core.Action) []string {
	out := []string{}
	for _, a := range actions {
		out = append(out, describe(a))
	}
	return out
}

func assertActions(t testing.TB, what string, got []core.Action, want []string) {
	t.Helper()
	g := describeAll(got)
	if want == nil {
		want = []string{}
	}
	if strings.Join(g, "\n") != strings.Join(want, "\n") {
		t.Errorf("%s actions:\n got: %q\nwant: %q", what, g, want)
	}
}

const (
	applyPatch = string(types.ApplyPatchType)
	mergePatch = string(types.MergePatchType)
	jsonPatch  = string(types.JSONPatchType)
)

// appliedDeployment decodes the Deployment a server-side apply action sent.
func appliedDeployment(t *testing.T, actions []core.Action) *appsv1.Deployment {
	t.Helper()
	for _, a := range actions {
		if p, ok := a.(core.PatchAction); ok && p.GetPatchType() == types.ApplyPatchType && a.GetResource().Resource == "deployments" {
			var d appsv1.Deployment
			if err := json.Unmarshal(p.GetPatch(), &d); err != nil {
				t.Fatalf("decoding applied Deployment: %v", err)
			}
			return &d
		}
	}
	t.Fatalf("no Deployment apply among %q", describeAll(actions))
	return nil
}

// appliedStatus decodes the Foo status a server-side apply action sent.
func appliedStatus(t *testing.T, actions []core.Action) samplev1beta1.FooStatus {
	t.Helper()
	for _, a := range actions {
		if p, ok := a.(core.PatchAction); ok && a.GetSubresource() == "status" {
			var foo samplev1beta1.Foo
			if err := json.Unmarshal(p.GetPatch(), &foo); err != nil {
				t.Fatalf("decoding applied status: %v", err)
			}
			return foo.Status
		}
	}
	t.Fatalf("no status apply among %q", describeAll(actions))
	return samplev1beta1.FooStatus{}
}

func readyOf(t *testing.T, st samplev1beta1.FooStatus) metav1.Condition {
	t.Helper()
	for _, c := range st.Conditions {
		if c.Type == samplev1beta1.ConditionReady {
			return c
		}
	}
	t.Fatalf("no Ready condition in %+v", st)
	return metav1.Condition{}
}

func assertEvents(t *testing.T, got []string, wantPrefixes ...string) {
	t.Helper()
	if len(got) != len(wantPrefixes) {
		t.Fatalf("events: got %q, want %d starting with %q", got, len(wantPrefixes), wantPrefixes)
	}
	for i := range got {
		if !strings.HasPrefix(got[i], wantPrefixes[i]) {
			t.Errorf("event %d: got %q, want prefix %q", i, got[i], wantPrefixes[i])
		}
	}
}

func assertQueue(t *testing.T, c *Controller, want []string) {
	t.Helper()
	var got []string
	for c.workqueue.Len() > 0 {
		key, _ := c.workqueue.Get()
		got = append(got, key.String())
		c.workqueue.Done(key)
		c.workqueue.Forget(key)
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("queued keys: got %q, want %q", got, want)
	}
}

// counterValue reads a foo_controller_* counter, with the given label
// ("name=value") if any, from the registry the controller serves. It
// registers the metrics first: until then they count nothing.
func counterValue(t *testing.T, name, label string) float64 {
	t.Helper()
	metrics.Register("test", "0123abc")
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range families {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if label == "" || l.GetName()+"="+l.GetValue() == label {
					return m.GetCounter().GetValue()
				}
			}
			if label == "" {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}
