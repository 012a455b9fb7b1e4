package plan

import (
	"maps"
	"slices"
	"unique"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	samplev1alpha1 "example.com/foo-controller/pkg/apis/samplecontroller/v1alpha1"
)

// CachedDeployment returns, as a new object, the part of dep that the
// controller reads: what its informer keeps of each Deployment. The cache
// holds every Deployment it watches for the life of the process, and a
// Deployment as served is mostly what only other controllers read (the pod
// template's defaults, the strategy, the conditions' messages and times).
//
// Kept: name, namespace, UID, resourceVersion, generation, labels, owner
// references, deletionTimestamp and the PodLabelsAnnotation annotation; replicas, the selector and the pod
// template's labels; every container's name (so that the indexes in a
// JSON patch's paths stay right, see StrayEntriesPatch) and our
// container's image and ports; the status replica counts, observed
// generation, and the Progressing and Available conditions' type, status
// and reason.
// Anything this package starts reading from a Deployment must be added
// here: FuzzCachedDeploymentHidesNothing fails until it is (if its edits
// touch that field: add one that does).
//
// Strings that repeat across Deployments are interned (see intern), and
// equal label maps share one map (the metadata's and the template's are
// equal in every Deployment the controller writes). That is safe only
// because nothing modifies a cached object; a DeepCopy gets maps of its
// own.
func CachedDeployment(dep *appsv1.Deployment) *appsv1.Deployment {
	out := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{
			Name:              dep.Name,
			Namespace:         intern(dep.Namespace),
			UID:               dep.UID,
			ResourceVersion:   dep.ResourceVersion,
			Generation:        dep.Generation,
			DeletionTimestamp: dep.DeletionTimestamp,
			Labels:            internKeys(dep.Labels),
			OwnerReferences:   slices.Clone(dep.OwnerReferences),
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
	if keys, ok := dep.Annotations[PodLabelsAnnotation]; ok {
		out.Annotations = map[string]string{PodLabelsAnnotation: keys}
	}
	for i := range out.OwnerReferences {
		ref := &out.OwnerReferences[i]
		ref.APIVersion, ref.Kind = intern(ref.APIVersion), intern(ref.Kind)
	}
	out.Spec.Template.Labels = shared(dep.Spec.Template.Labels, out.Labels)
	if sel := out.Spec.Selector; sel != nil && len(sel.MatchLabels) > 0 {
		out.Spec.Selector = &metav1.LabelSelector{
			MatchLabels:      shared(internKeys(sel.MatchLabels), out.Labels, out.Spec.Template.Labels),
			MatchExpressions: sel.MatchExpressions,
		}
	}
	if n := len(dep.Spec.Template.Spec.Containers); n > 0 {
		out.Spec.Template.Spec.Containers = make([]corev1.Container, n)
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
			out.Status.Conditions = append(out.Status.Conditions,
				appsv1.DeploymentCondition{Type: appsv1.DeploymentConditionType(intern(string(c.Type))),
					Status: corev1.ConditionStatus(intern(string(c.Status))), Reason: intern(c.Reason)})
		}
	}
	return out
}

// CachedFoo interns, in place, the strings of foo that repeat across Foos
// (see intern) and returns it: what the controller's informer keeps of
// each Foo. Nothing is dropped: the controller reads the whole Foo (its
// status too, to write only what changed).
func CachedFoo(foo *samplev1alpha1.Foo) *samplev1alpha1.Foo {
	foo.APIVersion, foo.Kind = intern(foo.APIVersion), intern(foo.Kind)
	foo.Namespace = intern(foo.Namespace)
	foo.Spec.Image = intern(foo.Spec.Image)
	for i := range foo.Status.Conditions {
		c := &foo.Status.Conditions[i]
		c.Type, c.Status = intern(c.Type), metav1.ConditionStatus(intern(string(c.Status)))
		c.Reason, c.Message = intern(c.Reason), intern(c.Message)
	}
	return foo
}

// intern returns s, or an equal string that other cached objects already
// hold: a decoded object has its own copy of every string, and most of
// those (namespaces, label keys, kinds, images, port names, condition
// reasons) are the same in thousands of objects. Values that are unique
// (names, UIDs) are not interned: that would only add an entry to the
// table.
func intern(s string) string { return unique.Make(s).Value() }

// internKeys returns m with interned keys, in a new map.
func internKeys(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[intern(k)] = v
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
