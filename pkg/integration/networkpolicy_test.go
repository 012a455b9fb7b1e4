//go:build integration

package integration

import (
	"bytes"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// TestNetworkPolicyComponent: artifacts/deploy with the networkpolicy
// component, as the README says to install it, renders a NetworkPolicy
// that the API server accepts, selects the controller's pods, and admits
// the webhook's container port from the API server's places only (an
// ipBlock and the konnectivity agents of kube-system) and the metrics'
// from the monitoring namespace only, naming ports the container declares
// (a policy matches the pod's port, after a Service's translation), and
// no other port: the probes' come from the node, which a policy always
// admits. (This plane has no network plugin that enforces policies: what
// the policy admits is read here, not tried.)
func TestNetworkPolicyComponent(t *testing.T) {
	dir := t.TempDir()
	deploy, err := filepath.Rel(dir, filepath.Join(repoRoot, "artifacts", "deploy"))
	if err != nil {
		t.Fatal(err)
	}
	// As the README's example, its patch included.
	kustomization := "resources:\n- " + deploy + "\ncomponents:\n- " + filepath.Join(deploy, "networkpolicy") + "\n" + `patches:
- target: {kind: NetworkPolicy, name: foo-controller}
  patch: |-
    - op: replace
      path: /spec/ingress/0/from/0/ipBlock/cidr
      value: 10.0.0.0/24
`
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(kustomization), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), filepath.Join(env.testbin, "kubectl"), "kustomize", dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kubectl kustomize: %v: %s", err, stderr.String())
	}
	var policy *networkingv1.NetworkPolicy
	var deployment *appsv1.Deployment
	for _, doc := range bytes.Split(out, []byte("\n---\n")) {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			t.Fatal(err)
		}
		var into runtime.Object
		switch meta.Kind {
		case "NetworkPolicy":
			policy = &networkingv1.NetworkPolicy{}
			into = policy
		case "Deployment":
			deployment = &appsv1.Deployment{}
			into = deployment
		default:
			continue
		}
		if err := yaml.UnmarshalStrict(doc, into); err != nil {
			t.Fatal(err)
		}
	}
	if policy == nil || deployment == nil {
		t.Fatalf("rendered no NetworkPolicy or no Deployment:\n%s", out)
	}
	// The API server takes it (validation, server-side dry run).
	created, err := env.kube.NetworkingV1().NetworkPolicies("default").Create(t.Context(), &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: policy.Name}, Spec: policy.Spec}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		t.Fatalf("the API server refuses the NetworkPolicy: %v", err)
	}
	if policy.Namespace != deployment.Namespace || !selects(created.Spec.PodSelector, deployment.Spec.Template.Labels) {
		t.Errorf("the policy (%s, %v) does not select the controller's pods (%s, %v)", policy.Namespace, policy.Spec.PodSelector, deployment.Namespace, deployment.Spec.Template.Labels)
	}
	declared := map[string]bool{}
	for _, c := range deployment.Spec.Template.Spec.Containers {
		for _, p := range c.Ports {
			declared[p.Name] = true
		}
	}
	admitted := map[string][]networkingv1.NetworkPolicyPeer{}
	for _, rule := range policy.Spec.Ingress {
		if len(rule.From) == 0 || len(rule.Ports) == 0 {
			t.Errorf("a rule that admits any source or any port: %+v", rule)
		}
		for _, p := range rule.Ports {
			if p.Port == nil || p.Port.Type != intstr.String || !declared[p.Port.StrVal] {
				t.Errorf("a rule on port %v, not one the container names (%v)", p.Port, declared)
				continue
			}
			admitted[p.Port.StrVal] = append(admitted[p.Port.StrVal], rule.From...)
		}
	}
	if len(admitted) != 2 || admitted["webhook"] == nil || admitted["metrics"] == nil {
		t.Errorf("ports admitted: %v, want webhook and metrics", slices.Sorted(maps.Keys(admitted)))
	}
	for _, peer := range admitted["webhook"] {
		ns := peer.NamespaceSelector
		switch {
		case peer.IPBlock != nil && peer.IPBlock.CIDR == "10.0.0.0/24": // the patch's
		case ns != nil && ns.MatchLabels["kubernetes.io/metadata.name"] == "kube-system" && peer.PodSelector != nil &&
			(peer.PodSelector.MatchLabels["k8s-app"] == "konnectivity-agent" || peer.PodSelector.MatchLabels["app"] == "konnectivity-agent"):
		default:
			t.Errorf("the webhook admits %+v: neither an address block nor the konnectivity agents", peer)
		}
	}
	for _, peer := range admitted["metrics"] {
		if ns := peer.NamespaceSelector; ns == nil || ns.MatchLabels["kubernetes.io/metadata.name"] != "monitoring" || peer.PodSelector != nil || peer.IPBlock != nil {
			t.Errorf("/metrics admits %+v, want the monitoring namespace", peer)
		}
	}
}

func selects(sel metav1.LabelSelector, set map[string]string) bool {
	s, err := metav1.LabelSelectorAsSelector(&sel)
	return err == nil && !s.Empty() && s.Matches(labels.Set(set))
}
