package plan

import (
	"maps"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
)

// DeploymentView is what the controller reads of a Deployment, and what its
// informer caches in place of one: the cache holds every Deployment it
// watches for the life of the process, and an appsv1.Deployment is 1,232
// bytes before a single field is set (a PodSpec, a 408-byte Container per
// container, a strategy), nearly all of it for other controllers. A view
// is about a third of the heap of the smallest appsv1.Deployment
// (BenchmarkCachedBytes in pkg/cachetrim).
//
// Its fields have the names and JSON paths of appsv1.Deployment's, so code
// reads dep.Spec.Template.Labels either way, and a JSON patch computed
// from a view (removeStrayEntriesPatch) has the paths of the real object. A
// field of the spec or status the controller starts to read must be added
// here and in NewDeploymentView: the compiler enforces the first, and
// FuzzDeploymentViewHidesNothing the second. The metadata is the whole
// ObjectMeta type (so that a view is a metav1.Object), but only what
// NewDeploymentView copies is set: name, namespace, UID,
// resourceVersion, generation, deletionTimestamp, labels, owner
// references and the PodLabelsAnnotation annotation. Reading anything
// else of it (finalizers, another annotation) compiles and reads empty:
// copy it in NewDeploymentView, and add it to the fuzz test's reads.
//
// A view implements runtime.Object and metav1.Object, so that informers,
// indexes and the MutationCache keep it as they would a Deployment. It has
// no kind (GetObjectKind is empty): an Event that names a Deployment takes
// Reference instead.
type DeploymentView struct {
	metav1.ObjectMeta `json:"metadata"`
	Spec              deploymentViewSpec   `json:"spec"`
	Status            deploymentViewStatus `json:"status"`
}

// deploymentViewSpec is what the controller reads of a Deployment's spec.
type deploymentViewSpec struct {
	Replicas        *int32 `json:"replicas,omitempty"`
	MinReadySeconds int32  `json:"minReadySeconds,omitempty"`
	// ProgressDeadlineSeconds is compared only when the controller
	// declares it (progressDeadline); 0 for unset, which the API server's
	// default (600) never leaves it. A value, not a pointer: one
	// allocation less per cached Deployment.
	ProgressDeadlineSeconds int32 `json:"progressDeadlineSeconds,omitempty"`
	// RevisionHistoryLimit is a pointer, for 0 is a limit and unset (a
	// Deployment the API server has not defaulted) is not.
	RevisionHistoryLimit *int32                `json:"revisionHistoryLimit,omitempty"`
	Selector             *metav1.LabelSelector `json:"selector,omitempty"`
	Template             podTemplateView       `json:"template"`
}

// podTemplateView is what the controller reads of the pod template: its
// labels and its containers.
type podTemplateView struct {
	podTemplateMetaView `json:"metadata"`
	Spec                podSpecView `json:"spec"`
}

// podTemplateMetaView is the pod template's metadata: its labels.
type podTemplateMetaView struct {
	Labels map[string]string `json:"labels,omitempty"`
}

// podSpecView holds every container of the pod template, in order, so
// that the index of a container in a JSON patch's path is right; only the
// controller's own container keeps its image and ports.
type podSpecView struct {
	Containers []containerView `json:"containers"`
}

// containerView is a container's name and, for ours, image and ports.
type containerView struct {
	Name  string                 `json:"name"`
	Image string                 `json:"image,omitempty"`
	Ports []corev1.ContainerPort `json:"ports,omitempty"`
}

// deploymentViewStatus is what the controller reads of a Deployment's
// status: the counts and, of the Progressing and Available conditions,
// type, status and reason.
type deploymentViewStatus struct {
	ObservedGeneration int64                     `json:"observedGeneration,omitempty"`
	Replicas           int32                     `json:"replicas,omitempty"`
	UpdatedReplicas    int32                     `json:"updatedReplicas,omitempty"`
	ReadyReplicas      int32                     `json:"readyReplicas,omitempty"`
	AvailableReplicas  int32                     `json:"availableReplicas,omitempty"`
	Conditions         []deploymentConditionView `json:"conditions,omitempty"`
}

// deploymentConditionView is a Deployment condition without its message
// and times.
type deploymentConditionView struct {
	Type   appsv1.DeploymentConditionType `json:"type"`
	Status corev1.ConditionStatus         `json:"status"`
	Reason string                         `json:"reason,omitempty"`
}

// NewDeploymentView returns the view of dep, sharing nothing with it.
//
// Strings that repeat across Deployments are interned (see intern), and
// equal label maps are one map (the metadata's and the template's are
// equal in every Deployment the controller writes). That is safe only
// because nothing modifies a view; DeepCopy gives maps of its own.
func NewDeploymentView(dep *appsv1.Deployment) *DeploymentView {
	out := &DeploymentView{
		ObjectMeta: metav1.ObjectMeta{
			Name:              dep.Name,
			Namespace:         intern(dep.Namespace),
			UID:               dep.UID,
			ResourceVersion:   dep.ResourceVersion,
			Generation:        dep.Generation,
			DeletionTimestamp: dep.DeletionTimestamp.DeepCopy(),
			Labels:            internKeys(dep.Labels),
		},
		Spec: deploymentViewSpec{
			Replicas:                cloneInt32(dep.Spec.Replicas),
			MinReadySeconds:         dep.Spec.MinReadySeconds,
			ProgressDeadlineSeconds: ptr.Deref(dep.Spec.ProgressDeadlineSeconds, 0),
			RevisionHistoryLimit:    cloneInt32(dep.Spec.RevisionHistoryLimit),
		},
		Status: deploymentViewStatus{
			ObservedGeneration: dep.Status.ObservedGeneration,
			Replicas:           dep.Status.Replicas,
			UpdatedReplicas:    dep.Status.UpdatedReplicas,
			ReadyReplicas:      dep.Status.ReadyReplicas,
			AvailableReplicas:  dep.Status.AvailableReplicas,
		},
	}
	if keys, ok := dep.Annotations[PodLabelsAnnotation]; ok {
		out.Annotations = map[string]string{PodLabelsAnnotation: keys}
	}
	if n := len(dep.OwnerReferences); n > 0 {
		out.OwnerReferences = make([]metav1.OwnerReference, n)
	}
	for i := range out.OwnerReferences {
		ref := &out.OwnerReferences[i]
		dep.OwnerReferences[i].DeepCopyInto(ref)
		ref.APIVersion, ref.Kind = intern(ref.APIVersion), intern(ref.Kind)
	}
	out.Spec.Template.Labels = shared(internKeys(dep.Spec.Template.Labels), out.Labels)
	if sel := dep.Spec.Selector; sel != nil {
		out.Spec.Selector = sel.DeepCopy()
		out.Spec.Selector.MatchLabels = shared(internKeys(sel.MatchLabels), out.Labels, out.Spec.Template.Labels)
	}
	if n := len(dep.Spec.Template.Spec.Containers); n > 0 {
		out.Spec.Template.Spec.Containers = make([]containerView, n)
		for i, c := range dep.Spec.Template.Spec.Containers {
			kept := &out.Spec.Template.Spec.Containers[i]
			kept.Name = intern(c.Name)
			if c.Name == ContainerName {
				kept.Image, kept.Ports = intern(c.Image), slices.Clone(c.Ports)
				for j := range kept.Ports {
					p := &kept.Ports[j]
					p.Name, p.Protocol = intern(p.Name), corev1.Protocol(intern(string(p.Protocol)))
				}
			}
		}
	}
	for _, c := range dep.Status.Conditions {
		if c.Type == appsv1.DeploymentProgressing || c.Type == appsv1.DeploymentAvailable {
			out.Status.Conditions = append(out.Status.Conditions, deploymentConditionView{
				Type:   appsv1.DeploymentConditionType(intern(string(c.Type))),
				Status: corev1.ConditionStatus(intern(string(c.Status))), Reason: intern(c.Reason)})
		}
	}
	return out
}

// Reference names the Deployment in an Event's related object.
func (d *DeploymentView) Reference() *corev1.ObjectReference {
	return &corev1.ObjectReference{
		APIVersion: appsv1.SchemeGroupVersion.String(), Kind: "Deployment",
		Namespace: d.Namespace, Name: d.Name, UID: d.UID, ResourceVersion: d.ResourceVersion,
	}
}

// GetObjectKind is part of runtime.Object. A view has no kind.
func (d *DeploymentView) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject is part of runtime.Object.
func (d *DeploymentView) DeepCopyObject() runtime.Object { return d.DeepCopy() }

// DeepCopy returns a copy of d that shares no memory with it.
func (d *DeploymentView) DeepCopy() *DeploymentView {
	if d == nil {
		return nil
	}
	out := &DeploymentView{Spec: d.Spec, Status: d.Status}
	meta := &d.ObjectMeta // d.DeepCopyInto would read as a copy of the view
	meta.DeepCopyInto(&out.ObjectMeta)
	out.Spec.Replicas = cloneInt32(d.Spec.Replicas)
	out.Spec.RevisionHistoryLimit = cloneInt32(d.Spec.RevisionHistoryLimit)
	out.Spec.Selector = d.Spec.Selector.DeepCopy()
	out.Spec.Template.Labels = maps.Clone(d.Spec.Template.Labels)
	out.Spec.Template.Spec.Containers = slices.Clone(d.Spec.Template.Spec.Containers)
	for i := range out.Spec.Template.Spec.Containers {
		c := &out.Spec.Template.Spec.Containers[i]
		c.Ports = slices.Clone(c.Ports)
	}
	out.Status.Conditions = slices.Clone(d.Status.Conditions)
	return out
}

var _ interface {
	runtime.Object
	metav1.Object
} = &DeploymentView{}

func cloneInt32(p *int32) *int32 {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}
