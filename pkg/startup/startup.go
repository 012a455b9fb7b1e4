// Package startup holds the controller's start-up checks: run once, before
// any informer starts, so that a controller that cannot work says why and
// exits, rather than retrying forever while looking healthy.
package startup

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	apiwait "k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	samplev1beta1 "example.com/foo-controller/pkg/apis/samplecontroller/v1beta1"
	clientset "example.com/foo-controller/pkg/generated/clientset/versioned"
)

// CheckAPI fails, with one clear message, when the Foo CRD is not installed
// or we may not list what we watch: otherwise the informers would retry
// forever and the process would look healthy while doing nothing. An API
// server that is away (connection refused or reset, no answer in time, a
// 5xx or 429, or a refusal while its own /readyz fails, as in the first
// seconds after it starts and its RBAC cache fills) is waited for, up to
// wait, each try logged: a controller started during a short outage rides
// it out instead of crash-looping. Anything else (a wrong address or CA,
// no CRD, no permission) is an error at once. A signal while waiting ends
// it with the context's cause, a clean stop.
func CheckAPI(ctx context.Context, cfg *rest.Config, namespace string, wait time.Duration) error {
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

// APIWait bounds how long start-up waits for an API server that is away
// (see CheckAPI); apiTryTimeout bounds one try. The probes are served
// meanwhile, /healthz passing, so that a liveness probe does not cut the
// wait short.
const (
	APIWait       = 30 * time.Second
	apiTryTimeout = 15 * time.Second
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
	_, err = fc.SamplecontrollerV1beta1().Foos(namespace).List(ctx, one)
	if err := cannotList("foos", err); err != nil {
		return err
	}
	_, err = kc.AppsV1().Deployments(namespace).List(ctx, one)
	if err := cannotList("deployments", err); err != nil {
		return err
	}
	// The namespaces informer lists cluster-wide, or -namespace's alone
	// (see caches.StartNamespaces): a Role in that namespace cannot grant it.
	nsList := one
	if namespace != "" {
		nsList.FieldSelector = fields.OneTermEqualSelector("metadata.name", namespace).String()
	}
	_, err = kc.CoreV1().Namespaces().List(ctx, nsList)
	return cannotList("namespaces", err)
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
	gv := samplev1beta1.GroupVersion.String()
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
