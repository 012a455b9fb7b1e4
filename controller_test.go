package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"golang.org/x/sync/semaphore"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	core "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2/ktesting"

	samplev1beta1 "example.com/foo-controller/pkg/apis/samplecontroller/v1beta1"
	"example.com/foo-controller/pkg/generated/clientset/versioned/fake"
	informers "example.com/foo-controller/pkg/generated/informers/externalversions"
	"example.com/foo-controller/pkg/metrics"
	"example.com/foo-controller/pkg/plan"
	"example.com/foo-controller/pkg/shard"
)

func TestSyncTransientErrors(t *testing.T) {
	deployments := schema.GroupResource{Group: "apps", Resource: "deployments"}
	tests := []struct {
		name string
		err  error
	}{
		{"server error", apierrors.NewInternalError(errors.New("etcd is sad"))},
		{"write conflict", apierrors.NewConflict(deployments, "a-deploy", errors.New("stale"))},
		{"too many requests", apierrors.NewTooManyRequests("slow down", 1)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			foo := newFoo("a", 1)
			f := newFixture(t).withFoo(foo)
			_, ctx := ktesting.NewTestContext(t)
			c := f.newController(ctx)
			f.kubeclient.PrependReactor("patch", "deployments", func(core.Action) (bool, runtime.Object, error) {
				return true, nil, tc.err
			})
			if _, err := c.syncHandler(ctx, keyOf(foo)); !errors.Is(err, tc.err) {
				t.Fatalf("got %v, want %v", err, tc.err)
			}
			// Through the worker: the key is retried with backoff.
			c.workqueue.Add(keyOf(foo))
			if !c.processNextWorkItem(ctx, ctx) {
				t.Fatal("worker stopped")
			}
			if n := c.workqueue.NumRequeues(keyOf(foo)); n != 1 {
				t.Errorf("requeues: got %d, want 1", n)
			}
		})
	}
}

func TestSyncStaleFooConflictIsRetried(t *testing.T) {
	// The cached Foo is older than the stored one: the finalizer patch,
	// preconditioned on the cached resourceVersion, gets a 409 and the key
	// goes back to the queue with backoff.
	foo := newFoo("a", 1)
	foo.Spec.DeletionPolicy = samplev1beta1.DeletionPolicyOrphan
	f := newFixture(t).withFoo(foo)
	_, ctx := ktesting.NewTestContext(t)
	c := f.newController(ctx)
	f.client.PrependReactor("patch", "foos", func(a core.Action) (bool, runtime.Object, error) {
		if a.(core.PatchAction).GetPatchType() == types.MergePatchType {
			return true, nil, apierrors.NewConflict(schema.GroupResource{Group: samplev1beta1.GroupName, Resource: "foos"}, "a", errors.New("stale"))
		}
		return false, nil, nil
	})
	if _, err := c.syncHandler(ctx, keyOf(foo)); !apierrors.IsConflict(err) {
		t.Fatalf("want a conflict, got %v", err)
	}
	c.workqueue.Add(keyOf(foo))
	c.processNextWorkItem(ctx, ctx)
	if n := c.workqueue.NumRequeues(keyOf(foo)); n != 1 {
		t.Errorf("requeues: got %d, want 1", n)
	}
	assertActions(t, "kube", f.kubeclient.Actions(), nil) // nothing done past the failed step
}

func TestWorkerRecoversPanic(t *testing.T) {
	foo := newFoo("a", 1)
	f := newFixture(t).withFoo(foo)
	_, ctx := ktesting.NewTestContext(t)
	c := f.newController(ctx)
	f.kubeclient.PrependReactor("patch", "deployments", func(core.Action) (bool, runtime.Object, error) {
		panic("boom")
	})
	c.workqueue.Add(keyOf(foo))
	if !c.processNextWorkItem(ctx, ctx) {
		t.Fatal("worker stopped after a panic")
	}
	if n := c.workqueue.NumRequeues(keyOf(foo)); n != 1 {
		t.Errorf("a panicking key must be retried with backoff: requeues %d", n)
	}
}

// TestWorkerCountsEachResult: every sync is counted in
// foo_controller_reconcile_total under its result, a panic included.
func TestWorkerCountsEachResult(t *testing.T) {
	deployments := schema.GroupResource{Group: "apps", Resource: "deployments"}
	for _, tc := range []struct {
		result string
		apply  func() error // what applying the Deployment does; nil: it succeeds
	}{
		{metrics.ResultSuccess, nil},
		{metrics.ResultConflict, func() error { return apierrors.NewConflict(deployments, "a-deploy", errors.New("stale")) }},
		{metrics.ResultError, func() error { return apierrors.NewInternalError(errors.New("etcd is sad")) }},
		{metrics.ResultPanic, func() error { panic("boom") }},
	} {
		t.Run(tc.result, func(t *testing.T) {
			foo := newFoo("a", 1)
			f := newFixture(t).withFoo(foo)
			_, ctx := ktesting.NewTestContext(t)
			c := f.newController(ctx)
			if tc.apply != nil {
				f.kubeclient.PrependReactor("patch", "deployments", func(core.Action) (bool, runtime.Object, error) {
					return true, nil, tc.apply()
				})
			}
			before := counterValue(t, "foo_controller_reconcile_total", "result="+tc.result)
			c.workqueue.Add(keyOf(foo))
			c.processNextWorkItem(ctx, ctx)
			if got := counterValue(t, "foo_controller_reconcile_total", "result="+tc.result) - before; got != 1 {
				t.Errorf("reconcile_total{result=%q} went up by %v, want 1", tc.result, got)
			}
		})
	}
}

func TestSuccessfulSyncResetsBackoff(t *testing.T) {
	foo := newFoo("a", 1)
	dep := ownedDeployment(foo)
	withConvergedStatus(foo, dep, false)
	f := newFixture(t).withFoo(foo).withDeployment(dep)
	_, ctx := ktesting.NewTestContext(t)
	c := f.newController(ctx)
	c.workqueue.AddRateLimited(keyOf(foo))
	c.workqueue.AddRateLimited(keyOf(foo))
	c.workqueue.Add(keyOf(foo))
	c.processNextWorkItem(ctx, ctx)
	if n := c.workqueue.NumRequeues(keyOf(foo)); n != 0 {
		t.Errorf("requeues after success: got %d, want 0", n)
	}
}

// TestRequeueKeepsBackoff: "requeue after d" schedules the key (AddAfter)
// without resetting its failure backoff; only a sync that is done resets
// it.
func TestRequeueKeepsBackoff(t *testing.T) {
	f := newFixture(t)
	_, ctx := ktesting.NewTestContext(t)
	c := f.newController(ctx)
	// The key comes back after d, and not before.
	other := cache.ObjectName{Namespace: testNS, Name: "b"}
	c.handleErr(ctx, other, requeueAfter(20*time.Millisecond), nil)
	if n := c.workqueue.Len(); n != 0 {
		t.Fatalf("queue length %d right after a requeue-after, want 0", n)
	}
	if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return c.workqueue.Len() > 0, nil
	}); err != nil {
		t.Fatalf("the key never came back after its requeue-after: %v", err)
	}
	if got, _ := c.workqueue.Get(); got != other {
		t.Errorf("got key %v back, want %v", got, other)
	}

	key := cache.ObjectName{Namespace: testNS, Name: "a"}
	c.workqueue.AddRateLimited(key)
	c.workqueue.AddRateLimited(key)
	c.handleErr(ctx, key, requeueAfter(time.Hour), nil)
	if n := c.workqueue.NumRequeues(key); n != 2 {
		t.Errorf("failures after a requeue-after: got %d, want 2", n)
	}
	c.handleErr(ctx, key, syncResult{}, nil)
	if n := c.workqueue.NumRequeues(key); n != 0 {
		t.Errorf("failures after done: got %d, want 0", n)
	}
}

func TestSyncResultSoonest(t *testing.T) {
	done, one, two := syncResult{}, requeueAfter(time.Second), requeueAfter(2*time.Second)
	for _, tc := range []struct{ a, b, want syncResult }{
		{done, done, done}, {done, one, one}, {one, done, one}, {one, two, one}, {two, one, one},
	} {
		if got := tc.a.soonest(tc.b); got != tc.want {
			t.Errorf("%v.soonest(%v) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestWorkerTakesNoNewKeyAfterShutdownStarts(t *testing.T) {
	foo := newFoo("a", 1)
	f := newFixture(t).withFoo(foo)
	_, ctx := ktesting.NewTestContext(t)
	c := f.newController(ctx)
	c.workqueue.Add(keyOf(foo))
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if c.processNextWorkItem(cctx, ctx) {
		t.Error("worker went on after shutdown began")
	}
	assertActions(t, "kube", f.kubeclient.Actions(), nil)
}

func TestHasSyncedOnlyOnceBothCachesAre(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	client, kubeclient := fake.NewClientset(), k8sfake.NewClientset()
	i := informers.NewSharedInformerFactory(client, 0)
	k8sI := kubeinformers.NewSharedInformerFactory(kubeclient, 0)
	c, err := NewController(ctx, kubeclient, client, k8sI.Apps().V1().Deployments(),
		i.Samplecontroller().V1beta1().Foos(), events.NewFakeRecorder(10))
	if err != nil {
		t.Fatal(err)
	}
	if c.HasSynced() {
		t.Fatal("synced before the informers started")
	}
	cctx, cancel := context.WithCancel(ctx)
	i.Start(cctx.Done())
	k8sI.Start(cctx.Done())
	defer func() {
		cancel() // informers stop first; Shutdown waits for them
		i.Shutdown()
		k8sI.Shutdown()
	}()
	i.WaitForCacheSync(cctx.Done())
	k8sI.WaitForCacheSync(cctx.Done())
	if !c.HasSynced() {
		t.Error("not synced after both caches synced")
	}
}

// TestDeploymentsAreCachedAsViews: NewController sets the Deployment
// informer's transform itself, on an informer built without one, so that
// the cache holds plan.DeploymentView, which every read of it expects
// (deploymentsLister; the handlers, TestHandlersEnqueueTheRightFoos).
func TestDeploymentsAreCachedAsViews(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	foo := newFoo("a", 1)
	client, kubeclient := fake.NewClientset(foo), k8sfake.NewClientset(ownedDeployment(foo))
	i := informers.NewSharedInformerFactory(client, 0)
	k8sI := kubeinformers.NewSharedInformerFactory(kubeclient, 0) // no transform
	c, err := NewController(ctx, kubeclient, client, k8sI.Apps().V1().Deployments(),
		i.Samplecontroller().V1beta1().Foos(), events.NewFakeRecorder(10))
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	i.Start(cctx.Done())
	k8sI.Start(cctx.Done())
	defer func() {
		cancel()
		i.Shutdown()
		k8sI.Shutdown()
	}()
	i.WaitForCacheSync(cctx.Done())
	k8sI.WaitForCacheSync(cctx.Done())
	objs := k8sI.Apps().V1().Deployments().Informer().GetIndexer().List()
	if len(objs) != 1 {
		t.Fatalf("%d cached Deployments, want 1", len(objs))
	}
	if _, ok := objs[0].(*plan.DeploymentView); !ok {
		t.Fatalf("the cache holds a %T, want *plan.DeploymentView", objs[0])
	}
	dep, err := c.deploymentsLister.In(testNS).Get(foo.Spec.Deployment.Name)
	if err != nil || dep == nil || dep.UID != ownedDeployment(foo).UID {
		t.Errorf("deploymentsLister: %+v, %v", dep, err)
	}
	// The handlers are called after the caches sync, not before
	// WaitForCacheSync returns; nothing failed on the way. Both the Foo's
	// handler and its Deployment's queue the Foo, each from a goroutine of
	// its own: one may add it again after the first was taken out, so the
	// keys are compared as a set.
	for deadline := time.Now().Add(5 * time.Second); c.workqueue.Len() == 0 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	var got []string
	for deadline := time.Now().Add(200 * time.Millisecond); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for c.workqueue.Len() > 0 {
			key, _ := c.workqueue.Get()
			got = append(got, key.String())
			c.workqueue.Done(key)
		}
	}
	if got = slices.Compact(got); !slices.Equal(got, []string{"default/a"}) {
		t.Errorf("queued keys: got %q, want [default/a]", got)
	}
}

// TestWorkerPoolSharedBySlots: controllers sharing a pool (a sharded
// replica's slots) sync at most the pool's size of Foos at once between
// them, whatever workers each runs; one slot with work gets every token,
// and a slot whose work arrives later is served in turn, not after the
// busy slot's backlog.
func TestWorkerPoolSharedBySlots(t *testing.T) {
	const tokens = 4
	pool := semaphore.NewWeighted(tokens)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var (
		mu             sync.Mutex
		inFlight       = map[string]int{}
		total, peak    int
		release        = make(chan struct{})
		controllers    []*Controller
		foosOf         = map[string][]*samplev1beta1.Foo{}
		wg             sync.WaitGroup
		workersPerSlot = tokens // as runSharded: -workers each, one pool
	)
	build := func(slot string) *Controller {
		f := newFixture(t)
		for i := range 10 {
			foo := newFoo(fmt.Sprintf("%s-%d", slot, i), 1)
			f.withFoo(foo)
			foosOf[slot] = append(foosOf[slot], foo)
		}
		c := f.newController(ctx)
		c.workqueue.TypedRateLimitingInterface = shard.Pooled(ctx, c.workqueue.TypedRateLimitingInterface, pool)
		// Every sync holds its token in the Deployment apply until the
		// test lets one go: an API server of the test's, since the fake
		// clientset runs one request at a time.
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			inFlight[slot]++
			total++
			peak = max(peak, total)
			mu.Unlock()
			select {
			case <-release:
			case <-ctx.Done():
			}
			mu.Lock()
			inFlight[slot]--
			total--
			mu.Unlock()
			http.Error(w, "held by the test", http.StatusServiceUnavailable)
		}))
		t.Cleanup(srv.Close)
		kube, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
		if err != nil {
			t.Fatal(err)
		}
		c.kubeclientset = kube
		for range workersPerSlot {
			wg.Go(func() { c.runWorker(ctx, ctx) })
		}
		controllers = append(controllers, c)
		return c
	}
	state := func() (int, int, int) {
		mu.Lock()
		defer mu.Unlock()
		return inFlight["hot"], inFlight["late"], total
	}
	waitFor := func(what string, cond func(hot, late, total int) bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			hot, late, total := state()
			if cond(hot, late, total) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: hot %d, late %d in flight, %d in all", what, hot, late, total)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	hot, late := build("hot"), build("late")
	for _, foo := range foosOf["hot"] {
		hot.workqueue.Add(keyOf(foo))
	}
	waitFor("the busy slot to get every token", func(h, l, total int) bool { return h == tokens && total == tokens })
	for _, foo := range foosOf["late"] {
		late.workqueue.Add(keyOf(foo))
	}
	// The late slot's workers wait for a token; each one the busy slot
	// lets go goes to the longest waiter. Each takes a key, then waits for
	// a token: once every one has its key, they are (about to be) waiting,
	// ahead of the busy slot's workers, which wait again only after a
	// release. (Without this, on a loaded machine, a busy worker could be
	// back in line before a late one had begun to wait: a CI failure.)
	for deadline := time.Now().Add(5 * time.Second); late.workqueue.Len() > len(foosOf["late"])-workersPerSlot; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the late slot's workers took %d keys, want %d", len(foosOf["late"])-late.workqueue.Len(), workersPerSlot)
		}
	}
	time.Sleep(20 * time.Millisecond)
	for range tokens / 2 {
		release <- struct{}{}
	}
	waitFor("the late slot to be served before the busy slot's backlog", func(h, l, total int) bool { return l >= tokens/2 && total == tokens })
	for range 3 * tokens {
		release <- struct{}{}
	}
	cancel()
	for _, c := range controllers {
		c.workqueue.ShutDown()
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if peak > tokens {
		t.Errorf("%d syncs at once over two slots of %d workers each; want at most the pool's %d", peak, workersPerSlot, tokens)
	}
}
