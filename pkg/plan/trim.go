package plan

import (
	"maps"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// CachedDeployment returns, as a new object, the part of dep that the
// controller reads: what its informer keeps of each Deployment. The cache
// holds every Deployment it watches for the life of the process, and a
// Deployment as served is mostly what only other controllers read (the pod
// template's defaults, the strategy, the conditions' messages and times).
//
// Kept: name, namespace, UID, resourceVersion, generation, labels, owner
// references and deletionTimestamp; replicas, the selector and the pod
// template's labels; every container's name (so that the indexes in a
// JSON patch's paths stay right, see StrayEntriesPatch) and our
// container's image and ports; the status replica counts, observed
// generation, and the Progressing condition's type, status and reason.
// Anything this package starts reading from a Deployment must be added
// here: TestCachedDeploymentHidesNothing fails until it is.
//
// Equal label maps (the metadata's, the selector's and the template's are
// equal for every Deployment the controller writes) share one map. That is
// safe only because nothing modifies a cached object; a DeepCopy gets maps
// of its own.
func CachedDeployment(dep *appsv1.Deployment) *appsv1.Deployment {
	out := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{
			Name:              dep.Name,
			Namespace:         dep.Namespace,
			UID:               dep.UID,
			ResourceVersion:   dep.ResourceVersion,
			Generation:        dep.Generation,
			DeletionTimestamp: dep.DeletionTimestamp,
			Labels:            dep.Labels,
			OwnerReferences:   dep.OwnerReferences,
		},
		Spec: appsv1.DeploymentSpec{
			Replicas: dep.Spec.Replicas,
			Selector: dep.Spec.Selector,
		},
		Status: appsv1.DeploymentStatus{
			ObservedGeneration: dep.Status.ObservedGeneration,
			Replicas:           dep.Status.Replicas,
			UpdatedReplicas:    dep.Status.UpdatedReplicas,
			ReadyReplicas:      dep.Status.ReadyReplicas,
			AvailableReplicas:  dep.Status.AvailableReplicas,
		},
	}
	out.Spec.Template.Labels = shared(dep.Spec.Template.Labels, out.Labels)
	if sel := out.Spec.Selector; sel != nil && len(sel.MatchLabels) > 0 {
		out.Spec.Selector = &metav1.LabelSelector{
			MatchLabels:      shared(sel.MatchLabels, out.Labels, out.Spec.Template.Labels),
			MatchExpressions: sel.MatchExpressions,
		}
	}
	if n := len(dep.Spec.Template.Spec.Containers); n > 0 {
		out.Spec.Template.Spec.Containers = make([]corev1.Container, n)
		for i, c := range dep.Spec.Template.Spec.Containers {
			kept := &out.Spec.Template.Spec.Containers[i]
			kept.Name = c.Name
			if c.Name == ContainerName {
				kept.Image, kept.Ports = c.Image, c.Ports
			}
		}
	}
	for _, c := range dep.Status.Conditions {
		if c.Type == appsv1.DeploymentProgressing {
			out.Status.Conditions = append(out.Status.Conditions,
				appsv1.DeploymentCondition{Type: c.Type, Status: c.Status, Reason: c.Reason})
		}
	}
	return out
}

// shared returns the first of candidates equal to m, or m itself.
func shared(m map[string]string, candidates ...map[string]string) map[string]string {
	if len(m) == 0 {
		return m
	}
	for _, c := range candidates {
		if maps.Equal(m, c) {
			return c
		}
	}
	return m
}
