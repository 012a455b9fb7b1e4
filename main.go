// Command foo-controller keeps a Deployment in the shape each Foo
// (samplecontroller.example.com/v1beta1) declares and reports its state on
// the Foo. See README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	kubeinformers "k8s.io/client-go/informers"
	appsinformers "k8s.io/client-go/informers/apps/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection"

	// The JSON log format for -logging-format=json.
	_ "k8s.io/component-base/logs/json/register"
	"k8s.io/klog/v2"

	samplev1beta1 "example.com/foo-controller/pkg/apis/samplecontroller/v1beta1"
	"example.com/foo-controller/pkg/buildinfo"
	"example.com/foo-controller/pkg/cachetrim"
	"example.com/foo-controller/pkg/eventsink"
	fooinformers "example.com/foo-controller/pkg/generated/informers/externalversions"
	fooinformersv1beta1 "example.com/foo-controller/pkg/generated/informers/externalversions/samplecontroller/v1beta1"
	"example.com/foo-controller/pkg/leader"
	"example.com/foo-controller/pkg/metrics"
	"example.com/foo-controller/pkg/options"
	"example.com/foo-controller/pkg/shard"
	"example.com/foo-controller/pkg/startup"
	"example.com/foo-controller/pkg/webhook"
)

func main() {
	opts, err := options.Parse(controllerName, os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "foo-controller: %v (see -help)\n", err)
		os.Exit(2)
	}
	if opts.PrintVersion {
		fmt.Println(buildinfo.Read().Line())
		return
	}

	ctx := signalContext(klog.NewContext(context.Background(), klog.Background()))
	if err := run(ctx, opts); err != nil {
		if ctx.Err() != nil && errors.Is(err, context.Canceled) {
			// A signal before start-up finished (say, a rollout that
			// replaced this Pod at once): a clean stop, not a failure.
			klog.Background().Info("Stopped before start-up finished")
			klog.Flush()
			return
		}
		fmt.Fprintf(os.Stderr, "foo-controller: %v\n", err)
		klog.Flush()
		os.Exit(1)
	}
	klog.Background().Info("Stopped")
	klog.Flush()
}

// signalContext returns a context cancelled by the first SIGTERM or SIGINT,
// which starts a graceful shutdown. A second signal exits at once.
func signalContext(parent context.Context) context.Context {
	ctx, cancel := context.WithCancel(parent)
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-ch
		klog.FromContext(ctx).Info("Received signal; shutting down gracefully (send it again to exit at once)")
		cancel()
		<-ch
		klog.Flush()
		os.Exit(1)
	}()
	return ctx
}

// run is the controller's start-up, in sample-controller's order: the
// config and clients, the informers, the controller, then its workers
// (alone, leader-elected, or sharded). What is not the controller pattern
// itself lives beside it: the clients and the write guard in clients.go,
// leader election and sharding in ha.go (the shards' slots in pkg/shard); or in packages of
// its own, one call each: the start-up checks (pkg/startup), the build's
// version (pkg/buildinfo), the conversion webhook (pkg/webhook), the
// probes and metrics (pkg/metrics), the Events' sender (pkg/eventsink).
func run(ctx context.Context, o options.Options) (err error) {
	logger := klog.FromContext(ctx)
	b := buildinfo.Read()
	metrics.Register(b.Version, b.Revision)

	identity := leader.Identity()
	cfg, err := o.ClientConfig(controllerName, identity)
	if err != nil {
		return err
	}
	lc := o.LeaseConfig(identity)
	leaseClient, err := newLeaseClient(cfg)
	if err != nil {
		return err
	}
	// Every write goes through a guard that passes it only while this
	// process holds its Lease; a single replica has none.
	member, guard, err := writeGuardFor(o, &lc, leaseClient)
	if err != nil {
		return err
	}
	cs, err := newClients(cfg, guard)
	if err != nil {
		return err
	}
	logger.Info("Starting", "version", b.Version, "commit", b.Revision, "identity", lc.Identity, "leaderElection", o.LeaderElect, "shardSlots", o.ShardSlots,
		"lease", klog.KRef(lc.LeaseNamespace, lc.LeaseName))

	electionHealth := leaderelection.NewLeaderHealthzAdaptor(lc.HealthzTimeout())
	webhookReady, stopWebhook, err := webhook.Start(ctx, cfg, webhook.Options{Addr: o.WebhookAddr,
		Namespace: lc.LeaseNamespace, Secret: o.WebhookSecret, Hosts: o.WebhookHosts, InCluster: o.InCluster()})
	if err != nil {
		return err
	}
	defer stopWebhook() // last: it answers through the drain
	var ready atomic.Pointer[func() error]
	if err := metrics.ServeProbes(ctx, o.ProbeAddr, liveness(electionHealth, member), &ready, webhookReady); err != nil {
		return err
	}
	if err := metrics.ServeMetrics(ctx, cfg, metrics.Endpoint{Addr: o.MetricsAddr, Secure: o.MetricsSecure, Profiling: o.Profiling}); err != nil {
		return err
	}
	if err := startup.CheckAPI(ctx, cs.config, o.Namespace, startup.APIWait); err != nil {
		return err
	}
	recorder, sender, err := eventsink.Start(ctx, cs.events, samplev1beta1.Install, controllerName)
	if err != nil {
		return err
	}
	defer func() { sender.Stop(logger, errors.Is(err, leader.ErrLost)) }()
	namespaces, err := startNamespaceInformer(ctx, o, cs)
	if err != nil {
		return err
	}
	if member != nil {
		return runSharded(ctx, o, member, cs, recorder, namespaces, &ready)
	}

	// The informers, the controller over them, and its workers.
	deploymentInformer, fooInformer, start, err := newInformers(o, cs)
	if err != nil {
		return err
	}
	controller, err := NewController(ctx, cs.kube, cs.foo, deploymentInformer, fooInformer, recorder,
		WithNamespaces(namespaces))
	if err != nil {
		return err
	}
	ready.Store(readyWhen(controller.HasSynced))
	// The informers start before the election, so that a standby's cache
	// is warm when it takes over, and stop when run returns, whatever the
	// reason.
	stopInformers := start(ctx)
	defer func() { stopInformers(errors.Is(err, leader.ErrLost)) }()
	if o.LeaderElect {
		lc.OnLost = sender.Drop
		return runLeaderElected(ctx, lc, leaseClient, electionHealth, func(ctx context.Context) error {
			return controller.Run(ctx, o.Workers)
		})
	}
	metrics.Leader.Set(1)
	defer metrics.Leader.Set(0)
	return controller.Run(ctx, o.Workers)
}

// readyWhen is the readiness of one leader's (or standby's) controller.
func readyWhen(synced func() bool) *func() error {
	check := func() error {
		if !synced() {
			return errors.New("caches not synced yet")
		}
		return nil
	}
	return &check
}

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
func newInformers(o options.Options, cs *clients) (appsinformers.DeploymentInformer, fooinformersv1beta1.FooInformer, func(context.Context) func(lost bool), error) {
	kubeInformerFactory := kubeinformers.NewSharedInformerFactoryWithOptions(cs.kube, 0,
		kubeinformers.WithNamespace(o.Namespace), kubeinformers.WithTransform(cachetrim.Transform))
	fooInformerFactory := fooinformers.NewSharedInformerFactoryWithOptions(cs.foo, o.ResyncPeriod,
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
func startNamespaceInformer(ctx context.Context, o options.Options, cs *clients) (coreinformers.NamespaceInformer, error) {
	factory := kubeinformers.NewSharedInformerFactoryWithOptions(cs.kube, 0,
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

// liveness is what /healthz checks besides the process serving: that a
// leader still renews its Lease, or, sharded, the member its own. The
// member's threshold is the same as the leader's (the renew deadline),
// read from its fence: there is no elector to ask.
func liveness(election *leaderelection.HealthzAdaptor, member *shard.Member) metrics.Check {
	if member != nil {
		return metrics.Check{Name: "shard-member", Check: member.Healthz}
	}
	return metrics.Check{Name: "leader-election", Check: election.Check}
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
