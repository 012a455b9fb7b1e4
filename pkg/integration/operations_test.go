//go:build integration

package integration

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// metricValue sums the samples of a metric whose labels contain all of the
// given label pairs (e.g. `name="foo-controller"`).
func metricValue(body, name string, labels ...string) (float64, bool) {
	sum, found := 0.0, false
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		ok := true
		for _, l := range labels {
			if !strings.Contains(line, l) {
				ok = false
			}
		}
		if !ok {
			continue
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err == nil {
			sum, found = sum+v, true
		}
	}
	return sum, found
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
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	year := time.Now().Year()
	var out []time.Time
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.Contains(line, "Finished syncing Foo") {
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
	// identity reads the identity a process campaigns with from its log.
	identityRe := regexp.MustCompile(`"Waiting to lead".*identity="([^"]+)"`)
	identity := func(p *process) string {
		var id string
		s.eventually(30*time.Second, p.log+" to campaign", func() (bool, string) {
			b, _ := os.ReadFile(p.log)
			if m := identityRe.FindSubmatch(b); m != nil {
				id = string(m[1])
				return true, ""
			}
			return false, "no identity logged yet"
		})
		return id
	}

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
	s.eventually(10*time.Second, "b to lead after a's SIGTERM", func() (bool, string) { return holder() == idB, holder() })
	handover := time.Since(start)
	t.Logf("hand-over after SIGTERM: %v", handover.Round(time.Millisecond))
	if handover > 5*time.Second {
		t.Errorf("hand-over after SIGTERM took %v, want at most 5s", handover)
	}
	if err := a.stop(30 * time.Second); err != nil {
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
	t.Logf("take-over after SIGKILL: %v (bound: lease duration %v + 2 × retry period %v)", takeover.Round(time.Millisecond), leaseDuration, retryPeriod)
	if bound := leaseDuration + 2*retryPeriod; takeover > bound {
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
	p := s.startController()
	const n = 200
	for i := range n {
		s.createFoo(newFoo(fmt.Sprintf("g-%03d", i), fmt.Sprintf("g-%03d", i), 1))
	}
	s.eventually(2*time.Minute, "the burst to be under way", func() (bool, string) {
		deps, err := s.kube.AppsV1().Deployments(s.ns).List(s.ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		return len(deps.Items) >= n/5, fmt.Sprintf("%d Deployments", len(deps.Items))
	})
	start := time.Now()
	// In-flight syncs finish, then the process exits 0.
	if err := p.stop(30 * time.Second); err != nil {
		t.Fatalf("SIGTERM during a burst: %v\n%s", err, p.tail(20))
	}
	t.Logf("exited 0 %v after SIGTERM", time.Since(start).Round(time.Millisecond))
	logText, _ := os.ReadFile(p.log)
	if !strings.Contains(string(logText), "All workers stopped") {
		t.Errorf("no orderly stop in the log:\n%s", p.tail(10))
	}
	if strings.Contains(string(logText), "Unable to write event") {
		t.Errorf("Events were cut off at shutdown:\n%s", p.tail(10))
	}
	// A successor finishes the job: every Foo converges, one Deployment each.
	s.startController()
	for i := range n {
		s.waitConverged(fmt.Sprintf("g-%03d", i), 3*time.Minute)
	}
	deps, err := s.kube.AppsV1().Deployments(s.ns).List(s.ctx, metav1.ListOptions{})
	if err != nil || len(deps.Items) != n {
		t.Errorf("%d Deployments for %d Foos (%v)", len(deps.Items), n, err)
	}
}
