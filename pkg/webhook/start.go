package webhook

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	samplev1beta1 "example.com/foo-controller/pkg/apis/samplecontroller/v1beta1"
	fooscheme "example.com/foo-controller/pkg/generated/clientset/versioned/scheme"
)

// fooCRD is the CustomResourceDefinition whose conversion webhook the
// controller serves.
const fooCRD = "foos." + samplev1beta1.GroupName

// linger is how long the webhook keeps answering after the signal to
// stop, at least: the Pod leaves the Service's endpoints as it starts
// terminating, but the API server may still be sending it reviews for a
// few seconds, and a standby, with nothing to drain, would otherwise stop
// at once.
const linger = 5 * time.Second

// Options are the controller's webhook flags, and where it runs.
type Options struct {
	Addr      string   // -webhook-bind-address; "" or "0": off
	Namespace string   // of the certificate's Secret, and of the Service in a cluster
	Secret    string   // -webhook-secret
	Hosts     []string // -webhook-hosts; none: by InCluster
	InCluster bool     // with the in-cluster config
}

// Start serves the CRD conversion webhook (docs/evolving-the-api.md) in
// every replica, leader or not. Its clients are outside the write guard:
// the certificate's Secret and the CRD's caBundle are no Foo's, and a
// standby keeps them too. The readiness check it returns fails until a
// certificate is served. It goes on answering after ctx ends, through the
// controller's drain, until stop is called, which waits for linger past
// the end of ctx, then stops it. ready is nil and stop does nothing when
// the webhook is off.
func Start(ctx context.Context, cfg *rest.Config, o Options) (ready func() error, stop func(), err error) {
	if o.Addr == "" || o.Addr == "0" {
		return nil, func() {}, nil
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, nil, err
	}
	hosts := o.Hosts
	if len(hosts) == 0 {
		hosts = []string{"127.0.0.1", "localhost"}
		if o.InCluster {
			hosts = []string{fmt.Sprintf("foo-controller-webhook.%s.svc", o.Namespace)}
		}
	}
	lis, err := net.Listen("tcp", o.Addr)
	if err != nil {
		return nil, nil, fmt.Errorf("conversion webhook: %w", err)
	}
	keeper := &Keeper{Kube: kube, Dynamic: dyn, CRD: fooCRD, Hosts: hosts,
		Secret: types.NamespacedName{Namespace: o.Namespace, Name: o.Secret}}
	logger := klog.FromContext(ctx)
	var signalled atomic.Pointer[time.Time]
	context.AfterFunc(ctx, func() { now := time.Now(); signalled.Store(&now) })
	served, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := Run(served, lis, keeper, NewConverter(fooscheme.Scheme)); err != nil {
			logger.Error(err, "Conversion webhook stopped")
		}
	}()
	// Not ready once it has stopped on its own: it answers nothing more.
	ready = func() error {
		select {
		case <-done:
			return errors.New("stopped (the log says why)")
		default:
			return keeper.Ready()
		}
	}
	stop = func() {
		if t := signalled.Load(); t != nil {
			time.Sleep(time.Until(t.Add(linger)))
		}
		cancel()
		<-done
	}
	logger.Info("Serving the conversion webhook", "address", lis.Addr().String(), "path", Path,
		"secret", keeper.Secret, "hosts", hosts)
	return ready, stop, nil
}
