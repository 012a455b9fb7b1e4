// Package v1alpha1 is version v1alpha1 of the samplecontroller.example.com API:
// the Foo kind, which declares a Deployment for the controller to maintain.
//
// The comment markers in this package drive two generators, run by
// hack/update-codegen.sh: k8s.io/code-generator (deepcopy, clientset, apply
// configurations, listers, informers) and controller-gen (the CRD manifest
// with its OpenAPI schema, CEL rules, subresources and printer columns).
//
// +k8s:deepcopy-gen=package
// +k8s:conversion-gen=example.com/foo-controller/pkg/apis/samplecontroller/v1beta1
// +groupName=samplecontroller.example.com
// +kubebuilder:object:generate=false
package v1alpha1
