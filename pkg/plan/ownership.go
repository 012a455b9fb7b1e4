package plan

import (
	"maps"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	samplev1beta1 "example.com/foo-controller/pkg/apis/samplecontroller/v1beta1"
)

// fooKind is the kind named in the owner references the controller writes.
const fooKind = "Foo"

// Ownership says how an existing Deployment relates to a Foo.
type Ownership int

const (
	// Foreign is someone else's Deployment. The controller must not touch
	// it. It is the zero value, so that an undecided case is the safe one.
	Foreign Ownership = iota
	// Owned is a Deployment controlled by this Foo (a controller owner
	// reference with its UID).
	Owned
	// Orphaned is a Deployment created for this Foo (it carries the Foo's
	// UID label and selector) whose owner reference has been removed; the
	// controller adopts it back.
	Orphaned
	// Superseded is a Deployment controlled by an earlier Foo of the same
	// name, deleted and since recreated. The garbage collector is about to
	// delete it; the new Foo waits instead of reporting a conflict.
	Superseded
)

// String names the Ownership, for logs and test failures.
func (o Ownership) String() string {
	switch o {
	case Owned:
		return "Owned"
	case Orphaned:
		return "Orphaned"
	case Superseded:
		return "Superseded"
	default:
		return "Foreign"
	}
}

// ControllerFoo returns the Foo owner reference that controls obj, or nil if
// obj is not controlled by a Foo. Both the API group and the kind are
// checked: a "Foo" from another group is not ours.
func ControllerFoo(obj metav1.Object) *metav1.OwnerReference {
	ref := metav1.GetControllerOfNoCopy(obj)
	if ref == nil || ref.Kind != fooKind {
		return nil
	}
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil || gv.Group != samplev1beta1.GroupName {
		return nil
	}
	return ref
}

// IsControlledBy reports whether obj's controller is the Foo with this UID.
// Comparing UIDs, not names, keeps a Foo that was deleted and recreated under
// the same name from claiming its predecessor's objects.
func IsControlledBy(obj metav1.Object, fooUID types.UID) bool {
	ref := ControllerFoo(obj)
	return ref != nil && ref.UID == fooUID
}

// leftBehind reports whether dep, which is not foo's, was created by this
// controller for another Foo that no longer controls it: our labels, that
// Foo's UID, no controller (a Foo deleted with deletionPolicy: Orphan).
func leftBehind(dep *DeploymentView, foo *samplev1beta1.Foo) bool {
	if dep == nil {
		return false
	}
	uid, ok := dep.Labels[FooUIDLabel]
	return ok && uid != string(foo.UID) && dep.Labels[ManagedByLabel] == managedByValue && metav1.GetControllerOfNoCopy(dep) == nil
}

// Classify says whether dep belongs to foo.
func Classify(dep *DeploymentView, foo *samplev1beta1.Foo) Ownership {
	if IsControlledBy(dep, foo.UID) {
		return Owned
	}
	// Names are unique per namespace, so a controlling Foo of this name
	// with another UID no longer exists.
	if ref := ControllerFoo(dep); ref != nil && ref.Name == foo.Name {
		return Superseded
	}
	// Adopt only what we provably created: the UID label, and the selector
	// we would have written (a selector is immutable, so a Deployment with
	// any other selector could never be brought to the desired shape).
	if metav1.GetControllerOfNoCopy(dep) == nil &&
		dep.Labels[FooUIDLabel] == string(foo.UID) &&
		dep.Spec.Selector != nil && len(dep.Spec.Selector.MatchExpressions) == 0 &&
		maps.Equal(dep.Spec.Selector.MatchLabels, SelectorLabels(foo)) {
		return Orphaned
	}
	return Foreign
}
