// Package v1beta1 is version v1beta1 of the samplecontroller.example.com API:
// the Foo kind, reshaped from v1alpha1. It is the hub of the conversions:
// v1alpha1 converts to and from it, never to anything else, so each new
// version adds two conversions, not one per pair.
//
// What changed from v1alpha1:
//   - spec.deploymentName, replicas, image, containerPort and podLabels
//     moved under spec.deployment, deploymentName renamed to name;
//   - spec.deployment.image has no default: v1alpha1 filled in nginx:1.27,
//     which pinned every Foo that left it out to whatever the default was
//     when it was created; v1beta1 asks for it;
//   - spec.deployment.minReadySeconds and revisionHistoryLimit are new;
//     v1alpha1 keeps each in an annotation of its own, so that a v1alpha1
//     client's read-modify-write does not drop them.
//
// The markers drive the same generators as v1alpha1's (hack/update-codegen.sh).
//
// +k8s:deepcopy-gen=package
// +groupName=samplecontroller.example.com
// +kubebuilder:object:generate=false
package v1beta1
