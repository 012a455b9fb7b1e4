//go:build integration

package integration

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	svmv1beta1 "k8s.io/api/storagemigration/v1beta1"
	"k8s.io/apiextensions-apiserver/pkg/apihelpers"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensions "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	samplev1alpha1 "example.com/foo-controller/pkg/apis/samplecontroller/v1alpha1"
	samplev1beta1 "example.com/foo-controller/pkg/apis/samplecontroller/v1beta1"
	"example.com/foo-controller/pkg/storagemigrate"
	"example.com/foo-controller/pkg/webhook"
)

// storedVersionsOf reads, straight from etcd (its JSON gateway), the
// apiVersion each Foo of namespace ns is encoded in: what the API server
// stored, which no API read shows.
func (c *cluster) storedVersionsOf(ctx context.Context, ns string) (map[string]string, error) {
	prefix := "/registry/samplecontroller.example.com/foos/" + ns + "/"
	end := []byte(prefix)
	end[len(end)-1]++
	var resp struct {
		KVs []struct {
			Key   string `json:"key"`
			Value string `json:"value"`
		} `json:"kvs"`
	}
	body := fmt.Sprintf(`{"key":%q,"range_end":%q}`, base64.StdEncoding.EncodeToString([]byte(prefix)), base64.StdEncoding.EncodeToString(end))
	if err := postJSON(ctx, c.env.ControlPlane.Etcd.URL.String()+"/v3/kv/range", body, &resp); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, kv := range resp.KVs {
		key, err := base64.StdEncoding.DecodeString(kv.Key)
		if err != nil {
			return nil, err
		}
		value, err := base64.StdEncoding.DecodeString(kv.Value)
		if err != nil {
			return nil, err
		}
		var obj struct {
			APIVersion string `json:"apiVersion"`
		}
		if err := json.Unmarshal(value, &obj); err != nil {
			return nil, fmt.Errorf("%s: %w", key, err)
		}
		out[strings.TrimPrefix(string(key), prefix)] = obj.APIVersion
	}
	return out, nil
}

// previousRelease makes the installed CRD the one a release before this
// one shipped: v1alpha1 its storage version and the only version ever
// stored (status.storedVersions), serving the versions named; with
// v1beta1 not served, no conversion.
func previousRelease(t *testing.T, s *scenario, ext apiextensions.Interface, served ...string) {
	t.Helper()
	crds := ext.ApiextensionsV1().CustomResourceDefinitions()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		crd, err := crds.Get(s.ctx, fooCRD, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for i := range crd.Spec.Versions {
			v := &crd.Spec.Versions[i]
			v.Storage, v.Served = v.Name == "v1alpha1", slices.Contains(served, v.Name)
		}
		if !slices.Contains(served, "v1beta1") {
			crd.Spec.Conversion = &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.NoneConverter}
		}
		if crd, err = crds.Update(s.ctx, crd, metav1.UpdateOptions{}); err != nil {
			return err
		}
		crd.Status.StoredVersions = []string{"v1alpha1"}
		_, err = crds.UpdateStatus(s.ctx, crd, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("installing the previous release's CRD: %v", err)
	}
}

// managedFieldsInV1beta1 fails the test for each managed-fields entry of
// the Foos recorded in another version than v1beta1 (after a migration
// that moves them).
func managedFieldsInV1beta1(t *testing.T, foos []samplev1beta1.Foo) {
	t.Helper()
	for _, foo := range foos {
		for _, e := range foo.ManagedFields {
			if e.APIVersion != samplev1beta1.GroupVersion.String() {
				t.Errorf("Foo %s after the migration: the managed fields of %s (%s %s) in %s", foo.Name, e.Manager, e.Operation, e.Subresource, e.APIVersion)
			}
		}
	}
}

// countVersions counts Foos by the version they are stored in.
func countVersions(stored map[string]string) map[string]int {
	n := map[string]int{}
	for _, v := range stored {
		n[strings.TrimPrefix(v, "samplecontroller.example.com/")]++
	}
	return n
}

// TestStorageMigration: Foos stored in v1alpha1, one of them written in
// v1beta1 with the field only v1beta1 has; then the CRD's storage version
// becomes v1beta1. The migration (pkg/storagemigrate, as `make
// migrate-storage` runs it) stores every Foo in v1beta1 (read from etcd),
// trims status.storedVersions to [v1beta1], and changes no Foo as read in
// either version: spec, generation, labels, the v1beta1-only field. Run
// again, it does nothing. Both ways: the API server's
// StorageVersionMigration where served, and the rewrite, which is also
// shown failing with the conversion webhook down (storedVersions kept) and
// completing when run again.
func TestStorageMigration(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts clusterOptions
		// method is the one Auto must choose on that control plane.
		method storagemigrate.Method
	}{
		{"rewrite", clusterOptions{}, storagemigrate.Rewrite},
		{"StorageVersionMigration", clusterOptions{storageVersionMigrator: true}, storagemigrate.StorageVersionMigration},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cl := privateCluster(t, tc.opts)
			s := newScenarioOn(t, cl)
			ext, err := apiextensions.NewForConfig(cl.admin)
			if err != nil {
				t.Fatal(err)
			}
			clients := storagemigrate.Clients{Kube: s.kube, APIExtensions: ext, Dynamic: s.dyn}
			// Pages of 10: the rewrite goes through several. A settle of
			// 2 s: nothing else writes Foos here.
			opts := storagemigrate.Options{Settle: 2 * time.Second, PollEvery: 200 * time.Millisecond, PageSize: 10, ManagedFields: storagemigrate.FooFields}
			ctx := klog.NewContext(s.ctx, klog.Background().WithName(tc.name))
			// storeIn makes version the CRD's storage version.
			storeIn := func(version string) {
				t.Helper()
				patch := fmt.Sprintf(`[{"op":"replace","path":"/spec/versions/0/storage","value":%t},{"op":"replace","path":"/spec/versions/1/storage","value":%t}]`,
					version == "v1alpha1", version == "v1beta1")
				if _, err := s.dyn.Resource(webhook.CRDs).Patch(s.ctx, fooCRD, types.JSONPatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			// state reads how many Foos are stored in each version (etcd)
			// and the CRD's storedVersions.
			state := func() (stored map[string]int, storedVersions []string) {
				t.Helper()
				inEtcd, err := cl.storedVersionsOf(s.ctx, s.ns)
				if err != nil {
					t.Fatal(err)
				}
				crd, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(s.ctx, fooCRD, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				return countVersions(inEtcd), crd.Status.StoredVersions
			}

			// Before: stored in v1alpha1, the one storage version so far.
			previousRelease(t, s, ext, "v1alpha1", "v1beta1")
			const n = 30
			s.createFoos("old", n)
			beta := s.foos.SamplecontrollerV1beta1().Foos(s.ns)
			withField := &samplev1beta1.Foo{
				ObjectMeta: metav1.ObjectMeta{Name: "beta", Labels: map[string]string{"team": "a"}},
				Spec: samplev1beta1.FooSpec{Deployment: samplev1beta1.DeploymentSpec{
					Name: "beta", Replicas: ptr.To[int32](2), Image: "nginx:1.27", MinReadySeconds: 30,
				}},
			}
			if _, err := beta.Create(s.ctx, withField, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			// Foos written through v1alpha1: their managed fields are
			// recorded in v1alpha1, and moved by the migration.
			const throughAlpha = 10
			for i := range throughAlpha {
				if _, err := s.foos.SamplecontrollerV1alpha1().Foos(s.ns).Create(s.ctx, &samplev1alpha1.Foo{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("alpha-%d", i)},
					Spec:       samplev1alpha1.FooSpec{DeploymentName: "alpha", PodLabels: map[string]string{"tier": "web"}},
				}, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			if got, _ := state(); !maps.Equal(got, map[string]int{"v1alpha1": n + 1 + throughAlpha}) {
				t.Fatalf("before the storage version changed: stored %v, want all %d in v1alpha1", got, n+1+throughAlpha)
			}
			res, err := storagemigrate.Migrate(ctx, clients, fooCRD, opts)
			if err != nil || res.Method != "" {
				t.Fatalf("with v1alpha1 the only stored version: %+v, %v; want nothing done", res, err)
			}
			before, err := beta.List(s.ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}

			// The storage version becomes v1beta1 (as the shipped CRD
			// has it).
			storeIn("v1beta1")
			if _, sv := state(); !slices.Equal(sv, []string{"v1alpha1", "v1beta1"}) {
				t.Fatalf("storedVersions %v after the switch, want [v1alpha1 v1beta1]", sv)
			}
			// Foos written after the switch are stored in v1beta1: the
			// rewrite finds them so (the API server writes nothing).
			const late = 5
			s.eventually(30*time.Second, "a Foo written after the switch stored in v1beta1", func() (bool, string) {
				s.createFoo(newFoo(fmt.Sprintf("late-%d", time.Now().UnixNano()), "late", 1))
				stored, err := cl.storedVersionsOf(s.ctx, s.ns)
				if err != nil {
					return false, err.Error()
				}
				return countVersions(stored)["v1beta1"] >= late, fmt.Sprint(countVersions(stored))
			})
			all, err := beta.List(s.ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			total := len(all.Items)
			storedBefore, _ := state()
			t.Logf("before the migration: %d Foos, stored %v", total, storedBefore)

			var stuck string // the StorageVersionMigration left running, if any
			// What the failed run did: a Foo whose managed fields it
			// moved is written, webhook down or not, when the API server
			// holds it converted already (its watch cache of v1beta1): it
			// is stored in v1beta1 from then on. One it writes unchanged
			// is compared with what etcd holds, which takes the webhook.
			var failed storagemigrate.Result
			{
				// The webhook down: each Foo stored in v1alpha1 must be
				// converted to be written in v1beta1. It fails, and
				// storedVersions stay.
				cl.stopWebhook()
				start := time.Now()
				ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
				res, err := storagemigrate.Migrate(ctx, clients, fooCRD, opts)
				cancel()
				if err == nil {
					t.Fatalf("migration with the webhook down: %+v, no error", res)
				}
				t.Logf("with the webhook down, after %v: %v", time.Since(start).Round(time.Millisecond), err)
				// The rewrite fails at once; the API server's migration
				// retries for as long as it takes.
				want := map[storagemigrate.Method]string{storagemigrate.Rewrite: "conversion webhook", storagemigrate.StorageVersionMigration: "not finished"}[tc.method]
				if !strings.Contains(err.Error(), want) {
					t.Errorf("the error does not say %q", want)
				}
				stuck, failed = res.Migration, res
				storedBefore, _ = state()
				t.Logf("with the webhook down: written %d, managed fields moved on %d; stored now %v", res.Written, res.FieldsMoved, storedBefore)
				if _, sv := state(); !slices.Equal(sv, []string{"v1alpha1", "v1beta1"}) {
					t.Fatalf("storedVersions %v after a failed migration, want [v1alpha1 v1beta1] kept", sv)
				}
				// Back, at another address: the CRD changes (its
				// conversion webhook's url; a new caBundle would too).
				if err := cl.serveConversionWebhook(s.ctx); err != nil {
					t.Fatal(err)
				}
			}
			start := time.Now()
			res, err = storagemigrate.Migrate(ctx, clients, fooCRD, opts)
			if err != nil {
				t.Fatalf("migration: %+v: %v", res, err)
			}
			t.Logf("migrated in %v: %+v", time.Since(start).Round(time.Millisecond), res)
			if res.Method != tc.method {
				t.Errorf("auto chose %q, want %q", res.Method, tc.method)
			}
			if moved := failed.FieldsMoved + res.FieldsMoved; moved != throughAlpha {
				t.Errorf("managed fields moved on %d Foos (%d with the webhook down), want the %d written through v1alpha1", moved, failed.FieldsMoved, throughAlpha)
			}
			if tc.method == storagemigrate.Rewrite && (res.Written != storedBefore["v1alpha1"] || res.Unchanged != storedBefore["v1beta1"]) {
				t.Errorf("the rewrite wrote %d Foos and found %d stored in v1beta1; want the %d stored in v1alpha1 written, the %d in v1beta1 not",
					res.Written, res.Unchanged, storedBefore["v1alpha1"], storedBefore["v1beta1"])
			}
			// The migration left running with the webhook down began
			// before the CRD last changed (the webhook came back at
			// another address): it may have skipped Foos, so a new one,
			// queued behind it, did the job.
			if stuck != "" && res.Migration == stuck {
				t.Errorf("it used StorageVersionMigration %q, begun before the CRD changed; want a new one", stuck)
			}

			got, sv := state()
			if !maps.Equal(got, map[string]int{"v1beta1": total}) {
				t.Errorf("after the migration: stored %v, want all %d in v1beta1", got, total)
			}
			if !slices.Equal(sv, []string{"v1beta1"}) {
				t.Errorf("storedVersions %v after the migration, want [v1beta1]", sv)
			}

			// Nothing a client reads has changed.
			after, err := beta.List(s.ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(after.Items) != total {
				t.Fatalf("%d Foos after, %d before", len(after.Items), total)
			}
			for i := range before.Items {
				b := &before.Items[i]
				a := &after.Items[slices.IndexFunc(after.Items, func(f samplev1beta1.Foo) bool { return f.Name == b.Name })]
				if a.Generation != b.Generation || !apiequality.Semantic.DeepEqual(a.Spec, b.Spec) || !maps.Equal(a.Labels, b.Labels) || !maps.Equal(a.Annotations, b.Annotations) {
					t.Errorf("Foo %s changed by the migration:\nbefore generation %d %+v %v %v\nafter  generation %d %+v %v %v",
						a.Name, b.Generation, b.Spec, b.Labels, b.Annotations, a.Generation, a.Spec, a.Labels, a.Annotations)
				}
			}
			managedFieldsInV1beta1(t, after.Items)
			migrated, err := beta.Get(s.ctx, "beta", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if migrated.Spec.Deployment.MinReadySeconds != 30 {
				t.Errorf("minReadySeconds %d after the migration, want 30", migrated.Spec.Deployment.MinReadySeconds)
			}

			// Again: nothing to do.
			if res, err := storagemigrate.Migrate(ctx, clients, fooCRD, opts); err != nil || res.Method != "" || res.Written != 0 {
				t.Errorf("run again: %+v, %v; want nothing done", res, err)
			}

			// A second migration, back to v1alpha1 (as a release going
			// back would), held up by the webhook down: while the Foos are
			// still stored in v1beta1, storedVersions must name v1beta1.
			// (kube-controller-manager 1.36, which owned storedVersions
			// from its trim, drops them as it begins the next migration:
			// pkg/storagemigrate's coOwnStoredVersions.)
			storeIn("v1alpha1")
			cl.stopWebhook()
			held, cancel := context.WithTimeout(ctx, 20*time.Second)
			res, err = storagemigrate.Migrate(held, clients, fooCRD, opts)
			cancel()
			t.Logf("back to v1alpha1, the webhook down: %+v, %v", res, err)
			if err == nil {
				t.Fatal("the second migration succeeded with the webhook down")
			}
			got, sv = state()
			t.Logf("meanwhile: stored %v, storedVersions %v", got, sv)
			if got["v1beta1"] > 0 && !slices.Contains(sv, "v1beta1") {
				t.Errorf("storedVersions %v while Foos are stored in v1beta1 (%v): v1beta1 could be removed from the CRD over them", sv, got)
			}
			if err := cl.serveConversionWebhook(s.ctx); err != nil {
				t.Fatal(err)
			}
			if res, err = storagemigrate.Migrate(ctx, clients, fooCRD, opts); err != nil {
				t.Fatalf("the second migration: %+v: %v", res, err)
			}
			if got, sv = state(); !maps.Equal(got, map[string]int{"v1alpha1": total}) || !slices.Equal(sv, []string{"v1alpha1"}) {
				t.Errorf("after the second migration: stored %v, storedVersions %v; want all %d in v1alpha1, [v1alpha1]", got, sv, total)
			}
			if tc.method != storagemigrate.StorageVersionMigration {
				return
			}

			// A third, by hand (kubectl create, another migrator), after
			// the tool's: storedVersions, which kube-controller-manager's
			// trim made its own again, must stay as it begins (the tool
			// co-owns them after its migration too; found by the second
			// attack).
			storeIn("v1beta1")
			cl.stopWebhook()
			t.Cleanup(func() { _ = cl.serveConversionWebhook(context.WithoutCancel(s.ctx)) }) // the namespace's deletion needs it
			byHand := &svmv1beta1.StorageVersionMigration{
				ObjectMeta: metav1.ObjectMeta{Name: "by-hand"},
				Spec:       svmv1beta1.StorageVersionMigrationSpec{Resource: metav1.GroupResource{Group: "samplecontroller.example.com", Resource: "foos"}},
			}
			if _, err := s.kube.StoragemigrationV1beta1().StorageVersionMigrations().Create(s.ctx, byHand, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			s.eventually(time.Minute, "kube-controller-manager to begin the migration by hand", func() (bool, string) {
				crd, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(s.ctx, fooCRD, metav1.GetOptions{})
				if err != nil {
					return false, err.Error()
				}
				return apihelpers.IsCRDConditionTrue(crd, apiextensionsv1.StorageMigrating), fmt.Sprint(crd.Status.Conditions)
			})
			time.Sleep(2 * time.Second) // its apply, and the API server's answer to it
			got, sv = state()
			t.Logf("a migration by hand begun, the webhook down: stored %v, storedVersions %v", got, sv)
			if got["v1alpha1"] > 0 && !slices.Contains(sv, "v1alpha1") {
				t.Errorf("storedVersions %v while Foos are stored in v1alpha1 (%v)", sv, got)
			}
		})
	}
}
