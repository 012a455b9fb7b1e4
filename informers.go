package main

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	kubeinformers "k8s.io/client-go/informers"
	appsinformers "k8s.io/client-go/informers/apps/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"example.com/foo-controller/pkg/cachetrim"
	fooinformers "example.com/foo-controller/pkg/generated/informers/externalversions"
	fooinformersv1beta1 "example.com/foo-controller/pkg/generated/informers/externalversions/samplecontroller/v1beta1"
	"example.com/foo-controller/pkg/metrics"
	"example.com/foo-controller/pkg/options"
	"example.com/foo-controller/pkg/replicas"
)

// newInformers returns the informers of the Deployments and Foos, their
// watch failures counted (metrics.CountWatchErrors), and start, which starts them
// and returns the function that stops them.
//
// The transform trims objects before they are cached: the cache holds
// every watched object for the life of the process. Only Foos are
// resynced: a Foo's sync reads its Deployment from the cache, so the Foo
// resync covers every Deployment we own, and a Deployment resync would only
// hand each cached Deployment to a handler that drops re-deliveries (at
// 100,000 that is a walk of the whole cache, with its indexes recomputed,
// for nothing).
func newInformers(o options.Options, cs *replicas.Clients) (appsinformers.DeploymentInformer, fooinformersv1beta1.FooInformer, func(context.Context) func(lost bool), error) {
	kubeInformerFactory := kubeinformers.NewSharedInformerFactoryWithOptions(cs.Kube, 0,
		kubeinformers.WithNamespace(o.Namespace), kubeinformers.WithTransform(cachetrim.Transform))
	fooInformerFactory := fooinformers.NewSharedInformerFactoryWithOptions(cs.Foo, o.ResyncPeriod,
		fooinformers.WithNamespace(o.Namespace), fooinformers.WithTransform(cachetrim.Transform))
	deployments := kubeInformerFactory.Apps().V1().Deployments()
	foos := fooInformerFactory.Samplecontroller().V1beta1().Foos()
	if err := metrics.CountWatchErrors(map[string]cache.SharedIndexInformer{"deployments": deployments.Informer(), "foos": foos.Informer()}); err != nil {
		return nil, nil, nil, err
	}
	start := func(ctx context.Context) func(bool) {
		ctx, stopInformers := context.WithCancel(ctx)
		kubeInformerFactory.Start(ctx.Done())
		fooInformerFactory.Start(ctx.Done())
		// Waiting for them to stop is bounded: a reflector backing off
		// after a failed watch-list ignores its stop channel until the
		// backoff ends (seconds, client-go v0.37), and the process is
		// about to exit anyway. After a lost Lease we do not wait at all:
		// the exit itself is what tells the orchestrator.
		return func(lost bool) {
			stopInformers()
			if !lost && !waitAtMost(informerStopWait, kubeInformerFactory.Shutdown, fooInformerFactory.Shutdown) {
				klog.FromContext(ctx).Info("Informers were still stopping at exit", "waited", informerStopWait)
			}
		}
	}
	return deployments, foos, start, nil
}

// startNamespaceInformer starts the informer of the namespaces the Foos
// live in (only -namespace's, if set), which tells the controller which
// are being deleted (see WithNamespaces). It stops with ctx. Namespaces
// are few and small: its cache costs little beside the Foos'.
func startNamespaceInformer(ctx context.Context, o options.Options, cs *replicas.Clients) (coreinformers.NamespaceInformer, error) {
	factory := kubeinformers.NewSharedInformerFactoryWithOptions(cs.Kube, 0,
		kubeinformers.WithTransform(cachetrim.Transform),
		kubeinformers.WithTweakListOptions(func(lo *metav1.ListOptions) {
			if o.Namespace != "" {
				lo.FieldSelector = fields.OneTermEqualSelector("metadata.name", o.Namespace).String()
			}
		}))
	namespaces := factory.Core().V1().Namespaces()
	if err := metrics.CountWatchErrors(map[string]cache.SharedIndexInformer{"namespaces": namespaces.Informer()}); err != nil {
		return nil, err
	}
	factory.Start(ctx.Done())
	return namespaces, nil
}

// informerStopWait bounds how long a graceful stop waits for the informers
// to stop.
const informerStopWait = 2 * time.Second

// waitAtMost runs each fn in turn in the background and reports whether all
// returned within d. Those still running are left to the process's exit.
func waitAtMost(d time.Duration, fns ...func()) bool {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, fn := range fns {
			fn()
		}
	}()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}
