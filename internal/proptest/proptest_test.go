package proptest

import (
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"

	samplev1beta1 "example.com/foo-controller/pkg/apis/samplecontroller/v1beta1"
)

// The generator is only useful if what it makes is valid: a Foo the API
// server refuses would test a case that cannot happen. These are the
// FooSpec markers in pkg/apis/samplecontroller/v1alpha1/types.go; the
// integration test also creates the Foos (dry run) against the real CRD.
func TestFoosAreValid(t *testing.T) {
	deploymentName := regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	image := regexp.MustCompile(`^\S+$`)
	r := rand.New(rand.NewPCG(1, 2))
	seen := map[string]bool{}
	for range 10000 {
		foo := Foo(r, "ns")
		s := foo.Spec.Deployment
		if errs := validation.IsDNS1123Subdomain(foo.Name); len(errs) > 0 {
			t.Fatalf("name %q: %v", foo.Name, errs)
		}
		if n := len(s.Name); n < 1 || n > 63 || !deploymentName.MatchString(s.Name) {
			t.Fatalf("deploymentName %q", s.Name)
		}
		if s.Replicas != nil && (*s.Replicas < 0 || *s.Replicas > 100) {
			t.Fatalf("replicas %d", *s.Replicas)
		}
		if m := s.MinReadySeconds; m < 0 || m > samplev1beta1.MaxMinReadySeconds {
			t.Fatalf("minReadySeconds %d", m)
		}
		if h := s.RevisionHistoryLimit; h != nil && (*h < 0 || *h > samplev1beta1.MaxRevisionHistoryLimit) {
			t.Fatalf("revisionHistoryLimit %d", *h)
		}
		seen["revisionHistoryLimit nil"] = seen["revisionHistoryLimit nil"] || s.RevisionHistoryLimit == nil
		seen["revisionHistoryLimit 0"] = seen["revisionHistoryLimit 0"] || s.RevisionHistoryLimit != nil && *s.RevisionHistoryLimit == 0
		seen["revisionHistoryLimit 100"] = seen["revisionHistoryLimit 100"] || s.RevisionHistoryLimit != nil && *s.RevisionHistoryLimit == samplev1beta1.MaxRevisionHistoryLimit
		if s.Image == "" || (len(s.Image) > 512 || !image.MatchString(s.Image) || strings.HasSuffix(s.Image, ":latest")) {
			t.Fatalf("image %q", s.Image)
		}
		if p := s.ContainerPort; p != nil && (*p < 1 || *p > 65535) {
			t.Fatalf("containerPort %d", *p)
		}
		if len(s.PodLabels) > 32 {
			t.Fatalf("%d podLabels", len(s.PodLabels))
		}
		for k, v := range s.PodLabels {
			if errs := validation.IsQualifiedName(k); len(errs) > 0 {
				t.Fatalf("podLabels key %q: %v", k, errs)
			}
			if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
				t.Fatalf("podLabels value %q: %v", v, errs)
			}
			if k == "samplecontroller.example.com/foo-uid" || k == "app.kubernetes.io/managed-by" {
				t.Fatalf("podLabels key %q: the controller's own", k)
			}
			seen["long podLabels key"] = seen["long podLabels key"] || len(k) > 300
			seen["long podLabels value"] = seen["long podLabels value"] || len(v) == 63
			seen["empty podLabels value"] = seen["empty podLabels value"] || v == ""
		}
		seen["no podLabels"] = seen["no podLabels"] || len(s.PodLabels) == 0
		seen["many podLabels"] = seen["many podLabels"] || len(s.PodLabels) > 16
		switch foo.Spec.DeletionPolicy {
		case "", samplev1beta1.DeletionPolicyDelete, samplev1beta1.DeletionPolicyOrphan:
		default:
			t.Fatalf("deletionPolicy %q", foo.Spec.DeletionPolicy)
		}
		if errs := validation.IsValidLabelValue(string(foo.UID)); len(errs) > 0 {
			t.Fatalf("uid %q: %v", foo.UID, errs)
		}
		seen["replicas nil"] = seen["replicas nil"] || s.Replicas == nil
		seen["replicas 0"] = seen["replicas 0"] || s.Replicas != nil && *s.Replicas == 0
		seen["replicas 100"] = seen["replicas 100"] || s.Replicas != nil && *s.Replicas == 100
		seen["minReadySeconds 3600"] = seen["minReadySeconds 3600"] || s.MinReadySeconds == samplev1beta1.MaxMinReadySeconds
		seen["long image"] = seen["long image"] || len(s.Image) == 512
		seen["long deploymentName"] = seen["long deploymentName"] || len(s.Name) == 63
		seen["dotted name"] = seen["dotted name"] || strings.Contains(foo.Name, ".")
		seen["no containerPort"] = seen["no containerPort"] || s.ContainerPort == nil
		seen["containerPort 1"] = seen["containerPort 1"] || s.ContainerPort != nil && *s.ContainerPort == 1
		seen["containerPort 65535"] = seen["containerPort 65535"] || s.ContainerPort != nil && *s.ContainerPort == 65535
	}
	// Edges that are not generated are not tested.
	for _, edge := range []string{"replicas nil", "replicas 0", "replicas 100", "minReadySeconds 3600",
		"revisionHistoryLimit nil", "revisionHistoryLimit 0", "revisionHistoryLimit 100", "long image", "long deploymentName", "dotted name",
		"no containerPort", "containerPort 1", "containerPort 65535",
		"no podLabels", "many podLabels", "long podLabels key", "long podLabels value", "empty podLabels value"} {
		if !seen[edge] {
			t.Errorf("never generated: %s", edge)
		}
	}
}
