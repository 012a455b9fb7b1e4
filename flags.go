package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	logsapi "k8s.io/component-base/logs/api/v1"

	"example.com/foo-controller/pkg/leader"
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

	metricsAddr   string
	metricsSecure bool
	probeAddr     string

	webhookAddr   string
	webhookSecret string
	webhookHosts  []string

	profiling bool
	logging   *logsapi.LoggingConfiguration

	printVersion bool
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
	// safety net, not the loop. It costs CPU in proportion to the Foos
	// cached, at every pass (docs/performance.md, "Levers": the resync),
	// and nothing waits for it: every Foo whose last sync failed is retried
	// at least every 10 minutes (failedRetryMax, queue.go), and the
	// sync's own re-checks are requeues. 10 hours, as controller-runtime.
	fs.DurationVar(&o.resyncPeriod, "resync-period", 10*time.Hour,
		"How often every cached Foo is synced again even without events; 0 disables. A resync reads only the cache and writes nothing for a converged Foo; it also retries at once a Foo in failure backoff (a failed Foo is retried at least every 10 minutes anyway).")
	fs.BoolVar(&o.leaderElect, "leader-elect", false,
		"Run workers only while holding a leader Lease, so that replicas can stand by. Default: true with the in-cluster config, false otherwise.")
	fs.StringVar(&o.lease.LeaseName, "leader-elect-lease-name", controllerName, "Name of the leader election Lease.")
	fs.StringVar(&o.lease.LeaseNamespace, "leader-elect-namespace", "",
		"Namespace of the leader election Lease (and of a shard group's Leases). Default: the pod's namespace in-cluster, else \"default\".")
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
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", ":8443", `Address to serve Prometheus /metrics on; "0" disables.`)
	fs.BoolVar(&o.metricsSecure, "metrics-secure", true,
		"Serve /metrics over HTTPS (a certificate signed by itself) to clients whose bearer token the API server accepts and whose user may get the /metrics URL (TokenReview, SubjectAccessReview: docs/operations.md). false: plain HTTP, to anyone who can connect (make run).")
	fs.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", `Address to serve /healthz and /readyz on; "0" disables.`)
	fs.StringVar(&o.webhookAddr, "webhook-bind-address", "0",
		`Address to serve the CRD conversion webhook on (HTTPS, path /convert; docs/evolving-the-api.md), e.g. ":9443". Every replica serves it, leader or not. "0" (the default) disables it: artifacts/deploy serves it on ":9443", make run on 127.0.0.1:9443. Without it, v1alpha1 requests, and server-side applies to Foos written through v1alpha1, fail unless another replica serves it.`)
	fs.StringVar(&o.webhookSecret, "webhook-secret", "foo-controller-webhook-cert",
		"Secret, in the -leader-elect-namespace, holding the webhook's CA and serving certificate: created, renewed, and injected into the CRD's conversion caBundle by the controller.")
	fs.Func("webhook-hosts", "Comma-separated names or IP addresses the API server reaches the webhook at; its certificate is issued for them. Default: foo-controller-webhook.NAMESPACE.svc in a cluster, 127.0.0.1,localhost outside one.",
		func(v string) error {
			o.webhookHosts = nil
			for _, h := range strings.Split(v, ",") {
				if h = strings.TrimSpace(h); h != "" {
					o.webhookHosts = append(o.webhookHosts, h)
				}
			}
			if len(o.webhookHosts) == 0 {
				return errors.New("no host given")
			}
			return nil
		})
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
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if err := o.check(); err != nil {
		return o, err
	}
	if !o.leaderElectSet {
		o.leaderElect = inCluster(o) && o.shardSlots == 0
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

// check rejects flag values the controller cannot run with, naming the
// flag.
func (o options) check() error {
	var slotsErr, skewErr error
	if o.shardSlots != 0 {
		slotsErr = shard.Slots(o.shardSlots).Validate()
	}
	skewErr = o.shardRebalance.Validate()
	switch {
	case o.workers < 1:
		return fmt.Errorf("-workers must be at least 1, got %d", o.workers)
	case o.qps == 0:
		return fmt.Errorf("-kube-api-qps must be positive, or negative to disable client-side rate limiting; got 0")
	case o.burst < 1:
		return fmt.Errorf("-kube-api-burst must be at least 1, got %d", o.burst)
	case o.resyncPeriod < 0:
		return fmt.Errorf("-resync-period must not be negative, got %v", o.resyncPeriod)
	case slotsErr != nil:
		return fmt.Errorf("-shard-slots (0 for one leader): %w", slotsErr)
	case o.shardSlots != 0 && o.leaderElectSet && o.leaderElect:
		return errors.New("-shard-slots and -leader-elect exclude each other: sharded replicas all work, each on its own slots")
	case o.shardSlots != 0 && o.namespace != metav1.NamespaceAll:
		// Slots divide namespaces, and a namespace is never split: one
		// namespace falls in one slot, and the others would hold nothing.
		return fmt.Errorf("-shard-slots and -namespace exclude each other: sharding divides namespaces among replicas and never splits one, so namespace %q would all fall in slot %d of %d and the other slots would be empty; for one namespace, run one leader (-leader-elect)",
			o.namespace, shard.Slots(o.shardSlots).Of(o.namespace), o.shardSlots)
	case skewErr != nil:
		return fmt.Errorf("-shard-rebalance-skew: %w", skewErr)
	case o.shardEvery < 0:
		return fmt.Errorf("-shard-rebalance-interval must not be negative, got %v", o.shardEvery)
	}
	return nil
}
