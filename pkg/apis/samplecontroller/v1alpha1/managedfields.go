package v1alpha1

import (
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
)

// Server-side apply records each manager's fields as paths in the version
// it wrote in, and the API server never converts them
// (docs/evolving-the-api.md, section 10). FieldsToV1beta1 is the
// conversion of those paths, the second half of conversion.go, for the
// migration to rewrite them (pkg/storagemigrate): a version that moves a
// field changes both.

// movedUnderDeployment are the v1alpha1 spec fields that v1beta1 keeps
// under spec.deployment, by their v1beta1 names.
var movedUnderDeployment = map[string]string{
	"deploymentName": "name",
	"replicas":       "replicas",
	"image":          "image",
	"containerPort":  "containerPort",
	"podLabels":      "podLabels",
}

// FieldsToV1beta1 returns the set of v1beta1 paths that name the same
// fields as set, a v1alpha1 field set: the moved spec fields under
// spec.deployment, and the V1beta1SpecAnnotation (which up-conversion
// turns into v1beta1's own fields) as those fields. Every other path is
// the same in both versions and kept as it is. The input is not changed.
//
// It does not see the object, so it may name a field the object does not
// have in v1beta1 (the annotations map, when it held the
// V1beta1SpecAnnotation alone); the migration drops those.
func FieldsToV1beta1(set *fieldpath.Set) *fieldpath.Set {
	out := fieldpath.NewSet()
	for p := range set.All() {
		out.Insert(pathToV1beta1(p))
	}
	// An update that made the spec (a create) made, in v1beta1,
	// spec.deployment with it: v1beta1 requires it.
	if spec := fieldpath.MakePathOrDie("spec"); set.Has(spec) {
		out.Insert(fieldpath.MakePathOrDie("spec", "deployment"))
	}
	return out
}

func pathToV1beta1(p fieldpath.Path) fieldpath.Path {
	switch {
	case len(p) >= 2 && isField(p[0], "spec") && p[1].FieldName != nil:
		name, moved := movedUnderDeployment[*p[1].FieldName]
		if !moved {
			return p
		}
		return append(fieldpath.MakePathOrDie("spec", "deployment", name), p[2:]...)
	case len(p) == 3 && isField(p[0], "metadata") && isField(p[1], "annotations") && isField(p[2], V1beta1SpecAnnotation):
		// The annotation carries v1beta1's own fields: minReadySeconds
		// alone so far (v1beta1Only). A field added there is added here.
		return fieldpath.MakePathOrDie("spec", "deployment", "minReadySeconds")
	}
	return p
}

func isField(pe fieldpath.PathElement, name string) bool {
	return pe.FieldName != nil && *pe.FieldName == name
}
