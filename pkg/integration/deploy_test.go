//go:build integration

package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	samplev1beta1 "example.com/foo-controller/pkg/apis/samplecontroller/v1beta1"
	clientset "example.com/foo-controller/pkg/generated/clientset/versioned"
	"example.com/foo-controller/pkg/webhook"
)

// The tests in this file install artifacts/deploy (rendered by the real
// kubectl kustomize) and run the controller binary as its ServiceAccount,
// with a token from the TokenRequest API: the identity and permissions it
// has when deployed, not the admin-like user the other tests use.
//
// TestRBACIsExactlyEnough and TestRBACWithoutARule run the controller
// cluster-wide, as deployed, so they must not run beside the other tests:
// they would reconcile those tests' Foos too. They do not call t.Parallel,
// and `go test` runs every sequential test before releasing the parallel
// ones.

const (
	deploySystemNamespace = "foo-system"
	deployServiceAccount  = "foo-controller"
	deployLeaderRole      = "foo-controller-leader-election"
	deployFieldManager    = "foo-integration-test"
)

// deployRBACKinds are the objects of artifacts/deploy that grant the
// controller its permissions.
var deployRBACKinds = []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}

// wantClusterRules is the ClusterRole, rule by rule (group/resource: verbs):
// widening it must be a deliberate change here too. artifacts/deploy/README.md
// says why each one is needed.
var wantClusterRules = map[string][]string{
	"samplecontroller.example.com/foos":              {"get", "list", "watch", "patch"},
	"samplecontroller.example.com/foos/status":       {"patch"},
	"samplecontroller.example.com/foos/finalizers":   {"update"},
	"apps/deployments":                               {"list", "watch", "create", "patch", "delete"},
	"events.k8s.io/events":                           {"create", "patch"},
	"namespaces":                                     {"list", "watch"},
	"apiextensions.k8s.io/customresourcedefinitions": {"list", "watch", "patch"},
	"authentication.k8s.io/tokenreviews":             {"create"},
	"authorization.k8s.io/subjectaccessreviews":      {"create"},
}

// The webhook's Secret and the CRD it keeps: the only names the RBAC rules
// on Secrets and CRDs may reach (create aside, which no name can limit).
const (
	deployWebhookSecret = "foo-controller-webhook-cert"
	deployWebhookCRD    = "foos.samplecontroller.example.com"
)

func TestRBACIsExactlyEnough(t *testing.T) {
	objs := renderDeploy(t)
	checkRBACIsTight(t, objs)
	installDeployRBAC(t, objs)
	kubeconfig := serviceAccountKubeconfig(t, deploySystemNamespace, deployServiceAccount)

	// The token really is the ServiceAccount's, with none of the admin's
	// powers.
	sa := clientFor(t, kubeconfig)
	review, err := sa.AuthenticationV1().SelfSubjectReviews().Create(t.Context(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := "system:serviceaccount:" + deploySystemNamespace + ":" + deployServiceAccount; review.Status.UserInfo.Username != want {
		t.Fatalf("the kubeconfig authenticates as %q, want %q", review.Status.UserInfo.Username, want)
	}
	for _, attrs := range []authorizationv1.ResourceAttributes{
		{Verb: "list", Resource: "secrets"},
		{Verb: "get", Resource: "secrets", Namespace: deploySystemNamespace},
		{Verb: "list", Resource: "secrets", Namespace: deploySystemNamespace},
		{Verb: "update", Resource: "secrets", Namespace: deploySystemNamespace, Name: "other"},
		{Verb: "create", Resource: "secrets", Namespace: "default"},
		{Verb: "patch", Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions", Name: "other.example.com"},
		{Verb: "update", Group: "apps", Resource: "deployments", Namespace: "default"},
		{Verb: "create", Group: "coordination.k8s.io", Resource: "leases", Namespace: "default"},
	} {
		if canI(t, sa, attrs) {
			t.Errorf("the ServiceAccount may %s %s in %q; it must not", attrs.Verb, attrs.Resource, attrs.Namespace)
		}
	}

	s := newScenario(t)
	lease := "foo-controller-" + s.ns
	// As deployed, with the conversion webhook: its keeper shares the
	// plane's Secret in foo-system (harnessWebhookSecret) and lists and
	// watches it and the CRD as this ServiceAccount.
	// One host more than the Secret's certificate has: the keeper re-issues
	// it for both (an update of the Secret, as a rollout that changes
	// -webhook-hosts makes).
	// Its metrics as deployed: HTTPS, behind the API server's reviews.
	metricsAddr, probesAddr := freeAddr(t), freeAddr(t)
	ctrl := s.startControllerAs(kubeconfig, append(leaderElectionArgs(lease), "-webhook-bind-address=127.0.0.1:0",
		"-webhook-hosts=127.0.0.1,localhost,foo-controller-webhook.foo-system.svc",
		"-metrics-secure=true", "-metrics-bind-address="+metricsAddr, "-health-probe-bind-address="+probesAddr)...)
	s.eventually(time.Minute, "the controller to hold the Lease "+deploySystemNamespace+"/"+lease, func() (bool, string) {
		l, err := env.kube.CoordinationV1().Leases(deploySystemNamespace).Get(s.ctx, lease, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return ptr.Deref(l.Spec.HolderIdentity, "") != "", fmt.Sprintf("%+v", l.Spec)
	})
	checkMetricsNeedATokenAndTheRight(t, s, metricsAddr, probesAddr)

	for _, policy := range []samplev1beta1.DeletionPolicy{samplev1beta1.DeletionPolicyDelete, samplev1beta1.DeletionPolicyOrphan} {
		name := strings.ToLower(string(policy))
		start := time.Now()
		foo := newFoo(name, name+"-deploy", 1)
		foo.Spec.DeletionPolicy = policy
		foo = s.createFoo(foo)
		s.waitConverged(name, time.Minute)

		if out, err := s.kubectl("scale", "foo/"+name, "--replicas=2"); err != nil {
			t.Fatalf("kubectl scale: %v: %s", err, out)
		}
		s.waitConverged(name, time.Minute)
		if policy == samplev1beta1.DeletionPolicyOrphan {
			s.eventually(time.Minute, "the orphan finalizer", func() (bool, string) {
				f, err := s.getFoo(name)
				return err == nil && slices.Contains(f.Finalizers, samplev1beta1.OrphanFinalizer), fmt.Sprintf("%v %v", err, f)
			})
		}
		wantEvents := map[string]int{"Created": 1, "Scaled": 1}
		s.eventually(30*time.Second, "the Created and Scaled Events", func() (bool, string) {
			got := s.fooEvents(name)
			return got["Created"] == 1 && got["Scaled"] == 1, fmt.Sprintf("%v", got)
		})

		if err := s.foos.SamplecontrollerV1beta1().Foos(s.ns).Delete(s.ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		s.eventually(time.Minute, "the Foo to be gone", func() (bool, string) {
			_, err := s.getFoo(name)
			return apierrors.IsNotFound(err), fmt.Sprintf("%v", err)
		})
		switch policy {
		case samplev1beta1.DeletionPolicyDelete:
			s.eventually(time.Minute, "the Deployment to be garbage-collected", func() (bool, string) {
				_, err := s.getDeployment(foo.Spec.Deployment.Name)
				return apierrors.IsNotFound(err), fmt.Sprintf("%v", err)
			})
		case samplev1beta1.DeletionPolicyOrphan:
			dep, err := s.getDeployment(foo.Spec.Deployment.Name)
			if err != nil {
				t.Fatalf("the Orphan Foo's Deployment must be kept: %v", err)
			}
			if len(dep.OwnerReferences) != 0 {
				t.Errorf("the kept Deployment still has owners: %+v", dep.OwnerReferences)
			}
			wantEvents["Orphaned"] = 1
			s.eventually(30*time.Second, "the Orphaned Event", func() (bool, string) {
				got := s.fooEvents(name)
				return got["Orphaned"] == 1, fmt.Sprintf("%v", got)
			})
		}
		if got := s.fooEvents(name); !maps.Equal(got, wantEvents) {
			t.Errorf("events for %s: %v, want %v", name, got, wantEvents)
		}
		t.Logf("deletionPolicy %s: create, converge, scale, converge, delete in %v", policy, time.Since(start).Round(time.Millisecond))
	}

	if !ctrl.running() {
		t.Fatalf("the controller exited: %v", ctrl.err)
	}
	s.eventually(30*time.Second, "the webhook's certificate re-issued for the new host", func() (bool, string) {
		secret, err := env.kube.CoreV1().Secrets(deploySystemNamespace).Get(s.ctx, deployWebhookSecret, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		certs, err := certutil.ParseCertsPEM(secret.Data[corev1.TLSCertKey])
		if err != nil || len(certs) == 0 {
			return false, fmt.Sprint(err)
		}
		return slices.Contains(certs[0].DNSNames, "foo-controller-webhook.foo-system.svc"), fmt.Sprint(certs[0].DNSNames)
	})
	// A graceful stop releases the Lease (an update).
	if err := ctrl.stop(30 * time.Second); err != nil {
		t.Errorf("controller did not shut down cleanly: %v", err)
	}
	l, err := env.kube.CoordinationV1().Leases(deploySystemNamespace).Get(s.ctx, lease, metav1.GetOptions{})
	if err != nil || ptr.Deref(l.Spec.HolderIdentity, "") != "" {
		t.Errorf("the Lease was not released: %v %+v", err, l)
	}
	// Not one request was refused along the way: a refused Event or Lease
	// update would not have kept the Foos from converging, only shown up
	// here.
	if lines := ctrl.logLines("forbidden"); len(lines) > 0 {
		t.Errorf("the controller was refused something:\n%s", strings.Join(lines, "\n"))
	}
}

// TestRBACWithoutARule runs the controller with its ClusterRole missing one
// verb it needs: it must say so where the user looks (the Foo's status, an
// Event, its log) and keep running and retrying, not crash or fail
// silently; once the permission is granted, it converges by itself.
//
// Missing "create" shows that server-side apply of a Deployment that does
// not exist yet needs it beside "patch": the API server authorizes that
// request as a patch and then as a create.
func TestRBACWithoutARule(t *testing.T) {
	for _, tc := range []struct {
		resource, verb string
		want           string // in the Foo's Ready message and the log
	}{
		{"apps/deployments", "patch", "cannot patch resource"},
		{"apps/deployments", "create", "cannot create resource"},
		// Setting blockOwnerDeletion on the owner reference to the Foo
		// needs permission to update the Foo's finalizers, where the
		// OwnerReferencesPermissionEnforcement admission plugin is
		// enabled (it is not by default).
		{"samplecontroller.example.com/foos/finalizers", "update", "cannot set blockOwnerDeletion"},
	} {
		t.Run(tc.resource+" "+tc.verb, func(t *testing.T) {
			kubeconfig, name := kubeconfigWithout(t, tc.resource, tc.verb)

			s := newScenario(t)
			if tc.resource == "samplecontroller.example.com/foos/finalizers" && !ownerReferencesEnforced(t, kubeconfig, s.ns) {
				t.Skip("the API server does not enforce owner reference permissions " +
					"(kube-apiserver --enable-admission-plugins=OwnerReferencesPermissionEnforcement)")
			}
			metricsAddr := freeAddr(t)
			// The last flag wins: serve metrics, to see the refusals counted.
			ctrl := s.startControllerAs(kubeconfig, append(leaderElectionArgs("foo-controller-"+s.ns),
				"-metrics-bind-address="+metricsAddr)...)
			start := time.Now()
			s.createFoo(newFoo("web", "web", 1))

			s.eventually(time.Minute, "Ready=False/DeploymentApplyFailed, forbidden", func() (bool, string) {
				foo, err := s.getFoo("web")
				if err != nil {
					return false, err.Error()
				}
				c := meta.FindStatusCondition(foo.Status.Conditions, samplev1beta1.ConditionReady)
				return c != nil && c.Status == metav1.ConditionFalse && c.Reason == samplev1beta1.ReasonDeploymentApplyFailed &&
						strings.Contains(c.Message, "forbidden") && strings.Contains(c.Message, tc.want),
					fmt.Sprintf("%+v", foo.Status)
			})
			foo, _ := s.getFoo("web")
			t.Logf("reported in %v: %s", time.Since(start).Round(time.Millisecond),
				meta.FindStatusCondition(foo.Status.Conditions, samplev1beta1.ConditionReady).Message)
			s.eventually(30*time.Second, "a Warning Event", func() (bool, string) {
				got := s.fooEvents("web")
				return got[samplev1beta1.ReasonDeploymentApplyFailed] == 1, fmt.Sprintf("%v", got)
			})
			if _, err := s.getDeployment("web"); !apierrors.IsNotFound(err) {
				t.Errorf("the Deployment exists without the permission to make it: %v", err)
			}

			// Still running and retrying a few seconds later.
			time.Sleep(3 * time.Second)
			if !ctrl.running() {
				t.Fatalf("the controller exited: %v", ctrl.err)
			}
			lines := ctrl.logLines("forbidden")
			if !slices.ContainsFunc(lines, func(l string) bool { return strings.Contains(l, tc.want) && strings.Contains(l, s.ns) }) {
				t.Errorf("the log does not show the Forbidden error; lines with \"forbidden\":\n%s", strings.Join(lines, "\n"))
			}
			t.Logf("%d log lines with \"forbidden\" in %v", len(lines), time.Since(start).Round(time.Millisecond))
			// ...and a metric an alert can watch: client-go's request count by code.
			code, body := httpGet("http://" + metricsAddr + "/metrics")
			if v, _ := metricValue(body, "rest_client_requests_total", `code="403"`); code != 200 || v < 1 {
				t.Errorf("rest_client_requests_total{code=\"403\"} = %v (HTTP %d), want > 0", v, code)
			} else {
				t.Logf("rest_client_requests_total{code=\"403\"} = %v", v)
			}

			// Granted the permission, it converges with no restart (the
			// failing key is retried with backoff).
			grant := []*unstructured.Unstructured{typedToUnstructured(t,
				serviceAccountBinding("ClusterRoleBinding", name+"-full", "", "ClusterRole", "foo-controller", name))}
			applyObjects(t, grant, false)
			t.Cleanup(func() { deleteObjects(t, grant) })
			start = time.Now()
			s.waitConverged("web", 2*time.Minute)
			t.Logf("converged %v after the permission was granted", time.Since(start).Round(time.Millisecond))

			// Gone before the next controller, which watches every
			// namespace, starts.
			if err := s.foos.SamplecontrollerV1beta1().Foos(s.ns).Delete(s.ctx, "web", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			s.eventually(time.Minute, "the Foo to be gone", func() (bool, string) {
				_, err := s.getFoo("web")
				return apierrors.IsNotFound(err), fmt.Sprintf("%v", err)
			})
		})
	}
}

// ownerReferencesEnforced reports whether the API server refuses, to a user
// who may not update Foos' finalizers, a Deployment whose owner reference
// to a Foo blocks its deletion (a dry run: nothing is created).
func ownerReferencesEnforced(t *testing.T, kubeconfig, namespace string) bool {
	t.Helper()
	probe := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "owner-reference-probe", OwnerReferences: []metav1.OwnerReference{{
			APIVersion: samplev1beta1.GroupVersion.String(), Kind: "Foo", Name: "probe", UID: "00000000-0000-0000-0000-000000000000",
			Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
		}}},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "probe"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "probe"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nginx:1.27"}}},
			},
		},
	}
	_, err := clientFor(t, kubeconfig).AppsV1().Deployments(namespace).Create(t.Context(), probe,
		metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	switch {
	case err == nil:
		return false
	case apierrors.IsForbidden(err) && strings.Contains(err.Error(), "blockOwnerDeletion"):
		return true
	default:
		t.Fatalf("probing owner reference enforcement: %v", err)
		return false
	}
}

// TestDeployManifestsArePSSRestricted shows the API server accepts the
// manifests of artifacts/deploy as they are, and that the controller's pod
// template passes the restricted Pod Security Standard, which its namespace
// enforces.
func TestDeployManifestsArePSSRestricted(t *testing.T) {
	t.Parallel()
	objs := renderDeploy(t)

	nsObj := objectOf(t, objs, "Namespace", deploySystemNamespace)
	if l := nsObj.GetLabels()["pod-security.kubernetes.io/enforce"]; l != "restricted" {
		t.Errorf("namespace %s enforces Pod Security level %q, want restricted", deploySystemNamespace, l)
	}
	for _, o := range objs {
		namespaced := o.GetKind() != "Namespace" && o.GetKind() != "ClusterRole" && o.GetKind() != "ClusterRoleBinding"
		if namespaced && o.GetNamespace() != deploySystemNamespace {
			t.Errorf("%s %s is in namespace %q, want %s", o.GetKind(), o.GetName(), o.GetNamespace(), deploySystemNamespace)
		}
	}
	var dep appsv1.Deployment
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(objectOf(t, objs, "Deployment", "foo-controller").Object, &dep); err != nil {
		t.Fatal(err)
	}
	c := dep.Spec.Template.Spec.Containers[0]
	if c.Image != "example.com/foo-controller:dev" {
		t.Errorf("image %q: kustomization.yaml's images: did not apply", c.Image)
	}
	for _, arg := range []string{"-leader-elect=true", "-leader-elect-namespace=$(POD_NAMESPACE)", "-logging-format=json"} {
		if !slices.Contains(c.Args, arg) {
			t.Errorf("container args %q lack %q", c.Args, arg)
		}
	}

	// The Go runtime's soft memory limit leaves room below the container's
	// for the binary's pages, which count toward the container's limit and
	// not toward GOMEMLIMIT (docs/operations.md, "Memory"; what it does to
	// RSS is measured by the bench, not here: kwok runs no process).
	var goMemLimit int64
	for _, e := range c.Env {
		if n, ok := strings.CutSuffix(e.Value, "MiB"); e.Name == "GOMEMLIMIT" && ok {
			v, err := strconv.ParseInt(n, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			goMemLimit = v << 20
		}
	}
	if limit := c.Resources.Limits.Memory().Value(); goMemLimit <= 0 || limit-goMemLimit < 32<<20 {
		t.Errorf("GOMEMLIMIT %d bytes with a memory limit of %d: want it set, in MiB, at least 32 MiB below the limit (the binary's pages, 26 to 28 MB, and a margin)", goMemLimit, limit)
	}
	// GOGC=off: Go collects only as the heap nears GOMEMLIMIT, so the
	// container uses its limit, and must be granted it (a request below
	// would make it the first evicted under memory pressure).
	gcOff := slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "GOGC" && e.Value == "off" })
	if !gcOff {
		t.Errorf("GOGC=off not set: the default collector marks the whole cache every 2 minutes (docs/operations.md, \"Memory\")")
	}
	if gcOff && c.Resources.Requests.Memory().Cmp(*c.Resources.Limits.Memory()) < 0 {
		t.Errorf("GOGC=off with a memory request of %v below the limit %v: want them equal", c.Resources.Requests.Memory(), c.Resources.Limits.Memory())
	}

	// Shown here, not by scheduling: kwok's nodes lack the label.
	if aa := dep.Spec.Template.Spec.Affinity; aa == nil || aa.PodAntiAffinity == nil ||
		len(aa.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) != 1 ||
		aa.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm.TopologyKey != corev1.LabelHostname {
		t.Errorf("the pods must prefer different nodes: affinity %+v", aa)
	}

	// Every object, server-side dry-run applied where it goes: valid, and
	// without warnings (PodSecurity warns about a Deployment whose pods
	// the namespace would refuse).
	ensureSystemNamespace(t, objs)
	if warnings := applyObjects(t, objs, true); len(warnings) > 0 {
		t.Errorf("warnings applying artifacts/deploy:\n%s", strings.Join(warnings, "\n"))
	}

	// A Pod of the template is admitted in a namespace enforcing
	// restricted; the same Pod without its security contexts is not (the
	// check is not vacuous).
	ns := "pss-restricted-" + utilrand.String(5)
	if _, err := env.kube.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: ns,
		Labels: map[string]string{
			"pod-security.kubernetes.io/enforce":         "restricted",
			"pod-security.kubernetes.io/enforce-version": "latest",
		},
	}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.kube.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	newPod := func(spec corev1.PodSpec) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "foo-controller", Namespace: ns, Labels: dep.Spec.Template.Labels},
			Spec:       spec,
		}
	}
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	if _, err := env.kube.CoreV1().Pods(ns).Create(t.Context(), newPod(dep.Spec.Template.Spec), dryRun); err != nil {
		t.Fatalf("a Pod of the Deployment's template is refused: %v", err)
	}
	weakened := *dep.Spec.Template.Spec.DeepCopy()
	weakened.SecurityContext = nil
	weakened.Containers[0].SecurityContext = nil
	_, err := env.kube.CoreV1().Pods(ns).Create(t.Context(), newPod(weakened), dryRun)
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "PodSecurity") {
		t.Errorf("a Pod without security contexts: want refused by PodSecurity, got %v", err)
	}

	// Created for real there, the Deployment's pods are admitted: the
	// ReplicaSet controller's Pods pass enforcement too. (They are not
	// shown to spread over nodes: the anti-affinity's topology key,
	// kubernetes.io/hostname, is a label the kubelet sets and kwok's nodes
	// here do not have.)
	deployed := dep.DeepCopy()
	deployed.Namespace = ns
	if _, err := env.kube.AppsV1().Deployments(ns).Create(t.Context(), deployed, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	s := &scenario{t: t, ctx: t.Context()}
	s.eventually(time.Minute, "2 Running pods", func() (bool, string) {
		pods, err := env.kube.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		running := 0
		var state []string
		for _, p := range pods.Items {
			state = append(state, fmt.Sprintf("%s %s", p.Name, p.Status.Phase))
			if p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		d, err := env.kube.AppsV1().Deployments(ns).Get(t.Context(), deployed.Name, metav1.GetOptions{})
		if err == nil {
			for _, c := range d.Status.Conditions {
				if c.Type == appsv1.DeploymentReplicaFailure {
					state = append(state, c.Message)
				}
			}
		}
		return running == 2, strings.Join(state, "; ")
	})
}

// renderDeploy renders artifacts/deploy with kubectl kustomize, as
// `kubectl apply -k` does.
func renderDeploy(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), filepath.Join(env.testbin, "kubectl"), "kustomize",
		filepath.Join(repoRoot, "artifacts", "deploy"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kubectl kustomize artifacts/deploy: %v: %s", err, stderr.String())
	}
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	for {
		u := &unstructured.Unstructured{}
		err := dec.Decode(&u.Object)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("decoding kubectl kustomize output: %v", err)
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
	return objs
}

// objectOf returns a copy of the object of that kind and name.
func objectOf(t *testing.T, objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o.DeepCopy()
		}
	}
	t.Fatalf("artifacts/deploy has no %s %s", kind, name)
	return nil
}

func ofKinds(objs []*unstructured.Unstructured, kinds ...string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if slices.Contains(kinds, o.GetKind()) {
			out = append(out, o)
		}
	}
	return out
}

// ensureSystemNamespace creates foo-system from artifacts/deploy (with its
// Pod Security labels) if it is not there. Tests running in parallel may do
// this at the same time: applying the same object twice is harmless.
func ensureSystemNamespace(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	applyObjects(t, []*unstructured.Unstructured{objectOf(t, objs, "Namespace", deploySystemNamespace)}, false)
}

// installDeployRBAC applies the ServiceAccount and the RBAC objects of
// artifacts/deploy, and nothing else from it. They are left in place for
// other tests (applying them again changes nothing).
func installDeployRBAC(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	ensureSystemNamespace(t, objs)
	applyObjects(t, ofKinds(objs, deployRBACKinds...), false)
}

// checkRBACIsTight checks the rendered RBAC objects: the ClusterRole is
// wantClusterRules, without wildcards or Secrets, its CRD rule limited to
// the Foo CRD; leases and the webhook's Secret are granted only by Roles in
// the controller's namespace, the Secret by name but for create.
func checkRBACIsTight(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	got := map[string][]string{}
	for _, o := range ofKinds(objs, "ClusterRole", "Role") {
		rules, _, _ := unstructured.NestedSlice(o.Object, "rules")
		for _, r := range rules {
			rule := r.(map[string]any)
			verbs, _, _ := unstructured.NestedStringSlice(rule, "verbs")
			names, _, _ := unstructured.NestedStringSlice(rule, "resourceNames")
			keys := ruleKeys(rule)
			for _, k := range keys {
				if strings.Contains(k, "*") || slices.Contains(verbs, "*") {
					t.Errorf("%s %s: wildcard in %s %v", o.GetKind(), o.GetName(), k, verbs)
				}
				switch {
				case o.GetKind() == "ClusterRole" && k == "secrets":
					t.Errorf("ClusterRole %s grants access to Secrets", o.GetName())
				case o.GetKind() == "ClusterRole":
					if k == "apiextensions.k8s.io/customresourcedefinitions" && !slices.Equal(names, []string{deployWebhookCRD}) {
						t.Errorf("ClusterRole %s grants %s %v on %v, want only %s", o.GetName(), k, verbs, names, deployWebhookCRD)
					}
					got[k] = append(got[k], verbs...)
				case o.GetNamespace() != deploySystemNamespace:
					t.Errorf("Role %s/%s is outside %s", o.GetNamespace(), o.GetName(), deploySystemNamespace)
				case k == "coordination.k8s.io/leases":
				case k == "secrets" && slices.Equal(verbs, []string{"create"}):
				case k == "secrets":
					// What the keeper does to its Secret: watch it, renew it.
					if !slices.Equal(names, []string{deployWebhookSecret}) || !slices.Equal(slices.Sorted(slices.Values(verbs)), []string{"list", "update", "watch"}) {
						t.Errorf("Role %s/%s grants %s %v on %v, want list, watch, update on %s only", o.GetNamespace(), o.GetName(), k, verbs, names, deployWebhookSecret)
					}
				default:
					t.Errorf("Role %s/%s grants %s %v; Roles are only for the leader-election Lease and the webhook's Secret", o.GetNamespace(), o.GetName(), k, verbs)
				}
			}
		}
	}
	for k, verbs := range got {
		slices.Sort(verbs)
		want := slices.Sorted(slices.Values(wantClusterRules[k]))
		if !slices.Equal(verbs, want) {
			t.Errorf("ClusterRole grants %s %v, want %v", k, verbs, want)
		}
	}
	for k := range wantClusterRules {
		if got[k] == nil {
			t.Errorf("ClusterRole does not grant anything on %s", k)
		}
	}
}

// ruleKeys returns "group/resource" for each group and resource of a
// PolicyRule ("resource" alone for the core group).
func ruleKeys(rule map[string]any) []string {
	groups, _, _ := unstructured.NestedStringSlice(rule, "apiGroups")
	resources, _, _ := unstructured.NestedStringSlice(rule, "resources")
	var keys []string
	for _, g := range groups {
		for _, r := range resources {
			if g == "" {
				keys = append(keys, r)
			} else {
				keys = append(keys, g+"/"+r)
			}
		}
	}
	return keys
}

// serviceAccountBinding binds a role to a ServiceAccount of foo-system.
func serviceAccountBinding(kind, name, namespace, roleKind, roleName, serviceAccount string) runtime.Object {
	meta := metav1.ObjectMeta{Name: name, Namespace: namespace}
	roleRef := rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: roleKind, Name: roleName}
	subjects := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: serviceAccount, Namespace: deploySystemNamespace}}
	typeMeta := metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: kind}
	if kind == "RoleBinding" {
		return &rbacv1.RoleBinding{TypeMeta: typeMeta, ObjectMeta: meta, RoleRef: roleRef, Subjects: subjects}
	}
	return &rbacv1.ClusterRoleBinding{TypeMeta: typeMeta, ObjectMeta: meta, RoleRef: roleRef, Subjects: subjects}
}

func typedToUnstructured(t *testing.T, obj runtime.Object) *unstructured.Unstructured {
	t.Helper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: m}
	// A typed object converts with a null creationTimestamp, which apply
	// would try to own.
	unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
	return u
}

// warningCollector keeps the warnings the API server returns.
type warningCollector struct {
	mu       sync.Mutex
	warnings []string
}

func (w *warningCollector) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.warnings = append(w.warnings, text)
}

// applyObjects server-side applies objs as the admin (only validated and
// admitted, not stored, with dryRun) and returns the API server's warnings.
func applyObjects(t *testing.T, objs []*unstructured.Unstructured, dryRun bool) []string {
	t.Helper()
	var collector warningCollector
	cfg := rest.CopyConfig(env.admin)
	cfg.WarningHandler = &collector
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mapper := deployRESTMapper(t)
	opts := metav1.PatchOptions{FieldManager: deployFieldManager, Force: ptr.To(true)}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	for _, o := range objs {
		ri := resourceFor(t, dyn, mapper, o)
		data, err := o.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		// Two tests applying the same new object at once may collide on
		// its creation; the second attempt finds it and changes nothing.
		for attempt := 0; ; attempt++ {
			_, err = ri.Patch(t.Context(), o.GetName(), types.ApplyPatchType, data, opts)
			if attempt < 5 && (apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err)) {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			break
		}
		if err != nil {
			t.Fatalf("applying %s %s (dry run: %v): %v", o.GetKind(), o.GetName(), dryRun, err)
		}
	}
	collector.mu.Lock()
	defer collector.mu.Unlock()
	return collector.warnings
}

// deleteObjects deletes objs as the admin, for t.Cleanup.
func deleteObjects(t *testing.T, objs []*unstructured.Unstructured) {
	dyn, err := dynamic.NewForConfig(env.admin)
	if err != nil {
		t.Error(err)
		return
	}
	mapper := deployRESTMapper(t)
	for _, o := range objs {
		err := resourceFor(t, dyn, mapper, o).Delete(context.Background(), o.GetName(), metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
}

func deployRESTMapper(t *testing.T) meta.RESTMapper {
	t.Helper()
	dc, err := discovery.NewDiscoveryClientForConfig(env.admin)
	if err != nil {
		t.Fatal(err)
	}
	return restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
}

func resourceFor(t *testing.T, dyn dynamic.Interface, mapper meta.RESTMapper, o *unstructured.Unstructured) dynamic.ResourceInterface {
	t.Helper()
	gvk := o.GroupVersionKind()
	m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		t.Fatalf("%s: %v", gvk, err)
	}
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		return dyn.Resource(m.Resource).Namespace(o.GetNamespace())
	}
	return dyn.Resource(m.Resource)
}

// serviceAccountKubeconfig writes a kubeconfig that authenticates as the
// ServiceAccount with a bound token from the TokenRequest API, as a pod's
// projected token would.
func serviceAccountKubeconfig(t *testing.T, namespace, name string) string {
	t.Helper()
	tr, err := env.kube.CoreV1().ServiceAccounts(namespace).CreateToken(t.Context(), name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("requesting a token for ServiceAccount %s/%s: %v", namespace, name, err)
	}
	ca := env.env.ControlPlane.GetAPIServer().CA
	if len(ca) == 0 {
		ca = env.admin.CAData
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["envtest"] = &clientcmdapi.Cluster{Server: env.admin.Host, CertificateAuthorityData: ca}
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	cfg.Contexts[name] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: name}
	cfg.CurrentContext = name
	path := filepath.Join(env.dir, fmt.Sprintf("sa-%s-%s-%s.kubeconfig", namespace, name, utilrand.String(5)))
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

func clientFor(t *testing.T, kubeconfig string) kubernetes.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(restConfigFor(t, kubeconfig))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// fooClientFor is clientFor for the Foo API.
func fooClientFor(t *testing.T, kubeconfig string) clientset.Interface {
	t.Helper()
	c, err := clientset.NewForConfig(restConfigFor(t, kubeconfig))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func restConfigFor(t *testing.T, kubeconfig string) *rest.Config {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// canI asks the API server whether the client's user may do something.
func canI(t *testing.T, c kubernetes.Interface, attrs authorizationv1.ResourceAttributes) bool {
	t.Helper()
	r, err := c.AuthorizationV1().SelfSubjectAccessReviews().Create(t.Context(), &authorizationv1.SelfSubjectAccessReview{
		Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &attrs},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return r.Status.Allowed
}

// leaderElectionArgs are the flags of the deployed controller
// (artifacts/deploy/deployment.yaml) for a run in the tests: leader election
// in foo-system on a Lease of the test's own, and no listeners (the ports
// would collide between tests).
func leaderElectionArgs(lease string) []string {
	return []string{
		"-leader-elect=true",
		"-leader-elect-namespace=" + deploySystemNamespace,
		"-leader-elect-lease-name=" + lease,
		"-metrics-bind-address=0",
		"-health-probe-bind-address=0",
	}
}

// startControllerAs runs the controller binary with the given kubeconfig,
// on all namespaces (no -namespace), as it runs when deployed.
func (s *scenario) startControllerAs(kubeconfig string, extraArgs ...string) *process {
	s.t.Helper()
	return s.launch(controllerBin, nil, append([]string{"-kubeconfig=" + kubeconfig, "-v=4", plainMetrics}, extraArgs...)...)
}

// TestWatchRefusedIsCounted: a controller allowed to list Foos but not to
// watch them starts (the start-up check lists) and fills its cache from a
// list (it is even ready), but never hears of a change; what tells an
// operator is foo_controller_watch_errors_total{resource="foos"}, which
// counts the refused watches (the alert in docs/operations.md).
func TestWatchRefusedIsCounted(t *testing.T) {
	kubeconfig, _ := kubeconfigWithout(t, "samplecontroller.example.com/foos", "watch")
	s := newScenario(t)
	metricsAddr := freeAddr(t)
	ctrl := s.startControllerAs(kubeconfig, append(leaderElectionArgs("foo-controller-"+s.ns),
		"-metrics-bind-address="+metricsAddr)...)
	s.eventually(time.Minute, "watch errors counted for foos", func() (bool, string) {
		code, body := httpGet("http://" + metricsAddr + "/metrics")
		v, _ := metricValue(body, "foo_controller_watch_errors_total", `resource="foos"`)
		return code == 200 && v >= 2, fmt.Sprintf("HTTP %d, foo_controller_watch_errors_total{resource=\"foos\"} = %v", code, v)
	})
	if !ctrl.running() {
		t.Fatalf("the controller exited: %v", ctrl.err)
	}
}

// kubeconfigWithout is the kubeconfig of a ServiceAccount of its own, bound
// to the shipped ClusterRole less one verb on one resource (and to the
// leader-election Role), so that a test sees what an operator sees when a
// rule is missing; and the ServiceAccount's name. The full ClusterRole,
// which TestRBACIsExactlyEnough uses, is not disturbed.
func kubeconfigWithout(t *testing.T, resource, verb string) (kubeconfig, serviceAccount string) {
	t.Helper()
	objs := renderDeploy(t)
	installDeployRBAC(t, objs)

	// Its own ServiceAccount and ClusterRole, so the full one that
	// TestRBACIsExactlyEnough uses is not disturbed.
	name := fmt.Sprintf("foo-controller-without-%s-%s", verb, utilrand.String(5))
	role := objectOf(t, objs, "ClusterRole", "foo-controller")
	role.SetName(name)
	removed := 0
	rules, _, _ := unstructured.NestedSlice(role.Object, "rules")
	var kept []any
	for _, r := range rules {
		rule := r.(map[string]any)
		if slices.Contains(ruleKeys(rule), resource) {
			verbs, _, _ := unstructured.NestedStringSlice(rule, "verbs")
			if i := slices.Index(verbs, verb); i >= 0 {
				verbs = slices.Delete(verbs, i, i+1)
				removed++
			}
			if len(verbs) == 0 {
				continue // a rule must grant some verb
			}
			_ = unstructured.SetNestedStringSlice(rule, verbs, "verbs")
		}
		kept = append(kept, rule)
	}
	if removed != 1 {
		t.Fatalf("the ClusterRole grants %s on %s in %d rules, want 1", verb, resource, removed)
	}
	_ = unstructured.SetNestedSlice(role.Object, kept, "rules")
	limited := []*unstructured.Unstructured{
		typedToUnstructured(t, &corev1.ServiceAccount{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: deploySystemNamespace},
		}),
		role,
		typedToUnstructured(t, serviceAccountBinding("ClusterRoleBinding", name, "", "ClusterRole", name, name)),
		typedToUnstructured(t, serviceAccountBinding("RoleBinding", name, deploySystemNamespace, "Role", deployLeaderRole, name)),
	}
	applyObjects(t, limited, false)
	t.Cleanup(func() { deleteObjects(t, limited) })
	return serviceAccountKubeconfig(t, deploySystemNamespace, name), name
}

// TestWebhookNotReadyWithoutItsSecret runs the controller as deployed, its
// conversion webhook on, as a ServiceAccount bound to the ClusterRole and
// the leader election Role but not to the webhook's Role: its keeper is
// refused the Secret, so it has no certificate and answers no review. It
// must not count as ready (a rollout would go on replacing the replicas
// that do answer): /readyz fails naming the webhook, the log the refusal,
// while /healthz passes; granted the Role, it becomes ready with no
// restart.
func TestWebhookNotReadyWithoutItsSecret(t *testing.T) {
	objs := renderDeploy(t)
	installDeployRBAC(t, objs)
	name := "foo-controller-without-webhook-" + utilrand.String(5)
	limited := []*unstructured.Unstructured{
		typedToUnstructured(t, &corev1.ServiceAccount{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: deploySystemNamespace},
		}),
		typedToUnstructured(t, serviceAccountBinding("ClusterRoleBinding", name, "", "ClusterRole", "foo-controller", name)),
		typedToUnstructured(t, serviceAccountBinding("RoleBinding", name, deploySystemNamespace, "Role", deployLeaderRole, name)),
	}
	applyObjects(t, limited, false)
	t.Cleanup(func() { deleteObjects(t, limited) })
	kubeconfig := serviceAccountKubeconfig(t, deploySystemNamespace, name)

	s := newScenario(t)
	probe := freeAddr(t)
	ctrl := s.startControllerAs(kubeconfig, append(leaderElectionArgs("foo-controller-"+s.ns),
		"-webhook-bind-address=127.0.0.1:0", "-health-probe-bind-address="+probe)...)
	s.eventually(time.Minute, "/readyz failing on the webhook alone", func() (bool, string) {
		code, body := httpGet("http://" + probe + "/readyz")
		return code == http.StatusInternalServerError && strings.Contains(body, "conversion-webhook: no serving certificate yet") &&
			!strings.Contains(body, "informers"), fmt.Sprintf("%d %s", code, body)
	})
	if code, body := httpGet("http://" + probe + "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz: %d %s; a replica waiting for its certificate is alive", code, body)
	}
	s.eventually(30*time.Second, "the refusal in the log", func() (bool, string) {
		lines := ctrl.logLines("forbidden")
		return slices.ContainsFunc(lines, func(l string) bool { return strings.Contains(l, "secrets") }), strings.Join(lines, "\n")
	})

	grant := []*unstructured.Unstructured{typedToUnstructured(t,
		serviceAccountBinding("RoleBinding", name+"-webhook", deploySystemNamespace, "Role", "foo-controller-webhook", name))}
	applyObjects(t, grant, false)
	t.Cleanup(func() { deleteObjects(t, grant) })
	start := time.Now()
	s.eventually(2*time.Minute, "/readyz passing once granted", func() (bool, string) {
		code, body := httpGet("http://" + probe + "/readyz")
		return code == http.StatusOK, fmt.Sprintf("%d %s", code, body)
	})
	t.Logf("ready %v after the Role was granted", time.Since(start).Round(time.Millisecond))
	if !ctrl.running() {
		t.Fatalf("the controller exited: %v", ctrl.err)
	}
}

// TestDeployServesTheCRDsWebhook: the names the shipped CRD's conversion
// webhook gives (Service, namespace, port, path) are those artifacts/deploy
// serves it at: a Service of that name and namespace whose port sends to the
// container port the controller's -webhook-bind-address listens on, selecting
// the controller's pods, not yet ready ones too. Written in four files,
// checked together here.
func TestDeployServesTheCRDsWebhook(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot, "artifacts", "examples", "crd.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	crd := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(b, &crd.Object); err != nil {
		t.Fatal(err)
	}
	svcRef, _, _ := unstructured.NestedMap(crd.Object, "spec", "conversion", "webhook", "clientConfig", "service")
	name, _ := svcRef["name"].(string)
	namespace, _ := svcRef["namespace"].(string)
	port := asInt(svcRef["port"])
	if path, _ := svcRef["path"].(string); path != webhook.Path {
		t.Errorf("the CRD's webhook path %q, the controller serves %q", path, webhook.Path)
	}

	objs := renderDeploy(t)
	svc := objectOf(t, objs, "Service", name)
	if svc.GetNamespace() != namespace {
		t.Fatalf("Service %s is in %q, the CRD names %q", name, svc.GetNamespace(), namespace)
	}
	// A replica's first list of Foos stored in v1alpha1 goes through this
	// webhook, and it is ready only after that list: a Service of ready
	// replicas alone would never let the first one start
	// (TestUpgradeToV1beta1Storage points the CRD at the controller it is
	// starting, not yet ready, as this Service does).
	if pnra, _, _ := unstructured.NestedBool(svc.Object, "spec", "publishNotReadyAddresses"); !pnra {
		t.Errorf("Service %s routes to ready replicas only: an upgrade from a release without the webhook could never finish", name)
	}
	ports, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports")
	var targetPort string
	for _, p := range ports {
		if p := p.(map[string]any); asInt(p["port"]) == port {
			targetPort, _ = p["targetPort"].(string)
		}
	}
	dep := objectOf(t, objs, "Deployment", "foo-controller")
	selector, _, _ := unstructured.NestedStringMap(svc.Object, "spec", "selector")
	labels, _, _ := unstructured.NestedStringMap(dep.Object, "spec", "template", "metadata", "labels")
	for k, v := range selector {
		if labels[k] != v {
			t.Errorf("Service %s selects %s=%s, the controller's pods are labelled %v", name, k, v, labels)
		}
	}
	containers, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "containers")
	c := containers[0].(map[string]any)
	var containerPort int64
	cports, _, _ := unstructured.NestedSlice(c, "ports")
	for _, p := range cports {
		if p := p.(map[string]any); p["name"] == targetPort {
			containerPort = asInt(p["containerPort"])
		}
	}
	args, _, _ := unstructured.NestedStringSlice(c, "args")
	if want := fmt.Sprintf("-webhook-bind-address=:%d", containerPort); containerPort == 0 || !slices.Contains(args, want) {
		t.Errorf("Service %s port %d -> targetPort %q -> container port %d; the controller's args %v, want %s", name, port, targetPort, containerPort, args, want)
	}
}

// asInt is a JSON number as decoded: float64 by sigs.k8s.io/yaml, int64 by
// the unstructured decoder.
func asInt(v any) int64 {
	switch n := v.(type) {
	case int64:
		return n
	case float64:
		return int64(n)
	}
	return 0
}
