package ownwrites

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
)

// TestListerReadsOurWritesFirst: a write's answer is read before the
// informer has it (a newer one; a created one with includeAdds), the
// informer's own store is left as it is, and a missing object is
// NotFound, as a generated lister says.
func TestListerReadsOurWritesFirst(t *testing.T) {
	logger, _ := ktesting.NewTestContext(t)
	informed := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	cm := func(name, rv string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: rv}}
	}
	if err := informed.Add(cm("a", "10")); err != nil {
		t.Fatal(err)
	}
	l := NewLister[*corev1.ConfigMap](logger, informed, corev1.Resource("configmaps"), true)
	l.Mutation(cm("a", "11"))
	l.Mutation(cm("created", "12"))
	l.Mutation(cm("stale", "9"))
	for name, wantRV := range map[string]string{"a": "11", "created": "12"} {
		got, err := l.In("ns").Get(name)
		if err != nil || got.ResourceVersion != wantRV {
			t.Errorf("Get(%s) = %v, %v; want resourceVersion %s", name, got, err, wantRV)
		}
	}
	if obj, _, _ := l.Informed.GetByKey("ns/a"); obj.(*corev1.ConfigMap).ResourceVersion != "10" {
		t.Errorf("the informer's store was changed: %v", obj)
	}
	if _, err := l.In("ns").Get("missing"); !apierrors.IsNotFound(err) {
		t.Errorf("Get(missing) = %v, want NotFound", err)
	}
	if _, err := l.In("other").Get("a"); !apierrors.IsNotFound(err) {
		t.Errorf("Get(a) in another namespace = %v, want NotFound", err)
	}
}
