// Command migrate-storage moves every stored Foo to the CRD's storage
// version and trims the CRD's status.storedVersions, the step between
// changing the storage version and removing the old version
// (docs/evolving-the-api.md, section 8). Running it again is safe.
//
//	go run ./hack/migrate-storage -kubeconfig=$HOME/.kube/config
//	make migrate-storage MIGRATE_FLAGS=-method=rewrite
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	apiextensions "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"example.com/foo-controller/pkg/storagemigrate"
)

func main() {
	klog.InitFlags(nil)
	kubeconfig := flag.String("kubeconfig", "", "Path to a kubeconfig. Default: $KUBECONFIG, then ~/.kube/config, then in-cluster.")
	crd := flag.String("crd", "foos.samplecontroller.example.com", "The CRD whose objects to migrate.")
	method := flag.String("method", string(storagemigrate.Auto), "auto (StorageVersionMigration where the API server serves it, else rewrite), storageversionmigration or rewrite.")
	timeout := flag.Duration("timeout", 30*time.Minute, "Give up after this long.")
	flag.Parse()
	if err := run(*kubeconfig, *crd, storagemigrate.Method(*method), *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "migrate-storage:", err)
		os.Exit(1)
	}
}

func run(kubeconfig, crd string, method storagemigrate.Method, timeout time.Duration) error {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
	if err != nil {
		return err
	}
	var c storagemigrate.Clients
	if c.Kube, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	if c.APIExtensions, err = apiextensions.NewForConfig(cfg); err != nil {
		return err
	}
	if c.Dynamic, err = dynamic.NewForConfig(cfg); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	res, err := storagemigrate.Migrate(ctx, c, crd, method, 2*time.Second)
	fmt.Printf("storage version %s; storedVersions were %v; method %q; written %d, already in it %d, gone %d%s\n",
		res.StorageVersion, res.Before, res.Method, res.Written, res.Unchanged, res.Gone, migration(res.Migration))
	return err
}

func migration(name string) string {
	if name == "" {
		return ""
	}
	return "; StorageVersionMigration " + name
}
