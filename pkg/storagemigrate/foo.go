package storagemigrate

import (
	"example.com/foo-controller/pkg/apis/samplecontroller/v1alpha1"
	"example.com/foo-controller/pkg/apis/samplecontroller/v1beta1"
)

// FooFields are the Foo CRD's conversions of managed-fields paths
// (Options.ManagedFields): v1alpha1's, to v1beta1. A new version adds its
// own here with its conversion of paths (docs/evolving-the-api.md,
// section 10).
var FooFields = []FieldsConversion{
	{From: v1alpha1.GroupVersion.String(), To: v1beta1.GroupVersion.String(), Convert: v1alpha1.FieldsToV1beta1},
}
