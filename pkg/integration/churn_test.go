//go:build integration

package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	samplev1beta1 "example.com/foo-controller/pkg/apis/samplecontroller/v1beta1"
)

// TestEditStorm edits one Foo's replicas 100 times a second for 20 s, as a
// script or an autoscaler gone wrong would, and checks what the controller
// spends on it: status writes that do not lose to the edits (at most 10%
// refused), a status that never goes backwards, and Events that do not
// flood (at most 30) while the newest still tells the last scale.
func TestEditStorm(t *testing.T) {
	s := newScenario(t)
	s.startController()
	s.createFoo(newFoo("web", "web", 1))
	s.waitConverged("web", time.Minute)

	// Every status the API server stored, in order: a watch sees each
	// write (resumed where it stopped if the API server closes it).
	foo, err := s.getFoo("web")
	if err != nil {
		t.Fatal(err)
	}
	fooClient := s.foos.SamplecontrollerV1beta1().Foos(s.ns)
	w, err := watchtools.NewRetryWatcherWithContext(s.ctx, foo.ResourceVersion, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = "metadata.name=web"
			return fooClient.Watch(ctx, o)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	observed := make(chan []int64, 1)
	var watchedGen atomic.Int64
	go func() {
		var gens []int64
		for ev := range w.ResultChan() {
			if foo, ok := ev.Object.(*samplev1beta1.Foo); ok && ev.Type == watch.Modified {
				gens = append(gens, foo.Status.ObservedGeneration)
				watchedGen.Store(foo.Status.ObservedGeneration)
			}
		}
		observed <- gens
	}()

	// 100 a second, each sent on time whatever the one before it costs
	// (at most 16 in flight), as independent clients would.
	const edits, every = 2000, 10 * time.Millisecond
	start := time.Now()
	tick := time.NewTicker(every)
	inFlight := make(chan struct{}, 16)
	errs := make(chan error, edits)
	for i := range edits {
		<-tick.C
		inFlight <- struct{}{}
		go func() {
			defer func() { <-inFlight }()
			patch := fmt.Appendf(nil, `{"spec":{"deployment":{"replicas":%d}}}`, i%4+1) // 1, 2, 3, 4, 1, ...: a scale each time
			_, err := s.foos.SamplecontrollerV1beta1().Foos(s.ns).Patch(s.ctx, "web", types.MergePatchType, patch, metav1.PatchOptions{})
			errs <- err
		}()
	}
	tick.Stop()
	for range edits {
		if err := <-errs; err != nil {
			t.Fatalf("edit: %v", err)
		}
	}
	took := time.Since(start)
	t.Logf("%d edits in %v (%.0f a second)", edits, took.Round(time.Millisecond), edits/took.Seconds())
	// (Edits that arrive out of order and set the value already there are
	// no change: the generation counts those that were.)

	// Converged on the last edit the API server took, and the watch has
	// seen the status that says so.
	var last int32
	s.eventually(time.Minute, "the status to catch up with the last edit", func() (bool, string) {
		if ok, state := s.converged("web"); !ok {
			return false, state
		}
		if foo, err = s.getFoo("web"); err != nil {
			return false, err.Error()
		}
		last = *foo.Spec.Deployment.Replicas
		return foo.Status.Replicas == last, fmt.Sprintf("status.replicas %d of %d", foo.Status.Replicas, last)
	})
	s.eventually(time.Minute, "the watch to see it", func() (bool, string) {
		g := watchedGen.Load()
		return g == foo.Generation, fmt.Sprintf("watched observedGeneration %d of %d", g, foo.Generation)
	})
	time.Sleep(2 * time.Second) // the Events of the last syncs are sent
	end := time.Now()
	w.Stop()

	// Status writes: every attempt, and those the API server refused.
	attempts, refused := 0, map[int]int{}
	for _, e := range writesOf(s.controllerRequests(start, end)) {
		if e.resource() != "foos/status" || e.ObjectRef.Name != "web" {
			continue
		}
		attempts++
		if e.ResponseStatus != nil && e.ResponseStatus.Code >= 300 {
			refused[e.ResponseStatus.Code]++
		}
	}
	n := 0
	for _, c := range refused {
		n += c
	}
	t.Logf("status writes: %d attempts, %d refused %v", attempts, n, refused)
	if attempts == 0 || n*10 > attempts {
		t.Errorf("status writes: %d of %d refused %v, want at most 10%%", n, attempts, refused)
	}

	// The status never went backwards.
	gens := <-observed
	for i := 1; i < len(gens); i++ {
		if gens[i] < gens[i-1] {
			t.Errorf("observedGeneration went back from %d to %d (write %d of %d)", gens[i-1], gens[i], i, len(gens))
			break
		}
	}
	t.Logf("%d changes of the Foo watched; observedGeneration %d → %d (%d generations in the storm)", len(gens), gens[0], gens[len(gens)-1], foo.Generation-1)
	if gens[len(gens)-1] != foo.Generation {
		t.Errorf("the watch ended on observedGeneration %d, want %d: changes were missed", gens[len(gens)-1], foo.Generation)
	}

	// Events: a handful, the newest telling the last scale.
	list, err := s.kube.EventsV1().Events(s.ns).List(s.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var about []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.Kind == "Foo" && e.Regarding.Name == "web" {
			about = append(about, e)
		}
	}
	slices.SortFunc(about, func(a, b eventsv1.Event) int { return a.EventTime.Compare(b.EventTime.Time) })
	t.Logf("%d Events about the Foo, by reason %v", len(about), s.fooEvents("web"))
	if len(about) > 30 {
		t.Errorf("%d Events about the Foo after %d edits, want at most 30", len(about), edits)
	}
	want := fmt.Sprintf("to %d replicas", last)
	if newest := about[len(about)-1]; !strings.Contains(newest.Note, want) {
		t.Errorf("the newest Event says %q; want the last scale (%q)", newest.Note, want)
	} else {
		t.Logf("the newest Event: %s %q", newest.Reason, newest.Note)
	}
}

// TestLastChangeToldAtShutdown: a Scaled Event held back by the pacing
// (a second scale within 2 s of the first) is told when the controller
// stops, not lost with it.
func TestLastChangeToldAtShutdown(t *testing.T) {
	s := newScenario(t)
	p := s.startController()
	s.createFoo(newFoo("web", "web", 1))
	s.waitConverged("web", time.Minute)
	scale := func(n int) {
		patch := fmt.Appendf(nil, `{"spec":{"deployment":{"replicas":%d}}}`, n)
		if _, err := s.foos.SamplecontrollerV1beta1().Foos(s.ns).Patch(s.ctx, "web", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	scale(2)
	s.eventually(10*time.Second, "the first scale told", func() (bool, string) {
		n := s.fooEvents("web")["Scaled"]
		return n == 1, fmt.Sprintf("%d Scaled Events", n)
	})
	scale(3)
	s.eventually(10*time.Second, "the second scale made", func() (bool, string) {
		dep, err := s.getDeployment("web")
		if err != nil {
			return false, err.Error()
		}
		return *dep.Spec.Replicas == 3, fmt.Sprintf("Deployment at %d replicas", *dep.Spec.Replicas)
	})
	if err := p.stop(30 * time.Second); err != nil {
		t.Fatalf("stop: %v", err)
	}
	list, err := s.kube.EventsV1().Events(s.ns).List(s.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var notes []string
	for _, e := range list.Items {
		if e.Regarding.Name == "web" && e.Reason == "Scaled" {
			notes = append(notes, e.Note)
		}
	}
	if !slices.ContainsFunc(notes, func(n string) bool { return strings.Contains(n, "from 2 to 3 replicas") }) {
		t.Errorf("Scaled Events %q: the scale to 3, held back when the controller stopped, was not told", notes)
	}
}

// TestNamespaceDeletedWritesNoStatus deletes a namespace of Foos, some
// with the Orphan policy (a finalizer of ours), and checks that the
// controller writes no status to them while they go: the namespace's
// deletion removes their Deployments too, and a Foo that is being deleted,
// or whose namespace is, has nothing left to report to anyone.
func TestNamespaceDeletedWritesNoStatus(t *testing.T) {
	s := newScenario(t)
	s.startController()
	const n = 200
	names := make([]string, n)
	for i := range n {
		names[i] = fmt.Sprintf("foo-%03d", i)
		foo := newFoo(names[i], names[i], 1)
		if i%4 == 0 {
			foo.Spec.DeletionPolicy = samplev1beta1.DeletionPolicyOrphan
		}
		s.createFoo(foo)
	}
	s.waitAllConverged(names, 3*time.Minute)

	start := time.Now()
	if err := s.kube.CoreV1().Namespaces().Delete(s.ctx, s.ns, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	s.eventually(5*time.Minute, "the namespace to be gone", func() (bool, string) {
		_, err := s.kube.CoreV1().Namespaces().Get(s.ctx, s.ns, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, ""
		}
		foos, _ := s.foos.SamplecontrollerV1beta1().Foos(s.ns).List(s.ctx, metav1.ListOptions{})
		deps, _ := s.kube.AppsV1().Deployments(s.ns).List(s.ctx, metav1.ListOptions{})
		return false, fmt.Sprintf("%d Foos, %d Deployments left (%v)", len(foos.Items), len(deps.Items), err)
	})
	gone := time.Since(start)
	time.Sleep(2 * time.Second) // any late write would be in the audit log by now
	writes := writesOf(s.controllerRequests(start, time.Now()))
	var status []auditEvent
	for _, e := range writes {
		if e.resource() == "foos/status" {
			status = append(status, e)
		}
	}
	byKind := map[string]int{}
	for _, e := range writes {
		byKind[fmt.Sprintf("%s %s %d", e.Verb, e.resource(), e.ResponseStatus.Code)]++
	}
	t.Logf("namespace of %d Foos gone in %v; the controller's writes meanwhile: %v", n, gone.Round(time.Millisecond), byKind)
	if len(status) > 0 {
		t.Errorf("%d status writes to Foos of a namespace being deleted, want none:%s", len(status), summarize(status))
	}
	var refused []auditEvent
	for _, e := range writes {
		if e.resource() == "deployments" && e.ResponseStatus != nil && e.ResponseStatus.Code == 403 {
			refused = append(refused, e)
		}
	}
	if len(refused) > 0 {
		t.Errorf("%d Deployment writes refused in a namespace being deleted, want none:%s", len(refused), summarize(refused))
	}
}
