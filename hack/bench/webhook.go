package main

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/go-logr/logr/funcr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"sigs.k8s.io/yaml"

	fooscheme "example.com/foo-controller/pkg/generated/clientset/versioned/scheme"
	"example.com/foo-controller/pkg/webhook"
)

// installCRD installs the CRD with its conversion webhook served by the
// bench process itself, on an ephemeral port of 127.0.0.1, for as long as
// ctx lasts: the shipped CRD serves v1beta1 through the Service of
// artifacts/deploy, which nothing routes to on the local control plane,
// and the garbage collector and the namespace controller read Foos in
// v1beta1. Served here rather than by the controller under test, it stays
// up through the controller's restarts and the replicas' comings and
// goings. Its log is _output/bench-webhook.log.
func installCRD(ctx context.Context, cfg *rest.Config, kubectl, kubeconfig string) error {
	// The API server must reach the bench's 127.0.0.1: a plane on this
	// machine, not a cluster whose CRD (and webhook) this would take over.
	if u, err := url.Parse(cfg.Host); err != nil || !slices.Contains([]string{"127.0.0.1", "localhost", "::1"}, u.Hostname()) {
		return fmt.Errorf("the bench serves the CRD's conversion webhook on 127.0.0.1 and points the CRD at it: run it on a control plane on this machine (KUBECONFIG unset, or hack/local-up.sh's), not %s", cfg.Host)
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	if err := os.MkdirAll("_output", 0o755); err != nil {
		return err
	}
	logPath, _ := filepath.Abs("_output/bench-webhook.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	logger := funcr.New(func(prefix, args string) {
		_, _ = fmt.Fprintln(logFile, time.Now().Format(time.RFC3339Nano), prefix, args)
	}, funcr.Options{})
	keeper := &webhook.Keeper{Kube: kube, Dynamic: dyn, CRD: "foos.samplecontroller.example.com",
		Hosts:  []string{"127.0.0.1"},
		Secret: types.NamespacedName{Namespace: "default", Name: "foo-controller-webhook-cert"}}
	go func() {
		if err := webhook.Run(klog.NewContext(ctx, logger), lis, keeper, webhook.NewConverter(fooscheme.Scheme)); err != nil {
			logger.Error(err, "Conversion webhook stopped")
		}
	}()

	b, err := os.ReadFile("artifacts/examples/crd.yaml")
	if err != nil {
		return err
	}
	crd := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(b, &crd.Object); err != nil {
		return err
	}
	webhookURL := "https://" + lis.Addr().String() + webhook.Path
	if err := unstructured.SetNestedMap(crd.Object, map[string]any{"url": webhookURL}, "spec", "conversion", "webhook", "clientConfig"); err != nil {
		return err
	}
	if b, err = yaml.Marshal(crd.Object); err != nil {
		return err
	}
	local, err := os.CreateTemp("", "foo-bench-crd-*.yaml")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(local.Name()) }()
	if _, err := local.Write(b); err != nil {
		return err
	}
	if err := local.Close(); err != nil {
		return err
	}
	progress("installing the CRD, its conversion webhook served by the bench at %s (log: %s)", webhookURL, logPath)
	// First on the CRD already there, if any: an apply that drops the
	// service another apply (make run's, a user's) set, and sets the url,
	// is refused as holding both. Nothing to do on a new plane (NotFound),
	// or on a CRD converting with None (Invalid: the apply sets it all).
	if err := webhook.PointAt(ctx, dyn, keeper.CRD, webhookURL); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsInvalid(err) {
		return err
	}
	if _, err := output(kubectl, "--kubeconfig="+kubeconfig, "apply", "--server-side", "--force-conflicts", "-f", local.Name()); err != nil {
		return err
	}
	if _, err := output(kubectl, "--kubeconfig="+kubeconfig, "wait", "--for=condition=Established",
		"crd/foos.samplecontroller.example.com", "--timeout=60s"); err != nil {
		return err
	}
	// Converting from the first Foo on: the keeper has injected its CA.
	if err := webhook.WaitInjected(ctx, dyn, keeper.CRD, time.Minute); err != nil {
		return fmt.Errorf("the conversion webhook (log: %s): %w", logPath, err)
	}
	return nil
}
