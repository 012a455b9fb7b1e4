package plan

import (
	"maps"
	"slices"
	"strings"

	"k8s.io/utils/ptr"

	samplev1beta1 "example.com/foo-controller/pkg/apis/samplecontroller/v1beta1"
)

// What a Foo declares, read with the defaults the API server would give
// it, and the labels the controller puts on its Deployment: the values
// DesiredDeployment declares and Drift compares (deployment.go).

const (
	// FooUIDLabel carries the owning Foo's UID on the Deployment and its pods
	// and is the Deployment's whole selector. A UID (not the Foo's name) keeps
	// the selectors of two Foos — even a deleted Foo and its same-named
	// successor — from ever overlapping, and is always a valid label value.
	FooUIDLabel = "samplecontroller.example.com/foo-uid"
	// ManagedByLabel marks the objects this controller manages, for humans
	// and label queries; it is not part of the selector.
	ManagedByLabel = "app.kubernetes.io/managed-by"
	// managedByValue is the ManagedByLabel value.
	managedByValue = "foo-controller"

	// ContainerName is the name of the one container the controller manages
	// in the pod template.
	ContainerName = "app"
	// PortName names the container port that spec.containerPort declares.
	// In our container, the port of this name is ours, whoever wrote it:
	// any other "http" port there is drift (see removeStrayEntriesPatch).
	PortName = "http"

	// PodLabelsAnnotation records on the Deployment the keys of
	// spec.podLabels that the controller applied, comma-separated and
	// sorted (a label key has no comma); absent when there are none. A key
	// the Foo no longer declares must be removed from the pod template, and
	// the apply that removes it is sent only if Drift reports something:
	// Drift sees that the Foo's keys changed by comparing this annotation.
	PodLabelsAnnotation = "samplecontroller.example.com/pod-label-keys"

	// defaultImage and defaultReplicas mirror the CRD's defaults. The API
	// server applies those defaults; these are used only if a Foo reaches
	// the controller without them (e.g. one stored before the default
	// existed).
	defaultImage = "nginx:1.27"
	// defaultReplicas is the replica count of a Foo without one (see defaultImage).
	defaultReplicas = int32(1)
)

// Replicas is the Foo's desired replica count.
func Replicas(foo *samplev1beta1.Foo) int32 {
	if foo.Spec.Deployment.Replicas == nil {
		return defaultReplicas
	}
	return *foo.Spec.Deployment.Replicas
}

// defaultProgressDeadlineSeconds is the Deployment's default
// spec.progressDeadlineSeconds, which the API server requires to be greater
// than spec.minReadySeconds.
const defaultProgressDeadlineSeconds = int32(600)

// progressDeadline is the spec.progressDeadlineSeconds the controller
// declares for foo's Deployment, or nil to leave the field to its default
// (or to whoever set it): a Foo with a minReadySeconds gets the default's
// ten minutes beyond it. A pod becomes available minReadySeconds after it
// is ready, so a rollout must not be reported stalled for that wait alone,
// and the API server refuses a deadline that is not above it: at 600 and
// more, the default would be refused, and below it another writer's
// shorter deadline could be.
func progressDeadline(foo *samplev1beta1.Foo) *int32 {
	if m := foo.Spec.Deployment.MinReadySeconds; m > 0 {
		return ptr.To(m + defaultProgressDeadlineSeconds)
	}
	return nil
}

// defaultRevisionHistoryLimit is the Deployment's default
// spec.revisionHistoryLimit.
const defaultRevisionHistoryLimit = int32(10)

// RevisionHistoryLimit is the Deployment's spec.revisionHistoryLimit for
// foo: the Foo's, or the Deployment's default when the Foo leaves it unset.
// Declared either way, as minReadySeconds is: the controller sends an
// apply only on drift, so a field it stopped declaring when the Foo unset
// it would go back to its default only at the next apply for another
// reason, if ever (docs/adding-a-field.md, "Unset").
func RevisionHistoryLimit(foo *samplev1beta1.Foo) int32 {
	return ptr.Deref(foo.Spec.Deployment.RevisionHistoryLimit, defaultRevisionHistoryLimit)
}

// Image is the Foo's desired container image.
func Image(foo *samplev1beta1.Foo) string {
	if foo.Spec.Deployment.Image == "" {
		return defaultImage
	}
	return foo.Spec.Deployment.Image
}

// SelectorLabels are the Deployment's selector (and so the scale
// subresource's selector): unique to this Foo.
func SelectorLabels(foo *samplev1beta1.Foo) map[string]string {
	return map[string]string{FooUIDLabel: string(foo.UID)}
}

// Labels are all the labels the controller sets on the Deployment and on its
// pod template. Other labels that others add are left alone.
func Labels(foo *samplev1beta1.Foo) map[string]string {
	l := SelectorLabels(foo)
	l[ManagedByLabel] = managedByValue
	return l
}

// podLabels are the labels of spec.podLabels the controller sets on the pod
// template: all of them but the keys it sets itself (Labels), which the
// CRD refuses but a Foo stored before that rule could still have.
func podLabels(foo *samplev1beta1.Foo) map[string]string {
	own := Labels(foo)
	out := map[string]string{}
	for k, v := range foo.Spec.Deployment.PodLabels {
		if _, ok := own[k]; !ok {
			out[k] = v
		}
	}
	return out
}

// TemplateLabels are the labels the controller sets on the pod template:
// Labels, and podLabels beside them.
func TemplateLabels(foo *samplev1beta1.Foo) map[string]string {
	out := podLabels(foo)
	maps.Copy(out, Labels(foo))
	return out
}

// podLabelKeys is the value of PodLabelsAnnotation for foo, "" for none.
func podLabelKeys(foo *samplev1beta1.Foo) string {
	return strings.Join(slices.Sorted(maps.Keys(podLabels(foo))), ",")
}
