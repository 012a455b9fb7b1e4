// Package proptest holds what the property tests of the Foo controller's
// decisions share: a generator of random valid Foos, and a model of what the
// API server makes of the Deployment the controller applies.
//
// It is used only by tests (pkg/plan's unit tests and pkg/integration,
// which checks the model against a real API server), but is a package of its
// own so that both use the same idea of a valid Foo.
package proptest

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	appsv1apply "k8s.io/client-go/applyconfigurations/apps/v1"
	"k8s.io/utils/ptr"

	samplev1beta1 "example.com/foo-controller/pkg/apis/samplecontroller/v1beta1"
)

// Foo returns a random Foo in namespace that the CRD's schema accepts
// (artifacts/examples/crd.yaml), with a UID and a generation as if stored.
// Edge values (no replicas, 0 and 100 replicas, an image without a tag, no
// container port, ports 1 and 65535, minReadySeconds 0 and 3600,
// revisionHistoryLimit unset, 0 and 100, names of
// the maximum length) come up often, not once in millions.
//
// Replicas may be unset, as in a Foo stored before the CRD had its
// default: the controller must handle that too. The image may not: v1beta1
// requires one.
func Foo(r *rand.Rand, namespace string) *samplev1beta1.Foo {
	foo := &samplev1beta1.Foo{
		ObjectMeta: metav1.ObjectMeta{
			Name:       dnsSubdomain(r),
			Namespace:  namespace,
			UID:        uid(r),
			Generation: 1 + r.Int64N(1<<40),
		},
		Spec: samplev1beta1.FooSpec{
			Deployment: samplev1beta1.DeploymentSpec{
				Name:  dnsLabel(r, 63),
				Image: image(r),
			},
			DeletionPolicy: oneOf(r, "", samplev1beta1.DeletionPolicyDelete, samplev1beta1.DeletionPolicyOrphan),
		},
	}
	switch r.IntN(10) {
	case 0: // unset
	case 1:
		foo.Spec.Deployment.Replicas = ptr.To[int32](0)
	case 2:
		foo.Spec.Deployment.Replicas = ptr.To[int32](100)
	default:
		foo.Spec.Deployment.Replicas = ptr.To(r.Int32N(101))
	}
	switch r.IntN(4) {
	case 0, 1: // unset
	case 2:
		foo.Spec.Deployment.ContainerPort = ptr.To(oneOf[int32](r, 1, 65535))
	default:
		foo.Spec.Deployment.ContainerPort = ptr.To(1 + r.Int32N(65535))
	}
	switch r.IntN(4) {
	case 0, 1: // unset
	case 2:
		foo.Spec.Deployment.MinReadySeconds = samplev1beta1.MaxMinReadySeconds
	default:
		foo.Spec.Deployment.MinReadySeconds = r.Int32N(samplev1beta1.MaxMinReadySeconds + 1)
	}
	switch r.IntN(4) {
	case 0, 1: // none
	case 2:
		foo.Spec.Deployment.PodLabels = map[string]string{oneOf(r, "team", "app.kubernetes.io/name"): oneOf(r, "", "a", "web")}
	default:
		foo.Spec.Deployment.PodLabels = map[string]string{}
		for range 1 + r.IntN(oneOf(r, 4, 32)) {
			foo.Spec.Deployment.PodLabels[labelKey(r)] = labelValue(r)
		}
	}
	// Drawn last, so that the fields above stay what they were for a
	// seed kept before it.
	switch r.IntN(4) {
	case 0, 1: // unset
	case 2:
		foo.Spec.Deployment.RevisionHistoryLimit = ptr.To(oneOf[int32](r, 0, samplev1beta1.MaxRevisionHistoryLimit))
	default:
		foo.Spec.Deployment.RevisionHistoryLimit = ptr.To(r.Int32N(samplev1beta1.MaxRevisionHistoryLimit + 1))
	}
	return foo
}

const labelNameChars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_."

// labelName is a label value that is not empty, or the name part of a
// label key: at most 63 of [A-Za-z0-9-_.], alphanumeric at both ends.
func labelName(r *rand.Rand) string {
	n := length(r, 63)
	b := make([]byte, n)
	for i := range b {
		chars := labelNameChars
		if i == 0 || i == n-1 {
			chars = labelNameChars[:62]
		}
		b[i] = chars[r.IntN(len(chars))]
	}
	return string(b)
}

// labelKey is a label key the CRD accepts in spec.podLabels: a name, with
// a DNS subdomain prefix half the time, never one of the controller's own
// keys (the CRD refuses them).
func labelKey(r *rand.Rand) string {
	if r.IntN(2) == 0 {
		return labelName(r)
	}
	prefix := dnsSubdomain(r)
	switch r.IntN(8) {
	case 0:
		prefix = oneOf(r, "samplecontroller.example.com", "app.kubernetes.io")
	case 1: // the longest prefix: 253 characters
		prefix = strings.Repeat("a", 63) + "." + strings.Repeat("b", 63) + "." + strings.Repeat("c", 63) + "." + strings.Repeat("d", 61)
	}
	return prefix + "/" + labelName(r)
}

// labelValue is a label value: empty sometimes.
func labelValue(r *rand.Rand) string {
	if r.IntN(8) == 0 {
		return ""
	}
	return labelName(r)
}

func oneOf[T any](r *rand.Rand, choices ...T) T { return choices[r.IntN(len(choices))] }

// length is a random length in 1..maxLen, the extremes often.
func length(r *rand.Rand, maxLen int) int {
	switch r.IntN(8) {
	case 0:
		return 1
	case 1:
		return maxLen
	default:
		return 1 + r.IntN(min(maxLen, 20))
	}
}

const (
	alnum      = "abcdefghijklmnopqrstuvwxyz0123456789"
	labelChars = alnum + "-"
)

// dnsLabel is an RFC 1123 label of at most maxLen: [a-z0-9-], alphanumeric
// at both ends.
func dnsLabel(r *rand.Rand, maxLen int) string {
	n := length(r, maxLen)
	b := make([]byte, n)
	for i := range b {
		chars := labelChars
		if i == 0 || i == n-1 {
			chars = alnum
		}
		b[i] = chars[r.IntN(len(chars))]
	}
	return string(b)
}

// dnsSubdomain is an RFC 1123 subdomain (a Foo's name): labels joined by
// dots, at most 253 characters.
func dnsSubdomain(r *rand.Rand) string {
	name := dnsLabel(r, 63)
	for r.IntN(4) == 0 {
		next := dnsLabel(r, 63)
		if len(name)+1+len(next) > 253 {
			break
		}
		name += "." + next
	}
	return name
}

func uid(r *rand.Rand) types.UID {
	return types.UID(fmt.Sprintf("%08x-%04x-4%03x-%04x-%012x",
		r.Uint32(), r.Uint32N(1<<16), r.Uint32N(1<<12), 0x8000|r.Uint32N(1<<14), r.Uint64N(1<<48)))
}

// image is an image reference the CRD accepts: none (defaulted), a common
// shape, or up to 512 printable non-space characters not ending in
// ":latest" (the API server does not parse references; the kubelet does).
func image(r *rand.Rand) string {
	switch r.IntN(10) {
	case 0, 1, 2, 3: // never empty: v1beta1 requires an image
		return oneOf(r,
			"nginx:1.27", "nginx", "busybox@sha256:"+strings.Repeat("ab", 32),
			"registry.example.com:5000/team/app:v1.2.3", "ghcr.io/o/app:latest-2",
			"app:LATEST", "localhost/app:latestx", "x")
	}
	n := length(r, 512)
	for {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte('!' + r.IntN('~'-'!'+1))
		}
		if s := string(b); !strings.HasSuffix(s, ":latest") {
			return s
		}
	}
}

// Served is the Deployment the API server stores for a server-side apply of
// apply creating it: the fields applied, plus what the server fills in —
// identity, and the defaults of apps/v1 and core/v1 that the controller
// does not declare (its Drift must tolerate them). Status is left empty: a
// new Deployment has none yet.
//
// The defaults are a model, written down from the API's defaulting
// functions; pkg/integration's TestDriftAgreesWithTheAPIServer checks it
// against a real API server.
func Served(apply *appsv1apply.DeploymentApplyConfiguration) (*appsv1.Deployment, error) {
	raw, err := json.Marshal(apply)
	if err != nil {
		return nil, err
	}
	dep := &appsv1.Deployment{}
	if err := json.Unmarshal(raw, dep); err != nil {
		return nil, err
	}
	dep.UID = "00000000-0000-4000-8000-000000000001"
	dep.ResourceVersion = "1"
	dep.Generation = 1
	dep.CreationTimestamp = metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	deploymentDefaults(dep)
	return dep, nil
}

// deploymentDefaults sets the apps/v1 and core/v1 defaults the API server
// gives a Deployment (k8s.io/kubernetes/pkg/apis/apps/v1 and core/v1
// SetDefaults_*), as far as the controller's Deployment can have them.
func deploymentDefaults(dep *appsv1.Deployment) {
	s := &dep.Spec
	if s.Replicas == nil {
		s.Replicas = ptr.To[int32](1)
	}
	if s.Strategy.Type == "" {
		s.Strategy.Type = appsv1.RollingUpdateDeploymentStrategyType
	}
	if s.Strategy.Type == appsv1.RollingUpdateDeploymentStrategyType {
		if s.Strategy.RollingUpdate == nil {
			s.Strategy.RollingUpdate = &appsv1.RollingUpdateDeployment{}
		}
		if s.Strategy.RollingUpdate.MaxUnavailable == nil {
			s.Strategy.RollingUpdate.MaxUnavailable = ptr.To(intstr.FromString("25%"))
		}
		if s.Strategy.RollingUpdate.MaxSurge == nil {
			s.Strategy.RollingUpdate.MaxSurge = ptr.To(intstr.FromString("25%"))
		}
	}
	if s.RevisionHistoryLimit == nil {
		s.RevisionHistoryLimit = ptr.To[int32](10)
	}
	if s.ProgressDeadlineSeconds == nil {
		s.ProgressDeadlineSeconds = ptr.To[int32](600)
	}

	p := &s.Template.Spec
	if p.DNSPolicy == "" {
		p.DNSPolicy = corev1.DNSClusterFirst
	}
	if p.RestartPolicy == "" {
		p.RestartPolicy = corev1.RestartPolicyAlways
	}
	if p.SecurityContext == nil {
		p.SecurityContext = &corev1.PodSecurityContext{}
	}
	if p.TerminationGracePeriodSeconds == nil {
		p.TerminationGracePeriodSeconds = ptr.To[int64](corev1.DefaultTerminationGracePeriodSeconds)
	}
	if p.SchedulerName == "" {
		p.SchedulerName = corev1.DefaultSchedulerName
	}
	for i := range p.Containers {
		c := &p.Containers[i]
		if c.TerminationMessagePath == "" {
			c.TerminationMessagePath = corev1.TerminationMessagePathDefault
		}
		if c.TerminationMessagePolicy == "" {
			c.TerminationMessagePolicy = corev1.TerminationMessageReadFile
		}
		for j := range c.Ports {
			if c.Ports[j].Protocol == "" {
				c.Ports[j].Protocol = corev1.ProtocolTCP
			}
		}
		if c.ImagePullPolicy == "" {
			c.ImagePullPolicy = pullPolicy(c.Image)
		}
	}
}

// pullPolicy is the default pull policy of image: Always for a ":latest" or
// missing tag, else IfNotPresent (core/v1 SetDefaults_Container). The API
// server decides with a full image reference parser, and picks IfNotPresent
// for references it cannot parse (uppercase, odd characters); this is right
// for common references only, which is why the integration test does not
// compare pull policies. Drift ignores the pull policy either way.
func pullPolicy(image string) corev1.PullPolicy {
	name, _, _ := strings.Cut(image, "@")
	if i := strings.LastIndexAny(name, ":/"); i < 0 || name[i] == '/' || name[i+1:] == "latest" {
		return corev1.PullAlways
	}
	return corev1.PullIfNotPresent
}
