//go:build integration

package integration

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/klog/v2"
	"sigs.k8s.io/yaml"

	fooscheme "example.com/foo-controller/pkg/generated/clientset/versioned/scheme"
	"example.com/foo-controller/pkg/webhook"
)

// harnessWebhookSecret is where every test control plane keeps its
// conversion webhook's certificate: the Secret artifacts/deploy's
// controller keeps, so a controller under test given -webhook-bind-address
// joins the same installation instead of fighting over the caBundle.
var harnessWebhookSecret = types.NamespacedName{Namespace: deploySystemNamespace, Name: "foo-controller-webhook-cert"}

// installCRD creates the CRD in the file, as shipped, and waits until it
// is established and every version it serves is in discovery.
func (c *cluster) installCRD(ctx context.Context, path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	crd := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(b, &crd.Object); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	dyn, err := dynamic.NewForConfig(c.admin)
	if err != nil {
		return err
	}
	if _, err := dyn.Resource(webhook.CRDs).Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("installing %s: %w", path, err)
	}
	group, _, _ := unstructured.NestedString(crd.Object, "spec", "group")
	plural, _, _ := unstructured.NestedString(crd.Object, "spec", "names", "plural")
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	deadline := time.Now().Add(time.Minute)
	for _, v := range versions {
		name, _ := v.(map[string]any)["name"].(string)
		if served, _ := v.(map[string]any)["served"].(bool); !served {
			continue
		}
		for {
			resources, err := c.kube.Discovery().ServerResourcesForGroupVersion(group + "/" + name)
			if err == nil && slices.ContainsFunc(resources.APIResources, func(r metav1.APIResource) bool { return r.Name == plural }) {
				break
			}
			if time.Now().After(deadline) {
				if err == nil {
					err = errors.New("not in discovery")
				}
				return fmt.Errorf("%s/%s %s not served a minute after installing the CRD: %w", group, name, plural, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}

// serveConversionWebhook runs the conversion webhook for this control
// plane in the test process, as the Deployment of artifacts/deploy runs it
// in a cluster, and points the CRD at it. The shipped CRD serves v1beta1,
// the preferred version: the garbage collector and the namespace
// controller read Foos in it, so every control plane needs the webhook
// from the start, whatever the tests under it do. It runs apart from any
// controller under test, which come and go; its log is the plane's
// conversion-webhook.log.
func (c *cluster) serveConversionWebhook(ctx context.Context) error {
	dyn, err := dynamic.NewForConfig(c.admin)
	if err != nil {
		return err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: harnessWebhookSecret.Namespace}}
	if _, err := c.kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	logFile, err := os.Create(filepath.Join(c.dir, "conversion-webhook.log"))
	if err != nil {
		return err
	}
	logger := funcr.New(func(prefix, args string) {
		_, _ = fmt.Fprintln(logFile, time.Now().Format(time.RFC3339Nano), prefix, args)
	}, funcr.Options{})
	keeper := &webhook.Keeper{Kube: c.kube, Dynamic: dyn, CRD: fooCRD, Hosts: []string{"127.0.0.1", "localhost"}, Secret: harnessWebhookSecret}
	// Not the caller's context (a private plane's is its test's, which
	// ends before the cleanups that delete namespaces, which need the
	// webhook): it stops with the plane.
	ctx, cancel := context.WithCancel(klog.NewContext(context.WithoutCancel(ctx), logger))
	done := make(chan error, 1)
	go func() { done <- webhook.Run(ctx, lis, keeper, webhook.NewConverter(fooscheme.Scheme)) }()
	c.stopWebhook = func() {
		cancel()
		if err := <-done; err != nil {
			logger.Error(err, "Conversion webhook stopped")
		}
		_ = logFile.Close()
	}

	// The shipped clientConfig names the Service of artifacts/deploy,
	// which nothing here routes to: a URL instead, as `make run` does.
	url := "https://" + lis.Addr().String() + webhook.Path
	if err := webhook.PointAt(ctx, dyn, fooCRD, url); err != nil {
		return fmt.Errorf("pointing the CRD at the conversion webhook: %w", err)
	}
	if err := webhook.WaitInjected(ctx, dyn, fooCRD, time.Minute); err != nil {
		return fmt.Errorf("the conversion webhook (log: %s): %w", logFile.Name(), err)
	}
	return nil
}
