// Command migrate-storage moves every stored Foo to the CRD's storage
// version and trims the CRD's status.storedVersions, the step between
// changing the storage version and removing the old version
// (docs/evolving-the-api.md, section 8), and moves the Foos' managed
// fields recorded in v1alpha1 to v1beta1 (section 10). Running it again
// is safe.
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

// fooCRD is the CRD whose field paths this command knows how to move.
const fooCRD = "foos.samplecontroller.example.com"

func main() {
	klog.InitFlags(nil)
	kubeconfig := flag.String("kubeconfig", "", "Path to a kubeconfig. Default: $KUBECONFIG, then ~/.kube/config, then in-cluster.")
	crd := flag.String("crd", fooCRD, "The CRD whose objects to migrate.")
	method := flag.String("method", string(storagemigrate.Auto), "auto (StorageVersionMigration where the API server serves it, else rewrite), storageversionmigration or rewrite.")
	timeout := flag.Duration("timeout", 30*time.Minute, "Give up after this long.")
	settle := flag.Duration("settle", time.Minute, "How long the API server must have stored in the new version before anything is written (requests begun on the old storage end within its request timeout, a minute by default).")
	qps := flag.Float64("kube-api-qps", 50, "Requests per second to the API server (the rewrite writes each object once).")
	burst := flag.Int("kube-api-burst", 100, "Burst of requests to the API server.")
	force := flag.Bool("force", false, "Migrate even when the CRD's storedVersions name the storage version alone (storedVersions trimmed too early: docs/evolving-the-api.md, section 8).")
	managedFields := flag.Bool("managed-fields", true, "Move the Foos' managed-fields entries recorded in v1alpha1 to v1beta1, as the stored objects are (docs/evolving-the-api.md, section 10); also when every Foo is stored in v1beta1 already. Ignored for another -crd.")
	flag.Parse()
	o := storagemigrate.Options{Method: storagemigrate.Method(*method), Settle: *settle, Force: *force}
	if *managedFields && *crd == fooCRD {
		o.ManagedFields = storagemigrate.FooFields
	}
	if err := run(*kubeconfig, *crd, o, float32(*qps), *burst, *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "migrate-storage:", err)
		os.Exit(1)
	}
}

func run(kubeconfig, crd string, o storagemigrate.Options, qps float32, burst int, timeout time.Duration) error {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
	if err != nil {
		return err
	}
	// client-go's default, 5 per second, would take an hour for 18,000
	// objects, and a list's continue token expires within minutes.
	cfg.QPS, cfg.Burst = qps, burst
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
	res, err := storagemigrate.Migrate(ctx, c, crd, o)
	switch {
	case res.Method == storagemigrate.Rewrite:
		fmt.Printf("storage version %s; storedVersions were %v; rewrite: written %d, already in it %d, written by another first %d, gone %d\n",
			res.StorageVersion, res.StoredVersionsBefore, res.Written, res.Unchanged, res.Overtaken, res.Gone)
	case res.Method == storagemigrate.StorageVersionMigration:
		fmt.Printf("storage version %s; storedVersions were %v; StorageVersionMigration %s\n",
			res.StorageVersion, res.StoredVersionsBefore, res.Migration)
	case err == nil:
		fmt.Printf("storage version %s; storedVersions %v: every object stored in it already\n", res.StorageVersion, res.StoredVersionsBefore)
	}
	if len(o.ManagedFields) > 0 && (err == nil || res.FieldsMoved+res.FieldsLeft > 0) {
		fmt.Printf("managed fields recorded in an older version moved to %s on %d objects, not moved on %d\n", res.StorageVersion, res.FieldsMoved, res.FieldsLeft)
	}
	if err == nil && res.Method != "" {
		fmt.Printf("storedVersions now [%s]\n", res.StorageVersion)
	}
	return err
}
