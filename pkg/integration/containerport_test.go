//go:build integration

package integration

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	samplev1beta1 "example.com/foo-controller/pkg/apis/samplecontroller/v1beta1"
	"example.com/foo-controller/pkg/plan"
)

// TestContainerPort walks spec.containerPort through the life a Service
// needs from it, on the real API server, where server-side apply keys
// container ports by containerPort and protocol (not by name): set on the
// Foo, changed on the Foo, changed, re-keyed, removed and added to by
// another writer on the Deployment, unset on the Foo. After each step the
// Deployment's container has exactly the ports it should, and the
// controller reached it without a retry loop: no more than one refused
// request per step.
func TestContainerPort(t *testing.T) {
	t.Parallel()
	s := newScenario(t)
	s.startController()
	foo := newFoo("web", "web", 1)
	foo.Spec.Deployment.ContainerPort = ptr.To[int32](8080)
	s.createFoo(foo)

	http := func(n int32) corev1.ContainerPort {
		return corev1.ContainerPort{Name: plan.PortName, ContainerPort: n, Protocol: corev1.ProtocolTCP}
	}
	metrics := corev1.ContainerPort{Name: "metrics", ContainerPort: 9100, Protocol: corev1.ProtocolTCP}
	// edit changes the Deployment as `kubectl edit` does.
	edit := func(change func(*appsv1.Deployment)) { s.editDeployment("web", change) }
	ports := func(d *appsv1.Deployment) *[]corev1.ContainerPort { return &d.Spec.Template.Spec.Containers[0].Ports }

	steps := []struct {
		name   string
		change func()
		want   []corev1.ContainerPort
	}{
		{"set on the Foo", func() {}, []corev1.ContainerPort{http(8080)}},
		{"changed on the Foo", func() {
			s.updateFoo("web", func(f *samplev1beta1.Foo) { f.Spec.Deployment.ContainerPort = ptr.To[int32](9090) })
		}, []corev1.ContainerPort{http(9090)}},
		// The trap: the entry keyed 9090 is gone, one keyed 7070 owned by
		// kubectl-edit holds the name "http"; an apply alone is refused
		// (duplicate name) forever.
		{"number changed by another writer", func() {
			edit(func(d *appsv1.Deployment) { (*ports(d))[0].ContainerPort = 7070 })
		}, []corev1.ContainerPort{http(9090)}},
		{"protocol changed by another writer", func() {
			edit(func(d *appsv1.Deployment) { (*ports(d))[0].Protocol = corev1.ProtocolUDP })
		}, []corev1.ContainerPort{http(9090)}},
		{"renamed by another writer", func() {
			edit(func(d *appsv1.Deployment) { (*ports(d))[0].Name = "web" })
		}, []corev1.ContainerPort{http(9090)}},
		{"removed by another writer", func() {
			edit(func(d *appsv1.Deployment) { *ports(d) = nil })
		}, []corev1.ContainerPort{http(9090)}},
		// A port of another name is not ours: it stays, through the
		// Foo's changes too.
		{"another port added by another writer", func() {
			edit(func(d *appsv1.Deployment) { *ports(d) = append(*ports(d), metrics) })
		}, []corev1.ContainerPort{http(9090), metrics}},
		{"unset on the Foo", func() {
			s.updateFoo("web", func(f *samplev1beta1.Foo) { f.Spec.Deployment.ContainerPort = nil })
		}, []corev1.ContainerPort{metrics}},
		// With the field unset, "http" in our container is still ours to
		// keep absent; an apply cannot remove what it does not own.
		{"http added by another writer while unset", func() {
			edit(func(d *appsv1.Deployment) { *ports(d) = append(*ports(d), http(8081)) })
		}, []corev1.ContainerPort{metrics}},
	}
	for _, step := range steps {
		start := time.Now()
		step.change()
		s.eventually(time.Minute, step.name+": the container's ports", func() (bool, string) {
			dep, err := s.getDeployment("web")
			if err != nil {
				return false, err.Error()
			}
			got := *ports(dep)
			return slices.Equal(got, step.want), fmt.Sprintf("ports %+v, want %+v", got, step.want)
		})
		s.waitConverged("web", time.Minute)
		took := time.Since(start)
		// Settled: a further second brings no more attempts.
		time.Sleep(time.Second)
		var refused []auditEvent
		for _, e := range s.controllerRequests(start, time.Now()) {
			if e.ResponseStatus != nil && e.ResponseStatus.Code >= 400 && e.Verb != "watch" {
				refused = append(refused, e)
			}
		}
		if len(refused) > 1 {
			t.Errorf("%s: %d refused requests, want at most 1:%s", step.name, len(refused), summarize(refused))
		}
		t.Logf("%s: put right in %v, %d refused request(s)", step.name, took.Round(time.Millisecond), len(refused))
	}
	if ev := s.fooEvents("web"); ev["Contested"] != 0 {
		t.Errorf("events %v: one-off edits are not a fight", ev)
	}
}

// TestContainerPortCorrectionRefused: an admission policy refuses the
// controller the JSON patch that removes an "http" port someone else
// added. The operator sees it on the Foo (Ready=False,
// DeploymentApplyFailed, quoting the policy; one Warning Event), the
// controller retries with backoff rather than once a second, and once the
// policy is lifted the port goes. It also shows, on the real API server,
// the two 422 answers plan.FailedTest tells apart: a JSON patch whose
// "test" fails (our copy was stale: retried, not reported) and a refusal.
func TestContainerPortCorrectionRefused(t *testing.T) {
	t.Parallel()
	s := newScenario(t)
	s.startController()
	s.createFoo(newFoo("web", "web", 1))
	s.waitConverged("web", time.Minute)

	// A failed "test", as the API server answers it.
	_, err := s.kube.AppsV1().Deployments(s.ns).Patch(s.ctx, "web", types.JSONPatchType,
		[]byte(`[{"op":"test","path":"/spec/template/spec/containers/0/name","value":"not-app"}]`), metav1.PatchOptions{})
	if !apierrors.IsInvalid(err) || !plan.FailedTest(err) {
		t.Fatalf("a failed test: got %#v, want 422 Invalid that plan.FailedTest recognises", err)
	}

	// A foreign Deployment with an "http" port: the probe for the policy.
	probe := probeDeployment(corev1.ContainerPort{Name: plan.PortName, ContainerPort: 80})
	if _, err := s.kube.AppsV1().Deployments(s.ns).Create(s.ctx, probe, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ctrlKube := clientFor(t, s.cl.ctrlKC)
	removeHTTP := []byte(`[{"op":"remove","path":"/spec/template/spec/containers/0/ports/0"}]`)
	var refusal error
	denied := func() (bool, string) {
		_, err := ctrlKube.AppsV1().Deployments(s.ns).Patch(s.ctx, "probe", types.JSONPatchType, removeHTTP,
			metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		refusal = err
		return apierrors.IsInvalid(err), fmt.Sprintf("dry-run patch: %v", err)
	}
	hasHTTP := "c, has(c.ports) && c.ports.exists(p, p.name == 'http')"
	lift := s.denyToController("keephttp-", admissionregistrationv1.RuleWithOperations{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
		Rule: admissionregistrationv1.Rule{
			APIGroups: []string{"apps"}, APIVersions: []string{"*"}, Resources: []string{"deployments"},
		},
	}, admissionregistrationv1.Validation{
		Expression: fmt.Sprintf("!oldObject.spec.template.spec.containers.exists(%s) || object.spec.template.spec.containers.exists(%s)", hasHTTP, hasHTTP),
		Message:    "refused by the test: http ports stay",
	}, denied)
	if plan.FailedTest(refusal) {
		t.Fatalf("plan.FailedTest takes a refusal for a failed test: %#v", refusal)
	}

	// Someone adds an "http" port the Foo does not declare.
	start := time.Now()
	s.editDeployment("web", func(d *appsv1.Deployment) {
		d.Spec.Template.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: plan.PortName, ContainerPort: 8081, Protocol: corev1.ProtocolTCP}}
	})
	s.waitNotReady("web", samplev1beta1.ReasonDeploymentApplyFailed, "http ports stay", time.Minute)
	reported := time.Now()
	t.Logf("reported on the Foo in %v", reported.Sub(start).Round(time.Millisecond))
	// Backoff, not a retry a second: the refused attempts come ever
	// further apart (5 ms doubling), so 10 s hold about a dozen, the last
	// seconds apart.
	time.Sleep(10 * time.Second)
	var refused []time.Time
	for _, e := range s.controllerRequests(start, time.Now()) {
		if e.Verb == "patch" && e.resource() == "deployments" && e.ResponseStatus != nil && e.ResponseStatus.Code == 422 {
			refused = append(refused, e.RequestReceivedTimestamp.Time)
		}
	}
	if n := len(refused); n < 3 || n > 16 || refused[n-1].Sub(refused[n-2]) < 1500*time.Millisecond {
		t.Errorf("refused corrections at %v: want a few, ever further apart", refused)
	} else {
		t.Logf("%d refused corrections in %v, the last two %v apart", n, time.Since(start).Round(time.Second),
			refused[n-1].Sub(refused[n-2]).Round(time.Millisecond))
	}
	if ev := s.fooEvents("web"); ev[samplev1beta1.ReasonDeploymentApplyFailed] != 1 {
		t.Errorf("events %v: want one DeploymentApplyFailed Warning", ev)
	}

	lift()
	s.waitConverged("web", 2*time.Minute)
	dep, err := s.getDeployment("web")
	if err != nil {
		t.Fatal(err)
	}
	if p := dep.Spec.Template.Spec.Containers[0].Ports; len(p) != 0 {
		t.Errorf("ports after the policy was lifted: %+v, want none", p)
	}
}

// TestMutatingPolicyRewritesOurPort: a MutatingAdmissionPolicy moves every
// container port below 1024 up by 8000 (a platform rule: no privileged
// ports). The Foo asks for 80; the API server keeps 8080. That is not a
// stray to remove: the controller must not fight the API server (remove
// the port, re-apply, be rewritten, ...): once settled it sends nothing,
// and the Deployment's generation stands still.
func TestMutatingPolicyRewritesOurPort(t *testing.T) {
	t.Parallel()
	s := newScenario(t)
	first := "object.spec.template.spec.containers[0]"
	lowPort := fmt.Sprintf("object.spec.template.spec.containers.size() > 0 && has(%[1]s.ports) && %[1]s.ports.size() > 0 && %[1]s.ports[0].containerPort < 1024", first)
	name := "unprivileged-" + s.ns
	policy := &admissionregistrationv1.MutatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.MutatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{"apps"}, APIVersions: []string{"*"}, Resources: []string{"deployments"}},
				}}},
			},
			MatchConditions:    []admissionregistrationv1.MatchCondition{{Name: "low-port", Expression: lowPort}},
			ReinvocationPolicy: admissionregistrationv1.NeverReinvocationPolicy,
			Mutations: []admissionregistrationv1.Mutation{{
				PatchType: admissionregistrationv1.PatchTypeJSONPatch,
				JSONPatch: &admissionregistrationv1.JSONPatch{Expression: fmt.Sprintf(
					`[JSONPatch{op: "replace", path: "/spec/template/spec/containers/0/ports/0/containerPort", value: %s.ports[0].containerPort + 8000}]`, first)},
			}},
		},
	}
	binding := &admissionregistrationv1.MutatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.MutatingAdmissionPolicyBindingSpec{
			PolicyName: name,
			MatchResources: &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{"kubernetes.io/metadata.name": s.ns},
			}},
		},
	}
	adm := s.kube.AdmissionregistrationV1()
	if _, err := adm.MutatingAdmissionPolicies().Create(s.ctx, policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = adm.MutatingAdmissionPolicies().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	if _, err := adm.MutatingAdmissionPolicyBindings().Create(s.ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = adm.MutatingAdmissionPolicyBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	probe := probeDeployment(corev1.ContainerPort{ContainerPort: 80})
	s.eventually(30*time.Second, "the mutating policy to be in force", func() (bool, string) {
		d, err := s.kube.AppsV1().Deployments(s.ns).Create(s.ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return false, err.Error()
		}
		p := d.Spec.Template.Spec.Containers[0].Ports[0].ContainerPort
		return p == 8080, fmt.Sprintf("dry-run port %d", p)
	})

	s.startController()
	foo := newFoo("web", "web", 1)
	foo.Spec.Deployment.ContainerPort = ptr.To[int32](80)
	s.createFoo(foo)
	s.eventually(time.Minute, "the Deployment, with the policy's port", func() (bool, string) {
		dep, err := s.getDeployment("web")
		if err != nil {
			return false, err.Error()
		}
		p := dep.Spec.Template.Spec.Containers[0].Ports
		return len(p) == 1 && p[0].ContainerPort == 8080, fmt.Sprintf("ports %+v", p)
	})
	// Settle, then watch: no writes, a still generation.
	time.Sleep(3 * time.Second)
	before, err := s.getDeployment("web")
	if err != nil {
		t.Fatal(err)
	}
	from := time.Now()
	time.Sleep(10 * time.Second)
	after, err := s.getDeployment("web")
	if err != nil {
		t.Fatal(err)
	}
	writes := writesOf(s.controllerRequests(from, time.Now()))
	if len(writes) > 0 || after.Generation != before.Generation {
		t.Errorf("fighting the policy: %d writes in 10 s (generation %d → %d):%s", len(writes), before.Generation, after.Generation, summarize(writes))
	}
	if p := after.Spec.Template.Spec.Containers[0].Ports; len(p) != 1 || p[0].ContainerPort != 8080 || p[0].Name != plan.PortName {
		t.Errorf("ports %+v, want the policy's http:8080", p)
	}
	if ev := s.fooEvents("web"); ev["Updated"] != 0 || ev["Contested"] != 0 {
		t.Errorf("events %v: want none for what the API server does", ev)
	}
	if after.Generation != 1 {
		t.Errorf("generation %d after the create, want 1: the controller changed a pod template the policy rewrote", after.Generation)
	}
	t.Logf("settled: 0 writes in 10 s, generation %d", after.Generation)

	// Someone scales it. Every apply that declares port 80 is now refused
	// (the policy's 8080 holds the name), and the patch that puts 80 back
	// is rewritten to 8080: the replicas are put back without the port,
	// and no pod template ever lacks it (each would be a rollout).
	from = time.Now()
	s.editDeployment("web", func(d *appsv1.Deployment) { d.Spec.Replicas = ptr.To[int32](4) })
	s.eventually(30*time.Second, "the replicas put back", func() (bool, string) {
		d, err := s.getDeployment("web")
		if err != nil {
			return false, err.Error()
		}
		return *d.Spec.Replicas == 1, fmt.Sprintf("replicas %d", *d.Spec.Replicas)
	})
	time.Sleep(3 * time.Second)
	scaled, err := s.getDeployment("web")
	if err != nil {
		t.Fatal(err)
	}
	if scaled.Generation != after.Generation+2 {
		t.Errorf("generation %d → %d, want +2: the scale and its correction, no other change of the pod template",
			after.Generation, scaled.Generation)
	}
	if p := scaled.Spec.Template.Spec.Containers[0].Ports; len(p) != 1 || p[0].ContainerPort != 8080 {
		t.Errorf("ports %+v, want the policy's http:8080", p)
	}
	var deploymentWrites []auditEvent
	for _, e := range writesOf(s.controllerRequests(from, time.Now())) {
		if e.resource() == "deployments" {
			deploymentWrites = append(deploymentWrites, e)
		}
	}
	if len(deploymentWrites) > 3 {
		t.Errorf("%d Deployment writes to put the replicas back, want at most 3 (refused apply, patch, apply):%s",
			len(deploymentWrites), summarize(deploymentWrites))
	}
	rss, err := s.kube.AppsV1().ReplicaSets(s.ns).List(s.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, rs := range rss.Items {
		if len(rs.Spec.Template.Spec.Containers[0].Ports) == 0 {
			t.Errorf("ReplicaSet %s has a pod template without the port: a rollout the policy never asked for", rs.Name)
		}
	}
	t.Logf("scaled by someone else: put back with %d Deployment writes, generation %d → %d, %d ReplicaSets",
		len(deploymentWrites), after.Generation, scaled.Generation, len(rss.Items))

	// The policy gone, the next change of the Foo brings our port back.
	if err := adm.MutatingAdmissionPolicyBindings().Delete(s.ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	s.eventually(30*time.Second, "the mutating policy to be lifted", func() (bool, string) {
		d, err := s.kube.AppsV1().Deployments(s.ns).Create(s.ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return false, err.Error()
		}
		p := d.Spec.Template.Spec.Containers[0].Ports[0].ContainerPort
		return p == 80, fmt.Sprintf("dry-run port %d", p)
	})
	s.updateFoo("web", func(f *samplev1beta1.Foo) { f.Spec.Deployment.Replicas = ptr.To[int32](2) })
	s.eventually(30*time.Second, "our port back, with the Foo's new replicas", func() (bool, string) {
		d, err := s.getDeployment("web")
		if err != nil {
			return false, err.Error()
		}
		p := d.Spec.Template.Spec.Containers[0].Ports
		return *d.Spec.Replicas == 2 && len(p) == 1 && p[0].ContainerPort == 80 && p[0].Name == plan.PortName,
			fmt.Sprintf("replicas %d, ports %+v", *d.Spec.Replicas, p)
	})
}

// probeDeployment is a Deployment of nobody's, named "probe", whose one
// container declares port: what the tests try an admission policy on.
func probeDeployment(port corev1.ContainerPort) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "probe"},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "probe"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "probe"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "nginx:1.27",
					Ports: []corev1.ContainerPort{port}}}},
			},
		},
	}
}
