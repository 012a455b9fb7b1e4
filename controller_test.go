package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	kubeinformers "k8s.io/client-go/informers"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	core "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	samplev1alpha1 "example.com/foo-controller/pkg/apis/samplecontroller/v1alpha1"
	"example.com/foo-controller/pkg/generated/clientset/versioned/fake"
	informers "example.com/foo-controller/pkg/generated/informers/externalversions"
	"example.com/foo-controller/pkg/plan"
)

var fixedNow = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

// fixture builds a Controller over fake clientsets whose informer indexers
// are filled directly (the informers are never started), runs one sync, and
// compares the API actions the controller sent with the expected ones.
type fixture struct {
	t *testing.T

	kubeclient *k8sfake.Clientset
	client     *fake.Clientset
	recorder   *events.FakeRecorder
	// ordered is every action sent to either fake API, in order, for
	// assertions about the order of requests across the two.
	ordered []string

	// Objects in the informer caches.
	foos        []*samplev1alpha1.Foo
	deployments []*appsv1.Deployment
	// Objects in the fake API servers (usually the same as the caches).
	kubeobjects []runtime.Object
	objects     []runtime.Object
	// The informers' indexers, for tests that play later watch events.
	fooIndexer, deploymentIndexer cache.Indexer
	// clock is the controller's clock, at fixedNow until a test steps it.
	clock *testingclock.FakeClock
}

func newFixture(t *testing.T) *fixture {
	return &fixture{t: t}
}

// withFoo puts foo in the cache and the fake API.
func (f *fixture) withFoo(foo *samplev1alpha1.Foo) *fixture {
	f.foos = append(f.foos, foo)
	f.objects = append(f.objects, foo)
	return f
}

// withDeployment puts dep in the cache and the fake API.
func (f *fixture) withDeployment(dep *appsv1.Deployment) *fixture {
	f.deployments = append(f.deployments, dep)
	f.kubeobjects = append(f.kubeobjects, dep)
	return f
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
	// check the resourceVersion precondition, replace the status, bump the
	// resourceVersion. The integration tests show the real thing.
	f.client.PrependReactor("patch", "foos", func(a core.Action) (bool, runtime.Object, error) {
		p := a.(core.PatchAction)
		if p.GetPatchType() != types.ApplyPatchType {
			return false, nil, nil
		}
		obj, err := f.client.Tracker().Get(a.GetResource(), a.GetNamespace(), p.GetName())
		if err != nil {
			return true, nil, err
		}
		stored := obj.(*samplev1alpha1.Foo).DeepCopy()
		var applied samplev1alpha1.Foo
		if err := json.Unmarshal(p.GetPatch(), &applied); err != nil {
			return true, nil, err
		}
		if applied.ResourceVersion != "" && applied.ResourceVersion != stored.ResourceVersion {
			return true, nil, apierrors.NewConflict(a.GetResource().GroupResource(), stored.Name, errors.New("stale resourceVersion"))
		}
		stored.Status = applied.Status
		stored.ResourceVersion = bumpRV(stored.ResourceVersion)
		return true, stored, f.client.Tracker().Update(a.GetResource(), stored, stored.Namespace)
	})
	f.client.PrependReactor("*", "*", record)

	i := informers.NewSharedInformerFactory(f.client, 0)
	k8sI := kubeinformers.NewSharedInformerFactory(f.kubeclient, 0)
	c, err := NewController(ctx, f.kubeclient, f.client,
		k8sI.Apps().V1().Deployments(), i.Samplecontroller().V1alpha1().Foos(), f.recorder)
	if err != nil {
		f.t.Fatalf("NewController: %v", err)
	}
	f.clock = testingclock.NewFakeClock(fixedNow)
	c.clock = f.clock
	f.fooIndexer = i.Samplecontroller().V1alpha1().Foos().Informer().GetIndexer()
	f.deploymentIndexer = k8sI.Apps().V1().Deployments().Informer().GetIndexer()

	for _, foo := range f.foos {
		if err := i.Samplecontroller().V1alpha1().Foos().Informer().GetIndexer().Add(foo); err != nil {
			f.t.Fatal(err)
		}
	}
	for _, d := range f.deployments {
		if err := k8sI.Apps().V1().Deployments().Informer().GetIndexer().Add(d); err != nil {
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
	for _, foo := range f.foos {
		out = append(out, foo.DeepCopy())
	}
	for _, d := range f.deployments {
		out = append(out, d.DeepCopy())
	}
	return out
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

// --- object builders ---

const testNS = "default"

func newFoo(name string, replicas int32) *samplev1alpha1.Foo {
	return &samplev1alpha1.Foo{
		TypeMeta: metav1.TypeMeta{APIVersion: samplev1alpha1.GroupVersion.String(), Kind: "Foo"},
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: testNS, UID: types.UID(name + "-uid"),
			Generation: 1, ResourceVersion: "10",
		},
		Spec: samplev1alpha1.FooSpec{
			DeploymentName: name + "-deploy",
			Replicas:       ptr.To(replicas),
			Image:          "nginx:1.27",
			DeletionPolicy: samplev1alpha1.DeletionPolicyDelete,
		},
	}
}

// ownedDeployment is the Deployment the controller would create for foo,
// fully rolled out.
func ownedDeployment(foo *samplev1alpha1.Foo) *appsv1.Deployment {
	r := plan.Replicas(foo)
	return &appsv1.Deployment{
		TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{
			Name: foo.Spec.DeploymentName, Namespace: foo.Namespace, UID: types.UID(foo.Spec.DeploymentName + "-uid"),
			Generation: 1, ResourceVersion: "20",
			Labels: plan.Labels(foo),
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: samplev1alpha1.GroupVersion.String(), Kind: "Foo",
				Name: foo.Name, UID: foo.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(r),
			Selector: &metav1.LabelSelector{MatchLabels: plan.SelectorLabels(foo)},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: plan.Labels(foo)},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: plan.ContainerName, Image: plan.Image(foo),
				}}},
			},
		},
		Status: appsv1.DeploymentStatus{
			ObservedGeneration: 1, Replicas: r, UpdatedReplicas: r, ReadyReplicas: r, AvailableReplicas: r,
		},
	}
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
func withConvergedStatus(foo *samplev1alpha1.Foo, dep *appsv1.Deployment, conflict bool) *samplev1alpha1.Foo {
	foo.Status = plan.Status(foo, plan.Observation{Deployment: dep, Conflict: conflict},
		metav1.NewTime(fixedNow.Add(-time.Hour)))
	return foo
}

func keyOf(foo *samplev1alpha1.Foo) cache.ObjectName {
	return cache.ObjectName{Namespace: foo.Namespace, Name: foo.Name}
}

// --- action helpers ---

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

func assertActions(t *testing.T, what string, got []core.Action, want []string) {
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
func appliedStatus(t *testing.T, actions []core.Action) samplev1alpha1.FooStatus {
	t.Helper()
	for _, a := range actions {
		if p, ok := a.(core.PatchAction); ok && a.GetSubresource() == "status" {
			var foo samplev1alpha1.Foo
			if err := json.Unmarshal(p.GetPatch(), &foo); err != nil {
				t.Fatalf("decoding applied status: %v", err)
			}
			return foo.Status
		}
	}
	t.Fatalf("no status apply among %q", describeAll(actions))
	return samplev1alpha1.FooStatus{}
}

func readyOf(t *testing.T, st samplev1alpha1.FooStatus) metav1.Condition {
	t.Helper()
	for _, c := range st.Conditions {
		if c.Type == samplev1alpha1.ConditionReady {
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

// --- syncHandler cases ---

func TestSyncFooGoneDoesNothing(t *testing.T) {
	f := newFixture(t)
	kube, foos, evts, err := f.sync(cache.ObjectName{Namespace: testNS, Name: "missing"})
	if err != nil {
		t.Fatalf("sync of a deleted Foo: %v", err)
	}
	assertActions(t, "kube", kube, nil)
	assertActions(t, "foo", foos, nil)
	assertEvents(t, evts)
}

func TestSyncCreatesMissingDeployment(t *testing.T) {
	foo := newFoo("a", 3)
	f := newFixture(t).withFoo(foo)
	// The first status, "progressing", waits (TestSyncDefersANewFoosFirstStatus).
	kube, foos, evts, err := f.syncPaced(keyOf(foo))
	if err != nil {
		t.Fatal(err)
	}
	assertActions(t, "kube", kube, []string{"patch deployments a-deploy " + applyPatch})
	assertActions(t, "foo", foos, []string{"patch foos/status a " + applyPatch})
	assertEvents(t, evts, "Normal Created")

	d := appliedDeployment(t, kube)
	if got := d.Spec.Replicas; got == nil || *got != 3 {
		t.Errorf("replicas: got %v, want 3", got)
	}
	if got := d.Spec.Template.Spec.Containers; len(got) != 1 || got[0].Image != "nginx:1.27" || got[0].Name != plan.ContainerName {
		t.Errorf("containers: got %+v", got)
	}
	ref := metav1.GetControllerOf(d)
	if ref == nil || ref.UID != foo.UID || ref.Kind != "Foo" || ref.APIVersion != "samplecontroller.example.com/v1alpha1" {
		t.Errorf("controller reference: got %+v", ref)
	}
	if got := d.Spec.Selector.MatchLabels[plan.FooUIDLabel]; got != string(foo.UID) {
		t.Errorf("selector must be unique to the Foo (its UID): got %q", got)
	}
	if got := d.Spec.Template.Labels[plan.FooUIDLabel]; got != string(foo.UID) {
		t.Errorf("pod template must carry the selector label: got %q", got)
	}

	st := appliedStatus(t, foos)
	if st.ObservedGeneration != foo.Generation {
		t.Errorf("observedGeneration: got %d, want %d", st.ObservedGeneration, foo.Generation)
	}
	if c := readyOf(t, st); c.Status != metav1.ConditionFalse || c.Reason != samplev1alpha1.ReasonProgressing {
		t.Errorf("Ready after create: got %s/%s, want False/Progressing", c.Status, c.Reason)
	}
}

// TestSyncDefersANewFoosFirstStatus: a new Foo's first status waits
// statusProgressInterval when all it would say is "progressing", and is
// written at once when it has more to say.
func TestSyncDefersANewFoosFirstStatus(t *testing.T) {
	t.Run("progressing", func(t *testing.T) {
		foo := newFoo("a", 1)
		f := newFixture(t).withFoo(foo)
		_, ctx := ktesting.NewTestContext(t)
		c := f.newController(ctx)
		for _, after := range []time.Duration{0, statusProgressInterval / 2} {
			f.clock.SetTime(fixedNow.Add(after))
			res, err := c.syncHandler(ctx, keyOf(foo))
			if err != nil {
				t.Fatal(err)
			}
			if want := statusProgressInterval - after; res.requeueAfter != want {
				t.Errorf("after %v: the held-back status must come back when it may be written: requeue after %v, want %v",
					after, res.requeueAfter, want)
			}
		}
		assertActions(t, "foo", f.client.Actions(), nil)
		if c.workqueue.Len() != 0 {
			t.Error("the sync must not queue the key itself; handleErr does")
		}
		f.clock.SetTime(fixedNow.Add(statusProgressInterval))
		if res, err := c.syncHandler(ctx, keyOf(foo)); err != nil || res != (syncResult{}) {
			t.Fatal(res, err)
		}
		assertActions(t, "foo", f.client.Actions(), []string{"patch foos/status a " + applyPatch})
		if r := readyOf(t, appliedStatus(t, f.client.Actions())); r.Reason != samplev1alpha1.ReasonProgressing {
			t.Errorf("first status: Ready %s/%s", r.Status, r.Reason)
		}
	})
	t.Run("already available", func(t *testing.T) {
		foo := newFoo("a", 1)
		dep := ownedDeployment(foo)
		dep.Status = appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 1, UpdatedReplicas: 1, ReadyReplicas: 1, AvailableReplicas: 1}
		_, foos, _, err := newFixture(t).withFoo(foo).withDeployment(dep).sync(keyOf(foo))
		if err != nil {
			t.Fatal(err)
		}
		assertActions(t, "foo", foos, []string{"patch foos/status a " + applyPatch})
	})
}

func TestSyncConvergedSendsNothing(t *testing.T) {
	foo := newFoo("a", 2)
	dep := ownedDeployment(foo)
	withConvergedStatus(foo, dep, false)
	f := newFixture(t).withFoo(foo).withDeployment(dep)
	kube, foos, evts, err := f.sync(keyOf(foo))
	if err != nil {
		t.Fatal(err)
	}
	assertActions(t, "kube", kube, nil)
	assertActions(t, "foo", foos, nil)
	assertEvents(t, evts)
}

func TestSyncIgnoresFieldsItDoesNotOwn(t *testing.T) {
	foo := newFoo("a", 2)
	dep := ownedDeployment(foo)
	withConvergedStatus(foo, dep, false)
	// Others may add labels, annotations and containers, and the API server
	// fills in defaults: none of that is drift.
	dep.Labels["team"] = "blue"
	dep.Annotations = map[string]string{"deployment.kubernetes.io/revision": "1"}
	dep.Spec.Template.Spec.Containers = append(dep.Spec.Template.Spec.Containers, corev1.Container{Name: "sidecar", Image: "busybox"})
	dep.Spec.Template.Spec.Containers[0].ImagePullPolicy = corev1.PullIfNotPresent
	f := newFixture(t).withFoo(foo).withDeployment(dep)
	kube, foos, _, err := f.sync(keyOf(foo))
	if err != nil {
		t.Fatal(err)
	}
	assertActions(t, "kube", kube, nil)
	assertActions(t, "foo", foos, nil)
}

func TestSyncCorrectsDrift(t *testing.T) {
	tests := []struct {
		name      string
		mutate    func(*appsv1.Deployment)
		wantEvent string
	}{
		{"replicas", func(d *appsv1.Deployment) { d.Spec.Replicas = ptr.To[int32](7) }, "Normal Scaled"},
		{"image", func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Image = "evil:1" }, "Normal Updated"},
		{"container removed", func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Name = "renamed" }, "Normal Updated"},
		{"label value", func(d *appsv1.Deployment) { d.Labels[plan.ManagedByLabel] = "someone" }, "Normal Updated"},
		{"label removed", func(d *appsv1.Deployment) { delete(d.Labels, plan.ManagedByLabel) }, "Normal Updated"},
		{"template label", func(d *appsv1.Deployment) { delete(d.Spec.Template.Labels, plan.ManagedByLabel) }, "Normal Updated"},
		{"owner reference removed", func(d *appsv1.Deployment) { d.OwnerReferences = nil }, "Normal Adopted"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			foo := newFoo("a", 2)
			dep := ownedDeployment(foo)
			withConvergedStatus(foo, dep, false)
			tc.mutate(dep)
			f := newFixture(t).withFoo(foo).withDeployment(dep)
			kube, foos, evts, err := f.sync(keyOf(foo))
			if err != nil {
				t.Fatal(err)
			}
			assertActions(t, "kube", kube, []string{"patch deployments a-deploy " + applyPatch})
			// (Whether status is written then depends on the generation the
			// API server gives the put-back Deployment: the status tests
			// cover that.)
			_ = foos
			assertEvents(t, evts, tc.wantEvent)
			d := appliedDeployment(t, kube)
			if len(plan.Drift(foo, d)) != 0 {
				t.Errorf("applied Deployment still drifts: %v", plan.Drift(foo, d))
			}
		})
	}
}

func TestSyncCorrectionsAreRateLimited(t *testing.T) {
	// Another client keeps scaling our Deployment to 7: each sync sees it
	// changed again (a newer object in the informer cache).
	foo := newFoo("a", 2)
	dep := ownedDeployment(foo)
	withConvergedStatus(foo, dep, false)
	f := newFixture(t).withFoo(foo).withDeployment(dep)
	_, ctx := ktesting.NewTestContext(t)
	c := f.newController(ctx)
	rv := 1000
	fight := func() {
		t.Helper()
		rv++
		changed := dep.DeepCopy()
		changed.ResourceVersion = strconv.Itoa(rv)
		changed.Spec.Replicas = ptr.To[int32](7)
		if err := f.deploymentIndexer.Update(changed); err != nil {
			t.Fatal(err)
		}
	}
	applies := func() int {
		n := 0
		for _, a := range f.kubeclient.Actions() {
			if a.GetVerb() == "patch" && a.GetResource().Resource == "deployments" {
				n++
			}
		}
		return n
	}

	for i := range correctionBurst + 3 {
		fight()
		res, err := c.syncHandler(ctx, keyOf(foo))
		if err != nil {
			t.Fatalf("sync %d: %v", i, err)
		}
		if held := i >= correctionBurst; held != (res.requeueAfter > 0) || res.requeueAfter > correctionEvery {
			t.Errorf("sync %d: requeue after %v; a held-back correction must come back within %v, an applied one not at all",
				i, res.requeueAfter, correctionEvery)
		}
	}
	if got := applies(); got != correctionBurst {
		t.Errorf("a fight of %d changes at one instant got %d corrections, want the burst of %d",
			correctionBurst+3, got, correctionBurst)
	}
	if c.workqueue.Len() != 0 {
		t.Errorf("the sync must not queue the key itself; handleErr does (queue length %d)", c.workqueue.Len())
	}
	// One Event per correction until the fight is noticed, then one
	// Warning, then silence.
	wantEvents := slices.Repeat([]string{"Normal Scaled"}, correctionBurst)
	assertEvents(t, drainEvents(f.recorder), append(wantEvents, "Warning Contested")...)
	if n := len(f.client.Actions()); n != 0 {
		t.Errorf("the Foo's status must not follow a Deployment about to be put back: %s", describeAll(f.client.Actions()))
	}

	// One period later there is a token for one more.
	f.clock.Step(correctionEvery)
	fight()
	fight()
	for range 2 {
		if _, err := c.syncHandler(ctx, keyOf(foo)); err != nil {
			t.Fatal(err)
		}
	}
	if got := applies(); got != correctionBurst+1 {
		t.Errorf("after one period: %d corrections, want %d", got, correctionBurst+1)
	}
	assertEvents(t, drainEvents(f.recorder))

	// The user scales the Foo: what it declares changed, so the change is
	// applied at once, however long the fight has gone on.
	stored, err := f.client.SamplecontrollerV1alpha1().Foos(foo.Namespace).Get(ctx, foo.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	scaled := stored.DeepCopy()
	scaled.Spec.Replicas = ptr.To[int32](3)
	scaled.Generation = 2
	if _, err := f.client.SamplecontrollerV1alpha1().Foos(foo.Namespace).Update(ctx, scaled, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := f.fooIndexer.Update(scaled); err != nil {
		t.Fatal(err)
	}
	fight()
	if _, err := c.syncHandler(ctx, keyOf(foo)); err != nil {
		t.Fatal(err)
	}
	if got := applies(); got != correctionBurst+2 {
		t.Errorf("a new generation must be applied at once: %d applies, want %d", got, correctionBurst+2)
	}
}

func TestSyncNoEventWhenTheAPIServerOverridesUs(t *testing.T) {
	// A mutating webhook pins the image: our apply "succeeds" but the
	// answer still carries the other image. That is not a change worth an
	// Event (it would be one per sync).
	foo := newFoo("a", 2)
	dep := ownedDeployment(foo)
	withConvergedStatus(foo, dep, false)
	dep.Spec.Template.Spec.Containers[0].Image = "nginx@sha256:0123"
	f := newFixture(t).withFoo(foo).withDeployment(dep)
	_, ctx := ktesting.NewTestContext(t)
	c := f.newController(ctx)
	f.kubeclient.PrependReactor("patch", "deployments", func(core.Action) (bool, runtime.Object, error) {
		return true, dep.DeepCopy(), nil
	})
	if _, err := c.syncHandler(ctx, keyOf(foo)); err != nil {
		t.Fatal(err)
	}
	assertActions(t, "kube", f.kubeclient.Actions(), []string{"patch deployments a-deploy " + applyPatch})
	assertEvents(t, drainEvents(f.recorder))
}

func TestSyncScaledFooScalesDeployment(t *testing.T) {
	foo := newFoo("a", 2)
	dep := ownedDeployment(foo)
	withConvergedStatus(foo, dep, false)
	foo.Spec.Replicas = ptr.To[int32](5) // kubectl scale foo/a --replicas=5
	foo.Generation = 2
	f := newFixture(t).withFoo(foo).withDeployment(dep)
	kube, foos, evts, err := f.sync(keyOf(foo))
	if err != nil {
		t.Fatal(err)
	}
	assertActions(t, "kube", kube, []string{"patch deployments a-deploy " + applyPatch})
	assertActions(t, "foo", foos, []string{"patch foos/status a " + applyPatch})
	assertEvents(t, evts, "Normal Scaled")
	if r := appliedDeployment(t, kube).Spec.Replicas; r == nil || *r != 5 {
		t.Errorf("applied replicas: got %v, want 5", r)
	}
	st := appliedStatus(t, foos)
	if st.ObservedGeneration != 2 {
		t.Errorf("observedGeneration: got %d, want 2", st.ObservedGeneration)
	}
}

func TestSyncRenameCreatesNewAndDeletesOld(t *testing.T) {
	foo := newFoo("a", 1)
	old := ownedDeployment(foo)
	withConvergedStatus(foo, old, false)
	foo.Spec.DeploymentName = "a-renamed"
	foo.Generation = 2
	f := newFixture(t).withFoo(foo).withDeployment(old)
	kube, foos, evts, err := f.sync(keyOf(foo))
	if err != nil {
		t.Fatal(err)
	}
	assertActions(t, "kube", kube, []string{
		"patch deployments a-renamed " + applyPatch,
		"delete deployments a-deploy",
	})
	assertActions(t, "foo", foos, []string{"patch foos/status a " + applyPatch})
	assertEvents(t, evts, "Normal Created", "Normal Pruned")
	del := kube[1].(core.DeleteActionImpl)
	if p := del.DeleteOptions.Preconditions; p == nil || p.UID == nil || *p.UID != old.UID {
		t.Errorf("delete must be preconditioned on the old Deployment's UID, got %+v", p)
	}
}

func TestSyncDoesNotPruneOthersDeployments(t *testing.T) {
	foo := newFoo("a", 1)
	dep := ownedDeployment(foo)
	withConvergedStatus(foo, dep, false)
	other := newFoo("b", 1)
	othersDep := ownedDeployment(other) // controlled by another Foo
	f := newFixture(t).withFoo(foo).withFoo(other).withDeployment(dep).withDeployment(othersDep)
	kube, _, _, err := f.sync(keyOf(foo))
	if err != nil {
		t.Fatal(err)
	}
	assertActions(t, "kube", kube, nil)
}

func TestSyncConflict(t *testing.T) {
	foreignFoo := newFoo("b", 1)
	foreignFoo.Spec.DeploymentName = "a-deploy"
	otherGroupOwner := foreignDeployment("a-deploy")
	otherGroupOwner.OwnerReferences = []metav1.OwnerReference{{
		APIVersion: "other.example.com/v1", Kind: "Foo", Name: "a", UID: "a-uid", Controller: ptr.To(true),
	}}
	tests := []struct {
		name string
		dep  *appsv1.Deployment
	}{
		{"unowned Deployment", foreignDeployment("a-deploy")},
		{"controlled by another Foo", ownedDeployment(foreignFoo)},
		{"controlled by a Foo kind of another API group", otherGroupOwner},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			foo := newFoo("a", 1)
			f := newFixture(t).withFoo(foo).withDeployment(tc.dep)
			kube, foos, evts, err := f.sync(keyOf(foo))
			if err != nil {
				t.Fatalf("a conflict is permanent and must not return an error (it would hot-loop in backoff): %v", err)
			}
			assertActions(t, "kube", kube, nil) // the foreign object is untouched
			assertActions(t, "foo", foos, []string{"patch foos/status a " + applyPatch})
			assertEvents(t, evts, "Warning DeploymentConflict")
			c := readyOf(t, appliedStatus(t, foos))
			if c.Status != metav1.ConditionFalse || c.Reason != samplev1alpha1.ReasonDeploymentConflict {
				t.Errorf("Ready: got %s/%s, want False/DeploymentConflict", c.Status, c.Reason)
			}
		})
	}
}

func TestSyncConflictAlreadyReportedIsSilent(t *testing.T) {
	foo := newFoo("a", 1)
	dep := foreignDeployment("a-deploy")
	withConvergedStatus(foo, dep, true)
	f := newFixture(t).withFoo(foo).withDeployment(dep)
	kube, foos, evts, err := f.sync(keyOf(foo))
	if err != nil {
		t.Fatal(err)
	}
	assertActions(t, "kube", kube, nil)
	assertActions(t, "foo", foos, nil)
	assertEvents(t, evts) // one Event per conflict, not one per sync
}

func TestSyncConflictKeepsOldDeploymentOnRename(t *testing.T) {
	foo := newFoo("a", 1)
	old := ownedDeployment(foo)
	foo.Spec.DeploymentName = "taken"
	f := newFixture(t).withFoo(foo).withDeployment(old).withDeployment(foreignDeployment("taken"))
	kube, _, _, err := f.sync(keyOf(foo))
	if err != nil {
		t.Fatal(err)
	}
	// The new name is blocked: the old Deployment keeps serving.
	assertActions(t, "kube", kube, nil)
}

func TestSyncStatusFollowsDeployment(t *testing.T) {
	foo := newFoo("a", 3)
	dep := ownedDeployment(foo)
	dep.Status = appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 3, UpdatedReplicas: 3, ReadyReplicas: 1, AvailableReplicas: 1}
	withConvergedStatus(foo, dep, false)
	dep = dep.DeepCopy()
	dep.Status.ReadyReplicas, dep.Status.AvailableReplicas = 3, 3
	f := newFixture(t).withFoo(foo).withDeployment(dep)
	kube, foos, evts, err := f.sync(keyOf(foo))
	if err != nil {
		t.Fatal(err)
	}
	assertActions(t, "kube", kube, nil)
	assertActions(t, "foo", foos, []string{"patch foos/status a " + applyPatch})
	assertEvents(t, evts)
	st := appliedStatus(t, foos)
	if st.AvailableReplicas != 3 || st.ReadyReplicas != 3 || st.Replicas != 3 {
		t.Errorf("counts: got %+v", st)
	}
	c := readyOf(t, st)
	if c.Status != metav1.ConditionTrue || c.Reason != samplev1alpha1.ReasonDeploymentAvailable {
		t.Errorf("Ready: got %s/%s", c.Status, c.Reason)
	}
	if !c.LastTransitionTime.Time.Equal(fixedNow) {
		t.Errorf("Ready flipped, so lastTransitionTime must be now: got %v", c.LastTransitionTime)
	}
	if st.Selector != plan.FooUIDLabel+"=a-uid" {
		t.Errorf("selector for the scale subresource: got %q", st.Selector)
	}
}

func TestSyncPacesProgressOnlyStatus(t *testing.T) {
	// A rollout of 3 replicas, watched step by step.
	foo := newFoo("a", 3)
	dep := ownedDeployment(foo)
	dep.Status = appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 3, UpdatedReplicas: 1}
	withConvergedStatus(foo, dep, false)
	f := newFixture(t).withFoo(foo).withDeployment(dep)
	_, ctx := ktesting.NewTestContext(t)
	c := f.newController(ctx)
	rv := 100
	var last syncResult
	step := func(updated, available int32) {
		t.Helper()
		rv++
		d := dep.DeepCopy()
		d.ResourceVersion = strconv.Itoa(rv)
		d.Status.UpdatedReplicas, d.Status.ReadyReplicas, d.Status.AvailableReplicas = updated, available, available
		if err := f.deploymentIndexer.Update(d); err != nil {
			t.Fatal(err)
		}
		var err error
		if last, err = c.syncHandler(ctx, keyOf(foo)); err != nil {
			t.Fatal(err)
		}
	}
	writes := func() int { return len(f.client.Actions()) }

	step(2, 0) // the first change since the controller started: written
	if writes() != 1 {
		t.Fatalf("first progress update: %d writes, want 1", writes())
	}
	step(3, 0) // counts only, right after: held back
	step(3, 1)
	if writes() != 1 {
		t.Errorf("progress-only updates within %v of the last write must wait: %d writes", statusProgressInterval, writes())
	}
	if last.requeueAfter <= 0 || last.requeueAfter > statusProgressInterval {
		t.Errorf("the held-back update must come back within %v: requeue after %v", statusProgressInterval, last.requeueAfter)
	}
	f.clock.Step(statusProgressInterval)
	step(3, 2) // the interval has passed: written
	if writes() != 2 {
		t.Errorf("a progress update after the interval: %d writes, want 2", writes())
	}
	step(3, 3) // Ready flips: written at once
	if writes() != 3 {
		t.Errorf("Ready flipping must be written at once: %d writes, want 3", writes())
	}
	if st := appliedStatus(t, f.client.Actions()[2:]); readyOf(t, st).Status != metav1.ConditionTrue || st.AvailableReplicas != 3 {
		t.Errorf("last status written: %+v", st)
	}
}

func TestSyncOrphanPolicyAddsFinalizer(t *testing.T) {
	foo := newFoo("a", 1)
	foo.Spec.DeletionPolicy = samplev1alpha1.DeletionPolicyOrphan
	dep := ownedDeployment(foo)
	withConvergedStatus(foo, dep, false)
	f := newFixture(t).withFoo(foo).withDeployment(dep)
	kube, foos, _, err := f.sync(keyOf(foo))
	if err != nil {
		t.Fatal(err)
	}
	assertActions(t, "kube", kube, nil)
	assertActions(t, "foo", foos, []string{"patch foos a " + mergePatch})
	var patch struct {
		Metadata struct {
			ResourceVersion string   `json:"resourceVersion"`
			Finalizers      []string `json:"finalizers"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(foos[0].(core.PatchAction).GetPatch(), &patch); err != nil {
		t.Fatal(err)
	}
	if patch.Metadata.ResourceVersion != foo.ResourceVersion || len(patch.Metadata.Finalizers) != 1 ||
		patch.Metadata.Finalizers[0] != samplev1alpha1.OrphanFinalizer {
		t.Errorf("finalizer patch: got %s", foos[0].(core.PatchAction).GetPatch())
	}
}

func TestSyncDeletePolicyRemovesFinalizer(t *testing.T) {
	foo := newFoo("a", 1)
	foo.Finalizers = []string{"other.example.com/keep", samplev1alpha1.OrphanFinalizer}
	dep := ownedDeployment(foo)
	withConvergedStatus(foo, dep, false)
	f := newFixture(t).withFoo(foo).withDeployment(dep)
	_, foos, _, err := f.sync(keyOf(foo))
	if err != nil {
		t.Fatal(err)
	}
	assertActions(t, "foo", foos, []string{"patch foos a " + mergePatch})
	if p := string(foos[0].(core.PatchAction).GetPatch()); !strings.Contains(p, `"finalizers":["other.example.com/keep"]`) {
		t.Errorf("must remove only our finalizer: %s", p)
	}
}

func deletingFoo(policy samplev1alpha1.DeletionPolicy, finalizers ...string) *samplev1alpha1.Foo {
	foo := newFoo("a", 1)
	foo.Spec.DeletionPolicy = policy
	foo.DeletionTimestamp = ptr.To(metav1.NewTime(fixedNow))
	foo.Finalizers = finalizers
	return foo
}

func TestSyncOrphanDeletion(t *testing.T) {
	foo := deletingFoo(samplev1alpha1.DeletionPolicyOrphan, samplev1alpha1.OrphanFinalizer)
	dep := ownedDeployment(foo)
	f := newFixture(t).withFoo(foo).withDeployment(dep)
	kube, foos, evts, err := f.sync(keyOf(foo))
	if err != nil {
		t.Fatal(err)
	}
	assertActions(t, "kube", kube, []string{"list deployments", "patch deployments a-deploy " + jsonPatch})
	assertActions(t, "foo", foos, []string{"patch foos a " + mergePatch})
	// Order matters: the owner reference goes first, the finalizer last.
	if want := []string{"list deployments", "patch deployments a-deploy " + jsonPatch, "patch foos a " + mergePatch}; strings.Join(f.ordered, "|") != strings.Join(want, "|") {
		t.Errorf("request order: got %q, want %q", f.ordered, want)
	}
	assertEvents(t, evts, "Normal Orphaned")
	if !strings.Contains(string(kube[1].(core.PatchAction).GetPatch()), `"op":"test"`) {
		t.Errorf("owner reference removal must be guarded by a test op: %s", kube[1].(core.PatchAction).GetPatch())
	}
}

func TestSyncOrphanDeletionAfterCrash(t *testing.T) {
	// The owner reference was removed, then the process died before the
	// finalizer went: the retry only removes the finalizer.
	foo := deletingFoo(samplev1alpha1.DeletionPolicyOrphan, samplev1alpha1.OrphanFinalizer)
	dep := ownedDeployment(foo)
	dep.OwnerReferences = nil
	f := newFixture(t).withFoo(foo).withDeployment(dep)
	kube, foos, evts, err := f.sync(keyOf(foo))
	if err != nil {
		t.Fatal(err)
	}
	assertActions(t, "kube", kube, []string{"list deployments"})
	assertActions(t, "foo", foos, []string{"patch foos a " + mergePatch})
	assertEvents(t, evts)
}

func TestSyncOrphanDeletionFindsUncachedDeployment(t *testing.T) {
	foo := deletingFoo(samplev1alpha1.DeletionPolicyOrphan, samplev1alpha1.OrphanFinalizer)
	f := newFixture(t).withFoo(foo)
	f.kubeobjects = append(f.kubeobjects, ownedDeployment(foo)) // in the API, not yet in the cache
	kube, _, _, err := f.sync(keyOf(foo))
	if err != nil {
		t.Fatal(err)
	}
	assertActions(t, "kube", kube, []string{"list deployments", "patch deployments a-deploy " + jsonPatch})
}

func TestSyncDeletionWithoutOurFinalizer(t *testing.T) {
	for _, policy := range []samplev1alpha1.DeletionPolicy{samplev1alpha1.DeletionPolicyDelete, samplev1alpha1.DeletionPolicyOrphan} {
		t.Run(string(policy), func(t *testing.T) {
			foo := deletingFoo(policy, "other.example.com/keep")
			f := newFixture(t).withFoo(foo).withDeployment(ownedDeployment(foo))
			kube, foos, _, err := f.sync(keyOf(foo))
			if err != nil {
				t.Fatal(err)
			}
			// Garbage collection deletes the Deployment; nothing for us.
			assertActions(t, "kube", kube, nil)
			assertActions(t, "foo", foos, nil)
		})
	}
}

func TestSyncDeletionSwitchedBackToDelete(t *testing.T) {
	foo := deletingFoo(samplev1alpha1.DeletionPolicyDelete, samplev1alpha1.OrphanFinalizer)
	f := newFixture(t).withFoo(foo).withDeployment(ownedDeployment(foo))
	kube, foos, _, err := f.sync(keyOf(foo))
	if err != nil {
		t.Fatal(err)
	}
	assertActions(t, "kube", kube, nil)
	assertActions(t, "foo", foos, []string{"patch foos a " + mergePatch})
}

func TestSyncTransientErrors(t *testing.T) {
	deployments := schema.GroupResource{Group: "apps", Resource: "deployments"}
	tests := []struct {
		name string
		err  error
	}{
		{"server error", apierrors.NewInternalError(errors.New("etcd is sad"))},
		{"write conflict", apierrors.NewConflict(deployments, "a-deploy", errors.New("stale"))},
		{"too many requests", apierrors.NewTooManyRequests("slow down", 1)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			foo := newFoo("a", 1)
			f := newFixture(t).withFoo(foo)
			_, ctx := ktesting.NewTestContext(t)
			c := f.newController(ctx)
			f.kubeclient.PrependReactor("patch", "deployments", func(core.Action) (bool, runtime.Object, error) {
				return true, nil, tc.err
			})
			if _, err := c.syncHandler(ctx, keyOf(foo)); !errors.Is(err, tc.err) {
				t.Fatalf("got %v, want %v", err, tc.err)
			}
			// Through the worker: the key is retried with backoff.
			c.workqueue.Add(keyOf(foo))
			if !c.processNextWorkItem(ctx, ctx) {
				t.Fatal("worker stopped")
			}
			if n := c.workqueue.NumRequeues(keyOf(foo)); n != 1 {
				t.Errorf("requeues: got %d, want 1", n)
			}
		})
	}
}

func TestSyncStaleFooConflictIsRetried(t *testing.T) {
	// The cached Foo is older than the stored one: the finalizer patch,
	// preconditioned on the cached resourceVersion, gets a 409 and the key
	// goes back to the queue with backoff.
	foo := newFoo("a", 1)
	foo.Spec.DeletionPolicy = samplev1alpha1.DeletionPolicyOrphan
	f := newFixture(t).withFoo(foo)
	_, ctx := ktesting.NewTestContext(t)
	c := f.newController(ctx)
	f.client.PrependReactor("patch", "foos", func(a core.Action) (bool, runtime.Object, error) {
		if a.(core.PatchAction).GetPatchType() == types.MergePatchType {
			return true, nil, apierrors.NewConflict(schema.GroupResource{Group: samplev1alpha1.GroupName, Resource: "foos"}, "a", errors.New("stale"))
		}
		return false, nil, nil
	})
	if _, err := c.syncHandler(ctx, keyOf(foo)); !apierrors.IsConflict(err) {
		t.Fatalf("want a conflict, got %v", err)
	}
	c.workqueue.Add(keyOf(foo))
	c.processNextWorkItem(ctx, ctx)
	if n := c.workqueue.NumRequeues(keyOf(foo)); n != 1 {
		t.Errorf("requeues: got %d, want 1", n)
	}
	assertActions(t, "kube", f.kubeclient.Actions(), nil) // nothing done past the failed step
}

func TestSyncReadsItsOwnWrites(t *testing.T) {
	// Right after a sync created the Deployment and wrote status, the
	// informers have not seen either write yet. A second sync of the same
	// key (say, prompted by the Deployment's watch event racing the
	// Foo's) must not create it again, write status again or repeat the
	// Event.
	foo := newFoo("a", 2)
	f := newFixture(t).withFoo(foo)
	_, ctx := ktesting.NewTestContext(t)
	c := f.newController(ctx)
	if _, err := c.syncHandler(ctx, keyOf(foo)); err != nil {
		t.Fatal(err)
	}
	if n := len(drainEvents(f.recorder)); n != 1 {
		t.Fatalf("first sync: %d events, want 1", n)
	}
	f.kubeclient.ClearActions()
	f.client.ClearActions()
	if _, err := c.syncHandler(ctx, keyOf(foo)); err != nil {
		t.Fatal(err)
	}
	assertActions(t, "kube", f.kubeclient.Actions(), nil)
	assertActions(t, "foo", f.client.Actions(), nil)
	assertEvents(t, drainEvents(f.recorder))
}

func TestSyncWaitsForAnOldDeploymentToGo(t *testing.T) {
	recreated := newFoo("a", 1)
	predecessor := recreated.DeepCopy()
	predecessor.UID = "a-previous-uid"
	terminating := ownedDeployment(recreated)
	terminating.DeletionTimestamp = ptr.To(metav1.NewTime(fixedNow))
	terminating.Finalizers = []string{"foregroundDeletion"}
	tests := []struct {
		name string
		dep  *appsv1.Deployment
	}{
		{"left by a deleted Foo of the same name", ownedDeployment(predecessor)},
		{"being deleted", terminating},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			foo := recreated.DeepCopy()
			f := newFixture(t).withFoo(foo).withDeployment(tc.dep)
			kube, foos, evts, err := f.syncPaced(keyOf(foo))
			if err != nil {
				t.Fatal(err)
			}
			assertActions(t, "kube", kube, nil) // neither adopted nor updated
			assertActions(t, "foo", foos, []string{"patch foos/status a " + applyPatch})
			assertEvents(t, evts) // no Warning: it resolves by itself
			if c := readyOf(t, appliedStatus(t, foos)); c.Reason != samplev1alpha1.ReasonProgressing {
				t.Errorf("Ready: %s/%s %q", c.Status, c.Reason, c.Message)
			}
		})
	}
}

func TestSyncReportsRefusedDeployment(t *testing.T) {
	foo := newFoo("a", 1)
	f := newFixture(t).withFoo(foo)
	_, ctx := ktesting.NewTestContext(t)
	c := f.newController(ctx)
	refusal := apierrors.NewForbidden(schema.GroupResource{Group: "apps", Resource: "deployments"}, "a-deploy",
		errors.New("exceeded quota: compute, requested: pods=1, used: pods=10, limited: pods=10"))
	f.kubeclient.PrependReactor("patch", "deployments", func(core.Action) (bool, runtime.Object, error) {
		return true, nil, refusal
	})
	_, err := c.syncHandler(ctx, keyOf(foo))
	if !errors.Is(err, refusal) {
		t.Fatalf("the refusal must still be returned (for retry with backoff): %v", err)
	}
	assertActions(t, "foo", f.client.Actions(), []string{"patch foos/status a " + applyPatch})
	ready := readyOf(t, appliedStatus(t, f.client.Actions()))
	if ready.Reason != samplev1alpha1.ReasonDeploymentApplyFailed || !strings.Contains(ready.Message, "exceeded quota") {
		t.Errorf("Ready: %s %q", ready.Reason, ready.Message)
	}
	assertEvents(t, drainEvents(f.recorder), "Warning DeploymentApplyFailed")

	// The retry meets the same refusal: no second Event, no second write.
	f.client.ClearActions()
	if _, err := c.syncHandler(ctx, keyOf(foo)); !errors.Is(err, refusal) {
		t.Fatal(err)
	}
	assertActions(t, "foo", f.client.Actions(), nil)
	assertEvents(t, drainEvents(f.recorder))
}

func TestWorkerRecoversPanic(t *testing.T) {
	foo := newFoo("a", 1)
	f := newFixture(t).withFoo(foo)
	_, ctx := ktesting.NewTestContext(t)
	c := f.newController(ctx)
	f.kubeclient.PrependReactor("patch", "deployments", func(core.Action) (bool, runtime.Object, error) {
		panic("boom")
	})
	c.workqueue.Add(keyOf(foo))
	if !c.processNextWorkItem(ctx, ctx) {
		t.Fatal("worker stopped after a panic")
	}
	if n := c.workqueue.NumRequeues(keyOf(foo)); n != 1 {
		t.Errorf("a panicking key must be retried with backoff: requeues %d", n)
	}
}

func TestSuccessfulSyncResetsBackoff(t *testing.T) {
	foo := newFoo("a", 1)
	dep := ownedDeployment(foo)
	withConvergedStatus(foo, dep, false)
	f := newFixture(t).withFoo(foo).withDeployment(dep)
	_, ctx := ktesting.NewTestContext(t)
	c := f.newController(ctx)
	c.workqueue.AddRateLimited(keyOf(foo))
	c.workqueue.AddRateLimited(keyOf(foo))
	c.workqueue.Add(keyOf(foo))
	c.processNextWorkItem(ctx, ctx)
	if n := c.workqueue.NumRequeues(keyOf(foo)); n != 0 {
		t.Errorf("requeues after success: got %d, want 0", n)
	}
}

func TestSyncResultSoonest(t *testing.T) {
	done, one, two := syncResult{}, requeueAfter(time.Second), requeueAfter(2*time.Second)
	for _, tc := range []struct{ a, b, want syncResult }{
		{done, done, done}, {done, one, one}, {one, done, one}, {one, two, one}, {two, one, one},
	} {
		if got := tc.a.soonest(tc.b); got != tc.want {
			t.Errorf("%v.soonest(%v) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestWorkerTakesNoNewKeyAfterShutdownStarts(t *testing.T) {
	foo := newFoo("a", 1)
	f := newFixture(t).withFoo(foo)
	_, ctx := ktesting.NewTestContext(t)
	c := f.newController(ctx)
	c.workqueue.Add(keyOf(foo))
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if c.processNextWorkItem(cctx, ctx) {
		t.Error("worker went on after shutdown began")
	}
	assertActions(t, "kube", f.kubeclient.Actions(), nil)
}

// --- event handlers ---

func TestHandlersEnqueueTheRightFoos(t *testing.T) {
	a := newFoo("a", 1)
	b := newFoo("b", 1)
	b.Spec.DeploymentName = "shared-name" // blocked by a foreign Deployment
	recreated := newFoo("c", 1)
	staleOwned := ownedDeployment(recreated)
	staleOwned.Name = "c-old-name"
	recreated.UID = "c-new-uid" // same name, new incarnation
	leftover := ownedDeployment(a)
	leftover.Name = "a-old-name"
	otherGroup := foreignDeployment("x")
	otherGroup.OwnerReferences = []metav1.OwnerReference{{
		APIVersion: "other.example.com/v1", Kind: "Foo", Name: "a", UID: a.UID, Controller: ptr.To(true),
	}}

	tests := []struct {
		name string
		obj  any
		want []string
	}{
		{"owned Deployment", ownedDeployment(a), []string{"default/a"}},
		{"owned Deployment under an old name (found by owner, not by name)", leftover, []string{"default/a"}},
		{"foreign Deployment with a wanted name", foreignDeployment("shared-name"), []string{"default/b"}},
		{"unrelated Deployment", foreignDeployment("unrelated"), nil},
		{"Deployment of a previous Foo incarnation", staleOwned, nil},
		{"owner of another API group", otherGroup, nil},
		{"tombstone", cache.DeletedFinalStateUnknown{Key: "default/a-deploy", Obj: ownedDeployment(a)}, []string{"default/a"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t).withFoo(a).withFoo(b).withFoo(recreated)
			_, ctx := ktesting.NewTestContext(t)
			c := f.newController(ctx)
			c.handleDeployment(tc.obj)
			assertQueue(t, c, tc.want)
		})
	}
}

func TestDeploymentUpdateHandler(t *testing.T) {
	a := newFoo("a", 1)
	f := newFixture(t).withFoo(a)
	_, ctx := ktesting.NewTestContext(t)
	c := f.newController(ctx)
	dep := ownedDeployment(a)
	dep.Name = "a-old-name" // so only the owner reference can lead to the Foo

	// Resync: same resourceVersion, nothing new.
	c.handleDeploymentUpdate(dep, dep.DeepCopy())
	assertQueue(t, c, nil)

	// Controller reference removed: the old owner must hear of it.
	orphaned := dep.DeepCopy()
	orphaned.ResourceVersion = "21"
	orphaned.OwnerReferences = nil
	c.handleDeploymentUpdate(dep, orphaned)
	assertQueue(t, c, []string{"default/a"})
}

// TestDeploymentEventsJumpTheQueue: a Foo woken by its own Deployment is
// handed out before Foos waiting for their first sync; a Foo woken by a
// Deployment it only wants the name of is not.
func TestDeploymentEventsJumpTheQueue(t *testing.T) {
	deployed := newFoo("deployed", 1)
	blocked := newFoo("blocked", 1)
	blocked.Spec.DeploymentName = "taken"
	f := newFixture(t).withFoo(deployed).withFoo(blocked)
	_, ctx := ktesting.NewTestContext(t)
	c := f.newController(ctx)
	for _, name := range []string{"new-1", "new-2"} {
		c.enqueueFoo(newFoo(name, 1))
	}
	c.handleDeployment(foreignDeployment("taken"))
	dep := ownedDeployment(deployed)
	available := dep.DeepCopy()
	available.ResourceVersion = bumpRV(dep.ResourceVersion)
	available.Status.AvailableReplicas = 1
	c.handleDeploymentUpdate(dep, available)
	assertQueue(t, c, []string{"default/deployed", "default/new-1", "default/new-2", "default/blocked"})
}

func TestFooHandlerEnqueuesTombstones(t *testing.T) {
	f := newFixture(t)
	_, ctx := ktesting.NewTestContext(t)
	c := f.newController(ctx)
	c.enqueueFoo(cache.DeletedFinalStateUnknown{Key: "default/gone", Obj: newFoo("gone", 1)})
	assertQueue(t, c, []string{"default/gone"})
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

func TestHasSyncedOnlyOnceBothCachesAre(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	client, kubeclient := fake.NewClientset(), k8sfake.NewClientset()
	i := informers.NewSharedInformerFactory(client, 0)
	k8sI := kubeinformers.NewSharedInformerFactory(kubeclient, 0)
	c, err := NewController(ctx, kubeclient, client, k8sI.Apps().V1().Deployments(),
		i.Samplecontroller().V1alpha1().Foos(), events.NewFakeRecorder(10))
	if err != nil {
		t.Fatal(err)
	}
	if c.HasSynced() {
		t.Fatal("synced before the informers started")
	}
	cctx, cancel := context.WithCancel(ctx)
	i.Start(cctx.Done())
	k8sI.Start(cctx.Done())
	defer func() {
		cancel() // informers stop first; Shutdown waits for them
		i.Shutdown()
		k8sI.Shutdown()
	}()
	i.WaitForCacheSync(cctx.Done())
	k8sI.WaitForCacheSync(cctx.Done())
	if !c.HasSynced() {
		t.Error("not synced after both caches synced")
	}
}
