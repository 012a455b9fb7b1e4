package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Foo declares a Deployment that the foo-controller creates, keeps in the
// declared shape, and reports on.
//
// The printer columns and the scale subresource name v1beta1's paths: each
// version of a CRD has its own, read from the object in that version.
//
// The version the controller works in and the API server stores: a Foo
// written in v1alpha1 is converted to it on the way in, through the
// conversion webhook the controller serves, and the controller reads and
// watches Foos stored in v1beta1 without it (docs/evolving-the-api.md).
//
// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=foos,singular=foo,shortName=foo,scope=Namespaced
// +kubebuilder:storageversion
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.deployment.replicas,statuspath=.status.replicas,selectorpath=.status.selector
// +kubebuilder:printcolumn:name="Deployment",type=string,JSONPath=`.spec.deployment.name`
// +kubebuilder:printcolumn:name="Desired",type=integer,JSONPath=`.spec.deployment.replicas`
// +kubebuilder:printcolumn:name="Port",type=integer,JSONPath=`.spec.deployment.containerPort`,priority=1
// +kubebuilder:printcolumn:name="Available",type=integer,JSONPath=`.status.availableReplicas`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Foo struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired state: the Deployment the user declares.
	//
	// +required
	Spec FooSpec `json:"spec"`

	// Status is the observed state, written only by the controller, through
	// the status subresource; status.observedGeneration is 0 until the
	// controller first reports. Its shape is v1alpha1's.
	//
	// +optional
	// +kubebuilder:default={}
	Status FooStatus `json:"status,omitempty"`
}

// DeletionPolicy says what happens to a Foo's Deployment when the Foo is deleted.
//
// +kubebuilder:validation:Enum=Delete;Orphan
type DeletionPolicy string

const (
	// DeletionPolicyDelete lets the garbage collector delete the Deployment
	// with the Foo, through the Deployment's owner reference.
	DeletionPolicyDelete DeletionPolicy = "Delete"
	// DeletionPolicyOrphan keeps the Deployment: the controller holds a
	// finalizer on the Foo and removes its owner reference from the
	// Deployment before letting the Foo go.
	DeletionPolicyOrphan DeletionPolicy = "Orphan"
)

// FooSpec is the desired state of a Foo.
type FooSpec struct {
	// Deployment is the Deployment the controller maintains.
	//
	// +required
	Deployment DeploymentSpec `json:"deployment"`

	// DeletionPolicy is what happens to the Deployment when the Foo is
	// deleted: Delete (the default) or Orphan (keep it, without an owner).
	//
	// +optional
	// +kubebuilder:default=Delete
	DeletionPolicy DeletionPolicy `json:"deletionPolicy,omitempty"`
}

// DeploymentSpec is the Deployment a Foo declares.
type DeploymentSpec struct {
	// Name is the name of the Deployment, in the Foo's namespace (v1alpha1:
	// spec.deploymentName). Changing it creates the new Deployment and
	// deletes the old one.
	//
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// Replicas is the desired number of pods. It is also the spec side of the
	// scale subresource, so `kubectl scale` and a HorizontalPodAutoscaler can
	// set it.
	//
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	Replicas *int32 `json:"replicas,omitempty"`

	// Image is the container image the Deployment's pods run. Required:
	// v1alpha1's default (nginx:1.27) is gone.
	//
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:Pattern=`^\S+$`
	// +kubebuilder:validation:XValidation:rule="!self.endsWith(':latest')",message="image must be pinned: the mutable ':latest' tag is not allowed"
	Image string `json:"image"`

	// ContainerPort is the TCP port the container listens on, declared in
	// the pod template as the container port named "http". Unset: no port.
	//
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	ContainerPort *int32 `json:"containerPort,omitempty"`

	// PodLabels are extra labels on the pod template, beside the
	// controller's own, which they may not override (see v1alpha1's
	// spec.podLabels).
	//
	// +optional
	// +kubebuilder:validation:MaxProperties=32
	// +kubebuilder:validation:XValidation:rule="self.all(k, !format.qualifiedName().validate(k).hasValue())",message="keys must be label keys: an optional DNS subdomain prefix and '/', then a name of at most 63 characters"
	// +kubebuilder:validation:XValidation:rule="self.all(k, self[k].size() <= 63)",message="values must be at most 63 characters"
	// +kubebuilder:validation:XValidation:rule="!('samplecontroller.example.com/foo-uid' in self) && !('app.kubernetes.io/managed-by' in self)",message="the controller's own labels (samplecontroller.example.com/foo-uid, app.kubernetes.io/managed-by) may not be set"
	PodLabels map[string]string `json:"podLabels,omitempty"`

	// MinReadySeconds is how long a pod must have been ready before it
	// counts as available (the Deployment's spec.minReadySeconds): raised,
	// pods already running count as unavailable until they have been ready
	// that long. Set, the Deployment's progressDeadlineSeconds, which must
	// be greater, is minReadySeconds + 600. New in v1beta1: a v1alpha1
	// client sees it in the annotation
	// samplecontroller.example.com/v1beta1.spec.deployment.minReadySeconds.
	//
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=3600
	MinReadySeconds int32 `json:"minReadySeconds,omitempty"`

	// RevisionHistoryLimit is how many old ReplicaSets the Deployment keeps
	// for a rollback (the Deployment's spec.revisionHistoryLimit). Unset,
	// the Deployment's default, 10; either way another writer's value is
	// put back. New in v1beta1: a v1alpha1 client sees it in the
	// annotation
	// samplecontroller.example.com/v1beta1.spec.deployment.revisionHistoryLimit.
	//
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	RevisionHistoryLimit *int32 `json:"revisionHistoryLimit,omitempty"`
}

// MaxMinReadySeconds and MaxRevisionHistoryLimit are the schema's maximums
// (the markers above): conversion from v1alpha1 holds the annotations that
// carry the fields to the same bounds (TestBoundsAreTheSchemas).
const (
	MaxMinReadySeconds      = 3600
	MaxRevisionHistoryLimit = 100
)

// FooStatus is the observed state of a Foo, written only by the controller.
// The same in both versions: conversion copies it.
type FooStatus struct {
	// ObservedGeneration is the metadata.generation this status describes.
	// Until it equals metadata.generation, the rest of the status is stale;
	// 0 until the controller first reports.
	//
	// +optional
	// +kubebuilder:default=0
	ObservedGeneration int64 `json:"observedGeneration"` // not omitempty: the API server defaults it in the stored version only, so the 0 that tells kstatus "not reported on yet" must survive conversion

	// Replicas is the number of pods the Deployment has (the status side of
	// the scale subresource).
	//
	// +optional
	// +kubebuilder:default=0
	Replicas int32 `json:"replicas"` // not omitempty, nor the two below, and defaulted (to Foos stored without them): a count of 0 must read 0 (printer columns, kstatus) in both versions

	// AvailableReplicas is the number of the Deployment's pods that are available.
	//
	// +optional
	// +kubebuilder:default=0
	AvailableReplicas int32 `json:"availableReplicas"`

	// ReadyReplicas is the number of the Deployment's pods that are ready.
	//
	// +optional
	// +kubebuilder:default=0
	ReadyReplicas int32 `json:"readyReplicas"`

	// Selector is the label selector of the Deployment's pods, in string
	// form, for the scale subresource.
	//
	// +optional
	Selector string `json:"selector,omitempty"`

	// Conditions describe the Foo's state, in the kstatus conventions
	// (sigs.k8s.io/cli-utils/pkg/kstatus) that kubectl wait, Flux and kpt
	// read: Available and Ready are always present; Reconciling and
	// Stalled only while True. See docs/conditions.md.
	//
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`
}

// FooList is a list of Foos.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
type FooList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	// Items are the Foos in the list.
	Items []Foo `json:"items"`
}
