package webhook

import (
	"os"
	"slices"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// TestShippedCRDNamesTheWebhook: the CRD as shipped
// (hack/update-codegen.sh writes its conversion stanza) serves both
// versions, stores one, and converts between them through this webhook:
// the Service artifacts/deploy runs it behind, on Path, in the review
// version the Converter answers, with no caBundle for the keeper to fight.
// With strategy None the API server would hand a v1alpha1 object to a
// v1beta1 client with only its apiVersion changed.
func TestShippedCRDNamesTheWebhook(t *testing.T) {
	b, err := os.ReadFile("../../artifacts/examples/crd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(b, &crd); err != nil {
		t.Fatal(err)
	}
	var served, stored []string
	for _, v := range crd.Spec.Versions {
		if v.Served {
			served = append(served, v.Name)
		}
		if v.Storage {
			stored = append(stored, v.Name)
		}
	}
	if !slices.Equal(served, []string{"v1alpha1", "v1beta1"}) || len(stored) != 1 {
		t.Fatalf("served %v, stored %v; want both served, one stored", served, stored)
	}
	conv := crd.Spec.Conversion
	if conv == nil || conv.Strategy != apiextensionsv1.WebhookConverter || conv.Webhook == nil || conv.Webhook.ClientConfig == nil {
		t.Fatalf("conversion %+v, want strategy Webhook with a clientConfig", conv)
	}
	if !slices.Contains(conv.Webhook.ConversionReviewVersions, "v1") {
		t.Errorf("conversionReviewVersions %v: the Converter answers v1 reviews", conv.Webhook.ConversionReviewVersions)
	}
	cc := conv.Webhook.ClientConfig
	if cc.URL != nil || len(cc.CABundle) != 0 {
		t.Errorf("clientConfig has a URL %v or a caBundle of %d bytes: the Service only, the keeper injects the CA", cc.URL, len(cc.CABundle))
	}
	want := apiextensionsv1.ServiceReference{Namespace: "foo-system", Name: "foo-controller-webhook", Path: new(Path), Port: new(int32(443))}
	if svc := cc.Service; svc == nil || svc.Namespace != want.Namespace || svc.Name != want.Name ||
		svc.Path == nil || *svc.Path != *want.Path || svc.Port == nil || *svc.Port != *want.Port {
		t.Errorf("clientConfig.service %+v, want %s/%s port %d path %s", cc.Service, want.Namespace, want.Name, *want.Port, *want.Path)
	}
}
