//go:build integration

package integration

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	apiextensions "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	samplev1beta1 "example.com/foo-controller/pkg/apis/samplecontroller/v1beta1"
	applyv1beta1 "example.com/foo-controller/pkg/generated/applyconfiguration/samplecontroller/v1beta1"
	fooscheme "example.com/foo-controller/pkg/generated/clientset/versioned/scheme"
	"example.com/foo-controller/pkg/storagemigrate"
	"example.com/foo-controller/pkg/webhook"
)

// twinWrite is one write made the same way to two Foos: to "a-<name>"
// through v1alpha1, to "b-<name>" in v1beta1, with the same content.
type twinWrite struct {
	manager string
	// apply: a server-side apply of the body; create: a create; else a
	// merge patch (an update, to the API server's managed fields).
	verb string
	// The body in each version (%s: the Foo's name); no alpha: the
	// beta body, in v1beta1, to both.
	alpha, beta string
}

// twinWrites: an applier (a GitOps tool), and a Foo created, edited and
// patched (kubectl create, edit, patch), one editor writing in each
// version in turn; every field v1alpha1 has, and the annotations that
// carry v1beta1's own, each set by another manager (minReadySeconds by
// the applier, revisionHistoryLimit by a patch), and the legacy one a
// script of the release before sends.
var twinWrites = []twinWrite{
	{"gitops", "apply",
		`{"apiVersion":"samplecontroller.example.com/v1alpha1","kind":"Foo","metadata":{"name":"%s","labels":{"team":"a"},
		  "annotations":{"samplecontroller.example.com/v1beta1.spec.deployment.minReadySeconds":"5"}},
		  "spec":{"deploymentName":"web-%[1]s","replicas":2,"image":"nginx:1.27","containerPort":8080,"podLabels":{"tier":"web"},"deletionPolicy":"Delete"}}`,
		`{"apiVersion":"samplecontroller.example.com/v1beta1","kind":"Foo","metadata":{"name":"%s","labels":{"team":"a"}},
		  "spec":{"deployment":{"name":"web-%[1]s","replicas":2,"image":"nginx:1.27","containerPort":8080,"podLabels":{"tier":"web"},"minReadySeconds":5},"deletionPolicy":"Delete"}}`},
	{"kubectl-create", "create",
		`{"apiVersion":"samplecontroller.example.com/v1alpha1","kind":"Foo","metadata":{"name":"%s"},"spec":{"deploymentName":"web-%[1]s","replicas":1,"image":"nginx:1.27"}}`,
		`{"apiVersion":"samplecontroller.example.com/v1beta1","kind":"Foo","metadata":{"name":"%s"},"spec":{"deployment":{"name":"web-%[1]s","replicas":1,"image":"nginx:1.27"}}}`},
	{"kubectl-edit", "patch",
		`{"spec":{"replicas":3,"podLabels":{"tier":"web"}}}`,
		`{"spec":{"deployment":{"replicas":3,"podLabels":{"tier":"web"}}}}`},
	{"kubectl-patch", "patch",
		`{"metadata":{"annotations":{"samplecontroller.example.com/v1beta1.spec.deployment.revisionHistoryLimit":"4"}},"spec":{"containerPort":8081}}`,
		`{"spec":{"deployment":{"revisionHistoryLimit":4,"containerPort":8081}}}`},
	// The same editor again, in v1beta1 on both: its entries in v1alpha1
	// and v1beta1 on the first Foo become one.
	{"kubectl-edit", "patch", "", `{"spec":{"deployment":{"image":"nginx:1.28"}}}`},
	// A script of the release before: the legacy annotation.
	{"old-script", "patch",
		`{"metadata":{"annotations":{"samplecontroller.example.com/v1beta1-spec":"{\"deployment\":{\"minReadySeconds\":7}}"}}}`,
		`{"spec":{"deployment":{"minReadySeconds":7}}}`},
	// An annotation that sets none of v1beta1's fields: in v1beta1, no
	// change at all. Its entry is left with no path, and removed.
	{"kubectl-annotate", "patch",
		`{"metadata":{"annotations":{"samplecontroller.example.com/v1beta1-spec":"{\"deployment\":{}}"}}}`,
		`{}`},
	// Another manager's field beside the applier's, each annotation its
	// own: each path moves to the manager that set it.
	{"kubectl-patch", "patch",
		`{"metadata":{"annotations":{"samplecontroller.example.com/v1beta1.spec.deployment.revisionHistoryLimit":"4"}}}`,
		`{"spec":{"deployment":{"revisionHistoryLimit":4}}}`},
}

// managedSets is a Foo's managed fields as sets by manager, operation and
// subresource; an entry in another version than v1beta1, or two of one
// key, is an error.
func managedSets(t *testing.T, foo *unstructured.Unstructured) map[string]*fieldpath.Set {
	t.Helper()
	out := map[string]*fieldpath.Set{}
	for _, e := range foo.GetManagedFields() {
		set := &fieldpath.Set{}
		if err := set.FromJSON(e.FieldsV1.GetRawReader()); err != nil {
			t.Fatal(err)
		}
		key := fmt.Sprintf("%s/%s/%s", e.Manager, e.Operation, e.Subresource)
		if e.APIVersion != samplev1beta1.GroupVersion.String() {
			t.Errorf("Foo %s: the entry %s is in %s", foo.GetName(), key, e.APIVersion)
		}
		if _, ok := out[key]; ok {
			t.Errorf("Foo %s: two entries %s", foo.GetName(), key)
		}
		out[key] = set
	}
	return out
}

// TestManagedFieldsMovedToV1beta1: server-side apply records each
// manager's fields in the version it wrote in, and the API server never
// moves them. For Foos written through v1alpha1 (applied, created, edited,
// patched: twinWrites), samplev1alpha1.FieldsToV1beta1 gives exactly the
// sets the API server records for the same writes made in v1beta1; the
// migration (with every Foo stored in v1beta1 already) rewrites those
// entries, and a second run writes nothing. After it, with the conversion
// webhook down, the controller's status writes, a scale and server-side
// applies in v1beta1 go on where before they failed
// (TestConversionWebhookOutage), and the ownership moved still holds: the
// applier's next apply prunes a field it stopped applying, and another
// applier's change to its field is refused as a conflict naming it.
func TestManagedFieldsMovedToV1beta1(t *testing.T) {
	cl := privateCluster(t, clusterOptions{noConversionWebhook: true})
	s := newScenarioOn(t, cl)
	keeper := &webhook.Keeper{Kube: s.kube, Dynamic: s.dyn, CRD: fooCRD, Hosts: []string{"127.0.0.1"},
		Secret: types.NamespacedName{Namespace: s.ns, Name: "foo-controller-webhook-cert"}}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var reviews atomic.Int64
	converter := webhook.NewConverter(fooscheme.Scheme)
	counted := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reviews.Add(1)
		converter.ServeHTTP(w, r)
	})
	stop := runWebhook(t, lis, keeper, counted)
	t.Cleanup(stop)
	serveV1beta1(t, s, "https://"+lis.Addr().String()+webhook.Path)
	alpha, beta := s.dyn.Resource(fooV1alpha1GVR).Namespace(s.ns), s.dyn.Resource(fooGVR).Namespace(s.ns)
	s.createFoo(newFoo("probe", "web-probe", 1))
	s.eventually(30*time.Second, "a Foo read in v1alpha1 through the webhook", func() (bool, string) {
		_, err := alpha.Get(s.ctx, "probe", metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	})

	write := func(gvr schema.GroupVersionResource, name string, w twinWrite, body string) {
		t.Helper()
		client := s.dyn.Resource(gvr).Namespace(s.ns)
		if strings.Contains(body, "%s") {
			body = fmt.Sprintf(body, name)
		}
		var err error
		switch w.verb {
		case "apply":
			_, err = client.Patch(s.ctx, name, types.ApplyPatchType, []byte(body), metav1.PatchOptions{FieldManager: w.manager})
		case "create":
			u := &unstructured.Unstructured{}
			if err = u.UnmarshalJSON([]byte(body)); err == nil {
				_, err = client.Create(s.ctx, u, metav1.CreateOptions{FieldManager: w.manager})
			}
		default:
			_, err = client.Patch(s.ctx, name, types.MergePatchType, []byte(body), metav1.PatchOptions{FieldManager: w.manager})
		}
		if err != nil {
			t.Fatalf("%s %s of %s in %s: %v", w.manager, w.verb, name, gvr.Version, err)
		}
	}
	// "applied" takes the first write; "edited" the others.
	twins := map[string][]twinWrite{
		"applied":   {twinWrites[0], twinWrites[7]},
		"edited":    twinWrites[1:6],
		"annotated": {twinWrites[1], twinWrites[6]},
	}
	for name, writes := range twins {
		for _, w := range writes {
			if w.alpha == "" {
				write(fooGVR, "a-"+name, w, w.beta)
			} else {
				write(fooV1alpha1GVR, "a-"+name, w, w.alpha)
			}
			write(fooGVR, "b-"+name, w, w.beta)
		}
	}
	testManagers := map[string]bool{}
	for _, w := range twinWrites {
		testManagers[w.manager] = true
	}
	// compare checks that each a- Foo's managed fields, in v1beta1's paths
	// (moved as the migration would, if move), are its twin's, for the
	// test's managers.
	compare := func(when string, move bool) {
		t.Helper()
		for name := range twins {
			a, err := beta.Get(s.ctx, "a-"+name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			b, err := beta.Get(s.ctx, "b-"+name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if move {
				if _, err := storagemigrate.MoveManagedFields(a, samplev1beta1.GroupVersion.String(), storagemigrate.FooFields); err != nil {
					t.Fatal(err)
				}
			}
			got, want := managedSets(t, a), managedSets(t, b)
			for key, w := range want {
				if !testManagers[strings.Split(key, "/")[0]] {
					continue
				}
				g, ok := got[key]
				if !ok {
					t.Errorf("%s, %s: no entry %s; the twin's is\n%s", when, name, key, w)
					continue
				}
				if !g.Equals(w) {
					t.Errorf("%s, %s: entry %s is\n%s\nthe twin's (written in v1beta1)\n%s\nmissing %v\nextra %v", when, name, key, g, w, w.Difference(g), g.Difference(w))
				}
			}
			for key, g := range got {
				// An entry moved here with no path is sent so, and the
				// API server removes it: after the migration, none.
				if _, ok := want[key]; !ok && testManagers[strings.Split(key, "/")[0]] && (!move || !g.Empty()) {
					t.Errorf("%s, %s: entry %s, which the twin does not have: %s", when, name, key, g)
				}
			}
		}
	}
	compare("written through v1alpha1, moved here", true)
	if t.Failed() {
		t.FailNow()
	}
	// reviewsOfApply counts the reviews a server-side apply in v1beta1 to
	// the Foo costs, the API server's own decode of the write into its
	// v1alpha1 cache included (no controller runs yet: nothing else
	// writes).
	reviewsOfApply := func(name, label string) int64 {
		t.Helper()
		before := reviews.Load()
		labelled := applyv1beta1.Foo(name, s.ns).WithLabels(map[string]string{"measured": label})
		if _, err := s.foos.SamplecontrollerV1beta1().Foos(s.ns).Apply(s.ctx, labelled, metav1.ApplyOptions{FieldManager: "labeller"}); err != nil {
			t.Fatalf("an apply to %s: %v", name, err)
		}
		time.Sleep(time.Second) // the cache's review follows the write
		return reviews.Load() - before
	}
	alphaCost, betaCost := reviewsOfApply("a-applied", "before"), reviewsOfApply("b-applied", "before")
	t.Logf("a server-side apply before the migration: %d reviews to the Foo written through v1alpha1, %d to its twin", alphaCost, betaCost)
	if alphaCost <= betaCost {
		t.Errorf("an apply cost %d reviews to the Foo written through v1alpha1, %d to the other: want more (its managed fields are tracked in v1alpha1)", alphaCost, betaCost)
	}

	// The migration: every Foo is stored in v1beta1 already (the CRD as
	// shipped stores v1beta1); it moves the managed fields alone.
	ext, err := apiextensions.NewForConfig(cl.admin)
	if err != nil {
		t.Fatal(err)
	}
	clients := storagemigrate.Clients{Kube: s.kube, APIExtensions: ext, Dynamic: s.dyn}
	o := storagemigrate.Options{Settle: 2 * time.Second, PollEvery: 200 * time.Millisecond, ManagedFields: storagemigrate.FooFields}
	res, err := storagemigrate.Migrate(s.ctx, clients, fooCRD, o)
	if err != nil || res.FieldsMoved != len(twins) || res.Written != len(twins) {
		t.Fatalf("the migration: %+v, %v; want the managed fields of the %d Foos written through v1alpha1 moved, and nothing else written", res, err, len(twins))
	}
	t.Logf("the migration: %+v", res)
	compare("after the migration", false)
	for _, name := range []string{"a-applied", "a-edited"} {
		foo, err := beta.Get(s.ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range foo.GetManagedFields() {
			if e.Manager == "foo-migrate-storage" {
				t.Errorf("%s: the migration's own field manager owns %s; want it to own nothing (it changes no field)", name, e.FieldsV1.GetRawString())
			}
		}
	}
	alphaCost, betaCost = reviewsOfApply("a-applied", "after"), reviewsOfApply("b-applied", "after")
	t.Logf("a server-side apply after the migration: %d reviews to the Foo written through v1alpha1, %d to its twin", alphaCost, betaCost)
	if alphaCost > betaCost {
		t.Errorf("after the migration, an apply cost %d reviews to the Foo written through v1alpha1, %d to the other: want no more", alphaCost, betaCost)
	}
	if res, err := storagemigrate.Migrate(s.ctx, clients, fooCRD, o); err != nil || res.Written != 0 {
		t.Errorf("the migration again: %+v, %v; want nothing written", res, err)
	}
	// The controller, from here: its status writes, to Foos whose
	// managed fields were moved.
	s.startController()
	s.waitConverged("a-edited", time.Minute)

	// The webhook down.
	stop()
	if _, err := alpha.Get(s.ctx, "a-edited", metav1.GetOptions{}); err == nil || !strings.Contains(err.Error(), "conversion webhook") {
		t.Fatalf("a v1alpha1 read with the webhook down: %v; want the webhook's error", err)
	}
	// The controller's status applies to a Foo created through v1alpha1.
	if _, err := beta.Patch(s.ctx, "a-edited", types.MergePatchType, []byte(`{"spec":{"deployment":{"replicas":4}}}`), metav1.PatchOptions{FieldManager: "kubectl-scale"}); err != nil {
		t.Fatal(err)
	}
	s.waitConverged("a-edited", time.Minute)
	// The applier stops applying podLabels, in v1beta1 now: pruned, on
	// both Foos alike.
	for _, name := range []string{"a-applied", "b-applied"} {
		body := strings.Replace(fmt.Sprintf(twinWrites[0].beta, name), `"podLabels":{"tier":"web"},`, "", 1)
		if _, err := beta.Patch(s.ctx, name, types.ApplyPatchType, []byte(body), metav1.PatchOptions{FieldManager: "gitops"}); err != nil {
			t.Fatalf("gitops' apply in v1beta1 to %s, webhook down: %v", name, err)
		}
		foo, err := s.foos.SamplecontrollerV1beta1().Foos(s.ns).Get(s.ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if d := foo.Spec.Deployment; d.PodLabels != nil || d.MinReadySeconds != 5 || d.RevisionHistoryLimit == nil || *d.RevisionHistoryLimit != 4 {
			t.Errorf("%s after gitops applied it without podLabels: %+v; want podLabels pruned, the rest kept (revisionHistoryLimit 4 is kubectl-patch's)", name, foo.Spec.Deployment)
		}
		// Another applier's change to gitops' image: a conflict.
		intruder := applyv1beta1.Foo(name, s.ns).WithSpec(applyv1beta1.FooSpec().WithDeployment(applyv1beta1.DeploymentSpec().WithImage("nginx:1.29")))
		_, err = s.foos.SamplecontrollerV1beta1().Foos(s.ns).Apply(s.ctx, intruder, metav1.ApplyOptions{FieldManager: "intruder"})
		if !apierrors.IsConflict(err) || !strings.Contains(err.Error(), `"gitops"`) {
			t.Errorf("another applier's image on %s: %v; want a conflict with gitops", name, err)
		}
	}
	s.waitConverged("a-applied", time.Minute)
}
