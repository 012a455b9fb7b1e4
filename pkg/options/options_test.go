package options

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
)

// TestBadFlagsAreRefused: a flag value the controller cannot run with is an
// error from Parse (main prints it and exits 2), not a default.
func TestBadFlagsAreRefused(t *testing.T) {
	for _, args := range [][]string{
		{"-workers=0"}, {"-kube-api-qps=0"}, {"-kube-api-burst=0"}, {"-resync-period=-1s"},
		{"-leader-elect-renew-deadline=15s"}, {"-no-such-flag"}, {"stray-argument"},
		{"-shard-slots=-1"}, {"-shard-slots=257"}, {"-shard-slots=16", "-leader-elect=true"},
		{"-shard-slots=16", "-namespace=team-a"},
		{"-shard-slots=16", "-shard-rebalance-skew=1.1"}, {"-shard-slots=16", "-shard-rebalance-skew=-1"},
		{"-shard-slots=16", "-shard-rebalance-interval=-1s"},
		{"-webhook-hosts= , "},
	} {
		if _, err := Parse("foo-controller", args); err == nil {
			t.Errorf("Parse(%q) accepted it", args)
		}
	}
	// Re-balancing: on by default, and the first re-cut waits for ten Foos
	// a slot. (One successful parse per process: the logging flags apply
	// once.)
	o, err := Parse("foo-controller", []string{"-shard-slots=16"})
	if err != nil || o.ShardRebalance.Skew != 1.5 || o.ShardRebalance.MinLoad != 160 || o.ShardEvery != time.Minute {
		t.Errorf("Parse(-shard-slots=16): %+v, every %v, %v; want skew 1.5, min load 160, every 1m", o.ShardRebalance, o.ShardEvery, err)
	}
	// The conversion webhook: off until the shipped CRD serves v1beta1
	// through it; its hosts default by where the controller runs.
	if o.WebhookAddr != "0" || o.WebhookSecret != "foo-controller-webhook-cert" || o.WebhookHosts != nil {
		t.Errorf("webhook flags by default: %q, %q, %q", o.WebhookAddr, o.WebhookSecret, o.WebhookHosts)
	}
	// Sharding one namespace would put it all in one slot: the refusal
	// says so, and what to run instead.
	_, err = Parse("foo-controller", []string{"-shard-slots=16", "-namespace=team-a"})
	if err == nil || !strings.Contains(err.Error(), "exclude each other") || !strings.Contains(err.Error(), `"team-a" would all fall in slot`) ||
		!strings.Contains(err.Error(), "-leader-elect") {
		t.Errorf("-shard-slots with -namespace refused with %v; want it to say why and what to run instead", err)
	}
}

// TestVersionFlag: -version is answered whatever other flags say (what
// it prints, with the full commit when the build stamped one: TestVersion,
// in pkg/buildinfo).
func TestVersionFlag(t *testing.T) {
	for _, args := range [][]string{{"-version"}, {"--version"}, {"-version", "-workers=0"}} {
		o, err := Parse("foo-controller", args)
		if err != nil || !o.PrintVersion {
			t.Errorf("Parse(%q) = printVersion %v, error %v; want true, nil", args, o.PrintVersion, err)
		}
	}
}

// TestClientConfigWithNothing: no kubeconfig, no -master, not in a cluster:
// one message saying what to give.
func TestClientConfigWithNothing(t *testing.T) {
	t.Setenv(clientcmd.RecommendedConfigPathEnvVar, "")
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	_, err := Options{}.ClientConfig("foo-controller", "test")
	if err == nil || !strings.Contains(err.Error(), "no -kubeconfig, -master or $KUBECONFIG given, and not running in a cluster") {
		t.Errorf("got %v", err)
	}
}

// TestLeaseNamespaceOutsideACluster: outside a cluster the Lease is in
// "default" whatever the kubeconfig's context names, so that replicas of
// any version meet in one Lease; -leader-elect-namespace wins. (In a
// cluster, the Pod's namespace: TestInClusterConfig.)
func TestLeaseNamespaceOutsideACluster(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	kc := `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u, namespace: team-a}}]
current-context: x
`
	if err := os.WriteFile(path, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	o := Options{Kubeconfig: path}
	if got := o.LeaseConfig("me"); got.LeaseNamespace != "default" || got.Identity != "me" {
		t.Errorf("LeaseConfig: namespace %q, identity %q; want default, me", got.LeaseNamespace, got.Identity)
	}
	o.Lease.LeaseNamespace = "ops"
	if got := o.LeaseConfig("me"); got.LeaseNamespace != "ops" {
		t.Errorf("with -leader-elect-namespace=ops: %q", got.LeaseNamespace)
	}
}
