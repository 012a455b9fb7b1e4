package plan

import (
	"encoding/json"
	"fmt"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	samplev1alpha1 "example.com/foo-controller/pkg/apis/samplecontroller/v1alpha1"
)

// WantsOrphanFinalizer reports whether a live (not deleting) Foo should
// carry OrphanFinalizer: only when its deletionPolicy is Orphan. With Delete
// the garbage collector needs no help, and a finalizer would only be one
// more thing that can leave a Foo stuck terminating.
func WantsOrphanFinalizer(foo *samplev1alpha1.Foo) bool {
	return foo.Spec.DeletionPolicy == samplev1alpha1.DeletionPolicyOrphan
}

// HasOrphanFinalizer reports whether foo carries OrphanFinalizer.
func HasOrphanFinalizer(foo *samplev1alpha1.Foo) bool {
	return slices.Contains(foo.Finalizers, samplev1alpha1.OrphanFinalizer)
}

// FinalizerPatch returns a JSON merge patch that adds (want) or removes
// (!want) OrphanFinalizer, or ok=false when foo is already as wanted. The
// patch carries foo's resourceVersion: it replaces the whole finalizer list,
// so it must fail with a conflict, rather than drop a finalizer someone else
// just added, when foo is stale.
func FinalizerPatch(foo *samplev1alpha1.Foo, want bool) (patch []byte, ok bool, err error) {
	if HasOrphanFinalizer(foo) == want {
		return nil, false, nil
	}
	finalizers := make([]string, 0, len(foo.Finalizers)+1)
	for _, f := range foo.Finalizers {
		if f != samplev1alpha1.OrphanFinalizer {
			finalizers = append(finalizers, f)
		}
	}
	if want {
		finalizers = append(finalizers, samplev1alpha1.OrphanFinalizer)
	}
	patch, err = json.Marshal(map[string]any{
		"metadata": map[string]any{
			"resourceVersion": foo.ResourceVersion,
			"finalizers":      finalizers,
		},
	})
	return patch, true, err
}

// RemoveControllerRefPatch returns a JSON patch that removes the controller
// owner reference to the Foo with fooUID from obj, or ok=false if obj has
// none. A "test" of the reference's UID guards the index: if the list
// changed since obj was read, the patch fails instead of removing someone
// else's reference.
func RemoveControllerRefPatch(obj metav1.Object, fooUID types.UID) (patch []byte, ok bool, err error) {
	for i, ref := range obj.GetOwnerReferences() {
		if ref.UID != fooUID || ref.Controller == nil || !*ref.Controller {
			continue
		}
		path := fmt.Sprintf("/metadata/ownerReferences/%d", i)
		patch, err = json.Marshal([]map[string]any{
			{"op": "test", "path": path + "/uid", "value": ref.UID},
			{"op": "remove", "path": path},
		})
		return patch, true, err
	}
	return nil, false, nil
}
