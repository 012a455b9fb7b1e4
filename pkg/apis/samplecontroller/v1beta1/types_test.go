package v1beta1

import (
	"os"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// TestMaxMinReadySecondsIsTheSchemas: the bound conversion holds the
// v1beta1-spec annotation to is the one the CRD's schema holds the field
// to (the marker on DeploymentSpec.MinReadySeconds).
func TestMaxMinReadySecondsIsTheSchemas(t *testing.T) {
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
		field := v.Schema.OpenAPIV3Schema.Properties["spec"].Properties["deployment"].Properties["minReadySeconds"]
		if field.Maximum == nil || *field.Maximum != MaxMinReadySeconds || field.Minimum == nil || *field.Minimum != 0 {
			t.Fatalf("the schema bounds minReadySeconds to %v..%v, MaxMinReadySeconds is %d", field.Minimum, field.Maximum, MaxMinReadySeconds)
		}
		return
	}
	t.Fatal("no v1beta1 in the CRD")
}
