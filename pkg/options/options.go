package options

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

// Options are the command-line flags. Each flag's help states its default.
type Options struct {
	Kubeconfig   string
	Master       string
	Namespace    string
	Workers      int
	QPS          float64
	Burst        int
	ResyncPeriod time.Duration

	LeaderElect    bool
	leaderElectSet bool // -leader-elect given explicitly; otherwise on exactly when in-cluster
	Lease          leader.Config
	ShardSlots     int
	ShardRebalance shard.Policy
	ShardEvery     time.Duration

	MetricsAddr   string
	MetricsSecure bool
	ProbeAddr     string

	WebhookAddr   string
	WebhookSecret string
	WebhookHosts  []string

	Profiling bool
	Logging   *logsapi.LoggingConfiguration

	PrintVersion bool
}

// Parse reads the flags of the controller named name (the leader Lease's
// default name) from args.
func Parse(name string, args []string) (Options, error) {
	fs := flag.NewFlagSet("foo-controller", flag.ContinueOnError)
	o := Options{Logging: logsapi.NewLoggingConfiguration()}
	// -v, -vmodule and -logging-format (text or json), as in the
	// Kubernetes components themselves.
	logsapi.AddGoFlags(o.Logging, fs)
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "",
		"Path to a kubeconfig. Default: $KUBECONFIG if set (a list, as for kubectl), else the in-cluster config.")
	fs.StringVar(&o.Master, "master", "", "Address of the Kubernetes API server; overrides the kubeconfig's server.")
	fs.StringVar(&o.Namespace, "namespace", metav1.NamespaceAll, "Watch only this namespace (default: all namespaces).")
	fs.IntVar(&o.Workers, "workers", 32, "Number of Foos synced in parallel. A sync makes a few requests one after the other, so this is what bounds the controller's concurrent requests, and its speed in a burst (see docs/performance.md).")
	fs.Float64Var(&o.QPS, "kube-api-qps", -1, "Client-side rate limit for API requests per second, of each client (Foos, Kubernetes objects, Events). Negative (the default) disables it: the API server's priority and fairness paces us, and -workers bounds our concurrency (client-go's own default is 5).")
	fs.IntVar(&o.Burst, "kube-api-burst", 100, "Burst allowed above a positive -kube-api-qps (client-go's own default is 10).")
	// Every change the controller acts on is watched, so the resync is a
	// safety net, not the loop. It costs CPU in proportion to the Foos
	// cached, at every pass (docs/performance.md, "Levers": the resync),
	// and nothing waits for it: every Foo whose last sync failed is retried
	// at least every 10 minutes (failedRetryMax, the root's queue.go), and the
	// sync's own re-checks are requeues. 10 hours, as controller-runtime.
	fs.DurationVar(&o.ResyncPeriod, "resync-period", 10*time.Hour,
		"How often every cached Foo is synced again even without events; 0 disables. A resync reads only the cache and writes nothing for a converged Foo; it also retries at once a Foo in failure backoff (a failed Foo is retried at least every 10 minutes anyway).")
	fs.BoolVar(&o.LeaderElect, "leader-elect", false,
		"Run workers only while holding a leader Lease, so that replicas can stand by. Default: true with the in-cluster config, false otherwise.")
	fs.StringVar(&o.Lease.LeaseName, "leader-elect-lease-name", name, "Name of the leader election Lease.")
	fs.StringVar(&o.Lease.LeaseNamespace, "leader-elect-namespace", "",
		"Namespace of the leader election Lease (and of a shard group's Leases). Default: the pod's namespace in-cluster, else \"default\".")
	fs.DurationVar(&o.Lease.LeaseDuration, "leader-elect-lease-duration", 15*time.Second,
		"How long standbys wait after the last renewal before taking over a leader that stopped renewing.")
	fs.DurationVar(&o.Lease.RenewDeadline, "leader-elect-renew-deadline", 10*time.Second,
		"How long the leader keeps trying to renew before it gives up leading (and exits).")
	fs.DurationVar(&o.Lease.RetryPeriod, "leader-elect-retry-period", 2*time.Second,
		"How often candidates try to acquire, and the leader to renew, the Lease.")
	fs.IntVar(&o.ShardSlots, "shard-slots", 0,
		"Share the work among replicas (opt-in, see docs/sharding.md): namespaces are hashed into this many slots (1 to 256; 16 is a good start), and each replica takes its share of them through Leases named after -leader-elect-lease-name, with the -leader-elect-* timings. Every replica must use the same value. 0 (the default): one leader does everything (-leader-elect).")
	fs.Float64Var(&o.ShardRebalance.Skew, "shard-rebalance-skew", 1.5,
		"With -shard-slots: re-cut the slot boundaries between the namespaces that exist, weighted by their Foos, once the heaviest slot holds more than this many times the mean (and the new cut is 1.2 times better); every slot is handed over once. The first replica in order of those with a value above 0 re-cuts, so give every replica the same one. 0: this replica never re-cuts, and with 0 everywhere the boundaries stay as the group's layout Lease has them (equal hash ranges if there is none, which crowd namespaces named in sequence into few slots; delete the Lease to return to them). See docs/sharding.md.")
	fs.DurationVar(&o.ShardEvery, "shard-rebalance-interval", time.Minute,
		"With -shard-slots: the least time between two re-cuts of the slot boundaries (the first, from equal ranges, waits only for the load to be known).")
	fs.StringVar(&o.MetricsAddr, "metrics-bind-address", ":8443", `Address to serve Prometheus /metrics on; "0" disables.`)
	fs.BoolVar(&o.MetricsSecure, "metrics-secure", true,
		"Serve /metrics over HTTPS (a certificate signed by itself) to clients whose bearer token the API server accepts and whose user may get the /metrics URL (TokenReview, SubjectAccessReview: docs/operations.md). false: plain HTTP, to anyone who can connect (make run).")
	fs.StringVar(&o.ProbeAddr, "health-probe-bind-address", ":8081", `Address to serve /healthz and /readyz on; "0" disables.`)
	fs.StringVar(&o.WebhookAddr, "webhook-bind-address", "0",
		`Address to serve the CRD conversion webhook on (HTTPS, path /convert; docs/evolving-the-api.md), e.g. ":9443". Every replica serves it, leader or not. "0" (the default) disables it: artifacts/deploy serves it on ":9443", make run on 127.0.0.1:9443. Without it, v1alpha1 requests, and server-side applies to Foos written through v1alpha1, fail unless another replica serves it.`)
	fs.StringVar(&o.WebhookSecret, "webhook-secret", "foo-controller-webhook-cert",
		"Secret, in the -leader-elect-namespace, holding the webhook's CA and serving certificate: created, renewed, and injected into the CRD's conversion caBundle by the controller.")
	fs.Func("webhook-hosts", "Comma-separated names or IP addresses the API server reaches the webhook at; its certificate is issued for them. Default: foo-controller-webhook.NAMESPACE.svc in a cluster, 127.0.0.1,localhost outside one.",
		func(v string) error {
			o.WebhookHosts = nil
			for _, h := range strings.Split(v, ",") {
				if h = strings.TrimSpace(h); h != "" {
					o.WebhookHosts = append(o.WebhookHosts, h)
				}
			}
			if len(o.WebhookHosts) == 0 {
				return errors.New("no host given")
			}
			return nil
		})
	fs.BoolVar(&o.Profiling, "profiling", false, "Serve Go's profiles (/debug/pprof/) beside /metrics, to measure memory and CPU at scale.")
	fs.BoolVar(&o.PrintVersion, "version", false, "Print the version and the commit this binary was built from, and exit.")
	fs.SetOutput(io.Discard) // errors are reported once by main, not with the usage text
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(os.Stdout)
			_, _ = fmt.Fprintln(os.Stdout, "Usage of foo-controller:")
			fs.PrintDefaults()
		}
		return o, err
	}
	if o.PrintVersion {
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
		o.LeaderElect = o.InCluster() && o.ShardSlots == 0
	}
	// Ten Foos a slot before the first re-cut: fewer say little about
	// where the many will be.
	o.ShardRebalance.MinLoad = 10 * o.ShardSlots
	if err := o.Lease.Validate(); err != nil {
		return o, err
	}
	if err := logsapi.ValidateAndApply(o.Logging, nil); err != nil {
		return o, err
	}
	return o, nil
}

// check rejects flag values the controller cannot run with, naming the
// flag.
func (o Options) check() error {
	var slotsErr, skewErr error
	if o.ShardSlots != 0 {
		slotsErr = shard.Slots(o.ShardSlots).Validate()
	}
	skewErr = o.ShardRebalance.Validate()
	switch {
	case o.Workers < 1:
		return fmt.Errorf("-workers must be at least 1, got %d", o.Workers)
	case o.QPS == 0:
		return fmt.Errorf("-kube-api-qps must be positive, or negative to disable client-side rate limiting; got 0")
	case o.Burst < 1:
		return fmt.Errorf("-kube-api-burst must be at least 1, got %d", o.Burst)
	case o.ResyncPeriod < 0:
		return fmt.Errorf("-resync-period must not be negative, got %v", o.ResyncPeriod)
	case slotsErr != nil:
		return fmt.Errorf("-shard-slots (0 for one leader): %w", slotsErr)
	case o.ShardSlots != 0 && o.leaderElectSet && o.LeaderElect:
		return errors.New("-shard-slots and -leader-elect exclude each other: sharded replicas all work, each on its own slots")
	case o.ShardSlots != 0 && o.Namespace != metav1.NamespaceAll:
		// Slots divide namespaces, and a namespace is never split: one
		// namespace falls in one slot, and the others would hold nothing.
		return fmt.Errorf("-shard-slots and -namespace exclude each other: sharding divides namespaces among replicas and never splits one, so namespace %q would all fall in slot %d of %d and the other slots would be empty; for one namespace, run one leader (-leader-elect)",
			o.Namespace, shard.Slots(o.ShardSlots).Of(o.Namespace), o.ShardSlots)
	case skewErr != nil:
		return fmt.Errorf("-shard-rebalance-skew: %w", skewErr)
	case o.ShardEvery < 0:
		return fmt.Errorf("-shard-rebalance-interval must not be negative, got %v", o.ShardEvery)
	}
	return nil
}
