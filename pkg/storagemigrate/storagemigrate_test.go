package storagemigrate

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

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

func crd() *apiextensionsv1.CustomResourceDefinition {
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "foos.samplecontroller.example.com", Generation: 2},
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

// fixture: an API server storing Foos in v1beta1 (discovery says so), with
// the Foos given and a reactor deciding each update's fate.
func fixture(t *testing.T, update func(name string, try int) error, objs ...runtime.Object) (Clients, *extfake.Clientset) {
	t.Helper()
	kube := kubefake.NewClientset()
	kube.Resources = []*metav1.APIResourceList{{
		GroupVersion: foos.GroupVersion().String(),
		APIResources: []metav1.APIResource{{Name: "foos", Kind: "Foo", Namespaced: true,
			StorageVersionHash: storageVersionHash(foos.Group, "v1beta1", "Foo")}},
	}}
	ext := extfake.NewClientset(crd())
	dyn := dynfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{foos: "FooList"}, objs...)
	tries := map[string]int{}
	dyn.PrependReactor("update", "foos", func(a k8stesting.Action) (bool, runtime.Object, error) {
		obj := a.(k8stesting.UpdateAction).GetObject().(*unstructured.Unstructured)
		name := obj.GetName()
		tries[name]++
		if err := update(name, tries[name]); err != nil {
			return true, nil, err
		}
		out := obj.DeepCopy()
		out.SetResourceVersion(obj.GetResourceVersion() + "+")
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
		name        string
		update      func(name string, try int) error
		wantErr     string
		wantWritten int
		wantGone    int
	}{
		{"every Foo written", func(string, int) error { return nil }, "", 3, 0},
		{"another writer first: read again, written", func(name string, try int) error {
			if name == "b" && try == 1 {
				return apierrors.NewConflict(gr, name, errors.New("changed"))
			}
			return nil
		}, "", 3, 0},
		{"deleted meanwhile", func(name string, _ int) error {
			if name == "c" {
				return apierrors.NewNotFound(gr, name)
			}
			return nil
		}, "", 2, 1},
		{"conflicts without end", func(name string, _ int) error {
			if name == "b" {
				return apierrors.NewConflict(gr, name, errors.New("changed"))
			}
			return nil
		}, "ns/b", 2, 0},
		{"one refused (the conversion webhook down)", func(name string, _ int) error {
			if name == "a" {
				return apierrors.NewInternalError(errors.New("conversion webhook for samplecontroller.example.com/v1alpha1, Kind=Foo failed"))
			}
			return nil
		}, "conversion webhook", 2, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, ext := fixture(t, tc.update, foo("a", "1"), foo("b", "2"), foo("c", "3"))
			res, err := Migrate(context.Background(), c, crd().Name, Auto, time.Millisecond)
			if res.Method != Rewrite {
				t.Errorf("method %q, want %q (no StorageVersionMigration served)", res.Method, Rewrite)
			}
			if res.Written != tc.wantWritten || res.Gone != tc.wantGone {
				t.Errorf("written %d, gone %d; want %d, %d", res.Written, res.Gone, tc.wantWritten, tc.wantGone)
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

// TestNotStoringYet: an API server still storing in the old version (its
// discovery's hash says so) is not rewritten, nor the CRD trimmed.
func TestNotStoringYet(t *testing.T) {
	c, ext := fixture(t, func(string, int) error { return nil }, foo("a", "1"))
	c.Kube.(*kubefake.Clientset).Resources[0].APIResources[0].StorageVersionHash = storageVersionHash(foos.Group, "v1alpha1", "Foo")
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	res, err := Migrate(ctx, c, crd().Name, Auto, 10*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "does not store foos in v1beta1 yet") {
		t.Fatalf("%v, want the storage version not in use yet", err)
	}
	if res.Written != 0 || !slices.Equal(storedVersions(t, ext), []string{"v1alpha1", "v1beta1"}) {
		t.Errorf("written %d, storedVersions %v: want nothing done", res.Written, storedVersions(t, ext))
	}
}

// TestRewriteListExpired: a continue token that outlived etcd's compaction
// (410 Expired) restarts the list from the start; every Foo is written.
func TestRewriteListExpired(t *testing.T) {
	c, ext := fixture(t, func(string, int) error { return nil }, foo("a", "1"), foo("b", "2"))
	dyn := c.Dynamic.(*dynfake.FakeDynamicClient)
	lists := 0
	dyn.PrependReactor("list", "foos", func(k8stesting.Action) (bool, runtime.Object, error) {
		lists++
		// (The fake client's actions do not carry the continue token.)
		switch lists {
		case 1: // the first page: a, and a token
			l := &unstructured.UnstructuredList{Items: []unstructured.Unstructured{*foo("a", "1")}}
			l.SetContinue("token")
			return true, l, nil
		case 2: // with the token: expired
			return true, nil, apierrors.NewResourceExpired("the continue token is too old")
		default: // from the start again
			return true, &unstructured.UnstructuredList{Items: []unstructured.Unstructured{*foo("a", "1+"), *foo("b", "2")}}, nil
		}
	})
	res, err := Migrate(context.Background(), c, crd().Name, Rewrite, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if lists != 3 || res.Written != 3 {
		t.Errorf("%d lists, %d writes; want 3 lists (a page, expired, from the start) and 3 writes (a twice)", lists, res.Written)
	}
	if got := storedVersions(t, ext); !slices.Equal(got, []string{"v1beta1"}) {
		t.Errorf("storedVersions %v, want [v1beta1]", got)
	}
}
