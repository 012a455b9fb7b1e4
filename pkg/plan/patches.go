package plan

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	samplev1beta1 "example.com/foo-controller/pkg/apis/samplecontroller/v1beta1"
)

// WantsOrphanFinalizer reports whether a live (not deleting) Foo should
// carry OrphanFinalizer: only when its deletionPolicy is Orphan. With Delete
// the garbage collector needs no help, and a finalizer would only be one
// more thing that can leave a Foo stuck terminating.
func WantsOrphanFinalizer(foo *samplev1beta1.Foo) bool {
	return foo.Spec.DeletionPolicy == samplev1beta1.DeletionPolicyOrphan
}

// HasOrphanFinalizer reports whether foo carries OrphanFinalizer.
func HasOrphanFinalizer(foo *samplev1beta1.Foo) bool {
	return slices.Contains(foo.Finalizers, samplev1beta1.OrphanFinalizer)
}

// FinalizerPatch returns a JSON merge patch that adds (want) or removes
// (!want) OrphanFinalizer, or ok=false when foo is already as wanted. The
// patch carries foo's resourceVersion: it replaces the whole finalizer list,
// so it must fail with a conflict, rather than drop a finalizer someone else
// just added, when foo is stale.
func FinalizerPatch(foo *samplev1beta1.Foo, want bool) (patch []byte, ok bool, err error) {
	if HasOrphanFinalizer(foo) == want {
		return nil, false, nil
	}
	finalizers := make([]string, 0, len(foo.Finalizers)+1)
	for _, f := range foo.Finalizers {
		if f != samplev1beta1.OrphanFinalizer {
			finalizers = append(finalizers, f)
		}
	}
	if want {
		finalizers = append(finalizers, samplev1beta1.OrphanFinalizer)
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

// removeStrayEntriesPatch returns a JSON patch that removes, from our
// container in dep, every list entry that foo does not declare but that is
// ours to keep absent, or ok=false if there is none. Today that is each
// port named PortName other than the one foo declares (see strayPorts). A
// list field of our container whose entries the controller owns adds its
// own finder here.
//
// Server-side apply cannot remove these when another writer owns them:
// applying a list removes only the entries our field manager owned and no
// longer declares. "test" operations guard every index: if the lists
// changed since dep was read, the patch fails instead of removing the wrong
// entry.
func removeStrayEntriesPatch(foo *samplev1beta1.Foo, dep *DeploymentView) (patch []byte, ok bool, err error) {
	return strayEntriesPatch(foo, dep, false)
}

// replaceStrayEntriesPatch is removeStrayEntriesPatch that also adds, in the
// same patch, the entries foo declares that are missing: when another writer
// re-keyed our port, the pod template changes once (their port becomes ours)
// instead of twice (a template without the port, then the apply's), which
// would be two rollouts. And when the API server rewrites the port we declare
// (a mutating admission policy), the patch changes nothing at all, where a
// removal alone would roll out a template without it.
func replaceStrayEntriesPatch(foo *samplev1beta1.Foo, dep *DeploymentView) (patch []byte, ok bool, err error) {
	return strayEntriesPatch(foo, dep, true)
}

func strayEntriesPatch(foo *samplev1beta1.Foo, dep *DeploymentView, replace bool) (patch []byte, ok bool, err error) {
	for ci, c := range dep.Spec.Template.Spec.Containers {
		if c.Name != ContainerName {
			continue
		}
		cpath := fmt.Sprintf("/spec/template/spec/containers/%d", ci)
		ops := []map[string]any{{"op": "test", "path": cpath + "/name", "value": c.Name}}
		ops = append(ops, removals(cpath+"/ports", strayPorts(foo, &c))...)
		if len(ops) == 1 {
			return nil, false, nil
		}
		if replace {
			ops = append(ops, missingPorts(foo, &c, cpath+"/ports")...)
		}
		patch, err = json.Marshal(ops)
		return patch, true, err
	}
	return nil, false, nil
}

// removingStraysConverges reports whether removing the strays of dep (see
// removeStrayEntriesPatch) leaves nothing for foo to change: whether the
// patch alone would converge dep. After an apply the API server accepted,
// that is the condition to send it: if what we declare is still missing,
// the API server did not keep it (a mutating admission policy rewrote our
// port, say), and removing what it put there instead would only start a
// fight with it, one write per event, forever.
func removingStraysConverges(foo *samplev1beta1.Foo, dep *DeploymentView) (converges bool) {
	patch, ok, err := removeStrayEntriesPatch(foo, dep)
	if err != nil || !ok {
		return false
	}
	after, err := patchedCopy(dep, patch)
	return err == nil && len(Drift(foo, after)) == 0
}

// patchedCopy is dep with a JSON patch applied, dep itself unchanged.
func patchedCopy(dep *DeploymentView, patch []byte) (*DeploymentView, error) {
	raw, err := json.Marshal(dep)
	if err != nil {
		return nil, err
	}
	p, err := jsonpatch.DecodePatch(patch)
	if err != nil {
		return nil, err
	}
	out, err := p.Apply(raw)
	if err != nil {
		return nil, err
	}
	after := &DeploymentView{}
	return after, json.Unmarshal(out, after)
}

// stray is an entry to remove from a list: its index, and the values that
// identify it, each checked by a "test" before the removal.
type stray struct {
	index int
	is    map[string]any
}

// removals are the JSON patch operations that remove strays from the list
// at path, last first, so that each removal leaves the indexes still to
// come in place.
func removals(path string, strays []stray) []map[string]any {
	var ops []map[string]any
	for i := len(strays) - 1; i >= 0; i-- {
		entry := fmt.Sprintf("%s/%d", path, strays[i].index)
		for _, field := range slices.Sorted(maps.Keys(strays[i].is)) {
			ops = append(ops, map[string]any{"op": "test", "path": entry + "/" + field, "value": strays[i].is[field]})
		}
		ops = append(ops, map[string]any{"op": "remove", "path": entry})
	}
	return ops
}

// strayPorts are the ports of c named PortName other than the one foo
// declares. Server-side apply keys container ports by containerPort and
// protocol, not by name: when another writer changes the number of our
// "http" port (kubectl edit 8080 → 7070), the entry keyed 8080 is gone and
// a new one keyed 7070, owned by that writer, holds the name. Our apply
// adds 8080 beside it and the API server refuses the pair (duplicate
// name); no apply of ours can remove the stray.
func strayPorts(foo *samplev1beta1.Foo, c *containerView) []stray {
	var out []stray
	for i, p := range c.Ports {
		if p.Name != PortName || (foo.Spec.Deployment.ContainerPort != nil && isDesiredPort(p, *foo.Spec.Deployment.ContainerPort)) {
			continue
		}
		out = append(out, stray{index: i, is: map[string]any{
			"name": p.Name, "containerPort": p.ContainerPort, "protocol": p.Protocol,
		}})
	}
	return out
}

// missingPorts is the JSON patch operation that adds to c's ports, at
// path, the port foo declares, if c lacks it.
func missingPorts(foo *samplev1beta1.Foo, c *containerView, path string) []map[string]any {
	want := foo.Spec.Deployment.ContainerPort
	if want == nil || slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return isDesiredPort(p, *want) }) {
		return nil
	}
	return []map[string]any{{"op": "add", "path": path + "/-", "value": map[string]any{
		"name": PortName, "containerPort": *want, "protocol": corev1.ProtocolTCP,
	}}}
}

// FailedTest reports whether err is the API server saying that a "test"
// operation of a JSON patch failed: the object changed since it was read.
// The answer has no reason of its own: it is a 422 Invalid, like a
// refusal, but with the API server's generic message and no details (a
// refusal by validation or an admission policy names the object and the
// cause). pkg/integration's TestContainerPortCorrectionRefused shows both
// on a real API server.
func FailedTest(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return false
	}
	s := status.Status()
	return s.Code == http.StatusUnprocessableEntity && s.Reason == metav1.StatusReasonInvalid &&
		(s.Details == nil || (s.Details.Kind == "" && s.Details.Name == "" && len(s.Details.Causes) == 0))
}
