package webhook

import (
	"fmt"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"

	fooscheme "example.com/foo-controller/pkg/generated/clientset/versioned/scheme"
)

// BenchmarkConvert is the conversion's cost per object (make
// bench-conversion): a review of a list of Foos, as the API server sends
// one for a list read in the version not stored, converted each way, with
// the Foo a converged controller leaves (status and conditions, managed
// fields of two writers).
func BenchmarkConvert(b *testing.B) {
	c := NewConverter(fooscheme.Scheme)
	for _, tc := range []struct{ from, to string }{
		{storedAlpha, "samplecontroller.example.com/v1beta1"},
		{storedBeta, "samplecontroller.example.com/v1alpha1"},
	} {
		req := &apiextensionsv1.ConversionRequest{UID: "r", DesiredAPIVersion: tc.to}
		for range 1000 {
			req.Objects = append(req.Objects, runtime.RawExtension{Raw: []byte(tc.from)})
		}
		b.Run(fmt.Sprintf("to %s", tc.to[len("samplecontroller.example.com/"):]), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(tc.from) * len(req.Objects)))
			for b.Loop() {
				if resp := c.Convert(req); resp.Result.Status != "Success" {
					b.Fatal(resp.Result.Message)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(req.Objects))/1000, "µs/object")
		})
	}
}

// A Foo as stored once a controller has converged it, in each version.
const (
	storedAlpha = `{"apiVersion":"samplecontroller.example.com/v1alpha1","kind":"Foo","metadata":{"name":"web-0042","namespace":"team-a","uid":"5f0c9a8e-2b1d-4c3e-9f7a-1b2c3d4e5f60","resourceVersion":"123456","generation":3,"creationTimestamp":"2026-11-27T00:00:00Z","labels":{"app":"web"},"finalizers":["samplecontroller.example.com/orphan-deployment"],"managedFields":[{"manager":"kubectl","operation":"Apply","apiVersion":"samplecontroller.example.com/v1alpha1","time":"2026-11-27T00:00:00Z","fieldsType":"FieldsV1","fieldsV1":{"f:spec":{"f:deploymentName":{},"f:image":{},"f:replicas":{},"f:containerPort":{}}}},{"manager":"foo-controller","operation":"Apply","apiVersion":"samplecontroller.example.com/v1alpha1","time":"2026-11-27T00:00:05Z","fieldsType":"FieldsV1","fieldsV1":{"f:status":{"f:observedGeneration":{},"f:replicas":{},"f:availableReplicas":{},"f:readyReplicas":{},"f:selector":{},"f:conditions":{"k:{\"type\":\"Ready\"}":{".":{},"f:type":{},"f:status":{},"f:reason":{},"f:message":{},"f:lastTransitionTime":{},"f:observedGeneration":{}}}}},"subresource":"status"}]},"spec":{"deploymentName":"web-0042","replicas":3,"image":"nginx:1.27","containerPort":8080,"podLabels":{"tier":"front"},"deletionPolicy":"Orphan"},"status":{"observedGeneration":3,"replicas":3,"availableReplicas":3,"readyReplicas":3,"selector":"samplecontroller.example.com/foo-uid=5f0c9a8e-2b1d-4c3e-9f7a-1b2c3d4e5f60","conditions":[{"type":"Ready","status":"True","reason":"DeploymentAvailable","message":"Deployment web-0042 is available","lastTransitionTime":"2026-11-27T00:00:05Z","observedGeneration":3},{"type":"Available","status":"True","reason":"MinimumReplicasAvailable","message":"Deployment has minimum availability.","lastTransitionTime":"2026-11-27T00:00:05Z","observedGeneration":3}]}}`
	storedBeta  = `{"apiVersion":"samplecontroller.example.com/v1beta1","kind":"Foo","metadata":{"name":"web-0042","namespace":"team-a","uid":"5f0c9a8e-2b1d-4c3e-9f7a-1b2c3d4e5f60","resourceVersion":"123456","generation":3,"creationTimestamp":"2026-11-27T00:00:00Z","labels":{"app":"web"},"finalizers":["samplecontroller.example.com/orphan-deployment"],"managedFields":[{"manager":"kubectl","operation":"Apply","apiVersion":"samplecontroller.example.com/v1beta1","time":"2026-11-27T00:00:00Z","fieldsType":"FieldsV1","fieldsV1":{"f:spec":{"f:deployment":{"f:name":{},"f:image":{},"f:replicas":{},"f:containerPort":{},"f:minReadySeconds":{}}}}},{"manager":"foo-controller","operation":"Apply","apiVersion":"samplecontroller.example.com/v1beta1","time":"2026-11-27T00:00:05Z","fieldsType":"FieldsV1","fieldsV1":{"f:status":{"f:observedGeneration":{},"f:replicas":{},"f:availableReplicas":{},"f:readyReplicas":{},"f:selector":{},"f:conditions":{"k:{\"type\":\"Ready\"}":{".":{},"f:type":{},"f:status":{},"f:reason":{},"f:message":{},"f:lastTransitionTime":{},"f:observedGeneration":{}}}}},"subresource":"status"}]},"spec":{"deployment":{"name":"web-0042","replicas":3,"image":"nginx:1.27","containerPort":8080,"podLabels":{"tier":"front"},"minReadySeconds":10},"deletionPolicy":"Orphan"},"status":{"observedGeneration":3,"replicas":3,"availableReplicas":3,"readyReplicas":3,"selector":"samplecontroller.example.com/foo-uid=5f0c9a8e-2b1d-4c3e-9f7a-1b2c3d4e5f60","conditions":[{"type":"Ready","status":"True","reason":"DeploymentAvailable","message":"Deployment web-0042 is available","lastTransitionTime":"2026-11-27T00:00:05Z","observedGeneration":3},{"type":"Available","status":"True","reason":"MinimumReplicasAvailable","message":"Deployment has minimum availability.","lastTransitionTime":"2026-11-27T00:00:05Z","observedGeneration":3}]}}`
)
