package v1alpha1

import (
	"strings"

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
// spec.deployment, and the annotations that carry v1beta1's own fields
// (conversion.go's v1beta1Fields, and the legacy annotation's
// minReadySeconds) as those fields, each to its own. Every other path is
// the same in both versions and kept as it is. The input is not changed.
//
// It does not see the object, so it may name a field the object does not
// have in v1beta1 (the annotations map, when it held conversion's
// annotations alone); the migration drops those.
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
	case len(p) == 3 && isField(p[0], "metadata") && isField(p[1], "annotations") && p[2].FieldName != nil:
		key := *p[2].FieldName
		if key == LegacyV1beta1SpecAnnotation {
			// It carried minReadySeconds alone (readLegacy).
			return fieldpath.MakePathOrDie("spec", "deployment", "minReadySeconds")
		}
		for _, f := range v1beta1Fields {
			if key == f.annotation {
				return fieldpath.MakePathOrDie("spec", "deployment", strings.TrimPrefix(key, V1beta1FieldPrefix))
			}
		}
	}
	return p
}

func isField(pe fieldpath.PathElement, name string) bool {
	return pe.FieldName != nil && *pe.FieldName == name
}
