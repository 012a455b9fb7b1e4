package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensions "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	samplev1alpha1 "example.com/foo-controller/pkg/apis/samplecontroller/v1alpha1"
	samplev1beta1 "example.com/foo-controller/pkg/apis/samplecontroller/v1beta1"
	clientset "example.com/foo-controller/pkg/generated/clientset/versioned"
	fooinformers "example.com/foo-controller/pkg/generated/informers/externalversions"
	"example.com/foo-controller/pkg/plan"
	"example.com/foo-controller/pkg/storagemigrate"
)

const (
	image       = "nginx:1.27"
	editedImage = "nginx:1.28"
	depSuffix   = "-dep"
	fieldMgr    = "foo-bench"
	progressGap = 5 * time.Second
)

type clients struct {
	kube kubernetes.Interface
	foo  clientset.Interface
	ext  apiextensions.Interface
	dyn  dynamic.Interface
	// inV1alpha1: the converge phase creates its Foos in v1alpha1.
	inV1alpha1 bool
}

// createFoo creates one of the converge phase's Foos: in v1beta1, or, with
// c.inV1alpha1, in v1alpha1, as a cluster from before v1beta1 holds them.
func (c clients) createFoo(ctx context.Context, ns, name string, replicas int32) error {
	if c.inV1alpha1 {
		_, err := c.foo.SamplecontrollerV1alpha1().Foos(ns).Create(ctx, &samplev1alpha1.Foo{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       samplev1alpha1.FooSpec{DeploymentName: name + depSuffix, Replicas: ptr.To(replicas), Image: image},
		}, metav1.CreateOptions{})
		return err
	}
	_, err := c.foo.SamplecontrollerV1beta1().Foos(ns).Create(ctx, &samplev1beta1.Foo{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       samplev1beta1.FooSpec{Deployment: samplev1beta1.DeploymentSpec{Name: name + depSuffix, Replicas: ptr.To(replicas), Image: image}},
	}, metav1.CreateOptions{})
	return err
}

func progress(format string, args ...any) {
	_, _ = fmt.Fprintf(stderr, "bench: "+format+"\n", args...)
}

// parallel runs f(0..n-1) on workers goroutines and returns the first error.
func parallel(n, workers int, f func(i int) error) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
		next  = make(chan int)
	)
	for range workers {
		wg.Go(func() {
			for i := range next {
				if err := f(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return first
}

// newNamespace creates a namespace and waits for its default ServiceAccount
// (pods are refused without it, which would add retries to what we measure).
func newNamespace(ctx context.Context, c clients, name string) error {
	var made []string
	return newNamespaces(ctx, c, []string{name}, &made)
}

// newNamespaces creates names, in order, as newNamespace does, and adds
// each one it created to *made: what the run deletes if it ends early. A
// name that existed already is not the bench's to delete.
func newNamespaces(ctx context.Context, c clients, names []string, made *[]string) error {
	for _, name := range names {
		_, err := c.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
			Name: name, Labels: map[string]string{benchLabel: fieldMgr},
		}}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		*made = append(*made, name)
		if err := waitServiceAccount(ctx, c, name); err != nil {
			return err
		}
	}
	return nil
}

func waitServiceAccount(ctx context.Context, c clients, name string) error {
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := c.kube.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
}

// checkClean refuses to start when a bench's namespaces are still there
// (an interrupted run), or when one of the run's names (spaces) is taken:
// the names are the same in every run (namespaceNames), and team-a may be
// a real team's on a cluster of the caller's. It says, and returns, how
// many other Foos the controller will hold and sync besides the run's.
func checkClean(ctx context.Context, c clients, spaces []string) (others int, err error) {
	nss, err := c.kube.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	var left, taken []string
	for _, ns := range nss.Items {
		switch {
		case strings.HasPrefix(ns.Name, "bench-") || ns.Labels[benchLabel] == fieldMgr:
			left = append(left, ns.Name)
		case slices.Contains(spaces, ns.Name):
			taken = append(taken, ns.Name)
		}
	}
	if len(left) > 0 {
		return 0, fmt.Errorf("%d namespace(s) from an earlier bench are still there (%s, ...): their Foos would be counted in this run; delete them, or start from a clean control plane (hack/local-down.sh --clean)", len(left), left[0])
	}
	if len(taken) > 0 {
		return 0, fmt.Errorf("%d of the run's namespaces exist already, and not from a bench (%s, ...): the run would add its Foos to them and delete them; give another -namespace-names, or a control plane without them", len(taken), taken[0])
	}
	foos, err := c.foo.SamplecontrollerV1beta1().Foos(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	if n := len(foos.Items); n > 0 {
		progress("note: %d Foo(s) outside the bench exist (%s/%s, ...); the controller holds and resyncs them too", n, foos.Items[0].Namespace, foos.Items[0].Name)
	}
	return len(foos.Items), nil
}

// deleteNamespaces deletes them and waits until they are gone, so that
// their garbage collection does not load the next phase.
func deleteNamespaces(ctx context.Context, c clients, names []string, timeout time.Duration) error {
	start := time.Now()
	for _, name := range names {
		err := c.kube.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	err := wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		for _, name := range names {
			if _, err := c.kube.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false, nil
			}
		}
		return true, nil
	})
	progress("%d namespace(s) (%s) deleted in %.1fs", len(names), names[0], time.Since(start).Seconds())
	return err
}

// firsts records, per Foo name, the first time something was seen.
type firsts struct {
	mu sync.Mutex
	m  map[string]time.Time
}

func newFirsts() *firsts { return &firsts{m: map[string]time.Time{}} }

func (f *firsts) mark(name string, t time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.m[name]; !ok {
		f.m[name] = t
	}
}

func (f *firsts) len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.m)
}

func (f *firsts) snapshot() map[string]time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]time.Time, len(f.m))
	for k, v := range f.m {
		out[k] = v
	}
	return out
}

func (f *firsts) last() time.Time {
	var l time.Time
	for _, t := range f.snapshot() {
		if t.After(l) {
			l = t
		}
	}
	return l
}

// fooReported: the controller has written the Foo's status for its
// generation (the CRD defaults observedGeneration to 0, generations start
// at 1). Without kube-controller-manager's Deployment controller, that is
// as far as a Foo goes.
func fooReported(foo *samplev1beta1.Foo) bool {
	return foo.Status.ObservedGeneration == foo.Generation
}

func fooReady(foo *samplev1beta1.Foo) bool {
	return meta.IsStatusConditionTrue(foo.Status.Conditions, samplev1beta1.ConditionReady) &&
		foo.Status.ObservedGeneration == foo.Generation
}

func deploymentAsDeclared(d *appsv1.Deployment, replicas int32) bool {
	if d.Spec.Replicas == nil || *d.Spec.Replicas != replicas {
		return false
	}
	for _, ctr := range d.Spec.Template.Spec.Containers {
		if ctr.Image == image {
			return true
		}
	}
	return false
}

func deploymentAvailable(d *appsv1.Deployment) bool {
	return d.Spec.Replicas != nil && d.Status.ObservedGeneration >= d.Generation &&
		d.Status.AvailableReplicas == *d.Spec.Replicas
}

// measured is what converge reads of the controller: one process
// (*controllerProc), or several whose metrics and memory it sums (procs).
// members are its processes, for their CPU (plane.mark).
type measured interface {
	scrape() (sample, error)
	alive() error
	settle(quiet, max time.Duration) (sample, error)
	memStatus() (map[string]int64, error)
	cpuProfile(path string, window time.Duration) error
	members() []*controllerProc
}

// converge creates the Foos of p, of the given replicas, and measures until
// every one is Ready (withKCM) or, without kube-controller-manager's
// Deployment controller, until every one's status is written.
//
// The CPU each process of the machine used until every Deployment existed
// is in the burst_cpu_* figures, and from then until every Foo was done
// in tail_cpu_*; with profile set, the controller's CPU
// profile over the first profileWindow of the burst is saved there.
func converge(ctx context.Context, c clients, ctrl measured, pl plane, p placement, replicas int32, workers int, timeout time.Duration, withKCM bool, profile string, profileWindow time.Duration) (figures, series, error) {
	done, doneName := fooReady, "Ready"
	if !withKCM {
		done, doneName = fooReported, "reported"
	}
	spaces, n := p.spaces, len(p.of)
	created, depOK, depAvail, ready := newFirsts(), newFirsts(), newFirsts(), newFirsts()

	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	// One namespace: informers on it. Several: on all namespaces, keeping
	// only the bench's.
	watched := map[string]bool{}
	for _, ns := range spaces {
		watched[ns] = true
	}
	var kopts []kubeinformers.SharedInformerOption
	var fopts []fooinformers.SharedInformerOption
	if len(spaces) == 1 {
		kopts = append(kopts, kubeinformers.WithNamespace(spaces[0]))
		fopts = append(fopts, fooinformers.WithNamespace(spaces[0]))
	}
	kf := kubeinformers.NewSharedInformerFactoryWithOptions(c.kube, 0, kopts...)
	ff := fooinformers.NewSharedInformerFactoryWithOptions(c.foo, 0, fopts...)
	onDep := func(obj any) {
		now := time.Now()
		d, ok := obj.(*appsv1.Deployment)
		if !ok || !watched[d.Namespace] {
			return
		}
		foo := strings.TrimSuffix(d.Name, depSuffix)
		if deploymentAsDeclared(d, replicas) {
			depOK.mark(foo, now)
		}
		if deploymentAvailable(d) {
			depAvail.mark(foo, now)
		}
	}
	onFoo := func(obj any) {
		now := time.Now()
		if f, ok := obj.(*samplev1beta1.Foo); ok && watched[f.Namespace] && done(f) {
			ready.mark(f.Name, now)
		}
	}
	if _, err := kf.Apps().V1().Deployments().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: onDep, UpdateFunc: func(_, o any) { onDep(o) },
	}); err != nil {
		return nil, nil, err
	}
	if _, err := ff.Samplecontroller().V1beta1().Foos().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: onFoo, UpdateFunc: func(_, o any) { onFoo(o) },
	}); err != nil {
		return nil, nil, err
	}
	kf.Start(watchCtx.Done())
	ff.Start(watchCtx.Done())
	kf.WaitForCacheSync(watchCtx.Done())
	ff.WaitForCacheSync(watchCtx.Done())

	before, err := ctrl.scrape()
	if err != nil {
		return nil, nil, err
	}
	reviewsBefore := conversionReviews.Load()
	where := spaces[0]
	if len(spaces) > 1 {
		where = fmt.Sprintf("%d namespaces (%s, ...)", len(spaces), spaces[0])
	}
	progress("converge: creating %d Foos in %s with %d workers", n, where, workers)
	// From the first create, not the last: the queue fills while the
	// creates outpace the workers, and a short run has converged within
	// seconds of its last create.
	stopDepth := sampleMax(depthSampleEvery, func() (float64, error) {
		s, err := ctrl.scrape()
		if err != nil {
			return 0, err
		}
		return s.sum("workqueue_depth", ourQueues), nil
	})
	defer stopDepth()
	profiled := make(chan error, 1)
	if profile != "" {
		go func() { profiled <- ctrl.cpuProfile(profile, profileWindow) }()
	} else {
		profiled <- nil
	}
	cpu0 := pl.mark(ctrl.members()...)
	var cpuExist cpuMark
	t0 := time.Now()
	err = parallel(n, workers, func(i int) error {
		name := fmt.Sprintf("foo-%d", i)
		err := c.createFoo(ctx, p.of[i], name, replicas)
		if err == nil {
			created.mark(name, time.Now())
		}
		return err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("creating Foos: %w", err)
	}
	createsDone := time.Since(t0)
	deadline := time.Now().Add(timeout)
	lastProgress := time.Now()
	for ready.len() < n || depOK.len() < n {
		if cpuExist.cpu == nil && depOK.len() == n {
			cpuExist = pl.mark(ctrl.members()...)
		}
		if err := ctrl.alive(); err != nil {
			return nil, nil, err
		}
		if err := ctx.Err(); err != nil {
			return nil, nil, fmt.Errorf("converge: interrupted: %w", err)
		}
		if time.Now().After(deadline) {
			return nil, nil, fmt.Errorf("converge: only %d/%d Foos %s and %d/%d Deployments as declared after %v", ready.len(), n, doneName, depOK.len(), n, timeout)
		}
		if time.Since(lastProgress) >= progressGap {
			lastProgress = time.Now()
			progress("converge: %5.1fs deployments %d/%d, available %d/%d, foos %s %d/%d",
				time.Since(t0).Seconds(), depOK.len(), n, depAvail.len(), n, doneName, ready.len(), n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	cpuEnd := pl.mark(ctrl.members()...)
	maxDepth := stopDepth()
	if err := <-profiled; err != nil {
		return nil, nil, fmt.Errorf("CPU profile of the burst: %w", err)
	}
	if profile != "" {
		progress("CPU profile over the first %v of the burst written to %s (go tool pprof -top %s)", profileWindow, profile, profile)
	}
	progress("converge: all %d Foos %s after %.2fs; waiting for the controller to go quiet", n, doneName, time.Since(t0).Seconds())
	after, err := ctrl.settle(3*time.Second, time.Minute)
	if err != nil {
		return nil, nil, err
	}
	mem, err := ctrl.memStatus()
	if err != nil {
		return nil, nil, err
	}

	events := 0
	for _, ns := range spaces {
		evs, err := c.kube.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, nil, err
		}
		for _, e := range evs.Items {
			if e.Regarding.Kind == "Foo" {
				events++
			}
		}
	}

	cr, dok, da, rd := created.snapshot(), depOK.snapshot(), depAvail.snapshot(), ready.snapshot()
	var latency, lag []time.Duration
	for name, r := range rd {
		latency = append(latency, r.Sub(cr[name]))
		if a, ok := da[name]; ok {
			lag = append(lag, r.Sub(a))
		}
	}
	methods := diffMethods(before, after)
	nf := float64(n)
	fig := figures{
		"creates_sent_s":             createsDone.Seconds(),
		"deployments_exist_s":        depOK.last().Sub(t0).Seconds(),
		"burst_foos_per_s":           nf / depOK.last().Sub(t0).Seconds(),
		"requests_per_foo":           total(methods) / nf,
		"writes_per_foo":             writesOf(methods) / nf,
		"writes_excl_events_per_foo": (writesOf(methods) - float64(events)) / nf,
		"events_per_foo":             float64(events) / nf,
		"conversion_reviews_per_foo": float64(conversionReviews.Load()-reviewsBefore) / nf,
		"peak_rss_mb":                float64(mem["VmHWM"]) / (1 << 20),
		"rss_file_mb":                float64(mem["RssFile"]) / (1 << 20),
		"rss_anon_mb":                float64(mem["RssAnon"]) / (1 << 20),
		"go_heap_inuse_mb":           after.sum("go_memstats_heap_inuse_bytes") / (1 << 20),
		// Time the controller's requests spent waiting for its client-side
		// rate limiter (-kube-api-qps/-kube-api-burst), summed over requests.
		"ratelimit_wait_s_per_foo": (after.sum("rest_client_rate_limiter_duration_seconds_sum") -
			before.sum("rest_client_rate_limiter_duration_seconds_sum")) / nf,
		"workqueue_depth_max": maxDepth,
	}
	if cpuExist.cpu == nil {
		// Every Deployment and every Foo done between two polls: the
		// burst ends with the tail.
		cpuExist = cpuEnd
	}
	merge(fig, cpuFigures("burst", cpu0, cpuExist))
	merge(fig, cpuFigures("tail", cpuExist, cpuEnd))
	if withKCM {
		fig["deployments_available_s"] = depAvail.last().Sub(t0).Seconds()
		fig["foos_ready_s"] = ready.last().Sub(t0).Seconds()
		fig["ready_after_last_available"] = ready.last().Sub(depAvail.last()).Seconds()
		fig["latency_p50_s"], fig["latency_p99_s"] = pct(latency, 50), pct(latency, 99)
		fig["status_lag_p50_s"], fig["status_lag_p99_s"], fig["status_lag_max_s"] = pct(lag, 50), pct(lag, 99), pct(lag, 100)
	} else {
		fig["foos_reported_s"] = ready.last().Sub(t0).Seconds()
	}
	for m, v := range methods {
		fig["converge_"+m+"_per_foo"] = v / nf
	}
	if len(dok) != n {
		return nil, nil, fmt.Errorf("converge: saw %d/%d Deployments as declared", len(dok), n)
	}
	ser := series{
		"foos_created":      secondsSince(t0, cr),
		"deployments_exist": secondsSince(t0, dok),
	}
	ser["foos_"+strings.ToLower(doneName)] = secondsSince(t0, rd)
	return fig, ser, nil
}

// depthSampleEvery is how often converge reads the workqueue's depth, a
// gauge: a peak between two reads is missed. Read every 5 s from the end
// of the creates, as it was, it said 0 for any run that converged within
// 5 s of them (and runs of the same code gave 653, 749 and 1); the creates
// of 200 Foos take about half a second.
const depthSampleEvery = 250 * time.Millisecond

// sampleMax calls read at once and then every interval until the returned
// stop is called, and stop returns the highest value read. A read that
// fails is skipped: the figure is a lower bound of the peak in any case.
// stop may be called more than once (a deferred call after the one that
// takes the figure); it waits for a read in flight.
func sampleMax(interval time.Duration, read func() (float64, error)) (stop func() float64) {
	done := make(chan struct{})
	result := make(chan float64, 1)
	go func() {
		var highest float64
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			if v, err := read(); err == nil {
				highest = max(highest, v)
			}
			select {
			case <-done:
				result <- highest
				return
			case <-tick.C:
			}
		}
	}()
	return sync.OnceValue(func() float64 {
		close(done)
		return <-result
	})
}

// series are, by name, the sorted times (seconds since the start of a
// phase) at which each object reached a state: the curves of the plots.
type series map[string][]float64

func secondsSince(t0 time.Time, m map[string]time.Time) []float64 {
	out := make([]float64, 0, len(m))
	for _, t := range m {
		out = append(out, t.Sub(t0).Seconds())
	}
	slices.Sort(out)
	return out
}

// idle measures the controller's requests over window with nothing
// changing. With cpuPath set, the controller's CPU profile over the window
// is saved there.
func idle(ctx context.Context, ctrl *controllerProc, window time.Duration, cpuPath string) (figures, error) {
	before, err := ctrl.scrape()
	if err != nil {
		return nil, err
	}
	cpuBefore, err := ctrl.cpuSeconds()
	if err != nil {
		return nil, err
	}
	progress("idle: waiting %v", window)
	start := time.Now()
	profiled := make(chan error, 1)
	if cpuPath != "" {
		go func() { profiled <- ctrl.cpuProfile(cpuPath, window) }()
	} else {
		profiled <- nil
	}
	for time.Since(start) < window {
		if err := ctrl.alive(); err != nil {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("idle: interrupted: %w", ctx.Err())
		case <-time.After(min(progressGap*2, window-time.Since(start))):
		}
		progress("idle: %3.0fs/%.0fs", time.Since(start).Seconds(), window.Seconds())
	}
	after, err := ctrl.scrape()
	if err != nil {
		return nil, err
	}
	cpuAfter, err := ctrl.cpuSeconds()
	if err != nil {
		return nil, err
	}
	mem, err := ctrl.memStatus()
	if err != nil {
		return nil, err
	}
	if err := <-profiled; err != nil {
		return nil, fmt.Errorf("CPU profile: %w", err)
	}
	if cpuPath != "" {
		progress("CPU profile over the idle window written to %s (go tool pprof -top %s)", cpuPath, cpuPath)
	}
	mins := time.Since(start).Minutes()
	methods := diffMethods(before, after)
	fig := figures{
		"idle_requests_per_min": total(methods) / mins,
		"idle_writes_per_min":   writesOf(methods) / mins,
		// Percent of one core over the window (resyncs included).
		"idle_cpu_pct": 100 * (cpuAfter - cpuBefore) / time.Since(start).Seconds(),
		// Syncs in the window: with nothing changing, every one is a
		// resync's (n of them per pass), so the CPU above is for this
		// many passes.
		"idle_syncs": after.sum("foo_controller_reconcile_total") - before.sum("foo_controller_reconcile_total"),
		// Steady state: converged, then idle for the window.
		"steady_rss_mb":        float64(mem["VmRSS"]) / (1 << 20),
		"steady_rss_anon_mb":   float64(mem["RssAnon"]) / (1 << 20),
		"steady_heap_inuse_mb": after.sum("go_memstats_heap_inuse_bytes") / (1 << 20),
	}
	for m, v := range methods {
		fig["idle_"+m+"_per_min"] = v / mins
	}
	return fig, nil
}

// restart stops ctrl and starts a new controller with the n Foos converged.
//
// The CPU each process used from the start until every key was processed
// is in the restart_cpu_* figures.
func restart(ctx context.Context, ctrl *controllerProc, pl plane, bin, kubeconfig, logPath string, n int, extra controllerExtras) (*controllerProc, figures, error) {
	progress("restart: SIGTERM the controller")
	if err := ctrl.stop(); err != nil {
		return nil, nil, err
	}
	cpu0 := pl.mark()
	next, err := startController(bin, kubeconfig, logPath, extra)
	if err != nil {
		return nil, nil, err
	}
	// The new process starts at 0 CPU seconds.
	cpu0.cpu["controller"] = 0
	readyAt, err := next.waitReady(ctx, 2*time.Minute)
	if err != nil {
		return next, nil, err
	}
	var processedAt time.Time
	var cpuFig figures
	for deadline := time.Now().Add(2 * time.Minute); ; {
		s, err := next.scrape()
		if err != nil {
			return next, nil, err
		}
		q := `name="foo-controller"`
		if s.sum("workqueue_depth", q) == 0 && s.sum("workqueue_adds_total", q) >= float64(n) &&
			s.sum("foo_controller_reconcile_total") >= float64(n) {
			processedAt = time.Now()
			cpuFig = cpuFigures("restart", cpu0, pl.mark(next))
			break
		}
		if time.Now().After(deadline) {
			return next, nil, fmt.Errorf("restart: keys not all processed after 2m (adds %v, reconciles %v)",
				s.sum("workqueue_adds_total", q), s.sum("foo_controller_reconcile_total"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	after, err := next.settle(3*time.Second, 30*time.Second)
	if err != nil {
		return next, nil, err
	}
	methods := after.requestsByMethod()
	progress("restart: ready after %.2fs, all keys processed after %.2fs, %v writes",
		readyAt.Sub(next.started).Seconds(), processedAt.Sub(next.started).Seconds(), writesOf(methods))
	fig := figures{
		"restart_ready_s":     readyAt.Sub(next.started).Seconds(),
		"restart_processed_s": processedAt.Sub(next.started).Seconds(),
		"restart_writes":      writesOf(methods),
		"restart_requests":    total(methods),
	}
	merge(fig, cpuFig)
	return next, fig, nil
}

// floor sends, without the controller, what converging n Foos of the given
// replicas needs at the least: n Deployment creates and n Foo status
// writes, with the same concurrency as the Foo creates; then, for
// comparison, n Deployment applies.
func floor(ctx context.Context, c clients, pl plane, ns string, n int, replicas int32, workers int, timeout time.Duration) (figures, series, error) {
	progress("floor: %d Deployment creates in %s", n, ns)
	cpu0 := pl.mark()
	t0 := time.Now()
	created := newFirsts()
	err := parallel(n, workers, func(i int) error {
		name := fmt.Sprintf("floor-%d", i)
		lbl := map[string]string{"app": name}
		_, err := c.kube.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: name + depSuffix, Labels: lbl},
			Spec: appsv1.DeploymentSpec{
				Replicas: ptr.To(replicas),
				Selector: &metav1.LabelSelector{MatchLabels: lbl},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: lbl},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: plan.ContainerName, Image: image}}},
				},
			},
		}, metav1.CreateOptions{FieldManager: fieldMgr})
		if err == nil {
			created.mark(name, time.Now())
		}
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	depCreate := time.Since(t0)
	cpuFig := cpuFigures("floor", cpu0, pl.mark())
	// How long kube-controller-manager, scheduler and kwok take to make
	// them available: the part of convergence that is not ours.
	var depAvail time.Duration
	// A List of all n every poll: every 200 ms at small N, less often at
	// large N (1 s per 5,000) so that the polling does not load the API
	// server it measures.
	poll := max(200*time.Millisecond, time.Duration(n/5000)*time.Second)
	err = wait.PollUntilContextTimeout(ctx, poll, timeout, true, func(ctx context.Context) (bool, error) {
		l, err := c.kube.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		avail := 0
		for i := range l.Items {
			if deploymentAvailable(&l.Items[i]) {
				avail++
			}
		}
		depAvail = time.Since(t0)
		return avail == n, nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("floor: Deployments not all available: %w", err)
	}

	progress("floor: %d Foo creates, then %d status writes", n, n)
	foos := make([]*samplev1beta1.Foo, n)
	t1 := time.Now()
	err = parallel(n, workers, func(i int) error {
		name := fmt.Sprintf("floor-%d", i)
		f, err := c.foo.SamplecontrollerV1beta1().Foos(ns).Create(ctx, &samplev1beta1.Foo{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       samplev1beta1.FooSpec{Deployment: samplev1beta1.DeploymentSpec{Name: name + depSuffix, Replicas: ptr.To(replicas), Image: image}},
		}, metav1.CreateOptions{})
		foos[i] = f
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	fooCreate := time.Since(t1)
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	t2 := time.Now()
	err = parallel(n, workers, func(i int) error {
		f := foos[i]
		st := samplev1beta1.FooStatus{
			ObservedGeneration: f.Generation, Replicas: replicas, AvailableReplicas: replicas, ReadyReplicas: replicas,
			// The two conditions of a converged Foo: the same size of write.
			Conditions: []metav1.Condition{{
				Type: samplev1beta1.ConditionReady, Status: metav1.ConditionTrue, ObservedGeneration: f.Generation,
				LastTransitionTime: now, Reason: samplev1beta1.ReasonDeploymentAvailable, Message: "bench floor",
			}, {
				Type: samplev1beta1.ConditionAvailable, Status: metav1.ConditionTrue, ObservedGeneration: f.Generation,
				LastTransitionTime: now, Reason: samplev1beta1.ReasonMinimumReplicasAvailable, Message: "bench floor",
			}},
		}
		_, err := c.foo.SamplecontrollerV1beta1().Foos(ns).ApplyStatus(ctx, plan.StatusApply(f, st),
			metav1.ApplyOptions{FieldManager: fieldMgr, Force: true})
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	statusWrites := time.Since(t2)

	// The controller creates its Deployments by server-side apply, which
	// costs the API server more than a create: the same n Deployments
	// (plan.DesiredDeployment of each Foo, under new names) applied
	// the controller's way show how much of the gap to the create floor
	// is the verb.
	progress("floor: %d Deployment applies", n)
	t3 := time.Now()
	err = parallel(n, workers, func(i int) error {
		f := foos[i].DeepCopy()
		f.Spec.Deployment.Name = fmt.Sprintf("floor-apply-%d", i)
		_, err := c.kube.AppsV1().Deployments(ns).Apply(ctx, plan.DesiredDeployment(f),
			metav1.ApplyOptions{FieldManager: fieldMgr, Force: true})
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	fig := figures{
		"floor_deployment_creates_s":    depCreate.Seconds(),
		"floor_deployments_available_s": depAvail.Seconds(),
		"floor_foo_creates_s":           fooCreate.Seconds(),
		"floor_status_writes_s":         statusWrites.Seconds(),
		"floor_deployment_applies_s":    time.Since(t3).Seconds(),
	}
	merge(fig, cpuFig)
	return fig, series{"floor_deployments_created": secondsSince(t0, created.snapshot())}, nil
}

// pct is the p-th percentile (nearest rank) in seconds.
func pct(d []time.Duration, p float64) float64 {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(float64(len(s))*p/100+0.999999) - 1
	i = max(0, min(i, len(s)-1))
	return s[i].Seconds()
}

// editOne changes the image of one Foo among the n converged and idle ones
// (foo-0, in its namespace ns) and measures the time until its Deployment
// carries it: the latency a user sees with n Foos in the caches.
func editOne(ctx context.Context, c clients, ns, name string) (figures, error) {
	t0 := time.Now()
	patch := fmt.Sprintf(`{"spec":{"deployment":{"image":%q}}}`, editedImage)
	if _, err := c.foo.SamplecontrollerV1beta1().Foos(ns).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return nil, err
	}
	for deadline := t0.Add(time.Minute); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		d, err := c.kube.AppsV1().Deployments(ns).Get(ctx, name+depSuffix, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		if len(d.Spec.Template.Spec.Containers) > 0 && d.Spec.Template.Spec.Containers[0].Image == editedImage {
			s := time.Since(t0).Seconds()
			progress("edit: one Foo's image reached its Deployment in %.3fs", s)
			return figures{"edit_to_deployment_s": s}, nil
		}
	}
	return nil, errors.New("edit: the Deployment did not get the new image within a minute")
}

// scaleAroundTheMove scales every converged Foo, created through v1alpha1,
// moves their managed fields to v1beta1 as make migrate-storage
// -method=rewrite does (at the bench's client rate, not the tool's 50
// requests/s), and scales them all again: what the move saves the writes
// of an upgraded cluster, measured in one run.
func scaleAroundTheMove(ctx context.Context, c clients, ctrl *controllerProc, p placement, replicas int32, workers int, timeout time.Duration) (figures, error) {
	before, beforeReviews, err := scaleAll(ctx, c, ctrl, p, replicas+1, workers, timeout)
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	// The rewrite: one write per Foo, which moves its managed fields
	// (and stores it in v1beta1, if storedVersions still name v1alpha1:
	// the Foos were written in v1beta1's storage long before, settled).
	res, err := storagemigrate.Migrate(ctx, storagemigrate.Clients{Kube: c.kube, APIExtensions: c.ext, Dynamic: c.dyn},
		"foos.samplecontroller.example.com", storagemigrate.Options{Method: storagemigrate.Rewrite, Settle: time.Second, ManagedFields: storagemigrate.FooFields})
	if err != nil {
		return nil, fmt.Errorf("moving the managed fields: %w", err)
	}
	moved := time.Since(t0).Seconds()
	progress("move: the managed fields of %d Foos moved in %.2fs", res.FieldsMoved, moved)
	if res.FieldsMoved < len(p.of) {
		return nil, fmt.Errorf("moving the managed fields: %d moved, want the %d Foos'", res.FieldsMoved, len(p.of))
	}
	if _, err := ctrl.settle(3*time.Second, time.Minute); err != nil {
		return nil, err
	}
	after, afterReviews, err := scaleAll(ctx, c, ctrl, p, replicas+2, workers, timeout)
	if err != nil {
		return nil, err
	}
	return figures{
		"scale_all_s": before, "scale_all_reviews_per_foo": beforeReviews,
		"move_fields_s":     moved,
		"scale_all_moved_s": after, "scale_all_moved_reviews_per_foo": afterReviews,
		"scale_all_moved_vs_before": after / before,
	}, nil
}

// scaleAll sets every Foo's replicas, with a merge patch in v1beta1 as a
// user scaling them sends, and waits until every one is Ready at its new
// generation: the seconds that took, and the conversion reviews the
// bench's webhook answered per Foo until the controller was quiet again.
func scaleAll(ctx context.Context, c clients, ctrl *controllerProc, p placement, replicas int32, workers int, timeout time.Duration) (secs, reviewsPerFoo float64, err error) {
	n := len(p.of)
	reviews0 := conversionReviews.Load()
	patch := []byte(fmt.Sprintf(`{"spec":{"deployment":{"replicas":%d}}}`, replicas))
	t0 := time.Now()
	if err := parallel(n, workers, func(i int) error {
		_, err := c.foo.SamplecontrollerV1beta1().Foos(p.of[i]).Patch(ctx, fmt.Sprintf("foo-%d", i), types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	}); err != nil {
		return 0, 0, fmt.Errorf("scale-all: %w", err)
	}
	ours := map[string]bool{}
	for _, ns := range p.spaces {
		ours[ns] = true
	}
	listed := p.spaces[0]
	if len(p.spaces) > 1 {
		listed = metav1.NamespaceAll
	}
	ready := 0
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		list, err := c.foo.SamplecontrollerV1beta1().Foos(listed).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			return false, err
		}
		ready = 0
		for i := range list.Items {
			f := &list.Items[i]
			if ours[f.Namespace] && ptr.Deref(f.Spec.Deployment.Replicas, 0) == replicas && fooReady(f) {
				ready++
			}
		}
		return ready == n, nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("scale-all to %d: %d/%d Foos Ready: %w", replicas, ready, n, err)
	}
	secs = time.Since(t0).Seconds()
	if _, err := ctrl.settle(3*time.Second, time.Minute); err != nil {
		return 0, 0, err
	}
	reviewsPerFoo = float64(conversionReviews.Load()-reviews0) / float64(n)
	progress("scale-all: %d Foos Ready at %d replicas after %.2fs, %.2f conversion reviews per Foo", n, replicas, secs, reviewsPerFoo)
	return secs, reviewsPerFoo, nil
}

// listFloor is the floor of a start-up: a bare list of the n Foos and n
// Deployments in ns ("" for all namespaces, when the bench spreads them),
// one request each, as a client with no cache does it.
func listFloor(ctx context.Context, c clients, ns string) (figures, error) {
	t0 := time.Now()
	foos, err := c.foo.SamplecontrollerV1beta1().Foos(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	deps, err := c.kube.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	s := time.Since(t0).Seconds()
	progress("floor: listed %d Foos and %d Deployments in %.2fs", len(foos.Items), len(deps.Items), s)
	return figures{"floor_list_s": s}, nil
}

// deleteNamespaceWhileRunning deletes the first of the run's namespaces
// with the controller running, as a user tearing down an environment
// would, and reports how long until it is gone, what the controller sent
// meanwhile (nothing should be written for Foos being deleted: no
// status, no Deployment re-created, no Event), and how soon an edit of a
// Foo in another namespace, sent a second into the deletion, reached its
// Deployment.
func deleteNamespaceWhileRunning(ctx context.Context, c clients, ctrl *controllerProc, p placement, timeout time.Duration) (figures, error) {
	doomed := p.spaces[0]
	bystander := -1
	for i, ns := range p.of {
		if ns != doomed {
			bystander = i
			break
		}
	}
	if bystander < 0 {
		return nil, errors.New("delete-namespace: every Foo is in the namespace to delete")
	}
	count := 0
	for _, ns := range p.of {
		if ns == doomed {
			count++
		}
	}
	before, err := ctrl.scrape()
	if err != nil {
		return nil, err
	}
	progress("delete-namespace: deleting %s (%d Foos) with the controller running", doomed, count)
	t0 := time.Now()
	if err := c.kube.CoreV1().Namespaces().Delete(ctx, doomed, metav1.DeleteOptions{}); err != nil {
		return nil, err
	}
	time.Sleep(time.Second)
	ed, err := editOne(ctx, c, p.of[bystander], fmt.Sprintf("foo-%d", bystander))
	if err != nil {
		return nil, fmt.Errorf("delete-namespace: the bystander: %w", err)
	}
	err = wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		_, err := c.kube.CoreV1().Namespaces().Get(ctx, doomed, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		return nil, fmt.Errorf("delete-namespace: %s not gone after %v: %w", doomed, timeout, err)
	}
	gone := time.Since(t0).Seconds()
	after, err := ctrl.settle(3*time.Second, time.Minute)
	if err != nil {
		return nil, err
	}
	methods := diffMethods(before, after)
	// The bystander's own writes: its Deployment's apply and its status
	// (one or two, paced); the rest are for the namespace deleted.
	progress("delete-namespace: %s gone after %.1fs; the controller sent %v meanwhile; a bystander's edit reached its Deployment in %.3fs",
		doomed, gone, methods, ed["edit_to_deployment_s"])
	fig := figures{
		"nsdelete_foos":        float64(count),
		"nsdelete_gone_s":      gone,
		"nsdelete_writes":      writesOf(methods),
		"nsdelete_bystander_s": ed["edit_to_deployment_s"],
	}
	for m, v := range methods {
		fig["nsdelete_"+m] = v
	}
	return fig, nil
}
