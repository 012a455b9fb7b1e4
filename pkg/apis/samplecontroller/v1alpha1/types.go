package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Foo declares a Deployment that the foo-controller creates, keeps in the
// declared shape, and reports on.
//
// The first version, still served for the clients and manifests written
// for it; the API server converts to and from v1beta1 (which it stores,
// and the controller reads) through the conversion webhook
// (docs/evolving-the-api.md).
//
// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=foos,singular=foo,shortName=foo,scope=Namespaced
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.replicas,statuspath=.status.replicas,selectorpath=.status.selector
// +kubebuilder:printcolumn:name="Deployment",type=string,JSONPath=`.spec.deploymentName`
// +kubebuilder:printcolumn:name="Desired",type=integer,JSONPath=`.spec.replicas`
// +kubebuilder:printcolumn:name="Port",type=integer,JSONPath=`.spec.containerPort`,priority=1
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
	// Why the defaults below: kstatus (Flux, kpt) takes a Foo with no
	// status at all for Current, before its Deployment even exists, and the
	// controller's first status write may come seconds after the Foo (it
	// waits up to 2 s, see plan.FirstProgress). With the API server's
	// defaults, a new Foo reads status.observedGeneration 0 against
	// generation 1: InProgress (TestKstatusBeforeTheFirstStatus).

	// Status is the observed state, written only by the controller, through
	// the status subresource; status.observedGeneration is 0 until the
	// controller first reports.
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
	// DeploymentName is the name of the Deployment the controller maintains,
	// in the Foo's namespace. Changing it creates the new Deployment and
	// deletes the old one.
	//
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	DeploymentName string `json:"deploymentName"`

	// Replicas is the desired number of pods. It is also the spec side of the
	// scale subresource, so `kubectl scale` and a HorizontalPodAutoscaler can
	// set it.
	//
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	Replicas *int32 `json:"replicas,omitempty"`

	// Image is the container image the Deployment's pods run.
	//
	// +optional
	// +kubebuilder:default="nginx:1.27"
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:Pattern=`^\S+$`
	// +kubebuilder:validation:XValidation:rule="!self.endsWith(':latest')",message="image must be pinned: the mutable ':latest' tag is not allowed"
	Image string `json:"image,omitempty"`

	// ContainerPort is the TCP port the container listens on. The controller
	// declares it in the pod template as the container port named "http",
	// so a Service can target it by name (targetPort: http). Unset: the
	// controller declares no port, and removes the "http" port it declared.
	//
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	ContainerPort *int32 `json:"containerPort,omitempty"`

	// PodLabels are extra labels on the pod template, beside the ones the
	// controller sets itself (samplecontroller.example.com/foo-uid, the
	// selector, and app.kubernetes.io/managed-by), which they may not
	// override. Keys and values are as Kubernetes allows for labels (the
	// characters of a value are checked by the API server when the
	// controller applies the Deployment, not when the Foo is created). Only
	// the keys declared here are the controller's: labels others add to the
	// pod template are left alone, and a key removed from here is removed
	// from the pod template. Changing them changes the pod template: every
	// pod is replaced (a rollout).
	//
	// +optional
	// +kubebuilder:validation:MaxProperties=32
	// +kubebuilder:validation:XValidation:rule="self.all(k, !format.qualifiedName().validate(k).hasValue())",message="keys must be label keys: an optional DNS subdomain prefix and '/', then a name of at most 63 characters"
	// +kubebuilder:validation:XValidation:rule="self.all(k, self[k].size() <= 63)",message="values must be at most 63 characters"
	// +kubebuilder:validation:XValidation:rule="!('samplecontroller.example.com/foo-uid' in self) && !('app.kubernetes.io/managed-by' in self)",message="the controller's own labels (samplecontroller.example.com/foo-uid, app.kubernetes.io/managed-by) may not be set"
	PodLabels map[string]string `json:"podLabels,omitempty"`

	// DeletionPolicy is what happens to the Deployment when the Foo is
	// deleted: Delete (the default) or Orphan (keep it, without an owner).
	//
	// +optional
	// +kubebuilder:default=Delete
	DeletionPolicy DeletionPolicy `json:"deletionPolicy,omitempty"`
}

// FooStatus is the observed state of a Foo, written only by the controller.
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
	// form, for the scale subresource (and so for autoscalers).
	//
	// +optional
	Selector string `json:"selector,omitempty"`

	// Conditions describe the Foo's state, in the kstatus conventions
	// (sigs.k8s.io/cli-utils/pkg/kstatus) that kubectl wait, Flux, kpt and
	// Argo CD read: Available and Ready are always present; Reconciling
	// and Stalled only while True. See docs/conditions.md.
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
