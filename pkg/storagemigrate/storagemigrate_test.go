package storagemigrate

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	svmv1beta1 "k8s.io/api/storagemigration/v1beta1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	extfake "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset/fake"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

var foos = schema.GroupVersionResource{Group: "samplecontroller.example.com", Version: "v1beta1", Resource: "foos"}

// fast: no settling, quick polls.
var fast = Options{Settle: time.Millisecond, PollEvery: time.Millisecond}

// crdChanged is when the test CRD's spec last changed (its managedFields).
var crdChanged = time.Date(2026, 11, 27, 6, 0, 0, 0, time.UTC)

func crd() *apiextensionsv1.CustomResourceDefinition {
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "foos.samplecontroller.example.com", Generation: 2,
			ManagedFields: []metav1.ManagedFieldsEntry{
				{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "apiextensions.k8s.io/v1", FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1("{}"), Time: &metav1.Time{Time: crdChanged}},
				{Manager: "kube-apiserver", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "apiextensions.k8s.io/v1", FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1("{}"), Subresource: "status", Time: &metav1.Time{Time: crdChanged.Add(time.Hour)}},
			}},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: foos.Group,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "foos", Kind: "Foo"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{
				{Name: "v1alpha1", Served: true},
				{Name: "v1beta1", Served: true, Storage: true},
			},
		},
		Status: apiextensionsv1.CustomResourceDefinitionStatus{StoredVersions: []string{"v1alpha1", "v1beta1"}},
	}
}

func foo(name, rv string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(foos.GroupVersion().String())
	u.SetKind("Foo")
	u.SetNamespace("ns")
	u.SetName(name)
	u.SetResourceVersion(rv)
	return u
}

// fixture: an API server storing Foos in v1beta1 (discovery says so), not
// serving StorageVersionMigrations unless svm, with the Foos given and
// update deciding each update's fate.
func fixture(t *testing.T, svm bool, update func(name string) error, objs ...runtime.Object) (Clients, *extfake.Clientset) {
	t.Helper()
	kube := kubefake.NewClientset()
	kube.Resources = []*metav1.APIResourceList{{
		GroupVersion: foos.GroupVersion().String(),
		APIResources: []metav1.APIResource{{Name: "foos", Kind: "Foo", Namespaced: true,
			StorageVersionHash: storageVersionHash(foos.Group, "v1beta1", "Foo")}},
	}}
	if svm {
		kube.Resources = append(kube.Resources, &metav1.APIResourceList{GroupVersion: svmGroupVersion,
			APIResources: []metav1.APIResource{{Name: "storageversionmigrations", Kind: "StorageVersionMigration"}}})
	}
	ext := extfake.NewClientset(crd())
	dyn := dynfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{foos: "FooList"}, objs...)
	dyn.PrependReactor("update", "foos", func(a k8stesting.Action) (bool, runtime.Object, error) {
		obj := a.(k8stesting.UpdateAction).GetObject().(*unstructured.Unstructured)
		if err := update(obj.GetName()); err != nil {
			return true, nil, err
		}
		out := obj.DeepCopy()
		if obj.GetName() != "stored-in-v1beta1" {
			out.SetResourceVersion(obj.GetResourceVersion() + "+")
		}
		return true, out, nil
	})
	return Clients{Kube: kube, APIExtensions: ext, Dynamic: dyn}, ext
}

func storedVersions(t *testing.T, ext *extfake.Clientset) []string {
	t.Helper()
	got, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(context.Background(), crd().Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return got.Status.StoredVersions
}

func TestRewrite(t *testing.T) {
	gr := foos.GroupResource()
	for _, tc := range []struct {
		name    string
		update  func(name string) error
		wantErr string
		want    [4]int // written, unchanged, overtaken, gone
	}{
		{"every Foo written", func(string) error { return nil }, "", [4]int{3, 1, 0, 0}},
		{"another writer first: in the new version already", func(name string) error {
			if name == "b" {
				return apierrors.NewConflict(gr, name, errors.New("changed"))
			}
			return nil
		}, "", [4]int{2, 1, 1, 0}},
		{"deleted meanwhile", func(name string) error {
			if name == "c" {
				return apierrors.NewNotFound(gr, name)
			}
			return nil
		}, "", [4]int{2, 1, 0, 1}},
		{"one refused (the conversion webhook down)", func(name string) error {
			if name == "a" {
				return apierrors.NewInternalError(errors.New("conversion webhook for samplecontroller.example.com/v1alpha1, Kind=Foo failed"))
			}
			return nil
		}, "ns/a", [4]int{2, 1, 0, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, ext := fixture(t, false, tc.update, foo("a", "1"), foo("b", "2"), foo("c", "3"), foo("stored-in-v1beta1", "4"))
			res, err := Migrate(context.Background(), c, crd().Name, fast)
			if res.Method != Rewrite {
				t.Errorf("method %q, want %q (no StorageVersionMigration served)", res.Method, Rewrite)
			}
			if got := [4]int{res.Written, res.Unchanged, res.Overtaken, res.Gone}; got != tc.want {
				t.Errorf("written, unchanged, overtaken, gone: %v, want %v", got, tc.want)
			}
			got := storedVersions(t, ext)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got, []string{"v1beta1"}) {
					t.Errorf("storedVersions %v, want [v1beta1]", got)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want one naming %q", err, tc.wantErr)
			}
			if !slices.Equal(got, []string{"v1alpha1", "v1beta1"}) {
				t.Errorf("storedVersions %v after a failure, want both kept", got)
			}
		})
	}
}

// TestRewriteListExpired: a continue token that outlived etcd's compaction
// (410 Expired) goes on with the token the API server offers in its
// refusal; without one, the rewrite fails and trims nothing.
func TestRewriteListExpired(t *testing.T) {
	for _, offered := range []string{"token2", ""} {
		c, ext := fixture(t, false, func(string) error { return nil })
		lists := 0
		c.Dynamic.(*dynfake.FakeDynamicClient).PrependReactor("list", "foos", func(k8stesting.Action) (bool, runtime.Object, error) {
			lists++
			// (The fake client's actions do not carry the continue token.)
			switch lists {
			case 1: // the first page: a, and a token
				l := &unstructured.UnstructuredList{Items: []unstructured.Unstructured{*foo("a", "1")}}
				l.SetContinue("token")
				return true, l, nil
			case 2: // with the token: expired, another offered
				err := apierrors.NewResourceExpired("the continue token is too old")
				err.ErrStatus.Continue = offered
				return true, nil, err
			default: // from where it stopped
				return true, &unstructured.UnstructuredList{Items: []unstructured.Unstructured{*foo("b", "2")}}, nil
			}
		})
		res, err := Migrate(context.Background(), c, crd().Name, fast)
		if offered == "" {
			if !apierrors.IsResourceExpired(err) || !slices.Equal(storedVersions(t, ext), []string{"v1alpha1", "v1beta1"}) {
				t.Errorf("no token offered: %v, storedVersions %v; want the expiry, nothing trimmed", err, storedVersions(t, ext))
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if lists != 3 || res.Written != 2 || !slices.Equal(storedVersions(t, ext), []string{"v1beta1"}) {
			t.Errorf("%d lists, %d written, storedVersions %v; want 3 lists (a page, expired, the rest), a and b written, [v1beta1]", lists, res.Written, storedVersions(t, ext))
		}
	}
}

// TestTrimRefusedWhenTheCRDChanged: the CRD changed while the Foos were
// written again (its generation moved): nothing is trimmed.
func TestTrimRefusedWhenTheCRDChanged(t *testing.T) {
	var c Clients
	var ext *extfake.Clientset
	c, ext = fixture(t, false, func(string) error {
		changed := crd()
		changed.Generation++
		_, err := ext.ApiextensionsV1().CustomResourceDefinitions().Update(context.Background(), changed, metav1.UpdateOptions{})
		return err
	}, foo("a", "1"))
	_, err := Migrate(context.Background(), c, crd().Name, fast)
	if err == nil || !strings.Contains(err.Error(), "changed while") {
		t.Fatalf("%v, want the CRD's change named", err)
	}
	if got := storedVersions(t, ext); !slices.Equal(got, []string{"v1alpha1", "v1beta1"}) {
		t.Errorf("storedVersions %v, want both kept", got)
	}
}

// TestNotStoringYet: an API server still storing in the old version (its
// discovery's hash says so) is not written to, nor the CRD trimmed.
func TestNotStoringYet(t *testing.T) {
	writes := 0
	c, ext := fixture(t, false, func(string) error { writes++; return nil }, foo("a", "1"))
	c.Kube.(*kubefake.Clientset).Resources[0].APIResources[0].StorageVersionHash = storageVersionHash(foos.Group, "v1alpha1", "Foo")
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := Migrate(ctx, c, crd().Name, fast)
	if err == nil || !strings.Contains(err.Error(), "does not store foos in v1beta1 yet") {
		t.Fatalf("%v, want the storage version not in use yet", err)
	}
	if writes != 0 || !slices.Equal(storedVersions(t, ext), []string{"v1alpha1", "v1beta1"}) {
		t.Errorf("%d writes, storedVersions %v: want nothing done", writes, storedVersions(t, ext))
	}
}

// TestSettles: the hash must name the new version for Settle; a poll
// naming the old version in between starts the wait again.
func TestSettles(t *testing.T) {
	c, _ := fixture(t, false, func(string) error { return nil }, foo("a", "1"))
	kube := c.Kube.(*kubefake.Clientset)
	polls := 0
	// Discovery's reads (the first asks whether StorageVersionMigrations
	// are served): the fifth is answered by an API server not switched
	// yet. (Changed in the reactor: the fake reads Resources
	// right after it, unlocked.)
	kube.PrependReactor("get", "resource", func(k8stesting.Action) (bool, runtime.Object, error) {
		if len(kube.Resources[0].APIResources) > 0 {
			polls++
			version := "v1beta1"
			if polls == 5 {
				version = "v1alpha1"
			}
			kube.Resources[0].APIResources[0].StorageVersionHash = storageVersionHash(foos.Group, version, "Foo")
		}
		return false, nil, nil
	})
	start := time.Now()
	if _, err := Migrate(context.Background(), c, crd().Name, Options{Settle: 300 * time.Millisecond, PollEvery: 20 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	// waitStoring's first three polls match (0 to 40 ms), its fourth
	// (60 ms) does not: 300 ms from its fifth, at 80 ms at the earliest.
	if took := time.Since(start); took < 370*time.Millisecond {
		t.Errorf("wrote after %v: the old hash at the fifth poll must start the 300 ms settle again", took)
	}
}

// svmFixture: an API server serving StorageVersionMigrations, with the
// migrations given; kube-controller-manager's part is played by onGet.
func svmFixture(t *testing.T, onGet func(*svmv1beta1.StorageVersionMigration, *extfake.Clientset), svms ...runtime.Object) (Clients, *extfake.Clientset, *kubefake.Clientset) {
	t.Helper()
	c, ext := fixture(t, true, func(string) error { t.Error("a Foo written with StorageVersionMigrations served"); return nil })
	kube := c.Kube.(*kubefake.Clientset)
	for _, o := range svms {
		if err := kube.Tracker().Add(o); err != nil {
			t.Fatal(err)
		}
	}
	kube.PrependReactor("get", "storageversionmigrations", func(a k8stesting.Action) (bool, runtime.Object, error) {
		o, err := kube.Tracker().Get(a.GetResource(), "", a.(k8stesting.GetAction).GetName())
		if err != nil {
			return true, nil, err
		}
		svm := o.(*svmv1beta1.StorageVersionMigration).DeepCopy()
		onGet(svm, ext)
		return true, svm, nil
	})
	// The fake does not generate names.
	kube.PrependReactor("create", "storageversionmigrations", func(a k8stesting.Action) (bool, runtime.Object, error) {
		svm := a.(k8stesting.CreateAction).GetObject().(*svmv1beta1.StorageVersionMigration).DeepCopy()
		svm.Name = svm.GenerateName + "new"
		return true, svm, kube.Tracker().Add(svm)
	})
	return c, ext, kube
}

func migration(name string, created time.Time, conds ...metav1.Condition) *svmv1beta1.StorageVersionMigration {
	return &svmv1beta1.StorageVersionMigration{
		ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.Time{Time: created}},
		Spec:       svmv1beta1.StorageVersionMigrationSpec{Resource: metav1.GroupResource{Group: foos.Group, Resource: "foos"}},
		Status:     svmv1beta1.StorageVersionMigrationStatus{Conditions: conds},
	}
}

// succeed plays kube-controller-manager: the migration succeeds, and its
// runner trims storedVersions (if trims).
func succeed(trims bool) func(*svmv1beta1.StorageVersionMigration, *extfake.Clientset) {
	return func(svm *svmv1beta1.StorageVersionMigration, ext *extfake.Clientset) {
		svm.Status.ResourceVersion = "100"
		svm.Status.Conditions = []metav1.Condition{{Type: string(svmv1beta1.MigrationSucceeded), Status: metav1.ConditionTrue}}
		if trims {
			crd, _ := ext.ApiextensionsV1().CustomResourceDefinitions().Get(context.Background(), svm.Spec.Resource.Resource+"."+svm.Spec.Resource.Group, metav1.GetOptions{})
			crd.Status.StoredVersions = []string{"v1beta1"}
			_, _ = ext.ApiextensionsV1().CustomResourceDefinitions().UpdateStatus(context.Background(), crd, metav1.UpdateOptions{})
		}
	}
}

func TestStorageVersionMigration(t *testing.T) {
	running := metav1.Condition{Type: string(svmv1beta1.MigrationRunning), Status: metav1.ConditionTrue}
	t.Run("created, succeeds, trimmed by kube-controller-manager", func(t *testing.T) {
		c, ext, _ := svmFixture(t, succeed(true))
		res, err := Migrate(context.Background(), c, crd().Name, fast)
		if err != nil || res.Method != StorageVersionMigration || res.Migration != "foos.samplecontroller.example.com-new" {
			t.Fatalf("%+v, %v; want a new migration, succeeded", res, err)
		}
		if got := storedVersions(t, ext); !slices.Equal(got, []string{"v1beta1"}) {
			t.Errorf("storedVersions %v", got)
		}
	})
	t.Run("one begun after the switch settled: waited for", func(t *testing.T) {
		c, _, _ := svmFixture(t, succeed(true), migration("after", crdChanged.Add(time.Second), running))
		res, err := Migrate(context.Background(), c, crd().Name, fast)
		if err != nil || res.Migration != "after" {
			t.Fatalf("%+v, %v; want the one there waited for", res, err)
		}
	})
	t.Run("one begun before the switch settled: a new one", func(t *testing.T) {
		c, _, _ := svmFixture(t, succeed(true), migration("before", crdChanged.Add(-time.Second), running))
		res, err := Migrate(context.Background(), c, crd().Name, fast)
		if err != nil || res.Migration == "before" {
			t.Fatalf("%+v, %v: a migration begun before the CRD changed may have skipped Foos stored in the old version; want a new one", res, err)
		}
	})
	t.Run("failed", func(t *testing.T) {
		c, ext, _ := svmFixture(t, func(svm *svmv1beta1.StorageVersionMigration, _ *extfake.Clientset) {
			svm.Status.Conditions = []metav1.Condition{{Type: string(svmv1beta1.MigrationFailed), Status: metav1.ConditionTrue, Reason: "StorageVersionMigrationFailed", Message: "resource does not exist in GC"}}
		})
		_, err := Migrate(context.Background(), c, crd().Name, fast)
		if err == nil || !strings.Contains(err.Error(), "resource does not exist in GC") {
			t.Fatalf("%v, want the migration's failure", err)
		}
		if got := storedVersions(t, ext); !slices.Equal(got, []string{"v1alpha1", "v1beta1"}) {
			t.Errorf("storedVersions %v", got)
		}
	})
	t.Run("not trimmed by kube-controller-manager: run again", func(t *testing.T) {
		defer func(w time.Duration) { trimWait = w }(trimWait)
		trimWait = 10 * time.Millisecond
		c, _, _ := svmFixture(t, succeed(false))
		if _, err := Migrate(context.Background(), c, crd().Name, fast); err == nil || !strings.Contains(err.Error(), "run again") {
			t.Fatalf("%v, want storedVersions left and run again", err)
		}
	})
	t.Run("nothing runs it", func(t *testing.T) {
		defer func(w time.Duration) { svmStartWait = w }(svmStartWait)
		svmStartWait = 20 * time.Millisecond
		c, _, _ := svmFixture(t, func(*svmv1beta1.StorageVersionMigration, *extfake.Clientset) {})
		if _, err := Migrate(context.Background(), c, crd().Name, fast); err == nil || !strings.Contains(err.Error(), "-method=rewrite") {
			t.Fatalf("%v, want no controller named, and the rewrite offered", err)
		}
	})
	t.Run("asked for where not served", func(t *testing.T) {
		c, _ := fixture(t, false, func(string) error { return nil })
		o := fast
		o.Method = StorageVersionMigration
		if _, err := Migrate(context.Background(), c, crd().Name, o); err == nil || !strings.Contains(err.Error(), "does not serve") {
			t.Fatalf("%v, want it not served", err)
		}
	})
}

// TestRewriteRefusedByRBAC: a write refused as forbidden stops the rewrite
// at once (every other would be refused as well), naming the refusal.
func TestRewriteRefusedByRBAC(t *testing.T) {
	writes := 0
	c, ext := fixture(t, false, func(name string) error {
		writes++
		return apierrors.NewForbidden(foos.GroupResource(), name, errors.New(`User "migrator" cannot update resource "foos"`))
	}, foo("a", "1"), foo("b", "2"), foo("c", "3"))
	_, err := Migrate(context.Background(), c, crd().Name, fast)
	if !apierrors.IsForbidden(err) || writes != 1 {
		t.Errorf("%v after %d writes; want the refusal after the first", err, writes)
	}
	if got := storedVersions(t, ext); !slices.Equal(got, []string{"v1alpha1", "v1beta1"}) {
		t.Errorf("storedVersions %v", got)
	}
}
