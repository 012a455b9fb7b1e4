//go:build integration

package integration

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"example.com/foo-controller/pkg/promtext"
)

// freeAddr returns a loopback address with a port free at the time of the call.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().String()
}

func httpGet(url string) (int, string) {
	resp, err := http.Get(url) //nolint:noctx // a test probe, bounded by the poll loop
	if err != nil {
		return 0, err.Error()
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// metricValue sums the series of a metric, as named in the text format
// (x_bucket, x_count, x_sum for a histogram x), whose labels contain every
// given fragment: a pair (`name="foo-controller"`, `le="5"`) or a prefix
// (`code="5`). A body that does not parse (an error instead of a scrape)
// has no series.
func metricValue(body, name string, labels ...string) (float64, bool) {
	f, err := promtext.Parse(strings.NewReader(body))
	if err != nil {
		return 0, false
	}
	return f.Sum(name, labels...)
}

func TestMetricsAndProbes(t *testing.T) {
	t.Parallel()
	s := newScenario(t)
	probe, metricsAddr := freeAddr(t), freeAddr(t)
	s.startController("-health-probe-bind-address="+probe, "-metrics-bind-address="+metricsAddr)

	s.eventually(time.Minute, "/readyz to pass", func() (bool, string) {
		code, body := httpGet("http://" + probe + "/readyz")
		return code == http.StatusOK, fmt.Sprintf("%d %s", code, body)
	})
	if code, body := httpGet("http://" + probe + "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz: %d %s", code, body)
	}

	scrape := func() string {
		code, body := httpGet("http://" + metricsAddr + "/metrics")
		if code != http.StatusOK {
			t.Fatalf("/metrics: %d %s", code, body)
		}
		return body
	}
	before := scrape()
	for i := range 5 {
		s.createFoo(newFoo(fmt.Sprintf("m-%d", i), fmt.Sprintf("m-%d", i), 1))
	}
	for i := range 5 {
		s.waitConverged(fmt.Sprintf("m-%d", i), time.Minute)
	}
	after := scrape()

	q := `name="foo-controller"`
	for _, m := range []struct {
		name   string
		labels []string
	}{
		{"workqueue_adds_total", []string{q}},
		{"workqueue_queue_duration_seconds_count", []string{q}},
		{"workqueue_work_duration_seconds_count", []string{q}},
		{"foo_controller_reconcile_total", []string{`result="success"`}},
		{"foo_controller_reconcile_duration_seconds_count", []string{`result="success"`}},
		{"rest_client_requests_total", []string{`method="PATCH"`}},
	} {
		b, _ := metricValue(before, m.name, m.labels...)
		a, ok := metricValue(after, m.name, m.labels...)
		if !ok || a <= b {
			t.Errorf("%s%v did not move: %v -> %v", m.name, m.labels, b, a)
		} else {
			t.Logf("%s%v: %v -> %v", m.name, m.labels, b, a)
		}
	}
	for _, m := range []string{"workqueue_depth", "workqueue_unfinished_work_seconds", "workqueue_longest_running_processor_seconds", "workqueue_retries_total"} {
		if _, ok := metricValue(after, m, q); !ok {
			t.Errorf("%s{%s} missing", m, q)
		}
	}
	if v, _ := metricValue(after, "foo_controller_leader"); v != 1 {
		t.Errorf("foo_controller_leader = %v, want 1 (no leader election: always working)", v)
	}
	if _, ok := metricValue(after, "foo_controller_build_info"); !ok {
		t.Error("foo_controller_build_info missing")
	}
}

var klogTime = regexp.MustCompile(`^[IWEF](\d{4}) (\d{2}:\d{2}:\d{2}\.\d{6})`)

// syncTimes returns the times of the "Finished syncing Foo" lines of a log.
func syncTimes(t *testing.T, path string) []time.Time {
	t.Helper()
	return logTimes(t, path, "Finished syncing Foo")
}

// logTimes returns the times of the lines of a klog text log that contain
// substr.
func logTimes(t *testing.T, path, substr string) []time.Time {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	year := time.Now().Year()
	var out []time.Time
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.Contains(line, substr) {
			continue
		}
		m := klogTime.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		ts, err := time.ParseInLocation("20060102 15:04:05.000000", fmt.Sprintf("%d%s %s", year, m[1], m[2]), time.Local)
		if err == nil {
			out = append(out, ts)
		}
	}
	return out
}

func TestLeaderElection(t *testing.T) {
	t.Parallel()
	s := newScenario(t)
	const (
		leaseDuration = 15 * time.Second // the defaults
		retryPeriod   = 2 * time.Second
	)
	args := []string{"-leader-elect=true", "-leader-elect-namespace=" + s.ns, "-leader-elect-lease-name=foo-controller"}
	holder := func() string {
		l, err := s.kube.CoordinationV1().Leases(s.ns).Get(s.ctx, "foo-controller", metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return ""
		}
		return *l.Spec.HolderIdentity
	}
	identity := s.identityOf

	a := s.startController(args...)
	idA := identity(a)
	s.eventually(30*time.Second, "a to lead", func() (bool, string) { return holder() == idA, holder() })
	b := s.startController(args...)
	idB := identity(b)

	for i := range 10 {
		s.createFoo(newFoo(fmt.Sprintf("le-%d", i), fmt.Sprintf("le-%d", i), 1))
	}
	for i := range 10 {
		s.waitConverged(fmt.Sprintf("le-%d", i), time.Minute)
	}
	if n := len(syncTimes(t, b.log)); n != 0 {
		t.Errorf("the standby synced %d times; only the leader may work", n)
	}
	t.Logf("leader synced %d times, standby 0", len(syncTimes(t, a.log)))

	// Graceful hand-over: SIGTERM the leader; it finishes, releases the
	// Lease, exits 0, and the standby takes over at its next retry.
	start := time.Now()
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	s.eventually(10*time.Second, "b to lead after a's SIGTERM", func() (bool, string) {
		return holder() == idB, fmt.Sprintf("held by %q; a released it: %v; b's last lines:\n%s",
			holder(), len(a.logLines("Released the Lease")) > 0, b.tail(8))
	})
	handover := time.Since(start)
	t.Logf("hand-over after SIGTERM: %v", handover.Round(time.Millisecond))
	if handover > 5*time.Second {
		t.Errorf("hand-over after SIGTERM took %v, want at most 5s", handover)
	}
	// Wait, not stop: a second SIGTERM while it still finishes (its last
	// Events, on a busy machine) would make it exit 1 at once.
	if err := a.wait(30 * time.Second); err != nil {
		t.Errorf("the old leader must exit 0 after SIGTERM: %v", err)
	}
	// Never two at work: the old leader's last sync precedes the new one's first.
	for i := range 5 {
		s.createFoo(newFoo(fmt.Sprintf("le-b-%d", i), fmt.Sprintf("le-b-%d", i), 1))
	}
	for i := range 5 {
		s.waitConverged(fmt.Sprintf("le-b-%d", i), time.Minute)
	}
	aSyncs, bSyncs := syncTimes(t, a.log), syncTimes(t, b.log)
	if len(aSyncs) > 0 && len(bSyncs) > 0 && !aSyncs[len(aSyncs)-1].Before(bSyncs[0]) {
		t.Errorf("the two leaders overlapped: a's last sync %v, b's first %v", aSyncs[len(aSyncs)-1], bSyncs[0])
	}

	// Crash: SIGKILL the leader; it never releases, so a standby waits for
	// the Lease to expire.
	c := s.startController(args...)
	idC := identity(c)
	start = time.Now()
	b.kill()
	s.eventually(leaseDuration+4*retryPeriod+5*time.Second, "c to lead after b's SIGKILL", func() (bool, string) { return holder() == idC, holder() })
	takeover := time.Since(start)
	// client-go's candidates try every retry period jittered by up to 1.2
	// more (2.2 retry periods apart at most): one such gap to see the
	// last renewal, the lease duration, and one more to try after it.
	// (Lease duration + 2 retry periods failed once by 18 ms, 2026-11-26.)
	bound := leaseDuration + 2*retryPeriod*22/10
	t.Logf("take-over after SIGKILL: %v (bound: lease duration %v + 2 × 2.2 × retry period %v = %v)", takeover.Round(time.Millisecond), leaseDuration, retryPeriod, bound)
	if takeover > bound {
		t.Errorf("take-over after SIGKILL took %v, want at most %v", takeover, bound)
	}
	for i := range 5 {
		s.createFoo(newFoo(fmt.Sprintf("le-c-%d", i), fmt.Sprintf("le-c-%d", i), 1))
	}
	for i := range 10 {
		s.waitConverged(fmt.Sprintf("le-%d", i), time.Minute)
	}
	for i := range 5 {
		s.waitConverged(fmt.Sprintf("le-b-%d", i), time.Minute)
		s.waitConverged(fmt.Sprintf("le-c-%d", i), time.Minute)
	}
}

func TestGracefulShutdownDuringBurst(t *testing.T) {
	t.Parallel()
	s := newScenario(t)
	const n = 200
	// The Foos exist before the controller starts, so that the signal
	// lands in the middle of its burst (created while it ran, they were
	// mostly handled by the time the last one existed).
	names := s.createFoos("g", n)
	p := s.startController()
	s.waitForDeployments(n/5, 2*time.Minute) // the burst is under way
	start := time.Now()
	// In-flight syncs finish, then the process exits 0.
	if err := p.stop(30 * time.Second); err != nil {
		t.Fatalf("SIGTERM during a burst: %v\n%s", err, p.tail(20))
	}
	t.Logf("exited 0 %v after SIGTERM", time.Since(start).Round(time.Millisecond))
	s.requireMidBurst(n, "the SIGTERM")
	logText, _ := os.ReadFile(p.log)
	if !strings.Contains(string(logText), "All workers stopped") {
		t.Errorf("no orderly stop in the log:\n%s", p.tail(10))
	}
	if strings.Contains(string(logText), "Unable to write event") {
		t.Errorf("Events were cut off at shutdown:\n%s", p.tail(10))
	}
	// A successor finishes the job: every Foo converges, one Deployment each.
	s.startController()
	s.waitAllConverged(names, 3*time.Minute)
	deps, err := s.kube.AppsV1().Deployments(s.ns).List(s.ctx, metav1.ListOptions{})
	if err != nil || len(deps.Items) != n {
		t.Errorf("%d Deployments for %d Foos (%v)", len(deps.Items), n, err)
	}
}

// TestInClusterConfig runs the image's binary as it runs in a pod: in the
// image's filesystem (nothing but the binary: no CA bundle, /etc or /tmp),
// read-only, as the image's user, with no kubeconfig, the API server named
// by KUBERNETES_SERVICE_HOST/PORT, and a ServiceAccount token, CA and
// namespace where client-go looks for them. All of it is set up in a
// private mount namespace, so the host is left untouched.
func TestInClusterConfig(t *testing.T) {
	t.Parallel()
	s := newScenario(t)
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Fatalf("this test needs unshare (util-linux): %v", err)
	}

	// An identity with every permission: this test is about the code path,
	// TestRBAC* about the permissions.
	sa, err := s.kube.CoreV1().ServiceAccounts(s.ns).Create(s.ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "in-cluster"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "foo-in-cluster-" + s.ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa.Name, Namespace: s.ns}},
	}
	if _, err := s.kube.RbacV1().ClusterRoleBindings().Create(s.ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = s.kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), binding.Name, metav1.DeleteOptions{})
	})
	tok, err := s.kube.CoreV1().ServiceAccounts(s.ns).CreateToken(s.ctx, sa.Name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	src := t.TempDir()
	ca, err := os.ReadFile(filepath.Join(env.dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string][]byte{"token": []byte(tok.Status.Token), "ca.crt": ca, "namespace": []byte(s.ns)} {
		if err := os.WriteFile(filepath.Join(src, name), content, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	u, err := url.Parse(env.admin.Host)
	if err != nil {
		t.Fatal(err)
	}
	// The binary of the image, as a container runtime would run it: its
	// entrypoint, as its user, with its filesystem as the root, read-only
	// (as artifacts/deploy sets it), and the service account's files
	// mounted where the kubelet mounts them, readable by all (the
	// projected volume's default mode).
	const saDir = "/var/run/secrets/kubernetes.io/serviceaccount"
	script := `set -e
root="$FOO_ROOTFS"
mkdir -p "$root` + saDir + `"
mount --bind "$root" "$root"
mount -o remount,bind,ro "$root"
mount -t tmpfs -o mode=0755 tmpfs "$root` + saDir + `"
cp "$FOO_SA_SRC"/* "$root` + saDir + `"/
chmod 0644 "$root` + saDir + `"/*
exec "$0" "$@"`
	args := append([]string{"--mount", "--propagation", "private", "sh", "-c", script,
		"chroot", "--userspec=" + shipped.user, shipped.rootfs}, shipped.entrypoint...)
	// The parent-death signal that stops a controller whose test binary
	// died does not outlive chroot's change of user: if go test is killed,
	// this one is left running (a graceful end stops it as usual).
	p := s.launch("unshare", []string{
		"KUBERNETES_SERVICE_HOST=" + u.Hostname(), "KUBERNETES_SERVICE_PORT=" + u.Port(),
		"KUBECONFIG=", "HOME=/", "FOO_SA_SRC=" + src, "FOO_ROOTFS=" + shipped.rootfs,
	}, append(args, "-namespace="+s.ns, "-v=4", "-metrics-bind-address=0", "-health-probe-bind-address=0")...)

	// Leader election is on by default in-cluster, with its Lease in the
	// pod's namespace (read from the mounted namespace file).
	s.eventually(time.Minute, "the in-cluster controller to take the Lease in its namespace", func() (bool, string) {
		l, err := s.kube.CoordinationV1().Leases(s.ns).Get(s.ctx, "foo-controller", metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return false, fmt.Sprintf("%v\n%s", err, p.tail(5))
		}
		return true, ""
	})
	// By now unshare, sh and chroot have each exec'd the next: the
	// process is the controller.
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	uid := regexp.MustCompile(`(?m)^Uid:\s+(\d+)`).FindSubmatch(status)
	if uid == nil || !strings.HasPrefix(shipped.user, string(uid[1])+":") || !strings.Contains(string(status), "Name:\tfoo-controller\n") {
		t.Errorf("want the image's entrypoint running as its user %s; /proc/%d/status:\n%s", shipped.user, p.cmd.Process.Pid, status)
	}
	s.createFoo(newFoo("web", "web", 2))
	s.waitConverged("web", time.Minute)
}

// TestReadyzWaitsForCacheSync puts a slow network between the controller
// and the API server, so that the initial list and watch take seconds:
// /readyz must fail in that window, naming the reason, and pass after, while
// /healthz passes throughout.
func TestReadyzWaitsForCacheSync(t *testing.T) {
	t.Parallel()
	s := newScenario(t)
	slowKC := proxyToAPIServer(t, env, 300*time.Millisecond).kubeconfigVia(t, env.ctrlKC)
	probe := freeAddr(t)
	s.startController("-kubeconfig="+slowKC, "-health-probe-bind-address="+probe)

	var notReady, healthy int
	var lastFailure string
	start := time.Now()
	s.eventually(2*time.Minute, "/readyz to pass", func() (bool, string) {
		if code, _ := httpGet("http://" + probe + "/healthz"); code == http.StatusOK {
			healthy++
		}
		code, body := httpGet("http://" + probe + "/readyz")
		switch code {
		case http.StatusOK:
			return true, ""
		case http.StatusInternalServerError:
			notReady++
			lastFailure = strings.TrimSpace(body)
		}
		return false, fmt.Sprintf("%d %s", code, body)
	})
	t.Logf("/readyz answered 500 %d times (%q) before 200, %v after start; /healthz was 200 %d times meanwhile",
		notReady, lastFailure, time.Since(start).Round(time.Millisecond), healthy)
	if notReady == 0 || !strings.Contains(lastFailure, "caches not synced") {
		t.Errorf("/readyz never failed before the caches synced (last failure %q)", lastFailure)
	}
	if healthy == 0 {
		t.Error("/healthz must pass while the caches sync")
	}
}

// TestSIGTERMDuringStartup stops the controller while its start-up checks
// are still waiting for a slow API server: a stop, not a failure, so it
// must exit 0 (a rollout may replace a Pod that has only just started).
func TestSIGTERMDuringStartup(t *testing.T) {
	t.Parallel()
	s := newScenario(t)
	slowKC := proxyToAPIServer(t, env, 300*time.Millisecond).kubeconfigVia(t, env.ctrlKC)
	p := s.startController("-kubeconfig=" + slowKC)
	s.eventually(30*time.Second, "the signal handler to be installed", func() (bool, string) {
		// The first line logged after signal.Notify, before any request.
		return len(p.logLines("Feature gate default state")) > 0, p.tail(3)
	})
	if err := p.stop(30 * time.Second); err != nil {
		t.Fatalf("a SIGTERM during start-up must exit 0: %v\n%s", err, p.tail(10))
	}
	if lines := p.logLines("Stopped before start-up finished"); len(lines) != 1 {
		t.Errorf("want the stop logged once; log:\n%s", p.tail(10))
	}
}

// TestRunLocalRefusesReplicasThatWouldNotShare: `make run REPLICAS=N`
// refuses, before it starts anything, the flags that would leave its
// replicas unsharded (each a leader of its own, writing side by side) or
// fighting over one port. Found by the third attack of issue 14.
func TestRunLocalRefusesReplicasThatWouldNotShare(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ args, want string }{
		{"-shard-slots=0", "would each lead alone"},
		{"-shard-slots=x", "at least 1"},
		{"-shard-slots 4", "with '='"},
		{"-metrics-bind-address=:9000", "no -metrics-bind-address"},
		{"--health-probe-bind-address=:9001", "no -metrics-bind-address or -health-probe-bind-address"},
		{"-shard-slots=4 -webhook-bind-address=:9999", "give no -webhook-bind-address"},
	} {
		cmd := exec.Command("bash", filepath.Join(repoRoot, "hack", "run-local.sh"))
		// No KUBECONFIG, so that reaching further would start a plane:
		// the refusal must come first.
		cmd.Env = append(os.Environ(), "REPLICAS=2", "ARGS="+tc.args, "KUBECONFIG=", "FOO_LOCAL_DIR="+t.TempDir())
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(string(out), tc.want) {
			t.Errorf("REPLICAS=2 ARGS=%q: %v, output %q; want exit 2 saying %q", tc.args, err, out, tc.want)
		}
		if strings.Contains(string(out), "local-up") {
			t.Errorf("REPLICAS=2 ARGS=%q started the control plane before refusing: %q", tc.args, out)
		}
	}
}
