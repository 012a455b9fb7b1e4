//go:build integration

package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	samplev1beta1 "example.com/foo-controller/pkg/apis/samplecontroller/v1beta1"
	clientset "example.com/foo-controller/pkg/generated/clientset/versioned"
	"example.com/foo-controller/pkg/plan"
)

// scenario is one test's world: its own namespace and, once started, its
// own controller process watching only that namespace.
type scenario struct {
	t          *testing.T
	ctx        context.Context
	cl         *cluster // the control plane: env, or a test's private one
	ns         string
	kube       kubernetes.Interface
	foos       clientset.Interface
	dyn        dynamic.Interface
	controller *process
	logs       []string // controller logs, one per process started
}

// newScenario starts a scenario on the shared control plane.
func newScenario(t *testing.T) *scenario { return newScenarioOn(t, env) }

// newScenarioOn starts a scenario on the given control plane, in a
// namespace named after the test with a random suffix.
func newScenarioOn(t *testing.T, cl *cluster) *scenario {
	t.Helper()
	return newScenarioIn(t, cl, testSlug(t)+"-"+utilrand.String(5))
}

// testSlug is the test's name as the start of a namespace name.
func testSlug(t *testing.T) string {
	slug := strings.Trim(regexp.MustCompile(`[^a-z0-9]+`).ReplaceAllString(strings.ToLower(t.Name()), "-"), "-")
	if len(slug) > 40 {
		slug = slug[:40]
	}
	return strings.Trim(slug, "-")
}

// newScenarioIn starts a scenario on the given control plane, in a
// namespace of the given name, which it creates.
func newScenarioIn(t *testing.T, cl *cluster, ns string) *scenario {
	t.Helper()
	s := scenarioInExisting(t, cl, ns)
	if _, err := s.kube.CoreV1().Namespaces().Create(s.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: s.ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Registered first, so it runs last: after every controller the test
	// started has been stopped (see launch).
	t.Cleanup(func() {
		_ = s.kube.CoreV1().Namespaces().Delete(context.Background(), s.ns, metav1.DeleteOptions{})
	})
	return s
}

// scenarioInExisting is a scenario in a namespace that exists already (as
// TestHowItWorksLog's "default"), which it neither creates nor deletes.
func scenarioInExisting(t *testing.T, cl *cluster, ns string) *scenario {
	t.Helper()
	s := &scenario{t: t, ctx: t.Context(), cl: cl, ns: ns}
	var err error
	if s.kube, err = kubernetes.NewForConfig(cl.admin); err != nil {
		t.Fatal(err)
	}
	if s.foos, err = clientset.NewForConfig(cl.admin); err != nil {
		t.Fatal(err)
	}
	if s.dyn, err = dynamic.NewForConfig(cl.admin); err != nil {
		t.Fatal(err)
	}
	return s
}

// plainMetrics: the tests that scrape a controller's /metrics do so over
// plain HTTP; TestMetricsNeedATokenAndTheRight tests the secure default.
const plainMetrics = "-metrics-secure=false"

// startController runs the controller binary against the namespace.
func (s *scenario) startController(extraArgs ...string) *process {
	s.t.Helper()
	args := append([]string{
		"-kubeconfig=" + s.cl.ctrlKC,
		"-namespace=" + s.ns,
		"-v=4",
		// Several controllers run at once: no fixed ports (a test that
		// scrapes them passes its own addresses; the last flag wins).
		"-metrics-bind-address=0",
		"-health-probe-bind-address=0",
		plainMetrics,
	}, extraArgs...)
	s.controller = s.launch(controllerBin, nil, args...)
	return s.controller
}

// launch starts a controller process for this scenario, its log under
// the cluster's directory. When the test ends, a process still running gets a graceful stop
// and must exit 0 (one the test already stopped or killed was judged by the
// test); a failed test shows the tail of its log.
func (s *scenario) launch(bin string, environ []string, args ...string) *process {
	s.t.Helper()
	logPath := filepath.Join(s.cl.dir, fmt.Sprintf("controller-%s-%d.log", s.ns, len(s.logs)))
	p, err := startProcess("foo-controller", bin, logPath, environ, args...)
	if err != nil {
		s.t.Fatal(err)
	}
	s.logs = append(s.logs, logPath)
	t := s.t
	t.Cleanup(func() {
		if p.running() {
			if err := p.stop(30 * time.Second); err != nil && !stoppedBeforeMain(err, p.log) {
				t.Errorf("controller did not shut down cleanly: %v\n%s", err, p.tail(30))
			}
		}
		if t.Failed() {
			t.Logf("controller log (%s), last lines:\n%s", p.log, p.tail(60))
		}
	})
	return p
}

// privateCluster starts a control plane for this test alone, for faults
// that would disturb the other tests (restarting the API server or etcd,
// compacting etcd). It costs about ten seconds and is stopped when the test
// ends; its logs are kept with the shared cluster's.
func privateCluster(t *testing.T, opts clusterOptions) *cluster {
	t.Helper()
	// A directory of its own for each plane, named after the test: with
	// -count=N the next run's plane must not find this one's etcd data.
	dir, err := os.MkdirTemp(env.dir, "cluster-"+strings.ToLower(regexp.MustCompile(`[^A-Za-z0-9]+`).ReplaceAllString(t.Name(), "-"))+"-")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	cl, err := startCluster(t.Context(), repoRoot, env.testbin, dir, opts)
	if cl != nil {
		// After every scenario cleanup (registered later, so run earlier).
		t.Cleanup(cl.stop)
	}
	if err != nil {
		t.Fatalf("private control plane: %v", err)
	}
	t.Logf("private control plane up in %v (logs in %s)", time.Since(start).Round(time.Millisecond), dir)
	return cl
}

// eventually polls cond until it reports done, failing the test with the
// last state it described if timeout passes first.
func (s *scenario) eventually(timeout time.Duration, what string, cond func() (done bool, state string)) {
	s.t.Helper()
	deadline := time.Now().Add(timeout)
	state := ""
	for {
		var done bool
		done, state = cond()
		if done {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("timed out after %v waiting for %s; last state: %s", timeout, what, state)
		}
		select {
		case <-s.ctx.Done():
			s.t.Fatalf("test context ended waiting for %s", what)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// eventuallyDeployment is eventually, on the Deployment name: cond sees it
// as the API server has it; one it cannot read is a state, not a failure.
func (s *scenario) eventuallyDeployment(timeout time.Duration, name, what string, cond func(*appsv1.Deployment) (done bool, state string)) {
	s.t.Helper()
	s.eventually(timeout, what, func() (bool, string) {
		dep, err := s.getDeployment(name)
		if err != nil {
			return false, err.Error()
		}
		return cond(dep)
	})
}

func newFoo(name, deployment string, replicas int32) *samplev1beta1.Foo {
	return &samplev1beta1.Foo{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       samplev1beta1.FooSpec{Deployment: samplev1beta1.DeploymentSpec{Name: deployment, Replicas: ptr.To(replicas), Image: "nginx:1.27"}},
	}
}

func (s *scenario) createFoo(foo *samplev1beta1.Foo) *samplev1beta1.Foo {
	s.t.Helper()
	created, err := s.foos.SamplecontrollerV1beta1().Foos(s.ns).Create(s.ctx, foo, metav1.CreateOptions{})
	if err != nil {
		s.t.Fatalf("creating Foo %s: %v", foo.Name, err)
	}
	return created
}

func (s *scenario) getFoo(name string) (*samplev1beta1.Foo, error) {
	return s.foos.SamplecontrollerV1beta1().Foos(s.ns).Get(s.ctx, name, metav1.GetOptions{})
}

func (s *scenario) getDeployment(name string) (*appsv1.Deployment, error) {
	return s.kube.AppsV1().Deployments(s.ns).Get(s.ctx, name, metav1.GetOptions{})
}

// updateFoo re-reads the Foo and applies mutate until the update does not
// conflict.
func (s *scenario) updateFoo(name string, mutate func(*samplev1beta1.Foo)) {
	s.t.Helper()
	for range 10 {
		foo, err := s.getFoo(name)
		if err != nil {
			s.t.Fatal(err)
		}
		mutate(foo)
		_, err = s.foos.SamplecontrollerV1beta1().Foos(s.ns).Update(s.ctx, foo, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			s.t.Fatal(err)
		}
		return
	}
	s.t.Fatal("updateFoo: too many conflicts")
}

// editDeployment changes the Deployment as `kubectl edit` does: an Update
// under another field manager, read again and retried on a conflict.
func (s *scenario) editDeployment(name string, change func(*appsv1.Deployment)) {
	s.t.Helper()
	for {
		dep, err := s.getDeployment(name)
		if err != nil {
			s.t.Fatal(err)
		}
		change(dep)
		_, err = s.kube.AppsV1().Deployments(s.ns).Update(s.ctx, dep, metav1.UpdateOptions{FieldManager: "kubectl-edit"})
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			s.t.Fatalf("editing Deployment %s: %v", name, err)
		}
		return
	}
}

// converged reports whether the Foo and its Deployment are in their final
// state: the Deployment exists, is controlled by the Foo, matches its spec,
// has all replicas available, and the Foo's status says so for its
// current generation.
func (s *scenario) converged(name string) (bool, string) {
	foo, err := s.getFoo(name)
	if err != nil {
		return false, err.Error()
	}
	dep, err := s.getDeployment(foo.Spec.Deployment.Name)
	if err != nil {
		return false, err.Error()
	}
	if !plan.IsControlledBy(dep, foo.UID) {
		return false, fmt.Sprintf("Deployment %s not controlled by the Foo: %v", dep.Name, dep.OwnerReferences)
	}
	if drift := plan.Drift(foo, plan.NewDeploymentView(dep)); len(drift) > 0 {
		return false, fmt.Sprintf("Deployment drifts: %v", drift)
	}
	want := plan.Replicas(foo)
	ready := meta.FindStatusCondition(foo.Status.Conditions, samplev1beta1.ConditionReady)
	st := foo.Status
	// Rolled out, not only available: old pods count as available while a
	// new template rolls out.
	rolledOut := dep.Status.ObservedGeneration >= dep.Generation && dep.Status.UpdatedReplicas == want
	if !rolledOut || dep.Status.AvailableReplicas != want || st.AvailableReplicas != want || st.ObservedGeneration != foo.Generation ||
		ready == nil || ready.Status != metav1.ConditionTrue || ready.ObservedGeneration != foo.Generation {
		return false, fmt.Sprintf("generation %d, Deployment generation %d observed %d, updated %d, available %d/%d, Foo status %+v",
			foo.Generation, dep.Generation, dep.Status.ObservedGeneration, dep.Status.UpdatedReplicas, dep.Status.AvailableReplicas, want, st)
	}
	return true, ""
}

// waitNotReady waits until the Foo's Ready condition is False with
// reason, its message saying says: what a user reads in kubectl describe.
func (s *scenario) waitNotReady(name, reason, says string, timeout time.Duration) {
	s.t.Helper()
	s.eventually(timeout, fmt.Sprintf("Ready=False/%s saying %q", reason, says), func() (bool, string) {
		foo, err := s.getFoo(name)
		if err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(foo.Status.Conditions, samplev1beta1.ConditionReady)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == reason && strings.Contains(c.Message, says),
			fmt.Sprintf("%+v", foo.Status.Conditions)
	})
}

func (s *scenario) waitConverged(name string, timeout time.Duration) {
	s.t.Helper()
	s.eventually(timeout, "Foo "+name+" to converge", func() (bool, string) { return s.converged(name) })
}

// runningPods counts the Running pods selected by the Foo's selector.
func (s *scenario) runningPods(foo *samplev1beta1.Foo) int {
	pods, err := s.kube.CoreV1().Pods(s.ns).List(s.ctx, metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(plan.SelectorLabels(foo)).String(),
	})
	if err != nil {
		return -1
	}
	n := 0
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			n++
		}
	}
	return n
}

// kubectl runs the real kubectl as the admin.
func (s *scenario) kubectl(args ...string) (string, error) {
	cmd := exec.CommandContext(s.ctx, filepath.Join(s.cl.testbin, "kubectl"),
		append([]string{"--kubeconfig=" + s.cl.adminKC, "--namespace=" + s.ns}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// auditEvent is the part of an audit.k8s.io/v1 Event the tests read.
type auditEvent struct {
	AuditID   string `json:"auditID"`
	Stage     string `json:"stage"`
	Verb      string `json:"verb"`
	UserAgent string `json:"userAgent"`
	User      struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	RequestReceivedTimestamp metav1.MicroTime `json:"requestReceivedTimestamp"`
}

func (e auditEvent) resource() string {
	if e.ObjectRef == nil {
		return ""
	}
	if e.ObjectRef.Subresource != "" {
		return e.ObjectRef.Resource + "/" + e.ObjectRef.Subresource
	}
	return e.ObjectRef.Resource
}

// controllerRequests returns the requests the API server received from the
// controller for this scenario's namespace in [from, to), one per request.
func (s *scenario) controllerRequests(from, to time.Time) []auditEvent {
	s.t.Helper()
	f, err := os.Open(s.cl.auditLog)
	if err != nil {
		s.t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	seen := map[string]bool{}
	var out []auditEvent
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var e auditEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			continue
		}
		if e.User.Username != controllerUser || e.ObjectRef == nil || e.ObjectRef.Namespace != s.ns || seen[e.AuditID] {
			continue
		}
		ts := e.RequestReceivedTimestamp.Time
		if ts.Before(from) || !ts.Before(to) {
			continue
		}
		seen[e.AuditID] = true
		out = append(out, e)
	}
	return out
}

var writeVerbs = map[string]bool{"create": true, "update": true, "patch": true, "delete": true, "deletecollection": true}

func writesOf(events []auditEvent) []auditEvent {
	var out []auditEvent
	for _, e := range events {
		if writeVerbs[e.Verb] {
			out = append(out, e)
		}
	}
	return out
}

// summarize renders requests as "verb resource name" counts, for messages.
func summarize(events []auditEvent) string {
	counts := map[string]int{}
	for _, e := range events {
		name := ""
		if e.ObjectRef != nil {
			name = e.ObjectRef.Name
		}
		counts[fmt.Sprintf("%s %s %s", e.Verb, e.resource(), name)]++
	}
	var keys []string
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "\n  %3d× %s", counts[k], k)
	}
	return b.String()
}

// fooEvents returns the Events recorded about a Foo, by reason.
func (s *scenario) fooEvents(name string) map[string]int {
	list, err := s.kube.EventsV1().Events(s.ns).List(s.ctx, metav1.ListOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	out := map[string]int{}
	for _, e := range list.Items {
		if e.Regarding.Kind == "Foo" && e.Regarding.Name == name {
			n := 1
			if e.Series != nil {
				n = int(e.Series.Count)
			}
			out[e.Reason] += n
		}
	}
	return out
}

func regexpMatch(pattern, s string) bool { return regexp.MustCompile(pattern).MatchString(s) }

// createFoos creates n Foos of one replica, named prefix-000, prefix-001, ...
// (each wanting a Deployment of the same name), and returns their names.
func (s *scenario) createFoos(prefix string, n int) []string {
	s.t.Helper()
	names := make([]string, n)
	for i := range n {
		names[i] = fmt.Sprintf("%s-%03d", prefix, i)
		s.createFoo(newFoo(names[i], names[i], 1))
	}
	return names
}

// waitForDeployments waits until at least n Deployments exist in the namespace.
func (s *scenario) waitForDeployments(n int, timeout time.Duration) {
	s.t.Helper()
	s.eventually(timeout, fmt.Sprintf("%d Deployments to exist", n), func() (bool, string) {
		deps, err := s.kube.AppsV1().Deployments(s.ns).List(s.ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		return len(deps.Items) >= n, fmt.Sprintf("%d Deployments", len(deps.Items))
	})
}

// requireMidBurst logs how many of the n Deployments exist after a fault
// (what) that was meant to strike in the middle of the controller's burst,
// and fails the test if all do: a fault that came after the work proves
// nothing about interrupted work.
func (s *scenario) requireMidBurst(n int, what string) {
	s.t.Helper()
	deps, err := s.kube.AppsV1().Deployments(s.ns).List(s.ctx, metav1.ListOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Logf("%s found %d of %d Deployments created", what, len(deps.Items), n)
	if len(deps.Items) >= n {
		s.t.Fatalf("%s came after the burst: all %d Deployments existed", what, n)
	}
}

// waitAllConverged waits for each named Foo to converge.
func (s *scenario) waitAllConverged(names []string, timeout time.Duration) {
	s.t.Helper()
	for _, name := range names {
		s.waitConverged(name, timeout)
	}
}

// invariants checks, in one pass over the namespace, what must hold once
// the controller has caught up, whatever happened before: every Foo has
// converged (see converged) and controls exactly one Deployment, the one
// its spec names; no Deployment is controlled by a Foo that no longer
// exists; no Foo is stuck terminating. Deployments with no controller (kept
// by the Orphan policy) are allowed.
func (s *scenario) invariants() (bool, string) {
	foos, deps, err := s.listAll()
	if err != nil {
		return false, err.Error()
	}
	byUID := map[string]*samplev1beta1.Foo{}
	for i := range foos.Items {
		byUID[string(foos.Items[i].UID)] = &foos.Items[i]
	}
	controlled := map[string][]string{} // Foo name -> its Deployments
	var problems []string
	for i := range deps.Items {
		d := &deps.Items[i]
		ref := plan.ControllerFoo(d)
		if ref == nil {
			continue
		}
		foo := byUID[string(ref.UID)]
		if foo == nil {
			problems = append(problems, fmt.Sprintf("Deployment %s is controlled by a Foo that no longer exists (%s)", d.Name, ref.Name))
			continue
		}
		controlled[foo.Name] = append(controlled[foo.Name], d.Name)
	}
	for i := range foos.Items {
		foo := &foos.Items[i]
		if foo.DeletionTimestamp != nil {
			problems = append(problems, fmt.Sprintf("Foo %s is terminating (finalizers %v)", foo.Name, foo.Finalizers))
			continue
		}
		if got := controlled[foo.Name]; len(got) != 1 || got[0] != foo.Spec.Deployment.Name {
			problems = append(problems, fmt.Sprintf("Foo %s controls Deployments %v, want [%s]", foo.Name, got, foo.Spec.Deployment.Name))
			continue
		}
		if ok, state := s.converged(foo.Name); !ok {
			problems = append(problems, fmt.Sprintf("Foo %s: %s", foo.Name, state))
		}
	}
	if len(problems) > 5 {
		problems = append(problems[:5], fmt.Sprintf("... and %d more", len(problems)-5))
	}
	return len(problems) == 0, strings.Join(problems, "; ")
}

// listAll lists the namespace's Foos and Deployments.
func (s *scenario) listAll() (*samplev1beta1.FooList, *appsv1.DeploymentList, error) {
	foos, err := s.foos.SamplecontrollerV1beta1().Foos(s.ns).List(s.ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, err
	}
	deps, err := s.kube.AppsV1().Deployments(s.ns).List(s.ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, err
	}
	return foos, deps, nil
}

// stoppedBeforeMain reports whether a process that SIGTERM ended had not
// yet got to main (where the controller handles the signal, and logs
// before it does anything): one started just before its test ended, on a
// busy machine. Killed by the signal with nothing logged, it never ran.
func stoppedBeforeMain(err error, logPath string) bool {
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		return false
	}
	ws, ok := exit.Sys().(syscall.WaitStatus)
	info, statErr := os.Stat(logPath)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGTERM && statErr == nil && info.Size() == 0
}

// foreignDeployment is a Deployment of someone else's: no owner reference,
// labels that are not ours.
func foreignDeployment(name string) *appsv1.Deployment {
	labels := map[string]string{"app": "someone-else"}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox:1.36"}}},
			},
		},
	}
}
