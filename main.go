// Command foo-controller keeps a Deployment in the shape each Foo
// (samplecontroller.example.com/v1alpha1) declares and reports its state on
// the Foo. See README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"

	samplev1alpha1 "example.com/foo-controller/pkg/apis/samplecontroller/v1alpha1"
	clientset "example.com/foo-controller/pkg/generated/clientset/versioned"
	fooinformers "example.com/foo-controller/pkg/generated/informers/externalversions"
)

// options are the command-line flags. Each flag's help states its default.
type options struct {
	kubeconfig   string
	master       string
	namespace    string
	workers      int
	qps          float64
	burst        int
	resyncPeriod time.Duration
}

func main() {
	opts, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "foo-controller: %v (see -help)\n", err)
		os.Exit(2)
	}

	ctx := signalContext(klog.NewContext(context.Background(), klog.Background()))
	if err := run(ctx, opts); err != nil {
		fmt.Fprintf(os.Stderr, "foo-controller: %v\n", err)
		klog.Flush()
		os.Exit(1)
	}
	klog.Flush()
}

func parseFlags(args []string) (options, error) {
	fs := flag.NewFlagSet("foo-controller", flag.ContinueOnError)
	klog.InitFlags(fs)
	var o options
	fs.StringVar(&o.kubeconfig, "kubeconfig", "",
		"Path to a kubeconfig. Default: $KUBECONFIG if set (a list, as for kubectl), else the in-cluster config.")
	fs.StringVar(&o.master, "master", "", "Address of the Kubernetes API server; overrides the kubeconfig's server.")
	fs.StringVar(&o.namespace, "namespace", metav1.NamespaceAll, "Watch only this namespace (default: all namespaces).")
	fs.IntVar(&o.workers, "workers", 4, "Number of Foos synced in parallel.")
	fs.Float64Var(&o.qps, "kube-api-qps", 50, "Client-side rate limit for API requests, per second (client-go's own default is 5).")
	fs.IntVar(&o.burst, "kube-api-burst", 100, "Burst allowed above -kube-api-qps (client-go's own default is 10).")
	fs.DurationVar(&o.resyncPeriod, "resync-period", time.Minute,
		"How often every cached Foo is synced again even without events; 0 disables. A resync reads only the cache and writes nothing for a converged Foo.")
	fs.SetOutput(io.Discard) // errors are reported once by main, not with the usage text
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(os.Stdout)
			_, _ = fmt.Fprintln(os.Stdout, "Usage of foo-controller:")
			fs.PrintDefaults()
		}
		return o, err
	}
	switch {
	case fs.NArg() > 0:
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	case o.workers < 1:
		return o, fmt.Errorf("-workers must be at least 1, got %d", o.workers)
	case o.qps <= 0:
		return o, fmt.Errorf("-kube-api-qps must be positive, got %v", o.qps)
	case o.burst < 1:
		return o, fmt.Errorf("-kube-api-burst must be at least 1, got %d", o.burst)
	case o.resyncPeriod < 0:
		return o, fmt.Errorf("-resync-period must not be negative, got %v", o.resyncPeriod)
	}
	return o, nil
}

// signalContext returns a context cancelled by the first SIGTERM or SIGINT,
// which starts a graceful shutdown. A second signal exits at once.
func signalContext(parent context.Context) context.Context {
	ctx, cancel := context.WithCancel(parent)
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-ch
		klog.FromContext(ctx).Info("Received signal; shutting down gracefully (send it again to exit at once)")
		cancel()
		<-ch
		klog.Flush()
		os.Exit(1)
	}()
	return ctx
}

func run(ctx context.Context, o options) error {
	logger := klog.FromContext(ctx)

	cfg, err := clientConfig(o)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = float32(o.qps), o.burst
	cfg.UserAgent = controllerName

	kubeClient, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("building Kubernetes client: %w", err)
	}
	fooClient, err := clientset.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("building Foo client: %w", err)
	}
	if err := checkAPI(ctx, cfg, o.namespace); err != nil {
		return err
	}

	// Our own scheme for the event recorder (to name Foos in Events), rather
	// than adding our types to client-go's global scheme.
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := samplev1alpha1.Install(scheme); err != nil {
		return err
	}

	kubeInformerFactory := kubeinformers.NewSharedInformerFactoryWithOptions(kubeClient, o.resyncPeriod,
		kubeinformers.WithNamespace(o.namespace))
	fooInformerFactory := fooinformers.NewSharedInformerFactoryWithOptions(fooClient, o.resyncPeriod,
		fooinformers.WithNamespace(o.namespace))

	// Events are sent by their own goroutine; keep it running until the
	// workers have finished, so that the last syncs' Events have a chance
	// to go out (best effort: an Event still queued at exit is dropped).
	eventCtx, stopEvents := context.WithCancel(context.WithoutCancel(ctx))
	defer stopEvents()
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: kubeClient.EventsV1()})
	if err := broadcaster.StartRecordingToSinkWithContext(eventCtx); err != nil {
		return fmt.Errorf("starting event recorder: %w", err)
	}
	defer broadcaster.Shutdown()
	recorder := broadcaster.NewRecorder(scheme, controllerName)

	controller, err := NewController(ctx, kubeClient, fooClient,
		kubeInformerFactory.Apps().V1().Deployments(),
		fooInformerFactory.Samplecontroller().V1alpha1().Foos(),
		recorder)
	if err != nil {
		return err
	}

	// Start is non-blocking; informers stop when ctx is cancelled.
	kubeInformerFactory.Start(ctx.Done())
	fooInformerFactory.Start(ctx.Done())
	defer kubeInformerFactory.Shutdown()
	defer fooInformerFactory.Shutdown()

	if err := controller.Run(ctx, o.workers); err != nil {
		return err
	}
	logger.Info("Stopped")
	return nil
}

// clientConfig builds the REST config: from -kubeconfig, else from
// $KUBECONFIG (kubectl's loading rules), else from the in-cluster service
// account; -master overrides the server address.
func clientConfig(o options) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = o.kubeconfig
	if o.kubeconfig == "" && os.Getenv(clientcmd.RecommendedConfigPathEnvVar) == "" && o.master == "" {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("no -kubeconfig, -master or $KUBECONFIG given, and not running in a cluster: %w", err)
		}
		return cfg, nil
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules,
		&clientcmd.ConfigOverrides{ClusterInfo: clientcmdapi.Cluster{Server: o.master}}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig: %w", err)
	}
	return cfg, nil
}

// checkAPI fails fast, with one clear message, when the API server cannot be
// reached, the Foo CRD is not installed, or we may not list what we watch:
// otherwise the informers would retry forever and the process would look
// healthy while doing nothing.
func checkAPI(ctx context.Context, cfg *rest.Config, namespace string) error {
	c := rest.CopyConfig(cfg)
	c.Timeout = 15 * time.Second
	kc, err := kubernetes.NewForConfig(c)
	if err != nil {
		return err
	}
	if err := checkServesFoos(kc, cfg.Host); err != nil {
		return err
	}
	fc, err := clientset.NewForConfig(c)
	if err != nil {
		return err
	}
	one := metav1.ListOptions{Limit: 1}
	if _, err := fc.SamplecontrollerV1alpha1().Foos(namespace).List(ctx, one); err != nil {
		return fmt.Errorf("cannot list foos (does the controller's identity have RBAC permission to list and watch them?): %w", err)
	}
	if _, err := kc.AppsV1().Deployments(namespace).List(ctx, one); err != nil {
		return fmt.Errorf("cannot list deployments (does the controller's identity have RBAC permission to list and watch them?): %w", err)
	}
	return nil
}

func checkServesFoos(kc kubernetes.Interface, host string) error {
	gv := samplev1alpha1.GroupVersion.String()
	resources, err := kc.Discovery().ServerResourcesForGroupVersion(gv)
	if err != nil {
		if _, verr := kc.Discovery().ServerVersion(); verr != nil {
			return fmt.Errorf("cannot reach the API server at %s: %w", host, verr)
		}
		return fmt.Errorf("API %s is not served (is the CRD installed? kubectl apply -f artifacts/examples/crd.yaml): %w", gv, err)
	}
	for _, r := range resources.APIResources {
		if r.Name == "foos" {
			return nil
		}
	}
	return fmt.Errorf("API %s does not serve foos (is the CRD installed? kubectl apply -f artifacts/examples/crd.yaml)", gv)
}
