package options

import (
	"fmt"
	"os"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"example.com/foo-controller/pkg/leader"
)

// loader is kubectl's loader: -kubeconfig, else $KUBECONFIG (a list
// of files, merged), else, with -master alone, ~/.kube/config; -master
// overrides the server address. With none of them given, no file is read:
// in a cluster, the Pod's service account.
func (o Options) loader() clientcmd.ClientConfig {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = o.Kubeconfig
	if o.InCluster() {
		rules = &clientcmd.ClientConfigLoadingRules{}
	}
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules,
		&clientcmd.ConfigOverrides{ClusterInfo: clientcmdapi.Cluster{Server: o.Master}})
}

// InCluster: no -kubeconfig, -master or $KUBECONFIG, so the service
// account's config (and leader election on by default).
func (o Options) InCluster() bool {
	return o.Kubeconfig == "" && o.Master == "" && os.Getenv(clientcmd.RecommendedConfigPathEnvVar) == ""
}

// ClientConfig is the REST config every client starts from, its user agent
// naming the controller and this process (identity) so that an operator can tell in the API
// server's audit log which replica sent a request.
func (o Options) ClientConfig(name, identity string) (*rest.Config, error) {
	cfg, err := o.loader().ClientConfig()
	if clientcmd.IsEmptyConfig(err) {
		return nil, fmt.Errorf("no -kubeconfig, -master or $KUBECONFIG given, and not running in a cluster: %w", err)
	}
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = float32(o.QPS), o.Burst
	cfg.UserAgent = fmt.Sprintf("%s (%s)", name, identity)
	return cfg, nil
}

// LeaseConfig is the leader Lease's flags (a shard group's too), with this
// process's identity and the namespace filled in: by default the Pod's own
// in a cluster (as clientcmd reads it: $POD_NAMESPACE, else the service
// account's), else "default", whatever the kubeconfig's context names, so
// that replicas of any version run outside a cluster meet in one Lease.
func (o Options) LeaseConfig(identity string) leader.Config {
	lc := o.Lease
	lc.Identity = identity
	if lc.LeaseNamespace == "" {
		lc.LeaseNamespace = metav1.NamespaceDefault
		if o.InCluster() {
			if ns, _, err := o.loader().Namespace(); err == nil && ns != "" {
				lc.LeaseNamespace = ns
			}
		}
	}
	return lc
}
