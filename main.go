// Command foo-controller keeps a Deployment in the shape each Foo
// (samplecontroller.example.com/v1alpha1) declares and reports its state on
// the Foo. See README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	apiwait "k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/tools/leaderelection"
	logsapi "k8s.io/component-base/logs/api/v1"

	// The JSON log format for -logging-format=json.
	_ "k8s.io/component-base/logs/json/register"
	"k8s.io/klog/v2"

	samplev1alpha1 "example.com/foo-controller/pkg/apis/samplecontroller/v1alpha1"
	"example.com/foo-controller/pkg/cachetrim"
	"example.com/foo-controller/pkg/eventsink"
	clientset "example.com/foo-controller/pkg/generated/clientset/versioned"
	fooinformers "example.com/foo-controller/pkg/generated/informers/externalversions"
	"example.com/foo-controller/pkg/leader"
	"example.com/foo-controller/pkg/metrics"
	"example.com/foo-controller/pkg/shard"
)

// options are the command-line flags. Each flag's help states its default.
type options struct {
	kubeconfig   string
	master       string
	namespace    string
	workers      int
	qps          float64
	burst        int
	resyncPeriod time.Duration

	leaderElect    bool
	leaderElectSet bool // -leader-elect given explicitly; otherwise on exactly when in-cluster
	lease          leader.Config
	shardSlots     int
	shardRebalance shard.Policy
	shardEvery     time.Duration

	metricsAddr string
	probeAddr   string
	profiling   bool
	logging     *logsapi.LoggingConfiguration

	printVersion bool
}

func main() {
	opts, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "foo-controller: %v (see -help)\n", err)
		os.Exit(2)
	}
	if opts.printVersion {
		fmt.Println(versionLine(readBuild()))
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
	klog.Flush()
}

func parseFlags(args []string) (options, error) {
	fs := flag.NewFlagSet("foo-controller", flag.ContinueOnError)
	o := options{logging: logsapi.NewLoggingConfiguration()}
	// -v, -vmodule and -logging-format (text or json), as in the
	// Kubernetes components themselves.
	logsapi.AddGoFlags(o.logging, fs)
	fs.StringVar(&o.kubeconfig, "kubeconfig", "",
		"Path to a kubeconfig. Default: $KUBECONFIG if set (a list, as for kubectl), else the in-cluster config.")
	fs.StringVar(&o.master, "master", "", "Address of the Kubernetes API server; overrides the kubeconfig's server.")
	fs.StringVar(&o.namespace, "namespace", metav1.NamespaceAll, "Watch only this namespace (default: all namespaces).")
	fs.IntVar(&o.workers, "workers", 32, "Number of Foos synced in parallel. A sync makes a few requests one after the other, so this is what bounds the controller's concurrent requests, and its speed in a burst (see docs/performance.md).")
	fs.Float64Var(&o.qps, "kube-api-qps", -1, "Client-side rate limit for API requests per second, of each client (Foos, Kubernetes objects, Events). Negative (the default) disables it: the API server's priority and fairness paces us, and -workers bounds our concurrency (client-go's own default is 5).")
	fs.IntVar(&o.burst, "kube-api-burst", 100, "Burst allowed above a positive -kube-api-qps (client-go's own default is 10).")
	// Every change the controller acts on is watched, so the resync is a
	// safety net, not the loop: it bounds how long a Foo in failure backoff
	// waits once the cause is gone (an outage, a refusal lifted), and it
	// costs CPU in proportion to the Foos cached (docs/performance.md,
	// "Levers": the resync).
	fs.DurationVar(&o.resyncPeriod, "resync-period", 10*time.Minute,
		"How often every cached Foo is synced again even without events; 0 disables. A resync reads only the cache and writes nothing for a converged Foo; it also retries at once a Foo in failure backoff.")
	fs.BoolVar(&o.leaderElect, "leader-elect", false,
		"Run workers only while holding a leader Lease, so that replicas can stand by. Default: true with the in-cluster config, false otherwise.")
	fs.StringVar(&o.lease.LeaseName, "leader-elect-lease-name", controllerName, "Name of the leader election Lease.")
	fs.StringVar(&o.lease.LeaseNamespace, "leader-elect-namespace", "",
		"Namespace of the leader election Lease. Default: the pod's namespace in-cluster, else \"default\".")
	fs.DurationVar(&o.lease.LeaseDuration, "leader-elect-lease-duration", 15*time.Second,
		"How long standbys wait after the last renewal before taking over a leader that stopped renewing.")
	fs.DurationVar(&o.lease.RenewDeadline, "leader-elect-renew-deadline", 10*time.Second,
		"How long the leader keeps trying to renew before it gives up leading (and exits).")
	fs.DurationVar(&o.lease.RetryPeriod, "leader-elect-retry-period", 2*time.Second,
		"How often candidates try to acquire, and the leader to renew, the Lease.")
	fs.IntVar(&o.shardSlots, "shard-slots", 0,
		"Share the work among replicas (opt-in, see docs/sharding.md): namespaces are hashed into this many slots (1 to 256; 16 is a good start), and each replica takes its share of them through Leases named after -leader-elect-lease-name, with the -leader-elect-* timings. Every replica must use the same value. 0 (the default): one leader does everything (-leader-elect).")
	fs.Float64Var(&o.shardRebalance.Skew, "shard-rebalance-skew", 1.5,
		"With -shard-slots: re-cut the slot boundaries between the namespaces that exist, weighted by their Foos, once the heaviest slot holds more than this many times the mean (and the new cut is 1.2 times better); every slot is handed over once. The first replica in order of those with a value above 0 re-cuts, so give every replica the same one. 0: this replica never re-cuts, and with 0 everywhere the boundaries stay as the group's layout Lease has them (equal hash ranges if there is none, which crowd namespaces named in sequence into few slots; delete the Lease to return to them). See docs/sharding.md.")
	fs.DurationVar(&o.shardEvery, "shard-rebalance-interval", time.Minute,
		"With -shard-slots: the least time between two re-cuts of the slot boundaries (the first, from equal ranges, waits only for the load to be known).")
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", ":8080", `Address to serve Prometheus /metrics on; "0" disables.`)
	fs.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", `Address to serve /healthz and /readyz on; "0" disables.`)
	fs.BoolVar(&o.profiling, "profiling", false, "Serve Go's profiles (/debug/pprof/) beside /metrics, to measure memory and CPU at scale.")
	fs.BoolVar(&o.printVersion, "version", false, "Print the version and the commit this binary was built from, and exit.")
	fs.SetOutput(io.Discard) // errors are reported once by main, not with the usage text
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(os.Stdout)
			_, _ = fmt.Fprintln(os.Stdout, "Usage of foo-controller:")
			fs.PrintDefaults()
		}
		return o, err
	}
	if o.printVersion {
		// Whatever else is on the command line: the question is only
		// which binary this is.
		return o, nil
	}
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "leader-elect" {
			o.leaderElectSet = true
		}
	})
	switch {
	case fs.NArg() > 0:
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	case o.workers < 1:
		return o, fmt.Errorf("-workers must be at least 1, got %d", o.workers)
	case o.qps == 0:
		return o, fmt.Errorf("-kube-api-qps must be positive, or negative to disable client-side rate limiting; got 0")
	case o.burst < 1:
		return o, fmt.Errorf("-kube-api-burst must be at least 1, got %d", o.burst)
	case o.resyncPeriod < 0:
		return o, fmt.Errorf("-resync-period must not be negative, got %v", o.resyncPeriod)
	case o.shardSlots != 0 && (o.shardSlots < 1 || o.shardSlots > 256):
		return o, fmt.Errorf("-shard-slots must be 1 to 256, or 0 for one leader; got %d", o.shardSlots)
	case o.shardSlots != 0 && o.leaderElectSet && o.leaderElect:
		return o, errors.New("-shard-slots and -leader-elect exclude each other: sharded replicas all work, each on its own slots")
	case o.shardSlots != 0 && o.namespace != metav1.NamespaceAll:
		// Slots divide namespaces, and a namespace is never split: one
		// namespace falls in one slot, and the others would hold nothing.
		return o, fmt.Errorf("-shard-slots and -namespace exclude each other: sharding divides namespaces among replicas and never splits one, so namespace %q would all fall in slot %d of %d and the other slots would be empty; for one namespace, run one leader (-leader-elect)",
			o.namespace, shard.Slots(o.shardSlots).Of(o.namespace), o.shardSlots)
	case o.shardRebalance.Skew != 0 && o.shardRebalance.Skew < shard.Gain:
		return o, fmt.Errorf("-shard-rebalance-skew must be 0 (this replica never re-cuts) or at least %v (a re-cut must gain that much); got %v", shard.Gain, o.shardRebalance.Skew)
	case o.shardEvery < 0:
		return o, fmt.Errorf("-shard-rebalance-interval must not be negative, got %v", o.shardEvery)
	}
	// Ten Foos a slot before the first re-cut: fewer say little about
	// where the many will be.
	o.shardRebalance.MinLoad = 10 * o.shardSlots
	if err := o.lease.Validate(); err != nil {
		return o, err
	}
	if err := logsapi.ValidateAndApply(o.logging, nil); err != nil {
		return o, err
	}
	return o, nil
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

func run(ctx context.Context, o options) (err error) {
	logger := klog.FromContext(ctx)

	inCluster := o.kubeconfig == "" && o.master == "" && os.Getenv(clientcmd.RecommendedConfigPathEnvVar) == ""
	if !o.leaderElectSet {
		o.leaderElect = inCluster && o.shardSlots == 0
	}
	b := readBuild()
	metrics.Register(b.version, b.revision)

	lc := o.lease
	if lc.LeaseNamespace == "" {
		lc.LeaseNamespace = leader.DefaultNamespace()
	}

	cfg, err := clientConfig(o)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = float32(o.qps), o.burst
	// The identity names this process in the leader Lease and in the
	// API server's audit log (the user agent), so that an operator can
	// tell which replica sent a request.
	identity := leader.Identity()
	cfg.UserAgent = fmt.Sprintf("%s (%s)", controllerName, identity)
	// The Lease is renewed over a client of its own, outside the fence, and
	// outside any client-side rate limit (-kube-api-qps): a renewal must
	// never wait behind the work it keeps safe. (Sharded, taking 256 slots
	// at -kube-api-qps=5 starved the member's renewals until it lost them.)
	leaseCfg := rest.CopyConfig(cfg)
	leaseCfg.QPS = -1
	var member *shard.Member
	if o.shardSlots > 0 {
		// Every other client writes only to the namespaces of the slots
		// this replica holds, and only while it renews its member Lease
		// (see shard.Member.WrapTransport).
		leaseClient, err := kubernetes.NewForConfig(leaseCfg)
		if err != nil {
			return fmt.Errorf("building the Lease client: %w", err)
		}
		member, err = shard.NewMember(leaseClient, shard.Config{
			Group: lc.LeaseName, Namespace: lc.LeaseNamespace, Slots: shard.Slots(o.shardSlots), Identity: identity,
			LeaseDuration: lc.LeaseDuration, RenewDeadline: lc.RenewDeadline, RetryPeriod: lc.RetryPeriod,
			Rebalance: o.shardRebalance, RebalanceEvery: o.shardEvery,
		})
		if err != nil {
			return err
		}
		cfg.WrapTransport = member.WrapTransport
		cfg.Dial = member.Dial((&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext)
	} else if o.leaderElect {
		// Every other client built from cfg writes only while we lead by
		// our own clock (see leader.Fence), even if the elector has not
		// noticed a loss yet.
		lc.Fence = leader.NewFence(lc)
		cfg.WrapTransport = lc.Fence.WrapTransport
		cfg.Dial = lc.Fence.Dial((&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext)
	}
	logger.Info("Starting", "version", b.version, "commit", b.revision, "identity", identity, "leaderElection", o.leaderElect, "shardSlots", o.shardSlots)

	// Built-in types travel as protobuf: smaller and several times cheaper
	// to decode than JSON, which matters for the Deployment watch and the
	// apply responses. (Foos are a custom resource: JSON only.)
	kubeCfg := rest.CopyConfig(cfg)
	kubeCfg.ContentType = runtime.ContentTypeProtobuf
	kubeCfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	kubeClient, err := kubernetes.NewForConfig(kubeCfg)
	if err != nil {
		return fmt.Errorf("building Kubernetes client: %w", err)
	}
	fooClient, err := clientset.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("building Foo client: %w", err)
	}

	// Liveness: the process serves, and a leader (or a shard member) still
	// renews its Lease: one stuck past the renew deadline gets restarted;
	// one that gives up exits by itself. Readiness: the caches are synced
	// (standbys too: they are ready to take over; sharded, see shard.Ready).
	// Served before the start-up checks, so that a liveness probe does not
	// kill a process that waits for the API server (checkAPI); /readyz
	// fails until the caches are synced.
	electionHealth := leaderelection.NewLeaderHealthzAdaptor(lc.HealthzTimeout())
	health := metrics.Check{Name: "leader-election", Check: electionHealth.Check}
	if member != nil {
		// The same threshold as the leader's (the renew deadline), read
		// from the member's fence: there is no elector to ask.
		health = metrics.Check{Name: "shard-member", Check: member.Healthz}
	}
	// ready is set once start-up is past its checks: why the workers
	// cannot work yet (their caches not synced), or nil.
	var ready atomic.Pointer[func() error]
	probes := http.NewServeMux()
	probes.Handle("/healthz", metrics.ProbeHandler(health))
	probes.Handle("/readyz", metrics.ProbeHandler(metrics.Check{Name: "informers", Check: func(*http.Request) error {
		f := ready.Load()
		if f == nil {
			return errors.New("starting: checking the API server")
		}
		return (*f)()
	}}))
	if err := metrics.Serve(ctx, "health probes", o.probeAddr, probes); err != nil {
		return err
	}
	if err := metrics.Serve(ctx, "metrics", o.metricsAddr, metrics.MetricsMux(o.profiling)); err != nil {
		return err
	}
	if err := checkAPI(ctx, cfg, o.namespace, apiStartupWait); err != nil {
		return err
	}

	// Our own scheme for the event recorder (to name Foos in Events), rather
	// than adding our types to client-go's global scheme.
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := samplev1alpha1.Install(scheme); err != nil {
		return err
	}

	// Events are sent from goroutines of their own, behind the client's
	// rate limiter. At shutdown they get a bounded time to finish (see the
	// deferred function below), so the Events of the last changes go out.
	// They go through a client of their own, with its own rate limiter
	// (the same -kube-api-qps/-burst): Events are informational and must
	// never delay the writes that converge Foos. make bench showed them
	// halving the rate of Deployment creates when they shared one.
	eventClient, err := kubernetes.NewForConfig(rest.CopyConfig(kubeCfg))
	if err != nil {
		return fmt.Errorf("building the Events client: %w", err)
	}
	// After a lost Lease, though, nothing more may be written: Events
	// still queued are dropped (lc.OnLost below).
	eventCtx, stopEvents := context.WithCancel(context.WithoutCancel(ctx))
	sink := &eventsink.Tracked{Sink: &events.EventSinkImpl{Interface: eventClient.EventsV1()}}
	broadcaster := events.NewBroadcaster(sink)
	if err := broadcaster.StartRecordingToSinkWithContext(eventCtx); err != nil {
		stopEvents()
		return fmt.Errorf("starting event recorder: %w", err)
	}
	defer func() {
		if !errors.Is(err, leader.ErrLost) {
			broadcaster.Shutdown()
			if !sink.Wait(5 * time.Second) {
				logger.Info("Some Events were still being sent at exit and are dropped")
			}
		}
		stopEvents()
	}()
	recorder := broadcaster.NewRecorder(scheme, controllerName)
	if member != nil {
		return runSharded(ctx, o, member, kubeClient, fooClient, recorder, &ready)
	}

	// The transform trims objects before they are cached: the cache holds
	// every watched object for the life of the process. Only Foos are
	// resynced: a Foo's sync reads its Deployment from the cache, so the
	// Foo resync covers every Deployment we own, and a Deployment resync
	// would only hand each cached Deployment to a handler that drops
	// re-deliveries (at 100,000 that is a walk of the whole cache, with its
	// indexes recomputed, for nothing).
	kubeInformerFactory := kubeinformers.NewSharedInformerFactoryWithOptions(kubeClient, 0,
		kubeinformers.WithNamespace(o.namespace), kubeinformers.WithTransform(cachetrim.Transform))
	fooInformerFactory := fooinformers.NewSharedInformerFactoryWithOptions(fooClient, o.resyncPeriod,
		fooinformers.WithNamespace(o.namespace), fooinformers.WithTransform(cachetrim.Transform))

	deploymentInformer := kubeInformerFactory.Apps().V1().Deployments()
	fooInformer := fooInformerFactory.Samplecontroller().V1alpha1().Foos()
	if err := countWatchErrors(deploymentInformer.Informer(), fooInformer.Informer()); err != nil {
		return err
	}

	controller, err := NewController(ctx, kubeClient, fooClient, deploymentInformer, fooInformer, recorder)
	if err != nil {
		return err
	}
	synced := func() error {
		if !controller.HasSynced() {
			return errors.New("caches not synced yet")
		}
		return nil
	}
	ready.Store(&synced)

	// Start is non-blocking. The informers start before the election so
	// that a standby's cache is warm when it takes over, and stop when run
	// returns, whatever the reason. Waiting for them to stop is bounded:
	// a reflector backing off after a failed watch-list ignores its stop
	// channel until the backoff ends (seconds, client-go v0.37), and the
	// process is about to exit anyway. After a lost Lease we do not wait
	// at all: the exit itself is what tells the orchestrator.
	informersCtx, stopInformers := context.WithCancel(ctx)
	kubeInformerFactory.Start(informersCtx.Done())
	fooInformerFactory.Start(informersCtx.Done())
	defer func() {
		stopInformers()
		if errors.Is(err, leader.ErrLost) {
			return
		}
		if !waitAtMost(informerStopWait, kubeInformerFactory.Shutdown, fooInformerFactory.Shutdown) {
			logger.Info("Informers were still stopping at exit", "waited", informerStopWait)
		}
	}()

	if !o.leaderElect {
		metrics.Leader.Set(1)
		defer metrics.Leader.Set(0)
		if err := controller.Run(ctx, o.workers); err != nil {
			return err
		}
	} else {
		lc.Identity = identity
		lc.OnLost = stopEvents
		lc.OnLeading = func(leading bool) {
			if leading {
				metrics.Leader.Set(1)
			} else {
				metrics.Leader.Set(0)
			}
		}
		// On a lost Lease, Run cancels the controller's syncs at once and
		// returns leader.ErrLost; run then returns without sending the
		// Events still queued, and main exits 1 so that the restarted
		// process campaigns again as a standby.
		leaseClient, err := kubernetes.NewForConfig(leaseCfg)
		if err != nil {
			return fmt.Errorf("building the Lease client: %w", err)
		}
		if err := leader.Run(ctx, leaseClient, lc, electionHealth, func(ctx context.Context) error {
			// Rolled out over sharded replicas: they hand their slots over
			// once they see this Lease move; start when they have.
			shard.WaitForSlotsReleased(ctx, leaseClient, lc.LeaseName, lc.LeaseNamespace, lc.LeaseDuration, lc.RetryPeriod)
			if ctx.Err() != nil {
				return nil
			}
			return controller.Run(ctx, o.workers)
		}); err != nil {
			return err
		}
	}
	logger.Info("Stopped")
	return nil
}

// countWatchErrors makes the informers count their list/watch failures (a
// cache going stale is otherwise only a log line), then log them as
// client-go does by default.
func countWatchErrors(deployments, foos cache.SharedIndexInformer) error {
	for resource, inf := range map[string]cache.SharedIndexInformer{"deployments": deployments, "foos": foos} {
		if err := inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
			metrics.WatchErrors.WithLabelValues(resource).Inc()
			cache.DefaultWatchErrorHandler(ctx, r, err)
		}); err != nil {
			return err
		}
	}
	return nil
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

// version and revision are set by make image (hack/image, with -ldflags
// -X) from git. go build's own VCS stamping cannot be relied on for them:
// it recognises only a .git directory, so in a git worktree it records
// nothing, or the commit of a repository around it (golang/go#58218).
var version, revision string

// build describes the binary. Without the -X stamp, what the Go toolchain
// recorded: since Go 1.24 the main module's version comes from the VCS
// too (the commit's tag, else a pseudo-version naming it, "+dirty" for
// uncommitted changes), and it is "(devel)" with no revision when built
// without VCS information (-buildvcs=false, a worktree, no git).
type build struct {
	version             string // module version, "+dirty" included
	revision            string // full commit hash
	goVersion, platform string
}

func readBuild() build {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = &debug.BuildInfo{Main: debug.Module{Version: "unknown"}}
	}
	return buildOf(bi, version, revision)
}

func buildOf(bi *debug.BuildInfo, stampedVersion, stampedRevision string) build {
	b := build{version: bi.Main.Version, goVersion: bi.GoVersion}
	var goos, goarch string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			b.revision = s.Value
		case "GOOS":
			goos = s.Value
		case "GOARCH":
			goarch = s.Value
		}
	}
	if goos != "" {
		b.platform = goos + "/" + goarch
	}
	if stampedRevision != "" {
		b.version, b.revision = stampedVersion, stampedRevision
	}
	return b
}

// versionLine is what -version prints: one line, the full commit in it, so
// that an image can be traced to its source (hack/image's test checks it).
func versionLine(b build) string {
	commit := "commit unknown"
	if b.revision != "" {
		commit = "commit " + b.revision
	}
	return fmt.Sprintf("foo-controller %s (%s)", b.version, strings.Join(slices.DeleteFunc(
		[]string{commit, strings.TrimSpace(b.goVersion + " " + b.platform)}, func(s string) bool { return s == "" }), ", "))
}

// clientConfig builds the REST config: from -kubeconfig, else from
// $KUBECONFIG (kubectl's loading rules), else from the in-cluster service
// account; -master overrides the server address.
func clientConfig(o options) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = o.kubeconfig
	if o.kubeconfig == "" && os.Getenv(clientcmd.RecommendedConfigPathEnvVar) == "" && o.master == "" {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("no -kubeconfig, -master or $KUBECONFIG given, and not running in a cluster: %w", err)
		}
		return cfg, nil
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules,
		&clientcmd.ConfigOverrides{ClusterInfo: clientcmdapi.Cluster{Server: o.master}}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig: %w", err)
	}
	return cfg, nil
}

// checkAPI fails, with one clear message, when the Foo CRD is not installed
// or we may not list what we watch: otherwise the informers would retry
// forever and the process would look healthy while doing nothing. An API
// server that is away (connection refused or reset, no answer in time, a
// 5xx or 429, or a refusal while its own /readyz fails, as in the first
// seconds after it starts and its RBAC cache fills) is waited for, up to
// wait, each try logged: a controller started during a short outage rides
// it out instead of crash-looping. Anything else (a wrong address or CA,
// no CRD, no permission) is an error at once. A signal while waiting ends
// it with the context's cause, a clean stop.
func checkAPI(ctx context.Context, cfg *rest.Config, namespace string, wait time.Duration) error {
	logger := klog.FromContext(ctx)
	deadline := time.Now().Add(wait)
	backoff := apiwait.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Cap: 5 * time.Second, Steps: math.MaxInt32}
	for {
		// A try gets until the deadline, and at least apiTryTimeout, so
		// that the last one can still tell a refusal from an outage.
		tryUntil := deadline
		if least := time.Now().Add(apiTryTimeout); least.After(tryUntil) {
			tryUntil = least
		}
		try, cancel := context.WithDeadline(ctx, tryUntil)
		err := checkAPIOnce(try, cfg, namespace)
		cancel()
		if ctx.Err() != nil {
			return fmt.Errorf("waiting for the API server: %w", context.Cause(ctx))
		}
		if err == nil || !time.Now().Before(deadline) || !apiAway(ctx, cfg, err) {
			return err
		}
		logger.Info("Waiting for the API server", "err", err, "giveUpIn", time.Until(deadline).Round(time.Second))
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the API server: %w", context.Cause(ctx))
		case <-time.After(min(backoff.Step(), time.Until(deadline))):
		}
	}
}

// apiStartupWait bounds how long start-up waits for an API server that is
// away (see checkAPI); apiTryTimeout bounds one try. The probes are served
// meanwhile, /healthz passing, so that a liveness probe does not cut the
// wait short.
const (
	apiStartupWait = 30 * time.Second
	apiTryTimeout  = 15 * time.Second
)

// apiAway reports whether err says the API server is away for now rather
// than that something is wrong with our configuration: positive evidence
// only, so that a wrong address or CA fails at once.
func apiAway(ctx context.Context, cfg *rest.Config, err error) bool {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		if apierrors.IsServiceUnavailable(err) || apierrors.IsInternalError(err) || apierrors.IsTooManyRequests(err) ||
			apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) || status.Status().Code >= 500 {
			return true
		}
		// A refusal from an API server that is not ready yet is not its
		// last word (its RBAC cache may still be filling).
		return !apiReady(ctx, cfg)
	}
	if errors.Is(err, errNotServed) {
		return !apiReady(ctx, cfg)
	}
	var netErr net.Error
	return utilnet.IsConnectionRefused(err) || utilnet.IsConnectionReset(err) || utilnet.IsProbableEOF(err) ||
		errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &netErr) && netErr.Timeout())
}

// apiReady asks the API server's /readyz, which every authenticated client
// may read (the system:public-info-viewer role).
func apiReady(ctx context.Context, cfg *rest.Config) bool {
	c := rest.CopyConfig(cfg)
	c.Timeout = 5 * time.Second
	dc, err := discovery.NewDiscoveryClientForConfig(c)
	if err != nil {
		return false
	}
	return dc.RESTClient().Get().AbsPath("/readyz").Do(ctx).Error() == nil
}

var errNotServed = errors.New("not served")

func checkAPIOnce(ctx context.Context, cfg *rest.Config, namespace string) error {
	c := rest.CopyConfig(cfg)
	c.Timeout = apiTryTimeout
	kc, err := kubernetes.NewForConfig(c)
	if err != nil {
		return err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(c)
	if err != nil {
		return err
	}
	if err := checkServesFoos(ctx, dc, cfg.Host); err != nil {
		return err
	}
	fc, err := clientset.NewForConfig(c)
	if err != nil {
		return err
	}
	one := metav1.ListOptions{Limit: 1}
	_, err = fc.SamplecontrollerV1alpha1().Foos(namespace).List(ctx, one)
	if err := cannotList("foos", err); err != nil {
		return err
	}
	_, err = kc.AppsV1().Deployments(namespace).List(ctx, one)
	return cannotList("deployments", err)
}

func cannotList(resource string, err error) error {
	switch {
	case err == nil:
		return nil
	case apierrors.IsForbidden(err):
		return fmt.Errorf("cannot list %s (does the controller's identity have RBAC permission to list and watch them?): %w", resource, err)
	default:
		return fmt.Errorf("cannot list %s: %w", resource, err)
	}
}

func checkServesFoos(ctx context.Context, dc *discovery.DiscoveryClient, host string) error {
	gv := samplev1alpha1.GroupVersion.String()
	resources, err := dc.ServerResourcesForGroupVersionWithContext(ctx, gv)
	if err != nil {
		if _, verr := dc.ServerVersionWithContext(ctx); verr != nil {
			return fmt.Errorf("cannot reach the API server at %s: %w", host, verr)
		}
		return fmt.Errorf("API %s is not served (is the CRD installed? kubectl apply -f artifacts/examples/crd.yaml): %w", gv, err)
	}
	for _, r := range resources.APIResources {
		if r.Name == "foos" {
			return nil
		}
	}
	return fmt.Errorf("API %s does not serve foos (is the CRD installed? kubectl apply -f artifacts/examples/crd.yaml): %w", gv, errNotServed)
}
