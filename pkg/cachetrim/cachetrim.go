// Package cachetrim trims objects before they enter an informer's cache.
//
// An informer keeps every watched object in memory for the life of the
// process. managedFields (server-side apply's field ownership records) are
// often the largest part of an object and the controller never reads them,
// nor kubectl's last-applied-configuration annotation: dropping both before
// caching is the cheapest memory saving a controller can make. A
// Deployment is replaced by what the controller reads of it
// (plan.DeploymentView, a type of its own): most of one is defaults that
// only other controllers read. Strings that repeat across objects (namespaces, kinds,
// label keys, condition reasons) are interned (plan.CachedFoo).
package cachetrim

import (
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	samplev1beta1 "example.com/foo-controller/pkg/apis/samplecontroller/v1beta1"
	"example.com/foo-controller/pkg/plan"
)

// lastApplied is the annotation `kubectl apply` (client-side) writes: a full
// copy of the object as last applied.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// Transform is a cache.TransformFunc that drops what the controller never
// reads. It modifies the object in place, or returns a smaller one in its
// place, which a transform may do: the informer has not shared it with
// anyone yet. client-go never hands it a tombstone
// (cache.DeletedFinalStateUnknown): the object in one was transformed when
// it entered the cache.
func Transform(obj any) (any, error) {
	if dep, ok := obj.(*appsv1.Deployment); ok {
		return plan.NewDeploymentView(dep), nil
	}
	if foo, ok := obj.(*samplev1beta1.Foo); ok {
		obj = plan.CachedFoo(foo)
	}
	if m, ok := obj.(metav1.Object); ok {
		m.SetManagedFields(nil)
		if a := m.GetAnnotations(); a != nil {
			if _, found := a[lastApplied]; found {
				delete(a, lastApplied)
				m.SetAnnotations(a)
			}
		}
	}
	return obj, nil
}

var _ cache.TransformFunc = Transform
