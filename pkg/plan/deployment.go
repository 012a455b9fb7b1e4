package plan

import (
	"encoding/json"

	corev1 "k8s.io/api/core/v1"
	appsv1apply "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1apply "k8s.io/client-go/applyconfigurations/core/v1"
	metav1apply "k8s.io/client-go/applyconfigurations/meta/v1"

	samplev1beta1 "example.com/foo-controller/pkg/apis/samplecontroller/v1beta1"
)

// DesiredDeployment is the server-side apply configuration of foo's
// Deployment: exactly the fields the controller owns, nothing else. Applying
// it with the controller's field manager and force creates the Deployment or
// takes back any of these fields that someone else changed, and leaves every
// field it does not mention to its other owners.
func DesiredDeployment(foo *samplev1beta1.Foo) *appsv1apply.DeploymentApplyConfiguration {
	apply := appsv1apply.Deployment(foo.Spec.Deployment.Name, foo.Namespace).
		WithLabels(Labels(foo))
	if keys := podLabelKeys(foo); keys != "" {
		apply.WithAnnotations(map[string]string{PodLabelsAnnotation: keys})
	}
	spec := appsv1apply.DeploymentSpec().
		WithReplicas(Replicas(foo)).
		WithMinReadySeconds(foo.Spec.Deployment.MinReadySeconds).
		WithRevisionHistoryLimit(RevisionHistoryLimit(foo)).
		WithSelector(metav1apply.LabelSelector().WithMatchLabels(SelectorLabels(foo))).
		WithTemplate(corev1apply.PodTemplateSpec().
			WithLabels(TemplateLabels(foo)).
			WithSpec(corev1apply.PodSpec().
				WithContainers(desiredContainer(foo))))
	if deadline := progressDeadline(foo); deadline != nil {
		spec.WithProgressDeadlineSeconds(*deadline)
	}
	return apply.
		WithOwnerReferences(metav1apply.OwnerReference().
			// The version the controller works in. A release before
			// v1beta1 wrote v1alpha1 here: ownership compares the group
			// and the UID only (ControllerFoo), so those Deployments stay
			// the Foo's without a write at the upgrade, and the garbage
			// collector resolves either version while both are served.
			WithAPIVersion(samplev1beta1.GroupVersion.String()).
			WithKind(fooKind).
			WithName(foo.Name).
			WithUID(foo.UID).
			WithController(true).
			// The garbage collector's foreground deletion of the Foo waits
			// for the Deployment.
			WithBlockOwnerDeletion(true)).
		WithSpec(spec)
}

// desiredDeploymentWithoutPorts is DesiredDeployment without our
// container's ports: what the controller applies when the API server
// rewrites the port it declares (a mutating admission policy). Declaring
// the port would only be refused (two "http" ports: the rewritten one and
// ours), so the other fields could never be put back; without it, they
// are, and the port stays as the API server keeps it.
func desiredDeploymentWithoutPorts(foo *samplev1beta1.Foo) *appsv1apply.DeploymentApplyConfiguration {
	apply := DesiredDeployment(foo)
	apply.Spec.Template.Spec.Containers[0].Ports = nil
	return apply
}

// desiredContainer is the one container the controller declares.
func desiredContainer(foo *samplev1beta1.Foo) *corev1apply.ContainerApplyConfiguration {
	c := corev1apply.Container().WithName(ContainerName).WithImage(Image(foo))
	if foo.Spec.Deployment.ContainerPort != nil {
		// Protocol is sent although TCP is its default: server-side apply
		// keys container ports by containerPort and protocol, and a key
		// must be complete.
		c.WithPorts(corev1apply.ContainerPort().
			WithName(PortName).WithContainerPort(*foo.Spec.Deployment.ContainerPort).WithProtocol(corev1.ProtocolTCP))
	}
	return c
}

// Drift lists the owned fields in which dep differs from what foo wants, by
// name ("replicas", "minReadySeconds", "progressDeadlineSeconds",
// "revisionHistoryLimit", "image", "containerPort", "labels", "template
// labels", "podLabels", "owner"). Empty means the controller has nothing
// to send. Fields the
// controller does not own (added labels, annotations, other containers,
// defaults filled in by the API server) are not compared.
func Drift(foo *samplev1beta1.Foo, dep *DeploymentView) []string {
	var drift []string
	if dep.Spec.Replicas == nil || *dep.Spec.Replicas != Replicas(foo) {
		drift = append(drift, "replicas")
	}
	if dep.Spec.MinReadySeconds != foo.Spec.Deployment.MinReadySeconds {
		drift = append(drift, "minReadySeconds")
	}
	if want := progressDeadline(foo); want != nil && dep.Spec.ProgressDeadlineSeconds != *want {
		drift = append(drift, "progressDeadlineSeconds")
	}
	if h := dep.Spec.RevisionHistoryLimit; h == nil || *h != RevisionHistoryLimit(foo) {
		drift = append(drift, "revisionHistoryLimit")
	}
	if c := container(dep); c == nil || c.Image != Image(foo) {
		drift = append(drift, "image")
	}
	if c := container(dep); c != nil && !portMatches(c, foo.Spec.Deployment.ContainerPort) { // no container: "image" says so
		drift = append(drift, "containerPort")
	}
	if !hasLabels(dep.Labels, Labels(foo)) {
		drift = append(drift, "labels")
	}
	if !hasLabels(dep.Spec.Template.Labels, Labels(foo)) {
		drift = append(drift, "template labels")
	}
	if !podLabelsMatch(foo, dep) {
		drift = append(drift, "podLabels")
	}
	if !IsControlledBy(dep, foo.UID) {
		drift = append(drift, "owner")
	}
	return drift
}

// OwnedValues is, in one comparable string, every value of dep that Drift
// compares with foo: two Deployments with the same OwnedValues have the same
// drift from foo. Status and the fields of other owners do not enter it.
func OwnedValues(foo *samplev1beta1.Foo, dep *DeploymentView) string {
	pick := func(have map[string]string) map[string]string {
		out := map[string]string{}
		for k := range TemplateLabels(foo) {
			if v, ok := have[k]; ok {
				out[k] = v
			}
		}
		return out
	}
	owned := struct {
		Replicas       *int32
		MinReady       int32
		Deadline       int32
		History        *int32
		Container      *containerView `json:",omitempty"`
		Labels         map[string]string
		TemplateLabels map[string]string
		PodLabelKeys   *string
		Controlled     bool
	}{dep.Spec.Replicas, dep.Spec.MinReadySeconds, dep.Spec.ProgressDeadlineSeconds, dep.Spec.RevisionHistoryLimit, nil, pick(dep.Labels), pick(dep.Spec.Template.Labels), nil, IsControlledBy(dep, foo.UID)}
	if keys, ok := dep.Annotations[PodLabelsAnnotation]; ok {
		owned.PodLabelKeys = &keys
	}
	if c := container(dep); c != nil {
		owned.Container = &containerView{Image: c.Image, Ports: c.Ports}
	}
	b, _ := json.Marshal(owned) // plain types: cannot fail
	return string(b)
}

func container(dep *DeploymentView) *containerView {
	for i := range dep.Spec.Template.Spec.Containers {
		if dep.Spec.Template.Spec.Containers[i].Name == ContainerName {
			return &dep.Spec.Template.Spec.Containers[i]
		}
	}
	return nil
}

// portMatches reports whether c's ports named PortName are exactly the one
// want declares (nil: none). Ports of other names are not ours and are not
// compared.
func portMatches(c *containerView, want *int32) bool {
	found := false
	for _, p := range c.Ports {
		if p.Name != PortName {
			continue
		}
		if found || want == nil || !isDesiredPort(p, *want) {
			return false
		}
		found = true
	}
	return found == (want != nil)
}

// isDesiredPort reports whether p is the port spec.containerPort want
// declares: same name and same server-side apply key (number and protocol).
func isDesiredPort(p corev1.ContainerPort, want int32) bool {
	return p.Name == PortName && p.ContainerPort == want && p.Protocol == corev1.ProtocolTCP
}

// podLabelsMatch reports whether dep's pod template has the labels of
// spec.podLabels, and dep records (PodLabelsAnnotation) exactly the keys the
// Foo declares: when the Foo drops a key, the annotation differs, and the
// apply sent for it removes the key our field manager owned. Labels others
// added are not compared.
func podLabelsMatch(foo *samplev1beta1.Foo, dep *DeploymentView) bool {
	keys, ok := dep.Annotations[PodLabelsAnnotation]
	want := podLabelKeys(foo)
	return hasLabels(dep.Spec.Template.Labels, podLabels(foo)) && ok == (want != "") && keys == want
}

func hasLabels(have, want map[string]string) bool {
	for k, v := range want {
		if got, ok := have[k]; !ok || got != v {
			return false
		}
	}
	return true
}
