// Package replicas is what one replica of the controller needs to run
// beside others: its clients, every write behind a guard that passes it
// only while this process holds its Lease, and the two ways replicas
// share the work: one leader with standbys (RunLeaderElected), or shards
// (a shard.Member: GuardFor). A single replica needs neither; the
// controller itself is the same in every mode. See docs/operations.md,
// "Leader election", and docs/sharding.md.
package replicas

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"

	clientset "example.com/foo-controller/pkg/generated/clientset/versioned"
	"example.com/foo-controller/pkg/leader"
	"example.com/foo-controller/pkg/metrics"
	"example.com/foo-controller/pkg/options"
	"example.com/foo-controller/pkg/shard"
)

// LeaseClient is the client that renews Leases: outside any write
// guard (the guard is built on its renewals) and outside any client-side
// rate limit (-kube-api-qps), so that a renewal never waits behind the work
// it keeps safe. (Sharded, taking 256 slots at -kube-api-qps=5 starved the
// member's renewals until it lost them.)
func LeaseClient(cfg *rest.Config) (kubernetes.Interface, error) {
	leaseCfg := rest.CopyConfig(cfg)
	leaseCfg.QPS = -1
	c, err := kubernetes.NewForConfig(leaseCfg)
	if err != nil {
		return nil, fmt.Errorf("building the Lease client: %w", err)
	}
	return c, nil
}

// WriteGuard lets a write through only while this process holds its Lease,
// by its own clock: leader.Fence for a leader, shard.Member for a sharded
// replica (see docs/operations.md, "Leader election", and docs/sharding.md).
type WriteGuard interface {
	WrapTransport(http.RoundTripper) http.RoundTripper
	Dial(func(ctx context.Context, network, address string) (net.Conn, error)) func(ctx context.Context, network, address string) (net.Conn, error)
}

// Clients are the controller's clients, every one behind a WriteGuard
// (or none, for a single replica without leader election).
type Clients struct {
	Config *rest.Config         // what they are built from, for the start-up checks
	Kube   kubernetes.Interface // built-in types, as protobuf
	Foo    clientset.Interface  // Foos: a custom resource, JSON only
	// events sends Events on a rate limiter of its own (the same
	// -kube-api-qps/-burst): Events are informational and must never delay
	// the writes that converge Foos; make bench showed them halving the
	// rate of Deployment creates when they shared one.
	Events kubernetes.Interface
}

// NewClients builds the Clients from cfg, behind guard (nil: none).
func NewClients(cfg *rest.Config, guard WriteGuard) (*Clients, error) {
	cfg = rest.CopyConfig(cfg)
	if guard != nil {
		cfg.WrapTransport = guard.WrapTransport
		cfg.Dial = guard.Dial((&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext)
	}
	// Built-in types travel as protobuf: smaller and several times cheaper
	// to decode than JSON, which matters for the Deployment watch and the
	// apply responses.
	kubeCfg := rest.CopyConfig(cfg)
	kubeCfg.ContentType = runtime.ContentTypeProtobuf
	kubeCfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	c := &Clients{Config: cfg}
	var err error
	if c.Kube, err = kubernetes.NewForConfig(kubeCfg); err != nil {
		return nil, fmt.Errorf("building Kubernetes client: %w", err)
	}
	if c.Foo, err = clientset.NewForConfig(cfg); err != nil {
		return nil, fmt.Errorf("building Foo client: %w", err)
	}
	if c.Events, err = kubernetes.NewForConfig(rest.CopyConfig(kubeCfg)); err != nil {
		return nil, fmt.Errorf("building the Events client: %w", err)
	}
	return c, nil
}

// RunLeaderElected runs the workers only while this process holds the
// leader Lease. On a lost Lease, leader.Run cancels the syncs at once and
// returns leader.ErrLost; main then exits 1 so that the restarted process
// campaigns again as a standby (see docs/operations.md, "Losing the
// Lease").
func RunLeaderElected(ctx context.Context, lc leader.Config, leaseClient kubernetes.Interface,
	health *leaderelection.HealthzAdaptor, run func(context.Context) error) error {
	lc.OnLeading = func(leading bool) {
		if leading {
			metrics.Leader.Set(1)
		} else {
			metrics.Leader.Set(0)
		}
	}
	return leader.Run(ctx, leaseClient, lc, health, func(ctx context.Context) error {
		// Rolled out over sharded replicas: they hand their slots over
		// once they see this Lease move; start when they have.
		shard.WaitForSlotsReleased(ctx, leaseClient, lc.LeaseName, lc.LeaseNamespace, lc.LeaseDuration, lc.RetryPeriod)
		if ctx.Err() != nil {
			return nil
		}
		return run(ctx)
	})
}

// GuardFor returns the guard of this process's writes: a shard
// member's (-shard-slots, also returned), the leader's fence (-leader-elect,
// set in lc), or none.
func GuardFor(o options.Options, lc *leader.Config, leaseClient kubernetes.Interface) (*shard.Member, WriteGuard, error) {
	switch {
	case o.ShardSlots > 0:
		m, err := newMember(o, *lc, leaseClient)
		return m, m, err
	case o.LeaderElect:
		lc.Fence = leader.NewFence(*lc)
		return nil, lc.Fence, nil
	}
	return nil, nil, nil
}

// newMember makes this process a member of the shard group named by the
// leader Lease's flags (see docs/sharding.md).
func newMember(o options.Options, lc leader.Config, leaseClient kubernetes.Interface) (*shard.Member, error) {
	m, err := shard.NewMember(leaseClient, shard.Config{
		Group: lc.LeaseName, Namespace: lc.LeaseNamespace, Slots: shard.Slots(o.ShardSlots), Identity: lc.Identity,
		LeaseDuration: lc.LeaseDuration, RenewDeadline: lc.RenewDeadline, RetryPeriod: lc.RetryPeriod,
		Rebalance: o.ShardRebalance, RebalanceEvery: o.ShardEvery,
	})
	if err != nil {
		return nil, fmt.Errorf("joining the shard group: %w", err)
	}
	return m, nil
}
