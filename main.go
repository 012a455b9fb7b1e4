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

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"

	// The JSON log format for -logging-format=json.
	_ "k8s.io/component-base/logs/json/register"
	"k8s.io/klog/v2"

	samplev1beta1 "example.com/foo-controller/pkg/apis/samplecontroller/v1beta1"
	"example.com/foo-controller/pkg/buildinfo"
	"example.com/foo-controller/pkg/caches"
	"example.com/foo-controller/pkg/eventsink"
	"example.com/foo-controller/pkg/leader"
	"example.com/foo-controller/pkg/metrics"
	"example.com/foo-controller/pkg/options"
	"example.com/foo-controller/pkg/replicas"
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
// itself is one call each, into a package of its own: the flags
// (pkg/options), the clients, their write guard and leader election
// (pkg/replicas), the start-up checks (pkg/startup), the build's version
// (pkg/buildinfo), the conversion webhook (pkg/webhook), the probes and
// metrics (pkg/metrics), the Events' sender (pkg/eventsink); sharding's
// root glue is sharded.go (the slots in pkg/shard).
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
	leaseClient, err := replicas.LeaseClient(cfg)
	if err != nil {
		return err
	}
	// Every write goes through a guard that passes it only while this
	// process holds its Lease; a single replica has none.
	member, guard, err := replicas.GuardFor(o, &lc, leaseClient)
	if err != nil {
		return err
	}
	cs, err := replicas.NewClients(cfg, guard)
	if err != nil {
		return err
	}
	logger.Info("Starting", "version", b.Version, "commit", b.Revision, "identity", lc.Identity, "leaderElection", o.LeaderElect, "shardSlots", o.ShardSlots,
		"lease", klog.KRef(lc.LeaseNamespace, lc.LeaseName))

	electionHealth := leaderelection.NewLeaderHealthzAdaptor(lc.HealthzTimeout())
	var ready atomic.Pointer[func() error]
	stopWebhook, err := serve(ctx, o, cfg, lc.LeaseNamespace, liveness(electionHealth, member), &ready)
	if err != nil {
		return err
	}
	defer stopWebhook() // last: it answers through the drain
	if err := startup.CheckAPI(ctx, cs.Config, o.Namespace, startup.APIWait); err != nil {
		return err
	}
	recorder, sender, err := eventsink.Start(ctx, cs.Events, samplev1beta1.Install, controllerName)
	if err != nil {
		return err
	}
	defer func() { sender.Stop(logger, errors.Is(err, leader.ErrLost)) }()
	namespaces, err := caches.StartNamespaces(ctx, o, cs)
	if err != nil {
		return err
	}
	if member != nil {
		return runSharded(ctx, o, member, cs, recorder, namespaces, &ready)
	}

	// The informers, the controller over them, and its workers.
	deploymentInformer, fooInformer, start, err := caches.New(o, cs)
	if err != nil {
		return err
	}
	controller, err := NewController(ctx, cs.Kube, cs.Foo, deploymentInformer, fooInformer, recorder,
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
		return replicas.RunLeaderElected(ctx, lc, leaseClient, electionHealth, func(ctx context.Context) error {
			return controller.Run(ctx, o.Workers)
		})
	}
	metrics.Leader.Set(1)
	defer metrics.Leader.Set(0)
	return controller.Run(ctx, o.Workers)
}

// serve serves, in every replica, leader or not: the conversion webhook
// (pkg/webhook), the probes (live: liveness; ready: what ready holds, and
// the webhook's certificate) and the metrics (pkg/metrics). They are
// served before the start-up checks, so that a liveness probe does not
// kill a process that waits for the API server. stopWebhook stops the
// webhook after the drain.
func serve(ctx context.Context, o options.Options, cfg *rest.Config, namespace string, live metrics.Check,
	ready *atomic.Pointer[func() error]) (stopWebhook func(), err error) {
	webhookReady, stopWebhook, err := webhook.Start(ctx, cfg, webhook.Options{Addr: o.WebhookAddr,
		Namespace: namespace, Secret: o.WebhookSecret, Hosts: o.WebhookHosts, InCluster: o.InCluster()})
	if err != nil {
		return nil, err
	}
	if err := metrics.ServeProbes(ctx, o.ProbeAddr, live, ready, webhookReady); err != nil {
		stopWebhook()
		return nil, err
	}
	if err := metrics.ServeMetrics(ctx, cfg, metrics.Endpoint{Addr: o.MetricsAddr, Secure: o.MetricsSecure, Profiling: o.Profiling}); err != nil {
		stopWebhook()
		return nil, err
	}
	return stopWebhook, nil
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
