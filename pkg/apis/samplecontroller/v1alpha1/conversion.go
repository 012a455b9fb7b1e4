package v1alpha1

import (
	"maps"
	"strconv"
	"strings"

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

// The fields of v1beta1's spec that v1alpha1 has no place for travel
// through v1alpha1 in annotations, one per field, named by the field's
// v1beta1 path under V1beta1FieldPrefix and holding its value as JSON
// (samplecontroller.example.com/v1beta1.spec.deployment.minReadySeconds:
// "30"), so that a v1alpha1 client that reads a Foo, changes it and writes
// it back keeps them. One per field, not one for all, so that each is its
// own map key to every writer: a value conversion cannot read drops that
// value alone, a v1alpha1 writer that sets one (a merge patch, an apply)
// leaves the others as they are, and server-side apply records each key,
// and so each field, to the manager that set it (managedfields.go).
// docs/evolving-the-api.md, section 1, says why.
//
// Conversion owns every name under the prefix: down-conversion writes one
// for each field that is set and removes the others, whatever a v1beta1
// Foo carried under those names; up-conversion reads each within
// v1beta1's schema (the JSON exactly, the bounds the markers set) and
// always removes them, so conversion never carries them into v1beta1. A
// value it cannot read, or out of bounds, sets nothing: the annotation
// would otherwise carry past v1beta1's validation what v1beta1 itself
// refuses. (artifacts/examples/v1alpha1-annotations-policy.yaml refuses
// such a value at admission; conversion cannot tell the client.)
const V1beta1FieldPrefix = "samplecontroller.example.com/v1beta1.spec.deployment."

// The annotations of the v1beta1 fields so far. A field v1beta1 adds and
// v1alpha1 lacks gets one here and an entry in v1beta1Fields.
const (
	MinReadySecondsAnnotation      = V1beta1FieldPrefix + "minReadySeconds"
	RevisionHistoryLimitAnnotation = V1beta1FieldPrefix + "revisionHistoryLimit"
)

// LegacyV1beta1SpecAnnotation is how releases before revisionHistoryLimit
// carried minReadySeconds, the one v1beta1 field then: one JSON value in
// v1beta1's shape, {"deployment":{"minReadySeconds":30}}. Up-conversion
// still reads its minReadySeconds, over MinReadySecondsAnnotation (a
// client that sends it, a script of that time or a manifest, means it),
// and removes it; down-conversion never writes it.
const LegacyV1beta1SpecAnnotation = "samplecontroller.example.com/v1beta1-spec"

// v1beta1Field is one field of v1beta1's spec.deployment that v1alpha1
// lacks: its annotation, how to write it and how to read it back.
type v1beta1Field struct {
	annotation string
	// get is the field's value as the annotation holds it; false if the
	// field is unset (no annotation).
	get func(*v1beta1.DeploymentSpec) (string, bool)
	// set reads raw into the field, within v1beta1's schema; false, and
	// nothing set, if it cannot.
	set func(*v1beta1.DeploymentSpec, string) bool
}

var v1beta1Fields = []v1beta1Field{{
	annotation: MinReadySecondsAnnotation,
	get: func(d *v1beta1.DeploymentSpec) (string, bool) {
		return strconv.Itoa(int(d.MinReadySeconds)), d.MinReadySeconds != 0
	},
	set: func(d *v1beta1.DeploymentSpec, raw string) bool {
		v, ok := readInt32(raw, v1beta1.MaxMinReadySeconds)
		if ok {
			d.MinReadySeconds = v
		}
		return ok
	},
}, {
	annotation: RevisionHistoryLimitAnnotation,
	get: func(d *v1beta1.DeploymentSpec) (string, bool) {
		if d.RevisionHistoryLimit == nil {
			return "", false
		}
		return strconv.Itoa(int(*d.RevisionHistoryLimit)), true
	},
	set: func(d *v1beta1.DeploymentSpec, raw string) bool {
		v, ok := readInt32(raw, v1beta1.MaxRevisionHistoryLimit)
		if ok {
			d.RevisionHistoryLimit = &v
		}
		return ok
	},
}}

// readInt32 reads raw as a JSON integer from 0 to max, strictly (null,
// which encoding/json reads into an int as nothing, is not one).
func readInt32(raw string, max int32) (int32, bool) {
	var v *int32
	strict, err := sigsjson.UnmarshalStrict([]byte(raw), &v)
	if err != nil || len(strict) > 0 || v == nil || *v < 0 || *v > max {
		return 0, false
	}
	return *v, true
}

// readLegacy reads LegacyV1beta1SpecAnnotation's minReadySeconds as the
// release that wrote it did: the exact names (not encoding/json's
// case-insensitive match), no unknown or duplicate field, within the
// schema; what leaves it out (null, {}, {"deployment":{}}) is 0.
func readLegacy(raw string) (int32, bool) {
	var legacy struct {
		Deployment struct {
			MinReadySeconds int32 `json:"minReadySeconds"`
		} `json:"deployment"`
	}
	strict, err := sigsjson.UnmarshalStrict([]byte(raw), &legacy)
	if m := legacy.Deployment.MinReadySeconds; err != nil || len(strict) > 0 || m < 0 || m > v1beta1.MaxMinReadySeconds {
		return 0, false
	}
	return legacy.Deployment.MinReadySeconds, true
}

// isConversions reports whether an annotation is one conversion owns.
func isConversions(key string) bool {
	return strings.HasPrefix(key, V1beta1FieldPrefix) || key == LegacyV1beta1SpecAnnotation
}

func hasConversions(annotations map[string]string) bool {
	for k := range annotations {
		if isConversions(k) {
			return true
		}
	}
	return false
}

// withoutConversions is annotations without those conversion owns: a copy,
// for the generated code shares the map with the input; nil if empty.
func withoutConversions(annotations map[string]string) map[string]string {
	out := maps.Clone(annotations)
	maps.DeleteFunc(out, func(k, _ string) bool { return isConversions(k) })
	if len(out) == 0 {
		return nil
	}
	return out
}

// Convert_v1alpha1_Foo_To_v1beta1_Foo converts a v1alpha1 Foo to the hub,
// taking v1beta1's own fields back from their annotations.
func Convert_v1alpha1_Foo_To_v1beta1_Foo(in *Foo, out *v1beta1.Foo, s conversion.Scope) error {
	if err := autoConvert_v1alpha1_Foo_To_v1beta1_Foo(in, out, s); err != nil {
		return err
	}
	if !hasConversions(in.Annotations) {
		return nil
	}
	for _, f := range v1beta1Fields {
		if raw, ok := in.Annotations[f.annotation]; ok {
			f.set(&out.Spec.Deployment, raw)
		}
	}
	if raw, ok := in.Annotations[LegacyV1beta1SpecAnnotation]; ok {
		if m, ok := readLegacy(raw); ok {
			out.Spec.Deployment.MinReadySeconds = m
		}
	}
	out.Annotations = withoutConversions(in.Annotations)
	return nil
}

// Convert_v1beta1_Foo_To_v1alpha1_Foo converts a Foo from the hub, keeping
// v1beta1's own fields in their annotations.
func Convert_v1beta1_Foo_To_v1alpha1_Foo(in *v1beta1.Foo, out *Foo, s conversion.Scope) error {
	if err := autoConvert_v1beta1_Foo_To_v1alpha1_Foo(in, out, s); err != nil {
		return err
	}
	kept := map[string]string{}
	for _, f := range v1beta1Fields {
		if v, set := f.get(&in.Spec.Deployment); set {
			kept[f.annotation] = v
		}
	}
	if len(kept) == 0 && !hasConversions(in.Annotations) {
		return nil
	}
	out.Annotations = withoutConversions(in.Annotations)
	if len(kept) > 0 {
		if out.Annotations == nil {
			out.Annotations = map[string]string{}
		}
		maps.Copy(out.Annotations, kept)
	}
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
// in annotations: a spec has no metadata.
func Convert_v1beta1_FooSpec_To_v1alpha1_FooSpec(in *v1beta1.FooSpec, out *FooSpec, s conversion.Scope) error {
	if err := autoConvert_v1beta1_FooSpec_To_v1alpha1_FooSpec(in, out, s); err != nil {
		return err
	}
	d := in.Deployment
	out.DeploymentName, out.Replicas, out.Image, out.ContainerPort, out.PodLabels = d.Name, d.Replicas, d.Image, d.ContainerPort, d.PodLabels
	return nil
}
