package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/procfs"
)

// plane is the local control plane's processes by component (etcd,
// kube-apiserver, ...), read from the pid files hack/local-up.sh writes. On
// two cores the controller shares the CPU with all of them: their CPU
// seconds over a phase say whether the machine, rather than the
// controller, bounds it. With a KUBECONFIG of the caller's there are no
// pid files to read, and only the bench and the controller are measured.
type plane map[string]int

func localPlane(ours bool) plane {
	// The bench's own creates and watches are part of the load too.
	p := plane{"bench": os.Getpid()}
	if !ours {
		return p
	}
	files, _ := filepath.Glob(filepath.Join(localDir(), "pids", "*.pid"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			p[strings.TrimSuffix(filepath.Base(f), ".pid")] = pid
		}
	}
	return p
}

// localDir is hack/local-up.sh's directory for the local control plane.
func localDir() string {
	if dir := os.Getenv("FOO_LOCAL_DIR"); dir != "" {
		return dir
	}
	return filepath.Join(os.TempDir(), "foo-controller-local")
}

// sameFile reports whether two paths name the same file.
func sameFile(a, b string) bool {
	fa, errA := os.Stat(a)
	fb, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(fa, fb)
}

// cpuMark is the CPU seconds each process had used at one instant: the
// plane's components and, under "controller" ("controller-1", ... for
// several), the controllers.
type cpuMark struct {
	at  time.Time
	cpu map[string]float64
	// busy is the whole machine's busy CPU seconds (/proc/stat), every
	// process's, ours or not: what the figures above leave out is load
	// from elsewhere (another agent's build, say).
	busy float64
}

// mark reads every process's CPU time now. A process that has exited is
// left out, so that a phase's figures are for those that ran all of it.
func (p plane) mark(ctrls ...*controllerProc) cpuMark {
	m := cpuMark{at: time.Now(), cpu: map[string]float64{}}
	m.busy, _ = machineBusy()
	for name, pid := range p {
		if s, err := pidCPUSeconds(pid); err == nil {
			m.cpu[name] = s
		}
	}
	for i, c := range ctrls {
		name := "controller"
		if len(ctrls) > 1 {
			name = fmt.Sprintf("controller-%d", i+1)
		}
		if s, err := c.cpuSeconds(); err == nil {
			m.cpu[name] = s
		}
	}
	return m
}

// cpuFigures are the CPU seconds each process used from a to b, named
// <phase>_cpu_<process>_s, and <phase>_cpu_cores: all of them together in
// cores (2 is the whole machine here), over the phase's wall time.
func cpuFigures(phase string, a, b cpuMark) figures {
	fig := figures{}
	var sum float64
	for name, end := range b.cpu {
		start, ok := a.cpu[name]
		if !ok {
			continue
		}
		fig[phase+"_cpu_"+strings.ReplaceAll(name, "-", "_")+"_s"] = end - start
		sum += end - start
	}
	if wall := b.at.Sub(a.at).Seconds(); wall > 0 && len(fig) > 0 {
		fig[phase+"_cpu_cores"] = sum / wall
		if a.busy > 0 && b.busy > 0 {
			fig[phase+"_machine_cores"] = (b.busy - a.busy) / wall
		}
	}
	return fig
}

// machineBusy is the busy CPU seconds of the whole machine since boot:
// user, nice, system, irq, softirq and steal (idle and iowait are not busy;
// guest time is already in user).
func machineBusy() (float64, error) {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return 0, err
	}
	st, err := fs.Stat()
	if err != nil {
		return 0, err
	}
	c := st.CPUTotal
	return c.User + c.Nice + c.System + c.IRQ + c.SoftIRQ + c.Steal, nil
}

// cpuSummary is one line per phase: the cores used and the processes that
// used the most, for the printed table.
func cpuSummary(m figures) []string {
	var out []string
	for _, phase := range []string{"burst", "tail", "floor", "restart"} {
		cores, ok := m[phase+"_cpu_cores"]
		if !ok {
			continue
		}
		type use struct {
			name string
			s    float64
		}
		var uses []use
		for k, v := range m {
			if name, ok := strings.CutPrefix(k, phase+"_cpu_"); ok && strings.HasSuffix(name, "_s") {
				uses = append(uses, use{strings.TrimSuffix(name, "_s"), v})
			}
		}
		sort.Slice(uses, func(i, j int) bool { return uses[i].s > uses[j].s })
		parts := make([]string, 0, len(uses))
		for _, u := range uses {
			parts = append(parts, fmt.Sprintf("%s %.1fs", u.name, u.s))
		}
		line := fmt.Sprintf("%-8s %.2f cores: %s", phase, cores, strings.Join(parts, ", "))
		if busy, ok := m[phase+"_machine_cores"]; ok {
			line += fmt.Sprintf("; the machine %.2f cores busy (others: %.2f)", busy, busy-cores)
		}
		out = append(out, line)
	}
	return out
}

// pidCPUSeconds is the CPU time (user + system) process pid has used so
// far.
func pidCPUSeconds(pid int) (float64, error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return 0, err
	}
	st, err := p.Stat()
	if err != nil {
		return 0, err
	}
	return st.CPUTime(), nil
}
