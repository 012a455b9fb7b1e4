// Package caches builds the informers the controller reads through, and
// the two indexes its handlers and syncs look things up by.
//
// Each informer's transform trims objects before they are cached
// (pkg/cachetrim): the cache holds every watched object for the life of
// the process. The Deployments' is set by the controller itself, which
// needs it whoever built the informer; the others are set here. Each
// informer counts its watch failures (metrics.CountWatchErrors).
package caches

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	kubeinformers "k8s.io/client-go/informers"
	appsinformers "k8s.io/client-go/informers/apps/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	samplev1beta1 "example.com/foo-controller/pkg/apis/samplecontroller/v1beta1"
	"example.com/foo-controller/pkg/cachetrim"
	fooinformers "example.com/foo-controller/pkg/generated/informers/externalversions"
	fooinformersv1beta1 "example.com/foo-controller/pkg/generated/informers/externalversions/samplecontroller/v1beta1"
	"example.com/foo-controller/pkg/metrics"
	"example.com/foo-controller/pkg/options"
	"example.com/foo-controller/pkg/plan"
	"example.com/foo-controller/pkg/replicas"
)

// New returns the informers of the Deployments and Foos, and start, which
// starts them and returns the function that stops them.
//
// Only Foos are resynced: a Foo's sync reads its Deployment from the
// cache, so the Foo resync covers every Deployment we own, and a
// Deployment resync would only hand each cached Deployment to a handler
// that drops re-deliveries (at 100,000 that is a walk of the whole cache,
// with its indexes recomputed, for nothing).
func New(o options.Options, cs *replicas.Clients) (appsinformers.DeploymentInformer, fooinformersv1beta1.FooInformer, func(context.Context) func(lost bool), error) {
	kubeInformerFactory := kubeinformers.NewSharedInformerFactoryWithOptions(cs.Kube, 0,
		kubeinformers.WithNamespace(o.Namespace))
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
			if !lost && !waitAtMost(stopWait, kubeInformerFactory.Shutdown, fooInformerFactory.Shutdown) {
				klog.FromContext(ctx).Info("Informers were still stopping at exit", "waited", stopWait)
			}
		}
	}
	return deployments, foos, start, nil
}

// StartNamespaces starts the informer of the namespaces the Foos live in
// (only -namespace's, if set), which tells the controller which are being
// deleted. It stops with ctx. Namespaces are few and small: its cache
// costs little beside the Foos'.
func StartNamespaces(ctx context.Context, o options.Options, cs *replicas.Clients) (coreinformers.NamespaceInformer, error) {
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

// stopWait bounds how long a graceful stop waits for the informers to
// stop.
const stopWait = 2 * time.Second

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

const (
	// FooByDeploymentName indexes Foos by "namespace/spec.deployment.name", so
	// an event on any Deployment — including one we do not own — finds the
	// Foos that want that name. That is how a Foo blocked by a foreign
	// Deployment is retried the moment that Deployment goes away, without
	// polling.
	FooByDeploymentName = "fooByDeploymentName"
	// DeploymentByFooUID indexes Deployments by the UID of the Foo that
	// controls them, so a Foo finds all its Deployments (the current one and
	// any left from an old spec.deployment.name) without a List call.
	DeploymentByFooUID = "deploymentByFooUID"
)

// AddIndexers registers the indexes above with the informers.
func AddIndexers(deploymentInformer, fooInformer cache.SharedIndexInformer) error {
	if err := fooInformer.AddIndexers(cache.Indexers{FooByDeploymentName: indexFooByDeploymentName}); err != nil {
		return fmt.Errorf("adding Foo index: %w", err)
	}
	if err := deploymentInformer.AddIndexers(cache.Indexers{DeploymentByFooUID: indexDeploymentByFooUID}); err != nil {
		return fmt.Errorf("adding Deployment index: %w", err)
	}
	return nil
}

func indexFooByDeploymentName(obj any) ([]string, error) {
	foo, ok := obj.(*samplev1beta1.Foo)
	if !ok || foo.Spec.Deployment.Name == "" {
		return nil, nil
	}
	return []string{foo.Namespace + "/" + foo.Spec.Deployment.Name}, nil
}

func indexDeploymentByFooUID(obj any) ([]string, error) {
	dep, ok := obj.(*plan.DeploymentView)
	if !ok {
		return nil, nil
	}
	if ref := plan.ControllerFoo(dep); ref != nil {
		return []string{string(ref.UID)}, nil
	}
	return nil, nil
}
