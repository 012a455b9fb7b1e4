package v1beta1

import (
	"os"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// TestBoundsAreTheSchemas: the bounds conversion holds the v1alpha1
// annotations to are the ones the CRD's schema holds the fields to (the
// markers on DeploymentSpec). A field v1alpha1 carries in an annotation
// is added here with its bound.
func TestBoundsAreTheSchemas(t *testing.T) {
	b, err := os.ReadFile("../../../../artifacts/examples/crd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(b, &crd); err != nil {
		t.Fatal(err)
	}
	for _, v := range crd.Spec.Versions {
		if v.Name != "v1beta1" {
			continue
		}
		for name, max := range map[string]float64{
			"minReadySeconds":      MaxMinReadySeconds,
			"revisionHistoryLimit": MaxRevisionHistoryLimit,
		} {
			field := v.Schema.OpenAPIV3Schema.Properties["spec"].Properties["deployment"].Properties[name]
			if field.Maximum == nil || *field.Maximum != max || field.Minimum == nil || *field.Minimum != 0 {
				t.Errorf("the schema bounds %s to %v..%v, the constant is %v", name, field.Minimum, field.Maximum, max)
			}
		}
		return
	}
	t.Fatal("no v1beta1 in the CRD")
}
