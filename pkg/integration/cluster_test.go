//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// cluster is the shared control plane of one test binary run.
type cluster struct {
	env       *envtest.Environment
	dir       string // scratch: kubeconfigs, logs, audit log
	testbin   string // the binaries from hack/install-testbin.sh
	admin     *rest.Config
	kube      kubernetes.Interface
	adminKC   string // admin kubeconfig path (for kubectl)
	ctrlKC    string // the controller's kubeconfig path (user foo-controller)
	auditLog  string
	processes []*process
	// stopWebhook stops the plane's conversion webhook (webhook_test.go).
	stopWebhook func()
}

// controllerUser is the identity the controller under test runs as. The
// audit policy records only this user's requests, so the audit log is an
// exact account of what the controller sent.
const controllerUser = "foo-controller"

const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
# Lease writes with their bodies: which holder each write named (the
# sharding tests rebuild who held each slot when).
- level: Request
  users: ["` + controllerUser + `"]
  resources: [{group: coordination.k8s.io, resources: [leases]}]
- level: Metadata
  users: ["` + controllerUser + `"]
- level: None
`

// clusterOptions vary a control plane from the default one.
type clusterOptions struct {
	// apiserverFlags are extra kube-apiserver flags (name without "--").
	apiserverFlags map[string]string
	// noConversionWebhook leaves the CRD's conversion webhook as shipped
	// (a Service nothing routes to), for the tests that serve their own:
	// until they do, reads in v1beta1 fail.
	noConversionWebhook bool
	// storageVersionMigrator serves StorageVersionMigrations and runs their
	// controller (beta in 1.36, off by default).
	storageVersionMigrator bool
}

func startCluster(ctx context.Context, repoRoot, testbin, dir string, opts clusterOptions) (*cluster, error) {
	c := &cluster{dir: dir, testbin: testbin, auditLog: filepath.Join(dir, "audit.log")}
	policy := filepath.Join(dir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(auditPolicy), 0o600); err != nil {
		return nil, err
	}

	c.env = &envtest.Environment{
		BinaryAssetsDirectory: testbin,
		// No CRDInstallOptions: envtest would drop the CRD's conversion
		// webhook (it keeps one only for types its scheme can convert);
		// installCRD installs the file as shipped.
	}
	apiserver := c.env.ControlPlane.GetAPIServer()
	apiserver.Configure().
		Set("audit-policy-file", policy).
		Set("audit-log-path", c.auditLog).
		Set("audit-log-format", "json").
		Set("audit-log-mode", "blocking").
		// As in most real clusters: setting blockOwnerDeletion on an owner
		// reference to a Foo needs update on foos/finalizers.
		Set("enable-admission-plugins", "OwnerReferencesPermissionEnforcement")
	// Server-side sharded lists and watches (alpha in 1.36), as
	// hack/local-up.sh enables them (docs/sharding.md).
	gates := "ShardedListAndWatch=true"
	kcmFeatures := []string{}
	kcmControllers := "deployment-controller,replicaset-controller,garbage-collector-controller,namespace-controller,serviceaccount-controller,root-ca-certificate-publisher-controller,pod-garbage-collector-controller,node-lifecycle-controller"
	if opts.storageVersionMigrator {
		gates += ",StorageVersionMigrator=true"
		apiserver.Configure().Set("runtime-config", "storagemigration.k8s.io/v1beta1=true")
		kcmFeatures = append(kcmFeatures, "--feature-gates=StorageVersionMigrator=true")
		// It finds the objects to migrate through the garbage collector's
		// graph.
		kcmControllers += ",storage-version-migrator-controller"
	}
	apiserver.Configure().Set("feature-gates", gates)
	for name, value := range opts.apiserverFlags {
		apiserver.Configure().Set(name, value)
	}
	// Fixed directories (not envtest's temporary ones, which it deletes on
	// stop): the fault tests restart etcd on its data and the API server
	// with the same certificates, so existing kubeconfigs stay valid.
	apiserver.CertDir = filepath.Join(dir, "apiserver")
	apiserver.StopTimeout = 5 * time.Second
	// The default envtest apiserver logs only on failure; keep its output.
	if err := os.MkdirAll(apiserver.CertDir, 0o700); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(dir, "etcd"), 0o700); err != nil {
		return nil, err
	}
	apiserver.Out = mustCreate(filepath.Join(dir, "kube-apiserver.log"))
	apiserver.Err = apiserver.Out
	c.env.ControlPlane.Etcd = &envtest.Etcd{DataDir: filepath.Join(dir, "etcd")}
	etcd := c.env.ControlPlane.Etcd
	etcd.Out = mustCreate(filepath.Join(dir, "etcd.log"))
	etcd.Err = etcd.Out

	cfg, err := c.env.Start()
	if err != nil {
		return nil, fmt.Errorf("starting etcd and kube-apiserver (logs in %s): %w", dir, err)
	}
	c.admin = cfg
	if c.kube, err = kubernetes.NewForConfig(cfg); err != nil {
		return nil, err
	}

	// Each component gets the identity it has in a real cluster: the
	// bootstrap RBAC roles give them exactly their permissions.
	users := map[string]envtest.User{
		"admin":                   {Name: "admin", Groups: []string{"system:masters"}},
		controllerUser:            {Name: controllerUser, Groups: []string{"system:masters"}},
		"kube-controller-manager": {Name: "system:kube-controller-manager"},
		"kube-scheduler":          {Name: "system:kube-scheduler"},
		"kwok":                    {Name: "kwok-controller", Groups: []string{"system:masters"}},
	}
	kubeconfigs := map[string]string{}
	for id, u := range users {
		au, err := c.env.AddUser(u, nil)
		if err != nil {
			return nil, fmt.Errorf("adding user %s: %w", u.Name, err)
		}
		kc, err := au.KubeConfig()
		if err != nil {
			return nil, err
		}
		kubeconfigs[id] = filepath.Join(dir, id+".kubeconfig")
		if err := os.WriteFile(kubeconfigs[id], kc, 0o600); err != nil {
			return nil, err
		}
	}
	c.adminKC, c.ctrlKC = kubeconfigs["admin"], kubeconfigs[controllerUser]

	if err := c.installCRD(ctx, filepath.Join(repoRoot, "artifacts", "examples", "crd.yaml")); err != nil {
		return c, err
	}
	// Before the controller manager: its garbage collector reads Foos in
	// the preferred version, v1beta1.
	if !opts.noConversionWebhook {
		if err := c.serveConversionWebhook(ctx); err != nil {
			return c, err
		}
	}

	caFile := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(caFile, apiserver.CA, 0o600); err != nil {
		return c, err
	}

	// Flags as in hack/local-up.sh (see the reasons there); serving ports
	// are off because nothing here scrapes these components. The
	// node-lifecycle controller lifts the node.kubernetes.io/not-ready taint
	// that admission puts on every new node once kwok reports it Ready;
	// without it no pod is ever scheduled.
	if err := c.start("kube-controller-manager", append([]string{
		"--kubeconfig=" + kubeconfigs["kube-controller-manager"],
		"--secure-port=0",
		"--leader-elect=false",
		"--controllers=" + kcmControllers,
		"--use-service-account-credentials=true",
		"--root-ca-file=" + caFile,
		"--kube-api-qps=200", "--kube-api-burst=400",
		// Faster Deployment status: the default resync of the
		// deployment controller is not what is under test.
		"--concurrent-deployment-syncs=10", "--concurrent-replicaset-syncs=10",
	}, kcmFeatures...)...); err != nil {
		return c, err
	}
	schedCfg := filepath.Join(dir, "kube-scheduler.yaml")
	if err := os.WriteFile(schedCfg, []byte(fmt.Sprintf(`apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: %s
  qps: 200
  burst: 400
leaderElection:
  leaderElect: false
`, kubeconfigs["kube-scheduler"])), 0o600); err != nil {
		return c, err
	}
	if err := c.start("kube-scheduler", "--config="+schedCfg, "--secure-port=0"); err != nil {
		return c, err
	}
	kwokDir := filepath.Join(dir, "kwok")
	if err := os.MkdirAll(kwokDir, 0o700); err != nil {
		return c, err
	}
	if err := c.startEnv("kwok", []string{"KWOK_WORKDIR=" + kwokDir},
		"--kubeconfig="+kubeconfigs["kwok"],
		"--config="+filepath.Join(testbin, "kwok-stages.yaml"),
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
		"--node-lease-duration-seconds=40",
		"--cidr=127.100.0.0/16",
	); err != nil {
		return c, err
	}
	if err := c.createNodes(ctx, 3); err != nil {
		return c, err
	}
	return c, nil
}

// createNodes registers fake nodes for kwok and waits for them to be Ready.
func (c *cluster) createNodes(ctx context.Context, n int) error {
	for i := 1; i <= n; i++ {
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{
				Name:        fmt.Sprintf("kwok-node-%d", i),
				Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"},
				Labels: map[string]string{"type": "kwok", "kubernetes.io/os": "linux",
					"kubernetes.io/hostname": fmt.Sprintf("kwok-node-%d", i)},
			},
			Status: corev1.NodeStatus{
				Allocatable: corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse("1000"), corev1.ResourceMemory: resource.MustParse("4Ti"),
					corev1.ResourcePods: resource.MustParse("5000"),
				},
				Capacity: corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse("1000"), corev1.ResourceMemory: resource.MustParse("4Ti"),
					corev1.ResourcePods: resource.MustParse("5000"),
				},
			},
		}
		if _, err := c.kube.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating node: %w", err)
		}
	}
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		nodes, err := c.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "type=kwok"})
		ready := 0
		if err == nil {
			for _, nd := range nodes.Items {
				for _, cond := range nd.Status.Conditions {
					if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
						ready++
					}
				}
			}
		}
		if ready == n {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("kwok nodes not Ready after 2m (kwok log: %s)", filepath.Join(c.dir, "kwok.log"))
}

func (c *cluster) stop() {
	for i := len(c.processes) - 1; i >= 0; i-- {
		_ = c.processes[i].stop(10 * time.Second)
	}
	if c.stopWebhook != nil {
		c.stopWebhook()
	}
	if c.env != nil {
		_ = c.env.Stop()
	}
}

// stopAPIServer stops kube-apiserver: SIGTERM, as in a rolling upgrade,
// and SIGKILL if it has not exited within its StopTimeout (it sometimes
// hangs in shutdown with requests in flight; killed is as good a fault).
// startAPIServer starts it again on the same port, etcd and certificates.
func (c *cluster) stopAPIServer() error {
	if err := c.env.ControlPlane.APIServer.Stop(); err != nil && !strings.Contains(err.Error(), "timeout waiting") {
		return err
	}
	return nil
}

func (c *cluster) startAPIServer() error {
	if err := c.env.ControlPlane.APIServer.Start(); err != nil {
		return err
	}
	// Start returns once /healthz passes; /readyz also waits for the RBAC
	// roles and other post-start hooks, as a load balancer would.
	deadline := time.Now().Add(time.Minute)
	for {
		err := c.kube.Discovery().RESTClient().Get().AbsPath("/readyz").Do(context.Background()).Error()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kube-apiserver not ready a minute after its restart: %w", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// stopEtcd stops etcd; startEtcd starts it again on the same data.
func (c *cluster) stopEtcd() error { return c.env.ControlPlane.Etcd.Stop() }

func (c *cluster) startEtcd() error { return c.env.ControlPlane.Etcd.Start() }

// compactEtcd compacts etcd's history up to its current revision and
// returns that revision: every watch that resumes from an older
// resourceVersion now gets 410 Gone. It talks to etcd's JSON gateway, so
// the tests need no etcd client library.
func (c *cluster) compactEtcd(ctx context.Context) (int64, error) {
	base := c.env.ControlPlane.Etcd.URL.String()
	var rangeResp struct {
		Header struct {
			Revision string `json:"revision"`
		} `json:"header"`
	}
	// Any key will do: every response carries the store's revision.
	if err := postJSON(ctx, base+"/v3/kv/range", `{"key":"AA=="}`, &rangeResp); err != nil {
		return 0, err
	}
	rev, err := strconv.ParseInt(rangeResp.Header.Revision, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("etcd revision %q: %w", rangeResp.Header.Revision, err)
	}
	if err := postJSON(ctx, base+"/v3/kv/compaction", fmt.Sprintf(`{"revision":"%d","physical":true}`, rev), nil); err != nil {
		return 0, err
	}
	return rev, nil
}

func postJSON(ctx context.Context, url, body string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("POST %s: %s: %s", url, resp.Status, b)
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(b, out)
}

// restartComponent stops (SIGTERM) and starts again one of the components
// started beside the API server, with the same flags.
func (c *cluster) restartComponent(name string) error {
	for i, p := range c.processes {
		if p.name != name {
			continue
		}
		_ = p.stop(10 * time.Second)
		np, err := startProcess(p.name, p.cmd.Path, p.log, p.env, p.cmd.Args[1:]...)
		if err != nil {
			return err
		}
		c.processes[i] = np
		return nil
	}
	return fmt.Errorf("no component %s", name)
}

func (c *cluster) start(name string, args ...string) error { return c.startEnv(name, nil, args...) }

func (c *cluster) startEnv(name string, env []string, args ...string) error {
	p, err := startProcess(name, filepath.Join(c.testbin, name), filepath.Join(c.dir, name+".log"), env, args...)
	if err != nil {
		return err
	}
	c.processes = append(c.processes, p)
	return nil
}

// process is a child process with its output in a log file.
type process struct {
	name  string
	cmd   *exec.Cmd
	env   []string // added to the environment
	log   string
	done  chan struct{}
	err   error     // exit status, valid once done is closed
	ended time.Time // when it exited, valid once done is closed
}

func startProcess(name, bin, logPath string, env []string, args ...string) (*process, error) {
	// Appending: a restarted component keeps one log.
	out, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = append(os.Environ(), env...)
	// Its own process group, so that a Ctrl-C of `go test` reaches the
	// test binary first and the cleanup stops children in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = out.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, env: env, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		p.ended = time.Now()
		_ = out.Close()
		close(p.done)
	}()
	return p, nil
}

// stop sends SIGTERM and waits up to grace for the exit, then kills. It
// returns the exit error (nil for a clean exit 0).
func (p *process) stop(grace time.Duration) error {
	select {
	case <-p.done:
		return p.err
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	return p.wait(grace)
}

// wait waits for a process already signalled to exit, without a second
// signal (which the controller answers by exiting at once, with 1), and
// kills it after grace.
func (p *process) wait(grace time.Duration) error {
	select {
	case <-p.done:
		return p.err
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("%s did not exit within %v of SIGTERM: %w", p.name, grace, errors.Join(p.err, errors.New("killed")))
	}
}

// kill sends SIGKILL: a crash, with no chance to clean up.
func (p *process) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// running reports whether the process has not exited yet.
func (p *process) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// logLines returns the lines of the process's log that contain substr,
// case-insensitively.
func (p *process) logLines(substr string) []string {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return []string{err.Error()}
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(strings.ToLower(l), strings.ToLower(substr)) {
			out = append(out, l)
		}
	}
	return out
}

// tail returns the last n lines of the process's log.
func (p *process) tail(n int) string {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func mustCreate(path string) *os.File {
	f, err := os.Create(path)
	if err != nil {
		panic(err)
	}
	return f
}
