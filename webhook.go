package main

import (
	"context"
	"fmt"
	"net"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	samplev1alpha1 "example.com/foo-controller/pkg/apis/samplecontroller/v1alpha1"
	fooscheme "example.com/foo-controller/pkg/generated/clientset/versioned/scheme"
	"example.com/foo-controller/pkg/webhook"
)

// fooCRD is the CustomResourceDefinition whose conversion webhook the
// controller serves.
const fooCRD = "foos." + samplev1alpha1.GroupName

// serveConversionWebhook serves the CRD conversion webhook (pkg/webhook,
// docs/evolving-the-api.md) in every replica, leader or not, and before
// the informers start: listing Foos stored in one version in another may
// need it. Its clients are outside the write guard: the certificate's
// Secret and the CRD's caBundle are no Foo's, and a standby keeps them
// too. The readiness check it returns fails until a certificate is served
// (nil when the webhook is off).
func serveConversionWebhook(ctx context.Context, o options, cfg *rest.Config, namespace string) (ready func() error, err error) {
	if o.webhookAddr == "" || o.webhookAddr == "0" {
		return nil, nil
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	hosts := o.webhookHosts
	if len(hosts) == 0 {
		hosts = []string{"127.0.0.1", "localhost"}
		if inCluster(o) {
			hosts = []string{fmt.Sprintf("foo-controller-webhook.%s.svc", namespace)}
		}
	}
	lis, err := net.Listen("tcp", o.webhookAddr)
	if err != nil {
		return nil, fmt.Errorf("conversion webhook: %w", err)
	}
	keeper := &webhook.Keeper{Kube: kube, Dynamic: dyn, CRD: fooCRD, Hosts: hosts,
		Secret: types.NamespacedName{Namespace: namespace, Name: o.webhookSecret}}
	logger := klog.FromContext(ctx)
	go func() {
		if err := webhook.Run(ctx, lis, keeper, webhook.NewConverter(fooscheme.Scheme)); err != nil {
			logger.Error(err, "Conversion webhook stopped")
		}
	}()
	logger.Info("Serving the conversion webhook", "address", lis.Addr().String(), "path", webhook.Path,
		"secret", keeper.Secret, "hosts", hosts)
	return keeper.Ready, nil
}
