package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/prometheus/procfs"

	"example.com/foo-controller/pkg/promtext"
)

// controllerProc is one run of the controller binary as a child process.
type controllerProc struct {
	cmd         *exec.Cmd
	metricsAddr string
	probeAddr   string
	exited      chan error
	started     time.Time
}

// freePort asks the kernel for an unused loopback port.
func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := l.Addr().String()
	return addr, l.Close()
}

// startController starts the binary with its default flags, except where it
// finds the cluster and where it serves metrics and probes. Its output is
// appended to logPath.
// controllerExtras are additions to the controller's default command line
// and environment, for experiments only.
type controllerExtras struct {
	args []string // flags
	env  []string // NAME=VALUE, on top of the bench's environment
}

func startController(bin, kubeconfig, logPath string, extra controllerExtras) (*controllerProc, error) {
	m, err := freePort()
	if err != nil {
		return nil, err
	}
	p, err := freePort()
	if err != nil {
		return nil, err
	}
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, append([]string{"-kubeconfig=" + kubeconfig, "-metrics-bind-address=" + m, "-metrics-secure=false",
		"-health-probe-bind-address=" + p}, extra.args...)...)
	cmd.Env = append(os.Environ(), extra.env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	c := &controllerProc{cmd: cmd, metricsAddr: m, probeAddr: p, exited: make(chan error, 1), started: time.Now()}
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return nil, err
	}
	go func() {
		c.exited <- cmd.Wait()
		_ = logf.Close()
	}()
	return c, nil
}

// stop sends SIGTERM and waits for the exit (SIGKILL after 30s).
func (c *controllerProc) stop() error {
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	select {
	case err := <-c.exited:
		return err
	case <-time.After(30 * time.Second):
		_ = c.cmd.Process.Kill()
		return errors.New("controller did not exit within 30s of SIGTERM; killed")
	}
}

func (c *controllerProc) alive() error {
	select {
	case err := <-c.exited:
		c.exited <- err
		if err == nil {
			return errors.New("controller exited (status 0: a signal?) (see its log)")
		}
		return fmt.Errorf("controller exited: %w (see its log)", err)
	default:
		return nil
	}
}

// waitReady polls /readyz until it answers 200 and returns when it did.
func (c *controllerProc) waitReady(ctx context.Context, timeout time.Duration) (time.Time, error) {
	deadline := time.Now().Add(timeout)
	client := http.Client{Timeout: time.Second}
	for time.Now().Before(deadline) {
		if err := c.alive(); err != nil {
			return time.Time{}, err
		}
		resp, err := client.Get("http://" + c.probeAddr + "/readyz")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return time.Now(), nil
			}
		}
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return time.Time{}, fmt.Errorf("/readyz not 200 after %v", timeout)
}

// peakRSS is VmHWM from /proc/<pid>/status, in bytes.
func (c *controllerProc) peakRSS() (int64, error) {
	st, err := c.memStatus()
	if err != nil {
		return 0, err
	}
	v, ok := st["VmHWM"]
	if !ok {
		return 0, errors.New("no VmHWM in /proc status")
	}
	return v, nil
}

// memStatus is the memory lines of /proc/<pid>/status, in bytes: VmHWM,
// VmRSS, and RssFile (pages of the binary) against RssAnon (heap, stacks),
// which shows what the resident size is made of.
func (c *controllerProc) memStatus() (map[string]int64, error) {
	p, err := procfs.NewProc(c.cmd.Process.Pid)
	if err != nil {
		return nil, err
	}
	st, err := p.NewStatus()
	if err != nil {
		return nil, err
	}
	return map[string]int64{"VmHWM": int64(st.VmHWM), "VmRSS": int64(st.VmRSS), "RssAnon": int64(st.RssAnon), "RssFile": int64(st.RssFile)}, nil
}

// cpuSeconds is the CPU time (user + system) the controller has used so
// far.
func (c *controllerProc) cpuSeconds() (float64, error) {
	return pidCPUSeconds(c.cmd.Process.Pid)
}

// sample is one scrape of /metrics.
type sample promtext.Families

func (c *controllerProc) scrape() (sample, error) {
	client := http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get("http://" + c.metricsAddr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/metrics: %s", resp.Status)
	}
	f, err := promtext.Parse(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("/metrics: %w", err)
	}
	return sample(f), nil
}

// sum adds the series of metric name (x_sum, x_count, x_bucket for a
// histogram x) whose labels include every given fragment (`name="x"`).
func (s sample) sum(name string, labels ...string) float64 {
	v, _ := promtext.Families(s).Sum(name, labels...)
	return v
}

// requestsByMethod is rest_client_requests_total summed per method label.
func (s sample) requestsByMethod() map[string]float64 {
	return promtext.Families(s).SumBy("rest_client_requests_total", "method")
}

// diffMethods is after - before per method, dropping zeros.
func diffMethods(before, after sample) map[string]float64 {
	b, a := before.requestsByMethod(), after.requestsByMethod()
	out := map[string]float64{}
	for m, v := range a {
		if d := v - b[m]; d != 0 {
			out[m] = d
		}
	}
	return out
}

func writesOf(m map[string]float64) float64 {
	return m["POST"] + m["PUT"] + m["PATCH"] + m["DELETE"]
}

func total(m map[string]float64) float64 {
	var t float64
	for _, v := range m {
		t += v
	}
	return t
}

// ourQueues picks the controller's workqueue series by their name label:
// "foo-controller" of a single leader, "foo-controller-slot-N" of each slot
// a sharded replica holds (the fragment is a prefix, see promtext.Sum).
const ourQueues = `name="foo-controller`

// settle waits until the controller's request counters stop moving for
// quiet, so that trailing writes (Events are sent asynchronously) count.
func (c *controllerProc) settle(quiet, max time.Duration) (sample, error) {
	return settleScrapes(c.scrape, quiet, max)
}

// settleScrapes is settle for whatever scrape reads: one process, or the
// sum over several (procs).
func settleScrapes(scrape func() (sample, error), quiet, max time.Duration) (sample, error) {
	deadline := time.Now().Add(max)
	last, err := scrape()
	if err != nil {
		return nil, err
	}
	stableSince := time.Now()
	for time.Now().Before(deadline) {
		time.Sleep(250 * time.Millisecond)
		cur, err := scrape()
		if err != nil {
			return nil, err
		}
		if total(cur.requestsByMethod()) != total(last.requestsByMethod()) ||
			cur.sum("workqueue_depth", ourQueues) != 0 {
			stableSince = time.Now()
		}
		last = cur
		if time.Since(stableSince) >= quiet {
			return last, nil
		}
	}
	// The figures read next include whatever the controller still does.
	progress("settle: the controller was not quiet for %v within %v; measuring anyway", quiet, max)
	return last, nil
}

// liveHeap forces a garbage collection in the controller (through its
// heap profile: the bench runs it with -profiling) and returns the Go heap
// still allocated after it: what the process holds, without the garbage
// the collector had not reclaimed yet. With path set, the profile is
// saved there too.
func (c *controllerProc) liveHeap(path string) (float64, error) {
	client := http.Client{Timeout: 30 * time.Second}
	resp, err := client.Get("http://" + c.metricsAddr + "/debug/pprof/heap?gc=1")
	if err != nil {
		return 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("heap profile: HTTP %d (is the controller running with -profiling?)", resp.StatusCode)
	}
	out := io.Discard
	if path != "" {
		f, err := os.Create(path)
		if err != nil {
			return 0, err
		}
		defer func() { _ = f.Close() }()
		out = f
	}
	if _, err := io.Copy(out, resp.Body); err != nil {
		return 0, err
	}
	s, err := c.scrape()
	if err != nil {
		return 0, err
	}
	return s.sum("go_memstats_heap_alloc_bytes"), nil
}

func (c *controllerProc) members() []*controllerProc { return []*controllerProc{c} }

// cpuProfile saves the controller's CPU profile over window to path (the
// bench runs it with -profiling). The profile's own cost, a sample every
// 10 ms, is small beside what it shows.
func (c *controllerProc) cpuProfile(path string, window time.Duration) error {
	client := http.Client{Timeout: window + 30*time.Second}
	resp, err := client.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", c.metricsAddr, int(window.Seconds())))
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("HTTP %d (is the controller running with -profiling?)", resp.StatusCode)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
