package v1alpha1

import (
	"encoding/json"
	"maps"

	"k8s.io/apimachinery/pkg/conversion"
	sigsjson "sigs.k8s.io/json"

	"example.com/foo-controller/pkg/apis/samplecontroller/v1beta1"
)

// Conversion between v1alpha1 and v1beta1, the hub. conversion-gen writes
// the field-by-field part (zz_generated.conversion.go, from the
// +k8s:conversion-gen tag in doc.go) and calls the functions below for
// what it cannot match by name: the spec's fields moved under
// spec.deployment, and v1beta1's fields that v1alpha1 has no place for.
//
// Both directions are total: whatever the API server hands over converts,
// so that one odd object cannot fail a list of every Foo.

// V1beta1SpecAnnotation holds, on a v1alpha1 Foo, the fields of its v1beta1
// spec that v1alpha1 has no place for, as JSON in v1beta1's shape:
// {"deployment":{"minReadySeconds":10}}, so that a v1alpha1 client that
// reads a Foo, changes it and writes it back keeps them. Conversion owns
// it: down-conversion writes it when one of them is set and removes it
// otherwise, whatever a v1beta1 Foo carried under that name; up-conversion
// reads it, within v1beta1's schema (the names exactly, minReadySeconds 0
// to v1beta1.MaxMinReadySeconds), and always removes it, so v1beta1 never
// holds it. A value it cannot read, or out of range, sets nothing: the
// annotation would otherwise carry past v1beta1's validation what
// v1beta1 itself refuses.
const V1beta1SpecAnnotation = "samplecontroller.example.com/v1beta1-spec"

// v1beta1Only is the annotation's content: v1beta1's spec, reduced to what
// v1alpha1 lacks. A field that v1beta1 adds is added here too, with its
// schema's bounds in read.
type v1beta1Only struct {
	Deployment v1beta1OnlyDeployment `json:"deployment"`
}

type v1beta1OnlyDeployment struct {
	MinReadySeconds int32 `json:"minReadySeconds,omitempty"`
}

func (o v1beta1Only) isZero() bool { return o == v1beta1Only{} }

// readV1beta1Only reads the annotation strictly: the exact names (not
// encoding/json's case-insensitive match), no unknown or duplicate field,
// values within v1beta1's schema.
func readV1beta1Only(raw string) (v1beta1Only, bool) {
	var only v1beta1Only
	strict, err := sigsjson.UnmarshalStrict([]byte(raw), &only)
	if err != nil || len(strict) > 0 {
		return v1beta1Only{}, false
	}
	if m := only.Deployment.MinReadySeconds; m < 0 || m > v1beta1.MaxMinReadySeconds {
		return v1beta1Only{}, false
	}
	return only, true
}

// withoutAnnotation is annotations without V1beta1SpecAnnotation: a copy,
// for the generated code shares the map with the input; nil if empty.
func withoutAnnotation(annotations map[string]string) map[string]string {
	out := maps.Clone(annotations)
	delete(out, V1beta1SpecAnnotation)
	if len(out) == 0 {
		return nil
	}
	return out
}

// Convert_v1alpha1_Foo_To_v1beta1_Foo converts a v1alpha1 Foo to the hub,
// taking v1beta1's own fields back from the annotation.
func Convert_v1alpha1_Foo_To_v1beta1_Foo(in *Foo, out *v1beta1.Foo, s conversion.Scope) error {
	if err := autoConvert_v1alpha1_Foo_To_v1beta1_Foo(in, out, s); err != nil {
		return err
	}
	raw, ok := in.Annotations[V1beta1SpecAnnotation]
	if !ok {
		return nil
	}
	if only, ok := readV1beta1Only(raw); ok {
		out.Spec.Deployment.MinReadySeconds = only.Deployment.MinReadySeconds
	}
	out.Annotations = withoutAnnotation(in.Annotations)
	return nil
}

// Convert_v1beta1_Foo_To_v1alpha1_Foo converts a Foo from the hub, keeping
// v1beta1's own fields in the annotation.
func Convert_v1beta1_Foo_To_v1alpha1_Foo(in *v1beta1.Foo, out *Foo, s conversion.Scope) error {
	if err := autoConvert_v1beta1_Foo_To_v1alpha1_Foo(in, out, s); err != nil {
		return err
	}
	only := v1beta1Only{Deployment: v1beta1OnlyDeployment{MinReadySeconds: in.Spec.Deployment.MinReadySeconds}}
	if only.isZero() {
		if _, had := in.Annotations[V1beta1SpecAnnotation]; had {
			out.Annotations = withoutAnnotation(in.Annotations)
		}
		return nil
	}
	raw, err := json.Marshal(only)
	if err != nil {
		return err
	}
	out.Annotations = maps.Clone(in.Annotations)
	if out.Annotations == nil {
		out.Annotations = map[string]string{}
	}
	out.Annotations[V1beta1SpecAnnotation] = string(raw)
	return nil
}

// Convert_v1alpha1_FooSpec_To_v1beta1_FooSpec moves the Deployment's fields
// under spec.deployment, deploymentName becoming name.
func Convert_v1alpha1_FooSpec_To_v1beta1_FooSpec(in *FooSpec, out *v1beta1.FooSpec, s conversion.Scope) error {
	if err := autoConvert_v1alpha1_FooSpec_To_v1beta1_FooSpec(in, out, s); err != nil {
		return err
	}
	out.Deployment = v1beta1.DeploymentSpec{
		Name:          in.DeploymentName,
		Replicas:      in.Replicas,
		Image:         in.Image,
		ContainerPort: in.ContainerPort,
		PodLabels:     in.PodLabels,
	}
	return nil
}

// Convert_v1beta1_FooSpec_To_v1alpha1_FooSpec is the move back. The fields
// v1alpha1 has no place for are kept by Convert_v1beta1_Foo_To_v1alpha1_Foo,
// in the annotation: a spec has no metadata.
func Convert_v1beta1_FooSpec_To_v1alpha1_FooSpec(in *v1beta1.FooSpec, out *FooSpec, s conversion.Scope) error {
	if err := autoConvert_v1beta1_FooSpec_To_v1alpha1_FooSpec(in, out, s); err != nil {
		return err
	}
	d := in.Deployment
	out.DeploymentName, out.Replicas, out.Image, out.ContainerPort, out.PodLabels = d.Name, d.Replicas, d.Image, d.ContainerPort, d.PodLabels
	return nil
}
