//go:build integration

package integration

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensions "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	metav1apply "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	samplev1alpha1 "example.com/foo-controller/pkg/apis/samplecontroller/v1alpha1"
	applyv1alpha1 "example.com/foo-controller/pkg/generated/applyconfiguration/samplecontroller/v1alpha1"
	applyv1beta1 "example.com/foo-controller/pkg/generated/applyconfiguration/samplecontroller/v1beta1"
)

// The tests of the commands artifacts/deploy/README.md's upgrade notes give,
// run as written there.

// TestKubectlHabitsAfterTheUpgrade: with v1beta1 served, kubectl's `foo`
// means v1beta1, the preferred version. The first release's merge patch of
// spec.replicas, sent without a version, prints a warning about an unknown
// field, exits 0 and changes nothing; the same patch to
// foos.v1alpha1.samplecontroller.example.com, or rewritten to
// spec.deployment.replicas, changes the Foo; kubectl scale works in either
// version (the scale subresource).
func TestKubectlHabitsAfterTheUpgrade(t *testing.T) {
	t.Parallel()
	s := newScenario(t)
	s.createFoo(newFoo("x", "web-x", 1))
	replicas := func() (int32, int64) {
		t.Helper()
		foo, err := s.getFoo("x")
		if err != nil {
			t.Fatal(err)
		}
		return ptr.Deref(foo.Spec.Deployment.Replicas, 0), foo.Generation
	}
	_, generation := replicas()

	out, err := s.kubectl("patch", "foo", "x", "--type=merge", "-p", `{"spec":{"replicas":3}}`)
	t.Logf("kubectl patch foo x (the first release's shape):\n%s", out)
	if err != nil || !strings.Contains(out, `Warning: unknown field "spec.replicas"`) {
		t.Errorf("the first release's patch, no version named: %v, %q; want exit 0 and the warning", err, out)
	}
	if r, g := replicas(); r != 1 || g != generation {
		t.Errorf("after it: replicas %d, generation %d; want 1 and %d, unchanged", r, g, generation)
	}

	for _, tc := range []struct {
		args []string
		want int32
	}{
		{[]string{"patch", "foos.v1alpha1.samplecontroller.example.com", "x", "--type=merge", "-p", `{"spec":{"replicas":3}}`}, 3},
		{[]string{"patch", "foo", "x", "--type=merge", "-p", `{"spec":{"deployment":{"replicas":4}}}`}, 4},
		{[]string{"scale", "foo/x", "--replicas=5"}, 5},
		{[]string{"scale", "foos.v1alpha1.samplecontroller.example.com/x", "--replicas=6"}, 6},
	} {
		out, err := s.kubectl(tc.args...)
		t.Logf("kubectl %s:\n%s", strings.Join(tc.args, " "), out)
		if err != nil || strings.Contains(out, "Warning") {
			t.Errorf("kubectl %s: %v, %q", strings.Join(tc.args, " "), err, out)
		}
		if r, _ := replicas(); r != tc.want {
			t.Errorf("after kubectl %s: replicas %d, want %d", strings.Join(tc.args, " "), r, tc.want)
		}
	}
}

// TestV1alpha1RequestsDuringAnOutage: with v1beta1 stored and the webhook
// down, a list in v1alpha1 is still answered, from the API server's cache
// of v1alpha1, while a get in v1alpha1 fails, and a create in v1alpha1
// fails with nothing stored; once any Foo is written (in v1beta1), the
// list fails too.
func TestV1alpha1RequestsDuringAnOutage(t *testing.T) {
	cl := privateCluster(t, clusterOptions{})
	s := newScenarioOn(t, cl)
	names := s.createFoos("a", 3)
	alpha := s.foos.SamplecontrollerV1alpha1().Foos(s.ns)
	s.eventually(30*time.Second, "the Foos listed in v1alpha1", func() (bool, string) {
		list, err := alpha.List(s.ctx, metav1.ListOptions{})
		return err == nil && len(list.Items) == 3, fmt.Sprint(err)
	})

	cl.stopWebhook()
	t.Cleanup(func() { _ = cl.serveConversionWebhook(context.WithoutCancel(s.ctx)) })
	for _, opts := range []metav1.ListOptions{{}, {ResourceVersion: "0"}} {
		list, err := alpha.List(s.ctx, opts)
		if err != nil || len(list.Items) != 3 {
			t.Errorf("a v1alpha1 list (resourceVersion %q) with the webhook down: %v; want the 3 Foos", opts.ResourceVersion, err)
		}
	}
	out, err := s.kubectl("get", "foos.v1alpha1.samplecontroller.example.com")
	t.Logf("kubectl get foos.v1alpha1.samplecontroller.example.com, the webhook down:\n%s", out)
	if err != nil || !strings.Contains(out, names[0]) || !strings.Contains(out, names[2]) {
		t.Errorf("kubectl's v1alpha1 list with the webhook down: %v", err)
	}
	out, err = s.kubectl("get", "foos.v1alpha1.samplecontroller.example.com", names[0])
	t.Logf("kubectl get foos.v1alpha1.samplecontroller.example.com %s, the webhook down:\n%s", names[0], out)
	if err == nil || !strings.Contains(out, "conversion webhook") {
		t.Errorf("kubectl's v1alpha1 get with the webhook down: %v, %q; want the conversion webhook's error", err, out)
	}

	_, err = alpha.Create(s.ctx, &samplev1alpha1.Foo{ObjectMeta: metav1.ObjectMeta{Name: "new"},
		Spec: samplev1alpha1.FooSpec{DeploymentName: "web-new"}}, metav1.CreateOptions{})
	t.Logf("a v1alpha1 create with the webhook down: %v", err)
	if err == nil || !strings.Contains(err.Error(), "conversion webhook") {
		t.Errorf("a v1alpha1 create with the webhook down: %v; want the conversion webhook's error", err)
	}
	if _, err := s.getFoo("new"); !apierrors.IsNotFound(err) {
		t.Errorf("the Foo whose v1alpha1 create failed, read in v1beta1: %v; want NotFound", err)
	}

	// Once a Foo is written (in v1beta1, which works), the cache of
	// v1alpha1 cannot take the change without the webhook: a v1alpha1
	// list fails too.
	if _, err := s.foos.SamplecontrollerV1beta1().Foos(s.ns).Patch(s.ctx, names[0], types.MergePatchType,
		[]byte(`{"spec":{"deployment":{"replicas":7}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatalf("a v1beta1 write with the webhook down: %v", err)
	}
	ctx, cancel := context.WithTimeout(s.ctx, 40*time.Second)
	defer cancel()
	_, err = alpha.List(ctx, metav1.ListOptions{})
	t.Logf("a v1alpha1 list after a v1beta1 write, the webhook down: %v", err)
	if err == nil || !strings.Contains(err.Error(), "conversion webhook") {
		t.Errorf("a v1alpha1 list after a v1beta1 write, the webhook down: %v; want the conversion webhook's error", err)
	}
}

// TestGoingBackToV1alpha1Storage goes back from this release to one whose
// CRD served and stored v1alpha1 alone (the release before v1beta1), after
// the upgrade of artifacts/deploy/README.md, as its notes say. The old CRD
// is refused while status.storedVersions names v1beta1, before and after
// the migration; with the webhook still served, the storage version set
// back to v1alpha1 and make migrate-storage run again, it is accepted.
// The old controller's status writes (its server-side apply in v1alpha1,
// made here as it makes it) are then refused, the Foo's managed fields
// recorded in v1beta1, which the CRD no longer has; with the managed
// fields and the status cleared, they go through, and so does the one
// that drops a condition. With the managed fields alone cleared, that one
// is refused (a before-first-apply entry keeps part of the condition), as
// the old release has no repair.
func TestGoingBackToV1alpha1Storage(t *testing.T) {
	cl := privateCluster(t, clusterOptions{})
	s := newScenarioOn(t, cl)
	ext, err := apiextensions.NewForConfig(cl.admin)
	if err != nil {
		t.Fatal(err)
	}
	crds := ext.ApiextensionsV1().CustomResourceDefinitions()
	shipped, err := crds.Get(s.ctx, fooCRD, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The release before: its CRD lists v1alpha1 alone.
	previousRelease(t, s, ext, "v1alpha1")
	prev, err := crds.Get(s.ctx, fooCRD, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	old := *prev.Spec.DeepCopy()
	old.Versions = slices.DeleteFunc(old.Versions, func(v apiextensionsv1.CustomResourceDefinitionVersion) bool { return v.Name != "v1alpha1" })
	setSpec := func(spec apiextensionsv1.CustomResourceDefinitionSpec) error {
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			crd, err := crds.Get(s.ctx, fooCRD, metav1.GetOptions{})
			if err != nil {
				return err
			}
			crd.Spec = spec
			_, err = crds.Update(s.ctx, crd, metav1.UpdateOptions{})
			return err
		})
	}
	if err := setSpec(old); err != nil {
		t.Fatalf("the old CRD, storedVersions [v1alpha1]: %v", err)
	}
	kubectl := func(want string, args ...string) string {
		t.Helper()
		out, err := s.kubectl(args...)
		t.Logf("kubectl %s\n%s", strings.Join(args, " "), out)
		if err != nil || (want != "" && strings.TrimSpace(out) != want) {
			t.Fatalf("kubectl %s: %v, %q; want %q", strings.Join(args, " "), err, out, want)
		}
		return out
	}
	versions := []string{"get", "crd", fooCRD, "-o", `jsonpath={.spec.versions[*].name} {.spec.versions[?(@.storage==true)].name} {.status.storedVersions}{"\n"}`}
	kubectl(`v1alpha1 v1alpha1 ["v1alpha1"]`, versions...)

	// What the old release left: a Foo created through v1alpha1, its
	// status applied by the old controller's field manager in v1alpha1.
	alpha := s.foos.SamplecontrollerV1alpha1().Foos(s.ns)
	if _, err := alpha.Create(s.ctx, &samplev1alpha1.Foo{ObjectMeta: metav1.ObjectMeta{Name: "a"},
		Spec: samplev1alpha1.FooSpec{DeploymentName: "web-a", Replicas: ptr.To[int32](1)}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	oldStatus := func(conditions ...string) error {
		st := applyv1alpha1.FooStatus().WithReplicas(1)
		for _, c := range conditions {
			st.WithConditions(metav1apply.Condition().WithType(c).WithStatus(metav1.ConditionTrue).WithReason("Test").
				WithMessage("old controller").WithLastTransitionTime(metav1.Now()))
		}
		_, err := alpha.ApplyStatus(s.ctx, applyv1alpha1.Foo("a", s.ns).WithStatus(st),
			metav1.ApplyOptions{FieldManager: controllerFieldManager, Force: true})
		return err
	}
	if err := oldStatus("Ready"); err != nil {
		t.Fatal(err)
	}

	// The upgrade: the shipped CRD (its webhook served here, as the new
	// controller serves it), the new controller's status apply in
	// v1beta1, make migrate-storage.
	if err := setSpec(shipped.Spec); err != nil {
		t.Fatal(err)
	}
	s.eventually(30*time.Second, "v1beta1 served", func() (bool, string) {
		_, err := s.foos.SamplecontrollerV1beta1().Foos(s.ns).Get(s.ctx, "a", metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	})
	kubectl(`v1alpha1 v1beta1 v1beta1 ["v1alpha1","v1beta1"]`, versions...)
	beta := s.foos.SamplecontrollerV1beta1().Foos(s.ns)
	newStatus := func() error {
		st := applyv1beta1.FooStatus().WithReplicas(1)
		for _, c := range []string{"Ready", "Reconciling"} {
			st.WithConditions(metav1apply.Condition().WithType(c).WithStatus(metav1.ConditionTrue).WithReason("Test").
				WithMessage("new controller").WithLastTransitionTime(metav1.Now()))
		}
		_, err := beta.ApplyStatus(s.ctx, applyv1beta1.Foo("a", s.ns).WithStatus(st),
			metav1.ApplyOptions{FieldManager: controllerFieldManager, Force: true})
		return err
	}
	if err := newStatus(); err != nil {
		t.Fatal(err)
	}
	oldCRDRefused := func(when string) {
		t.Helper()
		err := setSpec(old)
		t.Logf("the old CRD %s: %v", when, err)
		if err == nil || !strings.Contains(err.Error(), "missing from spec.versions") {
			t.Fatalf("the old CRD %s: %v; want refused, v1beta1 missing from spec.versions", when, err)
		}
	}
	oldCRDRefused("after the new one")

	migrate := migrateStorageTool(t)
	out := migrate(cl.adminKC)
	if !strings.Contains(out, "storedVersions now [v1beta1]") {
		t.Fatalf("make migrate-storage:\n%s", out)
	}
	kubectl(`v1alpha1 v1beta1 v1beta1 ["v1beta1"]`, versions...)
	for _, l := range strings.Fields(kubectl("", "get", "foos", "-A", "-o",
		`jsonpath={range .items[*].metadata.managedFields[*]}{.apiVersion}{"\n"}{end}`)) {
		if l != "samplecontroller.example.com/v1beta1" {
			t.Errorf("a managed-fields entry in %s after the migration", l)
		}
	}
	oldCRDRefused("after the migration")

	// Going back, the webhook still served: the storage version back to
	// v1alpha1, make migrate-storage again.
	kubectl("", "patch", "crd", fooCRD, "--type=json", "-p",
		`[{"op":"replace","path":"/spec/versions/0/storage","value":true},{"op":"replace","path":"/spec/versions/1/storage","value":false}]`)
	kubectl(`v1alpha1 v1beta1 v1alpha1 ["v1beta1","v1alpha1"]`, versions...)
	out = migrate(cl.adminKC)
	if !strings.Contains(out, "storedVersions now [v1alpha1]") {
		t.Fatalf("make migrate-storage, back:\n%s", out)
	}
	stored, err := cl.storedVersionsOf(s.ctx, s.ns)
	if err != nil || stored["a"] != "samplecontroller.example.com/v1alpha1" {
		t.Fatalf("after the migration back: stored %v, %v", stored, err)
	}
	if err := setSpec(old); err != nil {
		t.Fatalf("the old CRD, storedVersions [v1alpha1]: %v", err)
	}
	kubectl(`v1alpha1 v1alpha1 ["v1alpha1"]`, versions...)
	// The new controller gone: the old one serves no webhook. (Not
	// served again: the cluster's stop must not stop it twice.)
	stopWebhook := cl.stopWebhook
	cl.stopWebhook = nil
	stopWebhook()

	// The old controller's status apply (the same call as its own:
	// v1alpha1, its field manager, forced) to a Foo whose managed fields
	// are recorded in v1beta1, which the CRD no longer has: refused.
	foo, err := alpha.Get(s.ctx, "a", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("a v1alpha1 read after going back: %v", err)
	}
	t.Logf("managed fields after going back: %s", describeManagers(foo.ManagedFields))
	err = oldStatus("Ready", "Reconciling")
	t.Logf("the old controller's status apply after going back: %v", err)
	if err == nil || !strings.Contains(err.Error(), "invalid group/version: samplecontroller.example.com/v1beta1") {
		t.Fatalf("the old controller's status apply after going back: %v; want refused, v1beta1 an invalid version", err)
	}
	// Cleared, as the server-side apply docs say, the old controller's
	// applies go through; but the next entry recorded owns what the
	// status held then (before-first-apply), and the old release has no
	// repair: the apply that drops a condition present then is refused.
	// So the status goes too; the old controller writes it again.
	kubectl("", "patch", "foos.v1alpha1.samplecontroller.example.com", "a", "--type=merge", "-p", `{"metadata":{"managedFields":[{}]}}`)
	kubectl("", "patch", "foos.v1alpha1.samplecontroller.example.com", "a", "--subresource=status", "--type=merge", "-p", `{"status":null}`)
	if foo, err = alpha.Get(s.ctx, "a", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Logf("after clearing the managed fields and the status: managed fields %s, status %+v", describeManagers(foo.ManagedFields), foo.Status)
	if err := oldStatus("Ready", "Reconciling"); err != nil {
		t.Fatalf("the old controller's status apply after clearing: %v", err)
	}
	if err := oldStatus("Ready"); err != nil {
		t.Fatalf("the old controller's status apply dropping Reconciling: %v", err)
	}
	if foo, err = alpha.Get(s.ctx, "a", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Logf("then: managed fields %s, conditions %+v", describeManagers(foo.ManagedFields), foo.Status.Conditions)
	if len(foo.Status.Conditions) != 1 || foo.Status.Conditions[0].Type != "Ready" {
		t.Errorf("conditions after the old controller dropped Reconciling: %+v, want Ready alone", foo.Status.Conditions)
	}

	// Without clearing the status, the same apply is refused: another
	// Foo, as the first was.
	if _, err := alpha.Create(s.ctx, &samplev1alpha1.Foo{ObjectMeta: metav1.ObjectMeta{Name: "b"},
		Spec: samplev1alpha1.FooSpec{DeploymentName: "web-b", Replicas: ptr.To[int32](1)}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	applyB := func(message string, conditions ...string) error {
		st := applyv1alpha1.FooStatus().WithReplicas(1)
		for _, c := range conditions {
			st.WithConditions(metav1apply.Condition().WithType(c).WithStatus(metav1.ConditionTrue).WithReason("Test").
				WithMessage(message).WithLastTransitionTime(metav1.Now()))
		}
		_, err := alpha.ApplyStatus(s.ctx, applyv1alpha1.Foo("b", s.ns).WithStatus(st),
			metav1.ApplyOptions{FieldManager: "another-writer", Force: true})
		return err
	}
	if err := applyB("before", "Ready", "Reconciling"); err != nil {
		t.Fatal(err)
	}
	kubectl("", "patch", "foos.v1alpha1.samplecontroller.example.com", "b", "--type=merge", "-p", `{"metadata":{"managedFields":[{}]}}`)
	_, err = alpha.ApplyStatus(s.ctx, applyv1alpha1.Foo("b", s.ns).WithStatus(applyv1alpha1.FooStatus().WithReplicas(1).
		WithConditions(
			metav1apply.Condition().WithType("Ready").WithStatus(metav1.ConditionTrue).WithReason("Test").WithMessage("old controller").WithLastTransitionTime(metav1.Now()),
			metav1apply.Condition().WithType("Reconciling").WithStatus(metav1.ConditionTrue).WithReason("Test").WithMessage("old controller").WithLastTransitionTime(metav1.Now()))),
		metav1.ApplyOptions{FieldManager: controllerFieldManager, Force: true})
	if err != nil {
		t.Fatal(err)
	}
	_, err = alpha.ApplyStatus(s.ctx, applyv1alpha1.Foo("b", s.ns).WithStatus(applyv1alpha1.FooStatus().WithReplicas(1).
		WithConditions(metav1apply.Condition().WithType("Ready").WithStatus(metav1.ConditionTrue).WithReason("Test").WithMessage("old controller").WithLastTransitionTime(metav1.Now()))),
		metav1.ApplyOptions{FieldManager: controllerFieldManager, Force: true})
	t.Logf("the managed fields alone cleared, the old controller's apply dropping Reconciling: %v", err)
	if err == nil || !strings.Contains(err.Error(), "Required value") {
		t.Errorf("the managed fields alone cleared, the old controller's apply dropping Reconciling: %v; want refused, a condition left in part", err)
	}
}

// migrateStorageTool builds hack/migrate-storage (what make migrate-storage
// runs) and returns a function that runs it against a kubeconfig with a
// settle of 2 s (nothing else writes Foos here), failing the test if it
// fails; it returns what it printed.
func migrateStorageTool(t *testing.T) func(kubeconfig string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "migrate-storage")
	build := exec.Command("go", "build", "-o", bin, "./hack/migrate-storage")
	build.Dir = repoRoot
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building hack/migrate-storage: %v\n%s", err, out)
	}
	return func(kubeconfig string) string {
		t.Helper()
		start := time.Now()
		out, err := exec.Command(bin, "-kubeconfig="+kubeconfig, "-settle=2s").CombinedOutput()
		t.Logf("migrate-storage (%v):\n%s", time.Since(start).Round(time.Millisecond), out)
		if err != nil {
			t.Fatalf("migrate-storage: %v", err)
		}
		return string(out)
	}
}
