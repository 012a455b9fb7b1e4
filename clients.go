package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	clientset "example.com/foo-controller/pkg/generated/clientset/versioned"
)

// newLeaseClient is the client that renews Leases: outside any write
// guard (the guard is built on its renewals) and outside any client-side
// rate limit (-kube-api-qps), so that a renewal never waits behind the work
// it keeps safe. (Sharded, taking 256 slots at -kube-api-qps=5 starved the
// member's renewals until it lost them.)
func newLeaseClient(cfg *rest.Config) (kubernetes.Interface, error) {
	leaseCfg := rest.CopyConfig(cfg)
	leaseCfg.QPS = -1
	c, err := kubernetes.NewForConfig(leaseCfg)
	if err != nil {
		return nil, fmt.Errorf("building the Lease client: %w", err)
	}
	return c, nil
}

// writeGuard lets a write through only while this process holds its Lease,
// by its own clock: leader.Fence for a leader, shard.Member for a sharded
// replica (see docs/operations.md, "Leader election", and docs/sharding.md).
type writeGuard interface {
	WrapTransport(http.RoundTripper) http.RoundTripper
	Dial(func(ctx context.Context, network, address string) (net.Conn, error)) func(ctx context.Context, network, address string) (net.Conn, error)
}

// clients are the controller's clients, every one behind guard (nil: none,
// for a single replica without leader election).
type clients struct {
	config *rest.Config         // what they are built from, for the start-up checks
	kube   kubernetes.Interface // built-in types, as protobuf
	foo    clientset.Interface  // Foos: a custom resource, JSON only
	// events sends Events on a rate limiter of its own (the same
	// -kube-api-qps/-burst): Events are informational and must never delay
	// the writes that converge Foos; make bench showed them halving the
	// rate of Deployment creates when they shared one.
	events kubernetes.Interface
}

func newClients(cfg *rest.Config, guard writeGuard) (*clients, error) {
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
	c := &clients{config: cfg}
	var err error
	if c.kube, err = kubernetes.NewForConfig(kubeCfg); err != nil {
		return nil, fmt.Errorf("building Kubernetes client: %w", err)
	}
	if c.foo, err = clientset.NewForConfig(cfg); err != nil {
		return nil, fmt.Errorf("building Foo client: %w", err)
	}
	if c.events, err = kubernetes.NewForConfig(rest.CopyConfig(kubeCfg)); err != nil {
		return nil, fmt.Errorf("building the Events client: %w", err)
	}
	return c, nil
}
