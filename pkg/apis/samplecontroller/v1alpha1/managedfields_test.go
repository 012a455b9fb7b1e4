package v1alpha1_test

import (
	"testing"

	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"example.com/foo-controller/pkg/apis/samplecontroller/v1alpha1"
)

func path(parts ...any) fieldpath.Path { return fieldpath.MakePathOrDie(parts...) }

// TestFieldsToV1beta1: each v1alpha1 path that names a moved field names
// it under spec.deployment; each field's annotation names that field; an
// update that made the spec made spec.deployment; every other path is
// kept. (That these are the sets the API server records for the same
// writes in v1beta1: TestManagedFieldsMovedToV1beta1, on the real API
// server.)
func TestFieldsToV1beta1(t *testing.T) {
	condition := path("status", "conditions", fieldpath.KeyByFields("type", "Ready"))
	for _, tc := range []struct {
		name     string
		in, want []fieldpath.Path
	}{
		{"deploymentName becomes deployment.name",
			[]fieldpath.Path{path("spec", "deploymentName")}, []fieldpath.Path{path("spec", "deployment", "name")}},
		{"the Deployment's fields move under deployment",
			[]fieldpath.Path{path("spec", "replicas"), path("spec", "image"), path("spec", "containerPort")},
			[]fieldpath.Path{path("spec", "deployment", "replicas"), path("spec", "deployment", "image"), path("spec", "deployment", "containerPort")}},
		{"podLabels, the map and its keys",
			[]fieldpath.Path{path("spec", "podLabels"), path("spec", "podLabels", "tier")},
			[]fieldpath.Path{path("spec", "deployment", "podLabels"), path("spec", "deployment", "podLabels", "tier")}},
		{"each field's annotation is that field; other annotations stay",
			[]fieldpath.Path{path("metadata", "annotations", v1alpha1.MinReadySecondsAnnotation), path("metadata", "annotations", v1alpha1.RevisionHistoryLimitAnnotation), path("metadata", "annotations", "team")},
			[]fieldpath.Path{path("spec", "deployment", "minReadySeconds"), path("spec", "deployment", "revisionHistoryLimit"), path("metadata", "annotations", "team")}},
		{"one field's annotation is that field alone",
			[]fieldpath.Path{path("metadata", "annotations", v1alpha1.RevisionHistoryLimitAnnotation)},
			[]fieldpath.Path{path("spec", "deployment", "revisionHistoryLimit")}},
		{"the legacy annotation is minReadySeconds, the one field it carried",
			[]fieldpath.Path{path("metadata", "annotations", v1alpha1.LegacyV1beta1SpecAnnotation)},
			[]fieldpath.Path{path("spec", "deployment", "minReadySeconds")}},
		{"a name under the prefix that is no field stays an annotation",
			[]fieldpath.Path{path("metadata", "annotations", v1alpha1.V1beta1FieldPrefix+"paused")},
			[]fieldpath.Path{path("metadata", "annotations", v1alpha1.V1beta1FieldPrefix+"paused")}},
		{"an update that made the spec made spec.deployment",
			[]fieldpath.Path{path("spec"), path("spec", "deploymentName")},
			[]fieldpath.Path{path("spec"), path("spec", "deployment"), path("spec", "deployment", "name")}},
		{"the same in both versions: deletionPolicy, status, labels",
			[]fieldpath.Path{path("spec", "deletionPolicy"), path("status", "replicas"), condition, append(condition, fieldpath.PathElement{FieldName: strptr("status")}), path("metadata", "labels", "team")},
			[]fieldpath.Path{path("spec", "deletionPolicy"), path("status", "replicas"), condition, append(condition, fieldpath.PathElement{FieldName: strptr("status")}), path("metadata", "labels", "team")}},
		{"a podLabels key named like a moved field is a key, not a field",
			[]fieldpath.Path{path("spec", "podLabels", "image")},
			[]fieldpath.Path{path("spec", "deployment", "podLabels", "image")}},
		{"nothing", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := fieldpath.NewSet(tc.in...)
			kept := in.Copy()
			got := v1alpha1.FieldsToV1beta1(in)
			if want := fieldpath.NewSet(tc.want...); !got.Equals(want) {
				t.Errorf("got\n%s\nwant\n%s", got, want)
			}
			if !in.Equals(kept) {
				t.Errorf("the input changed: %s", in)
			}
		})
	}
}

func strptr(s string) *string { return &s }
