package webhook

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// TestKeeperHoldsOffAFight: past writeBurst writes within writeWindow the
// keeper refuses to write, saying what to look for, and writes again once
// the window has passed.
func TestKeeperHoldsOffAFight(t *testing.T) {
	now := t0
	k := &Keeper{Now: func() time.Time { return now }}
	for i := range writeBurst {
		if err := k.mayWrite("the Secret"); err != nil {
			t.Fatalf("write %d refused: %v", i+1, err)
		}
		now = now.Add(time.Second)
	}
	err := k.mayWrite("the Secret")
	if err == nil || !strings.Contains(err.Error(), "holding off writing the Secret") || !strings.Contains(err.Error(), "GitOps") {
		t.Fatalf("write %d: %v, want it held off", writeBurst+1, err)
	}
	now = now.Add(writeWindow)
	if err := k.mayWrite("the Secret"); err != nil {
		t.Errorf("after the window: %v", err)
	}
}

// TestKeeperWarnsOfAHostItLacks: a CRD that sends reviews to a host the
// certificate is not issued for is named in the log once each time it
// changes, by URL or by Service, whatever form the host is written in.
func TestKeeperWarnsOfAHostItLacks(t *testing.T) {
	crd := func(clientConfig map[string]any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"conversion": map[string]any{
			"strategy": "Webhook", "webhook": map[string]any{"clientConfig": clientConfig}}}}}
	}
	k := &Keeper{Hosts: []string{"localhost", "foo-controller-webhook.foo-system.svc"}}
	for _, tc := range []struct {
		name string
		crd  *unstructured.Unstructured
		want string
	}{
		{"a URL of a host it has", crd(map[string]any{"url": "https://LOCALHOST:9443/convert"}), ""},
		{"a URL of a host it lacks", crd(map[string]any{"url": "https://127.0.0.1:9443/convert"}), "127.0.0.1"},
		{"the same again: warned once", crd(map[string]any{"url": "https://127.0.0.1:9443/convert"}), ""},
		{"the Service it has", crd(map[string]any{"service": map[string]any{"name": "foo-controller-webhook", "namespace": "foo-system"}}), ""},
		{"another Service", crd(map[string]any{"service": map[string]any{"name": "foo-webhook", "namespace": "foo-system"}}), "foo-webhook.foo-system.svc"},
		{"no URL and no Service", crd(map[string]any{}), ""},
	} {
		if got := k.warnHost(klog.Background(), tc.crd); got != tc.want {
			t.Errorf("%s: warned of %q, want %q", tc.name, got, tc.want)
		}
	}
}

// keeperWorld is a Keeper on fake clients, with the stores its informers
// would fill, for sync to run against directly.
type keeperWorld struct {
	k       *Keeper
	kube    *kubefake.Clientset
	dyn     *dynamicfake.FakeDynamicClient
	secrets cache.Store
	crds    cache.Store
}

func newKeeperWorld(t *testing.T, crd *unstructured.Unstructured) *keeperWorld {
	t.Helper()
	w := &keeperWorld{
		kube:    kubefake.NewClientset(),
		dyn:     dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{CRDs: "CustomResourceDefinitionList"}, crd.DeepCopy()),
		secrets: cache.NewStore(cache.MetaNamespaceKeyFunc),
		crds:    cache.NewStore(cache.MetaNamespaceKeyFunc),
	}
	w.k = &Keeper{Kube: w.kube, Dynamic: w.dyn, CRD: crd.GetName(), Hosts: []string{"127.0.0.1"},
		Secret: types.NamespacedName{Namespace: "foo-system", Name: "foo-controller-webhook-cert"}, Now: func() time.Time { return t0 }}
	if err := w.crds.Add(crd); err != nil {
		t.Fatal(err)
	}
	return w
}

// sync runs the keeper's sync once, then shows it what it wrote, as its
// informers would: the Secret, and the CRD unless keepCRD (another writer
// puts it back).
func (w *keeperWorld) sync(t *testing.T, keepCRD bool) error {
	t.Helper()
	err := w.k.sync(t.Context(), w.secrets, w.crds)
	if s, getErr := w.kube.CoreV1().Secrets("foo-system").Get(t.Context(), "foo-controller-webhook-cert", metav1.GetOptions{}); getErr == nil {
		_ = w.secrets.Update(s)
	}
	if !keepCRD {
		if c, getErr := w.dyn.Resource(CRDs).Get(t.Context(), w.k.CRD, metav1.GetOptions{}); getErr == nil {
			_ = w.crds.Update(c)
		}
	}
	return err
}

func (w *keeperWorld) patches() int {
	n := 0
	for _, a := range w.dyn.Actions() {
		if a.GetVerb() == "patch" {
			n++
		}
	}
	return n
}

func webhookCRD(annotations map[string]string, caBundle string) *unstructured.Unstructured {
	crd := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": "foos.samplecontroller.example.com", "resourceVersion": "1"},
		"spec": map[string]any{"conversion": map[string]any{"strategy": "Webhook", "webhook": map[string]any{
			"clientConfig": map[string]any{"url": "https://127.0.0.1:9443/convert", "caBundle": caBundle}}}},
	}}
	crd.SetAnnotations(annotations)
	return crd
}

// TestKeeperSync: what one keeper writes, through sync: the Secret and the
// caBundle with its owner on a CRD that has none, nothing more once both are
// right, the owner again on a right caBundle without it; nothing to a CRD
// another Secret owns; and no more than writeBurst attempts against
// something that keeps putting the caBundle back.
func TestKeeperSync(t *testing.T) {
	t.Run("claims an unowned CRD once", func(t *testing.T) {
		w := newKeeperWorld(t, webhookCRD(nil, ""))
		for range 3 {
			if err := w.sync(t, false); err != nil {
				t.Fatal(err)
			}
		}
		crd, _ := w.dyn.Resource(CRDs).Get(t.Context(), w.k.CRD, metav1.GetOptions{})
		if got := crd.GetAnnotations()[CABundleFromAnnotation]; got != "foo-system/foo-controller-webhook-cert" || w.patches() != 1 {
			t.Errorf("owner %q after %d patches, want ours after 1", got, w.patches())
		}
		if _, err := w.k.GetCertificate(nil); err != nil {
			t.Error(err)
		}
		// The caBundle right but no owner named (an install that had the
		// caBundle before the annotation): the owner is written.
		crd.SetAnnotations(nil)
		if _, err := w.dyn.Resource(CRDs).Update(t.Context(), crd, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		_ = w.crds.Update(crd)
		if err := w.sync(t, false); err != nil {
			t.Fatal(err)
		}
		crd, _ = w.dyn.Resource(CRDs).Get(t.Context(), w.k.CRD, metav1.GetOptions{})
		if got := crd.GetAnnotations()[CABundleFromAnnotation]; got != "foo-system/foo-controller-webhook-cert" || w.patches() != 2 {
			t.Errorf("owner %q after %d patches, want ours after 2", got, w.patches())
		}
	})
	t.Run("leaves another Secret's CRD alone", func(t *testing.T) {
		w := newKeeperWorld(t, webhookCRD(map[string]string{CABundleFromAnnotation: "other/secret"}, ""))
		err := w.sync(t, false)
		if err == nil || !strings.Contains(err.Error(), "kubectl annotate crd foos.samplecontroller.example.com samplecontroller.example.com/ca-bundle-from-") || w.patches() != 0 {
			t.Errorf("sync: %v, %d patches; want the hand-over command and none", err, w.patches())
		}
		if _, err := w.k.GetCertificate(nil); err != nil {
			t.Errorf("it still serves: %v", err)
		}
	})
	t.Run("holds off against a caBundle put back", func(t *testing.T) {
		w := newKeeperWorld(t, webhookCRD(map[string]string{CABundleFromAnnotation: "foo-system/foo-controller-webhook-cert"}, "Zm9yZWlnbg=="))
		var err error
		for range 3 * writeBurst {
			if err = w.sync(t, true); err != nil {
				break
			}
		}
		// The Secret's creation was one of the writeBurst attempts.
		if err == nil || !strings.Contains(err.Error(), "holding off writing the CRD's caBundle") || w.patches() != writeBurst-1 {
			t.Errorf("after %d patches: %v; want %d and holding off", w.patches(), err, writeBurst-1)
		}
	})
}
