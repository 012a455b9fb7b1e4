//go:build integration

package integration

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
}

// controllerUser is the identity the controller under test runs as. The
// audit policy records only this user's requests, so the audit log is an
// exact account of what the controller sent.
const controllerUser = "foo-controller"

const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  users: ["` + controllerUser + `"]
- level: None
`

func startCluster(ctx context.Context, repoRoot, testbin, dir string) (*cluster, error) {
	c := &cluster{dir: dir, testbin: testbin, auditLog: filepath.Join(dir, "audit.log")}
	policy := filepath.Join(dir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(auditPolicy), 0o600); err != nil {
		return nil, err
	}

	c.env = &envtest.Environment{
		BinaryAssetsDirectory: testbin,
		CRDInstallOptions: envtest.CRDInstallOptions{
			Paths:              []string{filepath.Join(repoRoot, "artifacts", "examples", "crd.yaml")},
			ErrorIfPathMissing: true,
		},
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
	// The default envtest apiserver logs only on failure; keep its output.
	apiserver.Out = mustCreate(filepath.Join(dir, "kube-apiserver.log"))
	apiserver.Err = apiserver.Out
	c.env.ControlPlane.Etcd = &envtest.Etcd{}
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

	caFile := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(caFile, apiserver.CA, 0o600); err != nil {
		return nil, err
	}

	// Flags as in hack/local-up.sh (see the reasons there); serving ports
	// are off because nothing here scrapes these components. The
	// node-lifecycle controller lifts the node.kubernetes.io/not-ready taint
	// that admission puts on every new node once kwok reports it Ready;
	// without it no pod is ever scheduled.
	if err := c.start("kube-controller-manager",
		"--kubeconfig="+kubeconfigs["kube-controller-manager"],
		"--secure-port=0",
		"--leader-elect=false",
		"--controllers=deployment-controller,replicaset-controller,garbage-collector-controller,namespace-controller,serviceaccount-controller,root-ca-certificate-publisher-controller,pod-garbage-collector-controller,node-lifecycle-controller",
		"--use-service-account-credentials=true",
		"--root-ca-file="+caFile,
		"--kube-api-qps=200", "--kube-api-burst=400",
		// Faster Deployment status: the default resync of the
		// deployment controller is not what is under test.
		"--concurrent-deployment-syncs=10", "--concurrent-replicaset-syncs=10",
	); err != nil {
		return nil, err
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
		return nil, err
	}
	if err := c.start("kube-scheduler", "--config="+schedCfg, "--secure-port=0"); err != nil {
		return nil, err
	}
	kwokDir := filepath.Join(dir, "kwok")
	if err := os.MkdirAll(kwokDir, 0o700); err != nil {
		return nil, err
	}
	if err := c.startEnv("kwok", []string{"KWOK_WORKDIR=" + kwokDir},
		"--kubeconfig="+kubeconfigs["kwok"],
		"--config="+filepath.Join(testbin, "kwok-stages.yaml"),
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
		"--node-lease-duration-seconds=40",
		"--cidr=127.100.0.0/16",
	); err != nil {
		return nil, err
	}
	if err := c.createNodes(ctx, 3); err != nil {
		return nil, err
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
	if c.env != nil {
		_ = c.env.Stop()
	}
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
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error // exit status, valid once done is closed
}

func startProcess(name, bin, logPath string, env []string, args ...string) (*process, error) {
	out, err := os.Create(logPath)
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
	p := &process{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
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
