//go:build integration

package integration

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	samplev1alpha1 "example.com/foo-controller/pkg/apis/samplecontroller/v1alpha1"
	samplev1beta1 "example.com/foo-controller/pkg/apis/samplecontroller/v1beta1"
)

// TestV1alpha1AnnotationsPolicy: with artifacts/examples'
// ValidatingAdmissionPolicy applied as its comment says (kubectl apply
// -f), a v1alpha1 write of a v1beta1 field's annotation outside v1beta1's
// bounds, or not an integer, is refused with a message naming the
// annotation, where without it conversion drops the value without a word
// (TestConversionWebhook); each bound, from the Go constants, is accepted
// and one past it refused; the other field is untouched; a v1beta1 write
// is not evaluated (matchPolicy Exact: no conversion for it, so it goes on
// with the webhook down).
func TestV1alpha1AnnotationsPolicy(t *testing.T) {
	t.Parallel()
	cl := privateCluster(t, clusterOptions{})
	s := newScenarioOn(t, cl)
	if out, err := s.kubectl("apply", "-f", filepath.Join(repoRoot, "artifacts", "examples", "v1alpha1-annotations-policy.yaml")); err != nil {
		t.Fatalf("kubectl apply the policy: %v: %s", err, out)
	}
	foo := newFoo("a", "web-a", 1)
	foo.Spec.Deployment.MinReadySeconds = 30
	foo.Spec.Deployment.RevisionHistoryLimit = ptr.To[int32](4)
	s.createFoo(foo)
	alpha := s.foos.SamplecontrollerV1alpha1().Foos(s.ns)
	patch := func(key, value string) error {
		body := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, key, value)
		_, err := alpha.Patch(s.ctx, "a", types.MergePatchType, []byte(body), metav1.PatchOptions{})
		return err
	}
	// The policy takes effect once the API server has loaded it.
	s.eventually(30*time.Second, "the policy to refuse a value out of bounds", func() (bool, string) {
		err := patch(samplev1alpha1.RevisionHistoryLimitAnnotation, "101")
		return err != nil && strings.Contains(err.Error(), "revisionHistoryLimit must be an integer from 0 to 100"), fmt.Sprint(err)
	})
	fields := []struct {
		key string
		max int32
		get func(samplev1beta1.DeploymentSpec) int32 // -1: unset
	}{
		{samplev1alpha1.MinReadySecondsAnnotation, samplev1beta1.MaxMinReadySeconds,
			func(d samplev1beta1.DeploymentSpec) int32 { return d.MinReadySeconds }},
		{samplev1alpha1.RevisionHistoryLimitAnnotation, samplev1beta1.MaxRevisionHistoryLimit,
			func(d samplev1beta1.DeploymentSpec) int32 { return ptr.Deref(d.RevisionHistoryLimit, -1) }},
	}
	for _, tc := range fields {
		for _, bad := range []string{strconv.Itoa(int(tc.max) + 1), "-1", `"5"`, "5.0", "007", "x"} {
			if err := patch(tc.key, bad); err == nil || !strings.Contains(err.Error(), tc.key+" must be an integer") {
				t.Errorf("v1alpha1 annotation %s=%s: %v; want refused, naming it", tc.key, bad, err)
			}
		}
		for _, good := range []string{"0", strconv.Itoa(int(tc.max))} {
			if err := patch(tc.key, good); err != nil {
				t.Errorf("v1alpha1 annotation %s=%s: %v; want accepted", tc.key, good, err)
			}
		}
	}
	got, err := s.foos.SamplecontrollerV1beta1().Foos(s.ns).Get(s.ctx, "a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range fields { // each field at its maximum, the last value accepted
		if v := tc.get(got.Spec.Deployment); v != tc.max {
			t.Errorf("after the accepted patches, the field of %s is %d; want %d", tc.key, v, tc.max)
		}
	}
	// v1beta1 is not evaluated: the webhook down changes nothing for it.
	stop := cl.stopWebhook
	cl.stopWebhook = nil // the plane's stop would wait for it a second time
	stop()
	if _, err := s.foos.SamplecontrollerV1beta1().Foos(s.ns).Patch(s.ctx, "a", types.MergePatchType,
		[]byte(`{"spec":{"deployment":{"revisionHistoryLimit":3}}}`), metav1.PatchOptions{}); err != nil {
		t.Errorf("a v1beta1 patch with the policy and the webhook down: %v", err)
	}
}
