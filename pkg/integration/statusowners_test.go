//go:build integration

package integration

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	metav1apply "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/utils/ptr"

	samplev1alpha1 "example.com/foo-controller/pkg/apis/samplecontroller/v1alpha1"
	samplev1beta1 "example.com/foo-controller/pkg/apis/samplecontroller/v1beta1"
	applyv1beta1 "example.com/foo-controller/pkg/generated/applyconfiguration/samplecontroller/v1beta1"
	fooscheme "example.com/foo-controller/pkg/generated/clientset/versioned/scheme"
	"example.com/foo-controller/pkg/webhook"
)

// TestStatusWrittenWhateverTheManagedFields: the controller's status
// reaches what its Deployment says from any managed-fields state a client
// or the API server can leave, each a Foo of its own, all caught while
// Reconciling is True (pods held Pending on cordoned nodes), then the pods
// let run, so that Reconciling must go:
//
//   - outage: a Foo created through v1alpha1, patched in v1beta1 while the
//     conversion webhook is down, so the API server drops every entry; the
//     controller's next apply (a scale, webhook still down) creates a
//     before-first-apply entry that co-owns part of Reconciling, and
//     removing Reconciling leaves an invalid condition: refused, every time;
//   - cleared: managedFields cleared by a client, as the server-side apply
//     docs describe: before-first-apply owns all of Reconciling, and the
//     apply that removes it succeeds and changes nothing;
//   - coowned: another manager applies Reconciling as it is: the same.
//
// Each converges within 30 s of its pods running, with the webhook still
// down (none of them needs a conversion any more), and is told once: a
// StatusRepaired Warning naming the other owners, and a log line at the
// default level; a client that keeps applying Reconciling gets it removed
// each time, told in one Event with a count. Without the repair (plan.WriteStatus), the first is
// refused for good and the other two keep Reconciling=True beside
// Ready=True.
func TestStatusWrittenWhateverTheManagedFields(t *testing.T) {
	s := newScenarioOn(t, privateCluster(t, clusterOptions{noConversionWebhook: true}))
	stopWebhook, restartWebhook := webhookOnPrivatePlane(t, s, webhook.NewConverter(fooscheme.Scheme))
	ctrl := s.startController()

	alpha := s.foos.SamplecontrollerV1alpha1().Foos(s.ns)
	beta := s.foos.SamplecontrollerV1beta1().Foos(s.ns)
	if _, err := alpha.Create(s.ctx, &samplev1alpha1.Foo{ObjectMeta: metav1.ObjectMeta{Name: "outage"},
		Spec: samplev1alpha1.FooSpec{DeploymentName: "web-outage", Replicas: ptr.To[int32](1)}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	s.createFoo(newFoo("cleared", "web-cleared", 1))
	s.createFoo(newFoo("coowned", "web-coowned", 1))
	names := []string{"outage", "cleared", "coowned"}
	s.waitAllConverged(names, 2*time.Minute)

	// Pods stay Pending from here: a scale keeps Reconciling True.
	setUnschedulable := func(on bool) {
		t.Helper()
		nodes, err := s.kube.CoreV1().Nodes().List(s.ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range nodes.Items {
			patch := fmt.Sprintf(`{"spec":{"unschedulable":%t}}`, on)
			if _, err := s.kube.CoreV1().Nodes().Patch(s.ctx, n.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	setUnschedulable(true)
	scale := func(name string, replicas int32) {
		t.Helper()
		patch := fmt.Sprintf(`{"spec":{"deployment":{"replicas":%d}}}`, replicas)
		if _, err := beta.Patch(s.ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{FieldManager: "scaler"}); err != nil {
			t.Fatalf("scaling %s: %v", name, err)
		}
	}
	reconciling := func(name, says string) {
		t.Helper()
		s.eventually(time.Minute, name+": Reconciling saying "+says, func() (bool, string) {
			foo, err := s.getFoo(name)
			if err != nil {
				return false, err.Error()
			}
			c := meta.FindStatusCondition(foo.Status.Conditions, samplev1beta1.ConditionReconciling)
			return foo.Status.ObservedGeneration == foo.Generation && c != nil && strings.Contains(c.Message, says),
				fmt.Sprintf("generation %d, status %+v", foo.Generation, foo.Status)
		})
	}
	for _, name := range names {
		scale(name, 2)
	}
	for _, name := range names {
		reconciling(name, "1 of 2 replicas available")
	}

	// coowned: another manager applies Reconciling exactly as it is.
	foo, err := s.getFoo("coowned")
	if err != nil {
		t.Fatal(err)
	}
	rec := meta.FindStatusCondition(foo.Status.Conditions, samplev1beta1.ConditionReconciling)
	asItIs := applyv1beta1.Foo("coowned", s.ns).WithStatus(applyv1beta1.FooStatus().
		WithConditions(metav1apply.Condition().WithType(rec.Type).WithStatus(rec.Status).WithReason(rec.Reason).
			WithMessage(rec.Message).WithObservedGeneration(rec.ObservedGeneration).WithLastTransitionTime(rec.LastTransitionTime)))
	if _, err := beta.ApplyStatus(s.ctx, asItIs, metav1.ApplyOptions{FieldManager: "status-auditor"}); err != nil {
		t.Fatalf("another manager applying Reconciling as it is: %v", err)
	}

	// cleared: a client clears the managed fields.
	if _, err := beta.Patch(s.ctx, "cleared", types.MergePatchType, []byte(`{"metadata":{"managedFields":[{}]}}`), metav1.PatchOptions{}); err != nil {
		t.Fatalf("clearing the managed fields: %v", err)
	}

	// outage: the webhook goes; a v1beta1 patch to the Foo created through
	// v1alpha1 makes the API server drop its entries.
	stopWebhook()
	patched, err := beta.Patch(s.ctx, "outage", types.MergePatchType, []byte(`{"metadata":{"labels":{"touched":"during-outage"}}}`), metav1.PatchOptions{FieldManager: "labeler"})
	if err != nil {
		t.Fatalf("a v1beta1 patch with the webhook down: %v", err)
	}
	t.Logf("outage: managed fields after a v1beta1 patch with the webhook down: %s", describeManagers(patched.ManagedFields))
	if slices.ContainsFunc(patched.ManagedFields, func(e metav1.ManagedFieldsEntry) bool {
		return e.APIVersion == samplev1alpha1.GroupVersion.String()
	}) {
		t.Fatalf("outage: an entry in v1alpha1 is left (%s); the API server no longer drops them, and this case shows nothing", describeManagers(patched.ManagedFields))
	}
	// The controller's next apply keeps Reconciling, with another message.
	scale("outage", 3)
	reconciling("outage", "1 of 3 replicas available")
	foo, err = s.getFoo("outage")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("outage: managed fields after the controller's apply: %s", describeManagers(foo.ManagedFields))
	if !slices.ContainsFunc(foo.ManagedFields, func(e metav1.ManagedFieldsEntry) bool { return e.Manager == "before-first-apply" }) {
		t.Fatalf("outage: no before-first-apply entry (%s): not the state this case is about", describeManagers(foo.ManagedFields))
	}

	// The pods run: Reconciling must go, webhook still down.
	setUnschedulable(false)
	ran := time.Now()
	s.eventually(30*time.Second, "every status as its Deployment says, webhook down", func() (bool, string) {
		var wrong []string
		for _, name := range names {
			if ok, state := s.converged(name); !ok {
				wrong = append(wrong, name+": "+state)
				continue
			}
			foo, err := s.getFoo(name)
			if err != nil {
				return false, err.Error()
			}
			if c := meta.FindStatusCondition(foo.Status.Conditions, samplev1beta1.ConditionReconciling); c != nil {
				wrong = append(wrong, fmt.Sprintf("%s: Ready and %+v; managed fields %s", name, *c, describeManagers(foo.ManagedFields)))
			}
		}
		return len(wrong) == 0, strings.Join(wrong, "\n")
	})
	t.Logf("all three as their Deployments say %v after the pods were let run", time.Since(ran).Round(100*time.Millisecond))

	// One Warning each, naming who kept the condition.
	keptBy := map[string]string{"outage": "before-first-apply (Update)", "cleared": "before-first-apply (Update)", "coowned": "status-auditor (Apply)"}
	s.eventually(10*time.Second, "a StatusRepaired Warning per Foo, naming who kept Reconciling", func() (bool, string) {
		list, err := s.kube.EventsV1().Events(s.ns).List(s.ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		notes := map[string][]string{}
		for _, e := range list.Items {
			if e.Reason == reasonStatusRepaired {
				notes[e.Regarding.Name] = append(notes[e.Regarding.Name], e.Note)
			}
		}
		for name, owner := range keptBy {
			if len(notes[name]) != 1 || !strings.Contains(notes[name][0], owner) || !strings.Contains(notes[name][0], "[Reconciling]") {
				return false, fmt.Sprintf("%s: %q, want one naming [Reconciling] and %s", name, notes[name], owner)
			}
		}
		return true, ""
	})
	for _, name := range names {
		want := `foo="` + s.ns + "/" + name + `"`
		if !slices.ContainsFunc(ctrl.logLines("Removed status conditions that other field managers kept"), func(l string) bool { return strings.Contains(l, want) }) {
			t.Errorf("no log line at the default level about %s", name)
		}
	}

	// A client that keeps applying Reconciling: removed each time, and told
	// in one Event, with a count (the events API folds the same Warning
	// about the same object: it regards the Foo without a resourceVersion).
	for i := range 5 {
		again := applyv1beta1.Foo("coowned", s.ns).WithStatus(applyv1beta1.FooStatus().WithConditions(metav1apply.Condition().
			WithType(samplev1beta1.ConditionReconciling).WithStatus(metav1.ConditionTrue).WithReason("Audit").
			WithMessage(fmt.Sprintf("applied again, %d", i)).WithLastTransitionTime(metav1.Now())))
		if _, err := beta.ApplyStatus(s.ctx, again, metav1.ApplyOptions{FieldManager: "status-auditor", Force: true}); err != nil {
			t.Fatal(err)
		}
		s.eventually(10*time.Second, "Reconciling removed again", func() (bool, string) {
			foo, err := s.getFoo("coowned")
			if err != nil {
				return false, err.Error()
			}
			c := meta.FindStatusCondition(foo.Status.Conditions, samplev1beta1.ConditionReconciling)
			return c == nil, fmt.Sprintf("%+v", c)
		})
	}
	list, err := s.kube.EventsV1().Events(s.ns).List(s.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var repaired []string
	for _, e := range list.Items {
		if e.Reason == reasonStatusRepaired && e.Regarding.Name == "coowned" {
			count := 1
			if e.Series != nil {
				count = int(e.Series.Count)
			}
			repaired = append(repaired, fmt.Sprintf("%q ×%d", e.Note, count))
		}
	}
	if len(repaired) != 1 || !strings.Contains(repaired[0], "×") || strings.HasSuffix(repaired[0], "×1") {
		t.Errorf("6 repairs of one Foo: Events %v, want one, in a series", repaired)
	}

	// Up again: the Foo is read in v1alpha1 as it is.
	restartWebhook()
	s.eventually(30*time.Second, "outage read in v1alpha1, Ready", func() (bool, string) {
		got, err := alpha.Get(s.ctx, "outage", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(got.Status.Conditions, samplev1beta1.ConditionReady)
		return c != nil && c.Status == metav1.ConditionTrue && got.Status.AvailableReplicas == 3, fmt.Sprintf("%+v", got.Status)
	})
}

// reasonStatusRepaired is the controller's Event reason (statuswrite.go).
const reasonStatusRepaired = "StatusRepaired"

// describeManagers lists managed-fields entries as manager/operation/
// apiVersion[/subresource].
func describeManagers(entries []metav1.ManagedFieldsEntry) string {
	var out []string
	for _, e := range entries {
		d := fmt.Sprintf("%s/%s/%s", e.Manager, e.Operation, e.APIVersion)
		if e.Subresource != "" {
			d += "/" + e.Subresource
		}
		out = append(out, d)
	}
	return "[" + strings.Join(out, " ") + "]"
}

// TestCreateAnsweredWithAnErrorIsStored: a create in v1alpha1 is converted
// twice, the request to v1beta1 before it is stored and the response back
// to v1alpha1 after; when only the second conversion fails (the webhook
// went down between the two), the client gets a 500 for a Foo that is
// stored, and its retry gets AlreadyExists. What a client should do is in
// docs/troubleshooting.md: read the Foo before creating it again, or apply.
func TestCreateAnsweredWithAnErrorIsStored(t *testing.T) {
	s := newScenarioOn(t, privateCluster(t, clusterOptions{noConversionWebhook: true}))
	converter := webhook.NewConverter(fooscheme.Scheme)
	var failToAlpha atomic.Bool
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if failToAlpha.Load() && strings.Contains(string(body), `"desiredAPIVersion":"samplecontroller.example.com/v1alpha1"`) {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		converter.ServeHTTP(w, r)
	})
	webhookOnPrivatePlane(t, s, handler)
	alpha := s.foos.SamplecontrollerV1alpha1().Foos(s.ns)

	failToAlpha.Store(true)
	foo := &samplev1alpha1.Foo{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Spec: samplev1alpha1.FooSpec{DeploymentName: "web-a"}}
	_, err := alpha.Create(s.ctx, foo, metav1.CreateOptions{})
	if !apierrors.IsInternalError(err) || !strings.Contains(err.Error(), "conversion webhook") {
		t.Fatalf("a v1alpha1 create whose answer cannot be converted: %v, want a 500 naming the conversion webhook", err)
	}
	t.Logf("the client sees: %v", err)
	stored, err := s.getFoo("a")
	if err != nil {
		t.Fatalf("the Foo whose create was answered with an error, read in v1beta1: %v", err)
	}
	if stored.Spec.Deployment.Name != "web-a" {
		t.Errorf("stored: %+v", stored.Spec)
	}
	_, err = alpha.Create(s.ctx, foo, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		t.Errorf("the client's retry: %v, want AlreadyExists", err)
	}
}

// TestWebhookOutageMidBurst: 300 Foos created through v1alpha1; a burst of
// scales through v1alpha1, and in its middle the conversion webhook goes
// down for a few seconds, while a client patches 30 of the scaled Foos in
// v1beta1 (which drops their managed fields, some while Reconciling). Within
// 30 s of every Deployment being available, every Foo's status says so:
// none stuck. Without the repair (plan.WriteStatus), some stay stuck for
// good (the figure is in issue 38's note).
func TestWebhookOutageMidBurst(t *testing.T) {
	s := newScenarioOn(t, privateCluster(t, clusterOptions{noConversionWebhook: true}))
	stopWebhook, restartWebhook := webhookOnPrivatePlane(t, s, webhook.NewConverter(fooscheme.Scheme))
	s.startController()
	alpha := s.foos.SamplecontrollerV1alpha1().Foos(s.ns)
	beta := s.foos.SamplecontrollerV1beta1().Foos(s.ns)
	const n, patched = 300, 30
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("f-%03d", i)
		if _, err := alpha.Create(s.ctx, &samplev1alpha1.Foo{ObjectMeta: metav1.ObjectMeta{Name: names[i]},
			Spec: samplev1alpha1.FooSpec{DeploymentName: names[i], Replicas: ptr.To[int32](1)}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	s.waitAllConverged(names, 3*time.Minute)

	// The burst: every Foo scaled to 3 through v1alpha1, one after another.
	var scaled atomic.Int64
	burstDone := make(chan struct{})
	go func() {
		defer close(burstDone)
		for _, name := range names {
			if _, err := alpha.Patch(s.ctx, name, types.MergePatchType, []byte(`{"spec":{"replicas":3}}`), metav1.PatchOptions{FieldManager: "scaler"}); err == nil {
				scaled.Add(1)
			}
		}
	}()
	s.eventually(time.Minute, "a third of the burst sent", func() (bool, string) {
		return scaled.Load() >= n/3, fmt.Sprint(scaled.Load())
	})
	stopWebhook()
	down := time.Now()
	// In v1beta1, to Foos just scaled through v1alpha1: each drops their
	// managed fields.
	dropped := 0
	for i := int(scaled.Load()) - 1; i >= 0 && dropped < patched; i-- {
		foo, err := beta.Patch(s.ctx, names[i], types.MergePatchType, []byte(`{"metadata":{"labels":{"touched":"during-outage"}}}`), metav1.PatchOptions{FieldManager: "labeler"})
		if err != nil {
			t.Fatalf("a v1beta1 patch with the webhook down: %v", err)
		}
		if len(foo.ManagedFields) == 0 {
			dropped++
		}
	}
	time.Sleep(5*time.Second - time.Since(down))
	restartWebhook()
	back := time.Now()
	<-burstDone
	t.Logf("webhook down %v, mid-burst (%d of %d scales through v1alpha1 accepted); %d Foos patched in v1beta1 meanwhile, %d of them with their managed fields dropped",
		back.Sub(down).Round(100*time.Millisecond), scaled.Load(), n, patched, dropped)
	if dropped == 0 {
		t.Fatal("no Foo had its managed fields dropped: this test shows nothing")
	}
	// Scales refused while it was down are sent again, as a client would.
	for _, name := range names {
		if _, err := beta.Patch(s.ctx, name, types.MergePatchType, []byte(`{"spec":{"deployment":{"replicas":3}}}`), metav1.PatchOptions{FieldManager: "scaler"}); err != nil {
			t.Fatal(err)
		}
	}
	stuck := func() []string {
		var out []string
		for _, name := range names {
			ok, state := s.converged(name)
			if ok {
				foo, err := s.getFoo(name)
				if err != nil {
					t.Fatal(err)
				}
				if c := meta.FindStatusCondition(foo.Status.Conditions, samplev1beta1.ConditionReconciling); c != nil {
					ok, state = false, fmt.Sprintf("Reconciling %s", c.Message)
				}
			}
			if !ok {
				out = append(out, name+": "+state)
			}
		}
		return out
	}
	// The pods first: 600 more on the fake nodes take a while, whatever
	// the controller does. Then the statuses, within 30 s of that.
	s.eventually(2*time.Minute, "every Deployment available at 3", func() (bool, string) {
		deps, err := s.kube.AppsV1().Deployments(s.ns).List(s.ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		ready := 0
		for _, d := range deps.Items {
			if d.Status.ObservedGeneration >= d.Generation && d.Status.AvailableReplicas == 3 && d.Status.UpdatedReplicas == 3 {
				ready++
			}
		}
		return ready == n, fmt.Sprintf("%d of %d", ready, n)
	})
	available := time.Now()
	t.Logf("every Deployment available %v after the webhook's return", available.Sub(back).Round(100*time.Millisecond))
	s.eventually(30*time.Second, "every status as its Deployment says", func() (bool, string) {
		left := stuck()
		if len(left) > 3 {
			left = append(left[:3], fmt.Sprintf("and %d more", len(left)-3))
		}
		return len(left) == 0, strings.Join(left, "\n")
	})
	t.Logf("all %d Foos as their Deployments say %v after the webhook's return, %v after the last Deployment", n,
		time.Since(back).Round(100*time.Millisecond), time.Since(available).Round(100*time.Millisecond))
}

// webhookOnPrivatePlane serves handler as the CRD's conversion webhook, on
// an ephemeral port of 127.0.0.1, for s's private control plane, and waits
// until v1alpha1 is served through it. stop takes it down (and waits for
// it); restart serves it again at the same address.
func webhookOnPrivatePlane(t *testing.T, s *scenario, handler http.Handler) (stop, restart func()) {
	t.Helper()
	keeper := &webhook.Keeper{Kube: s.kube, Dynamic: s.dyn, CRD: fooCRD, Hosts: []string{"127.0.0.1"},
		Secret: types.NamespacedName{Namespace: s.ns, Name: "foo-controller-webhook-cert"}}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	current := runWebhook(t, lis, keeper, handler)
	t.Cleanup(func() { current() })
	serveV1beta1(t, s, "https://"+addr+webhook.Path)
	// Served once a Foo converts both ways: a dry-run create in v1alpha1
	// is converted to v1beta1 and back (the API server encodes it for
	// storage and decodes it, storing nothing), with the CA the CRD holds.
	// A list of no Foos converts nothing, and passed while the API server
	// still distrusted the webhook's certificate (a create then failed).
	probe := &samplev1alpha1.Foo{ObjectMeta: metav1.ObjectMeta{Name: "webhook-probe"}, Spec: samplev1alpha1.FooSpec{DeploymentName: "probe"}}
	s.eventually(30*time.Second, "v1alpha1 served through the webhook", func() (bool, string) {
		_, err := s.foos.SamplecontrollerV1alpha1().Foos(s.ns).Create(s.ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil, fmt.Sprint(err)
	})
	stop = func() { current() }
	restart = func() {
		t.Helper()
		lis, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		current = runWebhook(t, lis, keeper, handler)
	}
	return stop, restart
}
