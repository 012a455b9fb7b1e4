package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr/funcr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
//
// local says the plane is hack/local-up.sh's, whose API server reaches this
// machine's 127.0.0.1 (a kind cluster's kubeconfig names 127.0.0.1 too, but
// its API server runs in a container). restore points the CRD back where
// it pointed before, if it existed: a plane the bench did not start stays
// as make run left it.
//
// single installs it serving v1beta1 alone, converting with None, and
// serves no webhook: a release that no longer serves v1alpha1.
func installCRD(ctx context.Context, cfg *rest.Config, kubectl, kubeconfig string, local, single bool) (restore func(), err error) {
	if single {
		return installSingleVersionCRD(kubectl, kubeconfig)
	}
	if !local {
		return nil, fmt.Errorf("the bench serves the CRD's conversion webhook on 127.0.0.1 and points the CRD at it: run it on the local control plane (KUBECONFIG unset, or hack/local-up.sh's), not %s", cfg.Host)
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll("_output", 0o755); err != nil {
		return nil, err
	}
	logPath, _ := filepath.Abs("_output/bench-webhook.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	logger := funcr.New(func(prefix, args string) {
		_, _ = fmt.Fprintln(logFile, time.Now().Format(time.RFC3339Nano), prefix, args)
	}, funcr.Options{})
	keeper := &webhook.Keeper{Kube: kube, Dynamic: dyn, CRD: "foos.samplecontroller.example.com",
		Hosts:  []string{"127.0.0.1"},
		Secret: types.NamespacedName{Namespace: "default", Name: "foo-controller-webhook-cert"}}
	converter := webhook.NewConverter(fooscheme.Scheme)
	counted := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conversionReviews.Add(1)
		converter.ServeHTTP(w, r)
	})
	go func() {
		if err := webhook.Run(klog.NewContext(ctx, logger), lis, keeper, counted); err != nil {
			logger.Error(err, "Conversion webhook stopped")
		}
	}()

	crd, err := shippedCRD()
	if err != nil {
		return nil, err
	}
	webhookURL := "https://" + lis.Addr().String() + webhook.Path
	if err := unstructured.SetNestedMap(crd.Object, map[string]any{"url": webhookURL}, "spec", "conversion", "webhook", "clientConfig"); err != nil {
		return nil, err
	}
	progress("installing the CRD, its conversion webhook served by the bench at %s (log: %s)", webhookURL, logPath)
	// First on the CRD already there, if any: an apply that drops the
	// service another apply (make run's, a user's) set, and sets the url,
	// is refused as holding both. Nothing to do on a new plane (NotFound),
	// or on a CRD converting with None (Invalid: the apply sets it all).
	restore = func() {}
	if prev, err := dyn.Resource(webhook.CRDs).Get(ctx, keeper.CRD, metav1.GetOptions{}); err == nil {
		was, _, _ := unstructured.NestedMap(prev.Object, "spec", "conversion", "webhook", "clientConfig")
		if was["url"] != nil || was["service"] != nil {
			restore = func() {
				patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"conversion": map[string]any{"webhook": map[string]any{
					"clientConfig": map[string]any{"url": was["url"], "service": was["service"]}}}}})
				if _, err := dyn.Resource(webhook.CRDs).Patch(context.WithoutCancel(ctx), keeper.CRD, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
					progress("could not point the CRD's conversion webhook back where it was (%v): kubectl patch crd %s --type=merge -p '%s'", err, keeper.CRD, patch)
					return
				}
				progress("the CRD's conversion webhook points back where it was")
			}
		}
	}
	if err := webhook.PointAt(ctx, dyn, keeper.CRD, webhookURL); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsInvalid(err) {
		return nil, err
	}
	if err := applyCRD(kubectl, kubeconfig, crd); err != nil {
		return nil, err
	}
	// Converting from the first Foo on: the keeper has injected its CA.
	if err := webhook.WaitInjected(ctx, dyn, keeper.CRD, time.Minute); err != nil {
		return nil, fmt.Errorf("the conversion webhook (log: %s): %w", logPath, err)
	}
	return restore, nil
}

// conversionReviews counts the ConversionReviews the bench's webhook
// answered: what serving two versions costs the API server per write.
var conversionReviews atomic.Int64

// installSingleVersionCRD applies the shipped CRD with v1alpha1 no longer
// served and no conversion (strategy None), as a release that retired
// v1alpha1 would, over a CRD already serving both (a plane the bench ran
// on). v1alpha1 stays in the list, unserved: a plane whose storedVersions
// still name it would refuse its removal. The bench's namespaces hold no
// Foo (checkClean), so none stored in v1alpha1 is read through None.
func installSingleVersionCRD(kubectl, kubeconfig string) (restore func(), err error) {
	crd, err := shippedCRD()
	if err != nil {
		return nil, err
	}
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	served := 0
	for _, v := range versions {
		v := v.(map[string]any)
		if v["name"] != "v1beta1" {
			v["served"] = false
		}
		if v["served"] == true {
			served++
		}
	}
	if served != 1 {
		return nil, fmt.Errorf("artifacts/examples/crd.yaml: no v1beta1 served")
	}
	if err := unstructured.SetNestedSlice(crd.Object, versions, "spec", "versions"); err != nil {
		return nil, err
	}
	if err := unstructured.SetNestedMap(crd.Object, map[string]any{"strategy": "None"}, "spec", "conversion"); err != nil {
		return nil, err
	}
	progress("installing the CRD serving v1beta1 alone, no conversion webhook (-single-version)")
	// First on a CRD already there (a plane the bench ran on before): the
	// webhook's url, set by another field manager, would outlive the apply
	// and be refused beside strategy None.
	if _, err := output(kubectl, "--kubeconfig="+kubeconfig, "patch", "crd", crd.GetName(), "--type=merge",
		"-p", `{"spec":{"conversion":{"strategy":"None","webhook":null}}}`); err != nil && !strings.Contains(err.Error(), "NotFound") && !strings.Contains(err.Error(), "not found") {
		return nil, err
	}
	return func() {}, applyCRD(kubectl, kubeconfig, crd)
}

// shippedCRD reads artifacts/examples/crd.yaml.
func shippedCRD() (*unstructured.Unstructured, error) {
	b, err := os.ReadFile("artifacts/examples/crd.yaml")
	if err != nil {
		return nil, err
	}
	crd := &unstructured.Unstructured{}
	return crd, yaml.Unmarshal(b, &crd.Object)
}

// applyCRD applies crd (server-side, forcing: the bench's own settings
// win) and waits until it is established.
func applyCRD(kubectl, kubeconfig string, crd *unstructured.Unstructured) error {
	b, err := yaml.Marshal(crd.Object)
	if err != nil {
		return err
	}
	crdFile, err := os.CreateTemp("", "foo-bench-crd-*.yaml")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(crdFile.Name()) }()
	if _, err := crdFile.Write(b); err != nil {
		return err
	}
	if err := crdFile.Close(); err != nil {
		return err
	}
	if _, err := output(kubectl, "--kubeconfig="+kubeconfig, "apply", "--server-side", "--force-conflicts", "-f", crdFile.Name()); err != nil {
		return err
	}
	_, err = output(kubectl, "--kubeconfig="+kubeconfig, "wait", "--for=condition=Established",
		"crd/"+crd.GetName(), "--timeout=60s")
	return err
}
