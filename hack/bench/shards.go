package main

// The scale-out run (-shard-replicas): for each N, the single leader and
// then k sharded replicas (docs/sharding.md) converge the same load, in the
// same run, so that the rows compare like with like. Only the converge
// phase runs; idle, edit, restart and the floor are the leader's (once).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"

	"example.com/foo-controller/pkg/shard"
)

// validateScaleOut refuses what the scale-out run cannot measure as its
// table would claim. It has no floor phase, so -floor=true would be
// ignored. With fewer namespaces than slots some slots hold no Foo, and a
// replica's share of the work would depend on which slots it happens to
// hold, not on k. A replica beyond the slot count holds nothing. Its only
// phase is converge: the profiles (of the idle window and the restart)
// would not be taken. The bench gives the replicas -shard-slots itself, and
// the controller refuses -leader-elect beside it.
func (o options) validateScaleOut() error {
	if len(o.shardReplicas) == 0 {
		if o.shardSlots != 0 {
			return errors.New("-shard-slots is for the scale-out run: give -shard-replicas too")
		}
		return nil
	}
	if o.shardSlots < 1 || o.shardSlots > 256 {
		return errors.New("-shard-slots must be 1 to 256 (the controller's range)")
	}
	if o.floor {
		return errors.New("-shard-replicas runs no floor phase: give -floor=false")
	}
	if o.namespaces < o.shardSlots {
		return fmt.Errorf("-shard-replicas needs -namespaces of at least -shard-slots (%d), so that every slot, and so every replica, has Foos to converge", o.shardSlots)
	}
	if k := slices.Max(o.shardReplicas); k > o.shardSlots {
		return fmt.Errorf("-shard-replicas %d is more replicas than -shard-slots (%d): the extra ones would hold no slot", k, o.shardSlots)
	}
	if o.heapProfile || o.cpuProfile || o.given["idle"] || o.given["restarts"] {
		return errors.New("-heap-profile, -cpu-profile, -idle and -restarts are for the idle window and the restarts, which the scale-out run (-shard-replicas) skips")
	}
	for _, a := range o.controller.args {
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		switch name {
		case "shard-slots":
			return fmt.Errorf("-controller-flag=%s with -shard-replicas: the bench gives the replicas their slots itself (-shard-slots of the bench)", a)
		case "leader-elect":
			if on, err := strconv.ParseBool(value); !hasValue || err != nil || on {
				return fmt.Errorf("-controller-flag=%s with -shard-replicas: the controller refuses -leader-elect beside -shard-slots", a)
			}
		case "namespace":
			return fmt.Errorf("-controller-flag=%s with -shard-replicas: the controller refuses -namespace beside -shard-slots (a namespace falls in one slot)", a)
		}
	}
	return nil
}

// procs are controller processes measured as one (converge's measured):
// their metrics summed, every one alive, quiet all together.
type procs []*controllerProc

func (ps procs) scrape() (sample, error) {
	all := make([]sample, 0, len(ps))
	for i, p := range ps {
		s, err := p.scrape()
		if err != nil {
			return nil, fmt.Errorf("replica %d: %w", i, err)
		}
		all = append(all, s)
	}
	return sumSamples(all...), nil
}

func (ps procs) alive() error {
	for i, p := range ps {
		if err := p.alive(); err != nil {
			return fmt.Errorf("replica %d: %w", i, err)
		}
	}
	return nil
}

func (ps procs) settle(quiet, max time.Duration) (sample, error) {
	return settleScrapes(ps.scrape, quiet, max)
}

func (ps procs) members() []*controllerProc { return ps }

// cpuProfile saves each process's profile, to path with "-<i>" before its
// extension.
func (ps procs) cpuProfile(path string, window time.Duration) error {
	errs := make([]error, len(ps))
	var wg sync.WaitGroup
	for i, p := range ps {
		base, ext, _ := strings.Cut(path, ".")
		wg.Go(func() { errs[i] = p.cpuProfile(fmt.Sprintf("%s-%d.%s", base, i, ext), window) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// memStatus is the sum over the processes: what they hold together (a sum
// of VmHWM is a bound on their peak together, not that peak).
func (ps procs) memStatus() (map[string]int64, error) {
	out := map[string]int64{}
	for i, p := range ps {
		m, err := p.memStatus()
		if err != nil {
			return nil, fmt.Errorf("replica %d: %w", i, err)
		}
		for k, v := range m {
			out[k] += v
		}
	}
	return out, nil
}

// stop sends SIGTERM to every process still running at once (one by one,
// each stop would hand its slots to the others) and waits for them all.
func (ps procs) stop() error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for i, p := range ps {
		if p.alive() != nil {
			continue
		}
		wg.Go(func() {
			if err := p.stop(); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("replica %d: %w", i, err))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// withoutLeaseWrites are sharded replicas whose PUTs converge does not
// see. Those are the members' Lease writes: a renewal per replica every
// -leader-elect-retry-period (2s), which would never let settle find the
// counters quiet and would count as writes per Foo. The controller's own
// writes are applies (PATCH), creates (POST) and deletes, never a PUT (the
// leader's converge shows none); scaleOutOnce counts the PUTs apart
// (lease_puts).
type withoutLeaseWrites struct{ procs }

func (w withoutLeaseWrites) scrape() (sample, error) {
	s, err := w.procs.scrape()
	if err != nil {
		return nil, err
	}
	return withoutPUTs(s), nil
}

// withoutPUTs drops the PUTs from s's rest_client_requests_total. s must
// be sumSamples': it changes the family in place, which sumSamples made.
func withoutPUTs(s sample) sample {
	if mf := s["rest_client_requests_total"]; mf != nil {
		mf.Metric = slices.DeleteFunc(mf.Metric, func(m *dto.Metric) bool {
			return slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool {
				return l.GetName() == "method" && l.GetValue() == "PUT"
			})
		})
	}
	return s
}

func (w withoutLeaseWrites) settle(quiet, max time.Duration) (sample, error) {
	return settleScrapes(w.scrape, quiet, max)
}

// sumSamples is one sample holding every series of each: sample.sum over
// it is the sum over the processes.
func sumSamples(ss ...sample) sample {
	out := sample{}
	for _, s := range ss {
		for name, mf := range s {
			if cur, ok := out[name]; ok {
				cur.Metric = append(cur.Metric, mf.GetMetric()...)
				continue
			}
			out[name] = &dto.MetricFamily{Name: mf.Name, Help: mf.Help, Type: mf.Type, Unit: mf.Unit,
				Metric: slices.Clone(mf.GetMetric())}
		}
	}
	return out
}

// spreadNamespaces names count namespaces, all starting "bench-" (see
// checkClean), so that every slot holds count/slots of them or one more.
// Names that differ only at their end crowd into a few slots (the hash's
// high bits barely depend on the last characters: docs/sharding.md, "Why
// the namespace"), so the counter comes first and the run's suffix after
// it; and of the candidates, a name is kept only while its slot has fewer
// than its due, so the skew left is that of the Foos per namespace (none:
// they are spread round-robin) and of the slots per replica.
func spreadNamespaces(suffix string, count int, slots shard.Slots) ([]string, error) {
	s := int(slots)
	used := make([]int, s)
	var out []string
	j := 0
	// First every slot's count/slots, then one more for count%slots of them.
	for _, due := range []int{count / s, count/s + 1} {
		for len(out) < count && len(out) < due*s {
			if j > 1000*count {
				return nil, fmt.Errorf("no %d namespace names spread over %d slots in %d candidates", count, s, j)
			}
			name := fmt.Sprintf("bench-%d-%s", j, suffix)
			j++
			if i := slots.Of(name); used[i] < due {
				used[i]++
				out = append(out, name)
			}
		}
	}
	return out, nil
}

// fairShares are the slots each of k members holds once they have shared
// slots out (shard.Share), largest first.
func fairShares(slots, k int) []int {
	out := make([]int, k)
	for i := range out {
		out[i] = slots / k
		if i < slots%k {
			out[i]++
		}
	}
	return out
}

// sharedOut: the slots each process holds (foo_controller_shard_slots),
// in any order, are the fair shares.
func sharedOut(held []int, slots int) bool {
	h := slices.Sorted(slices.Values(held))
	slices.Reverse(h)
	return slices.Equal(h, fairShares(slots, len(held)))
}

// waitShared waits until the processes have shared the slots out, then
// until each one's /readyz passes again: a slot's Lease is counted as soon
// as it is taken, its caches are synced later.
func waitShared(ctx context.Context, ps procs, slots int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var held []int
	for {
		if err := ps.alive(); err != nil {
			return err
		}
		held = held[:0]
		for _, p := range ps {
			s, err := p.scrape()
			if err != nil {
				return err
			}
			held = append(held, int(s.sum("foo_controller_shard_slots")))
		}
		if sharedOut(held, slots) {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the replicas hold %v of %d slots after %v, not their shares %v", held, slots, timeout, fairShares(slots, len(ps)))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	for _, p := range ps {
		if _, err := p.waitReady(ctx, time.Until(deadline)); err != nil {
			return err
		}
	}
	return nil
}

// scaleOutReport is one N of the scale-out run: a configuration per k, the
// leader's (k=0) first.
type scaleOutReport struct {
	header
	Slots      int              `json:"slots"`
	Namespaces int              `json:"namespaces"`
	Configs    []scaleOutConfig `json:"configs"`
}

type scaleOutConfig struct {
	// K is the number of sharded replicas; 0 is the single leader (the
	// default mode).
	K      int       `json:"k"`
	Runs   []figures `json:"runs"`
	Median figures   `json:"median"`
	// Processes are the first run's figures per process.
	Processes []processFigures `json:"processes"`
}

// processFigures are one controller process's share and costs in a
// converge of the scale-out run.
type processFigures struct {
	// Slots it held once converged (foo_controller_shard_slots); the
	// leader's are all of them (and so are its SlotsWorked).
	Slots int `json:"slots"`
	// SlotsWorked: the slots whose workqueue took keys during the converge
	// (more than Slots: one changed hands meanwhile).
	SlotsWorked int `json:"slotsWorked"`
	// Foos in the namespaces of those slots: its share of the N.
	Foos  int     `json:"foos"`
	Syncs float64 `json:"syncs"` // foo_controller_reconcile_total during the converge
	// Memory in MB: VmHWM and VmRSS once converged and quiet, and the Go
	// heap still allocated after a forced collection.
	PeakRSSMB  float64 `json:"peakRssMb"`
	RSSMB      float64 `json:"rssMb"`
	LiveHeapMB float64 `json:"liveHeapMb"`
	// CPUSeconds: user and system CPU from the first create until the
	// converge had settled.
	CPUSeconds float64 `json:"cpuSeconds"`
}

// scaleOut runs the leader and each k of -shard-replicas on n Foos, -repeat
// times (the configurations interleaved, so that a drift of the control
// plane over the run spreads over them all), and prints the table.
func scaleOut(ctx context.Context, c clients, o options, n int, bin, kubeconfig, logPath string) (scaleOutReport, error) {
	rep := scaleOutReport{header: newHeader(o, n), Slots: o.shardSlots, Namespaces: o.namespaces}
	for _, k := range append([]int{0}, o.shardReplicas...) {
		rep.Configs = append(rep.Configs, scaleOutConfig{K: k})
	}
	progress("scale-out: N=%d over %d namespaces, the leader then %v replica(s) sharing %d slots, %d repeat(s)",
		n, o.namespaces, o.shardReplicas, o.shardSlots, o.repeat)
	for r := range o.repeat {
		for i := range rep.Configs {
			cfg := &rep.Configs[i]
			fig, per, err := scaleOutOnce(ctx, c, o, n, cfg.K, r, bin, kubeconfig, logPath)
			if err != nil {
				return rep, fmt.Errorf("k=%d, repeat %d: %w", cfg.K, r+1, err)
			}
			cfg.Runs = append(cfg.Runs, fig)
			if r == 0 {
				cfg.Processes = per
			}
		}
	}
	for i := range rep.Configs {
		rep.Configs[i].Median = medians(rep.Configs[i].Runs)
	}
	// Per replica against the leader: what a replica needs of a machine.
	leader := rep.Configs[0].Median
	for _, cfg := range rep.Configs {
		for ratio, key := range map[string]string{
			"peak_rss_max_vs_leader":  "replica_peak_rss_max_mb",
			"rss_max_vs_leader":       "replica_rss_max_mb",
			"live_heap_max_vs_leader": "replica_live_heap_max_mb",
		} {
			if leader[key] > 0 {
				cfg.Median[ratio] = cfg.Median[key] / leader[key]
			}
		}
	}
	printScaleOut(os.Stdout, rep)
	return rep, nil
}

// scaleOutOnce starts the leader (k=0) or k sharded replicas, waits until
// they are ready and have shared the slots out, converges n Foos over
// -namespaces fresh namespaces, measures, and stops them.
func scaleOutOnce(ctx context.Context, c clients, o options, n, k, r int, bin, kubeconfig, logPath string) (figures, []processFigures, error) {
	slots := shard.Slots(o.shardSlots)
	spaces, err := spreadNamespaces(fmt.Sprintf("k%d-%d-%d", k, r+1, time.Now().Unix()), o.namespaces, slots)
	if err != nil {
		return nil, nil, err
	}
	if err := checkClean(ctx, c); err != nil {
		return nil, nil, err
	}
	cleaned := false
	defer func() {
		if !cleaned {
			progress("deleting the run's namespaces")
			_ = deleteNamespaces(context.WithoutCancel(ctx), c, spaces, o.timeout)
		}
	}()
	for _, ns := range spaces {
		if err := newNamespace(ctx, c, ns); err != nil {
			return nil, nil, err
		}
	}
	extra, count := o.controller, 1
	if k > 0 {
		extra.args = append(slices.Clone(o.controller.args), fmt.Sprintf("-shard-slots=%d", o.shardSlots))
		count = k
	}
	what := "the leader"
	if k > 0 {
		what = fmt.Sprintf("%d replica(s) sharing %d slots", k, o.shardSlots)
	}
	progress("scale-out k=%d, repeat %d: starting %s", k, r+1, what)
	var ps procs
	defer func() { _ = ps.stop() }()
	started := time.Now()
	for range count {
		p, err := startController(bin, kubeconfig, logPath, extra)
		if err != nil {
			return nil, nil, err
		}
		ps = append(ps, p)
	}
	for _, p := range ps {
		if _, err := p.waitReady(ctx, 2*time.Minute); err != nil {
			return nil, nil, err
		}
	}
	if k > 0 {
		if err := waitShared(ctx, ps, o.shardSlots, 2*time.Minute); err != nil {
			return nil, nil, err
		}
	}
	ready := time.Since(started)
	progress("scale-out k=%d: ready, slots shared out, after %.2fs", k, ready.Seconds())

	before, cpuBefore := make([]sample, len(ps)), make([]float64, len(ps))
	for i, p := range ps {
		if before[i], err = p.scrape(); err != nil {
			return nil, nil, err
		}
		if cpuBefore[i], err = p.cpuSeconds(); err != nil {
			return nil, nil, err
		}
	}
	var target measured = ps
	if k > 0 {
		target = withoutLeaseWrites{ps}
	}
	// Each replica's own burst profile, of the first repeat:
	// _output/cpu-N-STAMP-burst-kK-I.pb.gz for replica I (k0: the leader).
	burstPath := ""
	if o.burstProfile > 0 && r == 0 {
		burstPath = fmt.Sprintf("_output/cpu-%d-%s-burst-k%d.pb.gz", n, o.stamp, k)
	}
	t0 := time.Now()
	fig, _, err := converge(ctx, c, target, o.plane, spaces, n, int32(o.replicas), o.concurrency, o.timeout, o.deploymentController, burstPath, o.burstProfile)
	if err != nil {
		return nil, nil, err
	}
	window := time.Since(t0).Seconds()

	// The Foos of each slot, for each process's share.
	foosIn := make([]int, o.shardSlots)
	for i := range n {
		foosIn[slots.Of(spaces[i%len(spaces)])]++
	}
	per := make([]processFigures, len(ps))
	var puts float64
	for i, p := range ps {
		after, err := p.scrape()
		if err != nil {
			return nil, nil, err
		}
		puts += after.requestsByMethod()["PUT"] - before[i].requestsByMethod()["PUT"]
		cpu, err := p.cpuSeconds()
		if err != nil {
			return nil, nil, err
		}
		mem, err := p.memStatus()
		if err != nil {
			return nil, nil, err
		}
		live, err := p.liveHeap("")
		if err != nil {
			return nil, nil, err
		}
		pf := processFigures{
			Slots: o.shardSlots, SlotsWorked: o.shardSlots, Foos: n,
			Syncs:     after.sum("foo_controller_reconcile_total") - before[i].sum("foo_controller_reconcile_total"),
			PeakRSSMB: float64(mem["VmHWM"]) / (1 << 20), RSSMB: float64(mem["VmRSS"]) / (1 << 20),
			LiveHeapMB: live / (1 << 20), CPUSeconds: cpu - cpuBefore[i],
		}
		if k > 0 {
			pf.Slots, pf.SlotsWorked, pf.Foos = int(after.sum("foo_controller_shard_slots")), 0, 0
			for slot := range o.shardSlots {
				q := fmt.Sprintf(`name="foo-controller-slot-%d"`, slot)
				if after.sum("workqueue_adds_total", q) > before[i].sum("workqueue_adds_total", q) {
					pf.SlotsWorked++
					pf.Foos += foosIn[slot]
				}
			}
		}
		per[i] = pf
	}
	// converge's memory figures are sums over the processes here: the
	// per-process ones replace them.
	for _, key := range []string{"peak_rss_mb", "rss_file_mb", "rss_anon_mb", "go_heap_inuse_mb"} {
		delete(fig, key)
	}
	merge(fig, spreadFigures(per))
	fig["ready_and_shared_s"] = ready.Seconds()
	fig["converge_window_s"] = window
	// The replicas' Lease writes over the window (left out of the figures
	// per Foo, see withoutLeaseWrites); 0 for the leader.
	fig["lease_puts"] = puts
	if cp, ok := controlPlaneCPU(fig); ok {
		fig["control_plane_cpu_s"] = cp
	}
	progress("scale-out k=%d: per replica %s", k, describeProcesses(per))

	err = ps.stop()
	cleaned = true
	if err := errors.Join(err, deleteNamespaces(ctx, c, spaces, o.timeout)); err != nil {
		return nil, nil, err
	}
	return fig, per, nil
}

// spreadFigures are the per-process figures' maxima, means and sums.
func spreadFigures(per []processFigures) figures {
	fig := figures{}
	for name, get := range map[string]func(processFigures) float64{
		"replica_peak_rss":  func(p processFigures) float64 { return p.PeakRSSMB },
		"replica_rss":       func(p processFigures) float64 { return p.RSSMB },
		"replica_live_heap": func(p processFigures) float64 { return p.LiveHeapMB },
		"replica_cpu":       func(p processFigures) float64 { return p.CPUSeconds },
		"replica_foos":      func(p processFigures) float64 { return float64(p.Foos) },
	} {
		var vs []float64
		for _, p := range per {
			vs = append(vs, get(p))
		}
		unit := "_mb"
		switch name {
		case "replica_cpu":
			unit = "_s"
		case "replica_foos":
			unit = ""
		}
		var sum float64
		for _, v := range vs {
			sum += v
		}
		fig[name+"_max"+unit] = slices.Max(vs)
		fig[name+"_mean"+unit] = sum / float64(len(vs))
		fig[name+"_total"+unit] = sum
		if name == "replica_foos" {
			fig[name+"_min"] = slices.Min(vs)
		}
	}
	return fig
}

func describeProcesses(per []processFigures) string {
	var parts []string
	for _, p := range per {
		parts = append(parts, fmt.Sprintf("[%d slots, %d Foos, peak RSS %.1f MB, live heap %.1f MB, CPU %.1fs]",
			p.Slots, p.Foos, p.PeakRSSMB, p.LiveHeapMB, p.CPUSeconds))
	}
	return strings.Join(parts, " ")
}

// controlPlaneCPU is the CPU seconds the control plane's components used
// from the first create until every Foo was done: the burst_cpu_* and
// tail_cpu_* figures of converge (plane.mark), without the bench's and the
// controllers'. ok is false without them (KUBECONFIG set: no pid files).
func controlPlaneCPU(fig figures) (s float64, ok bool) {
	for k, v := range fig {
		for _, phase := range []string{"burst_cpu_", "tail_cpu_"} {
			name, found := strings.CutPrefix(k, phase)
			if !found || !strings.HasSuffix(name, "_s") || name == "bench_s" || strings.HasPrefix(name, "controller") {
				continue
			}
			s, ok = s+v, true
		}
	}
	return s, ok
}

func printScaleOut(w io.Writer, rep scaleOutReport) {
	pf := func(format string, a ...any) { _, _ = fmt.Fprintf(w, format, a...) }
	runs := 0
	if len(rep.Configs) > 0 {
		runs = len(rep.Configs[0].Runs)
	}
	pf("\nfoo-controller scale-out bench: N=%d over %d namespaces, %d Pod replica(s) per Foo, concurrency %d, %d slots, %d run(s), medians; %s\n",
		rep.N, rep.Namespaces, rep.Replicas, rep.Concurrency, rep.Slots, runs, rep.Date)
	done, doneKey := "Ready", "foos_ready_s"
	if !rep.DeploymentController {
		pf("kube-controller-manager ran without its Deployment and ReplicaSet controllers: no Foo becomes Ready.\n")
		done, doneKey = "reported", "foos_reported_s"
	}
	pf("k=0 is the single leader; k>0, k sharded replicas. Per replica: max / mean over the replicas; x leader: the max against k=0.\n\n")
	pf("%3s %9s %7s %9s %8s %10s %10s %9s %9s %8s %11s\n", "k", "Foos each", "ready s", "Deps s", "Foos/s", done+" s", "creates s",
		"req/Foo", "wr/Foo", "CP CPU s", "burst cores")
	for _, cfg := range rep.Configs {
		m := cfg.Median
		cp, cores := "-", "-"
		if _, ok := m["control_plane_cpu_s"]; ok {
			cp = fmt.Sprintf("%.1f", m["control_plane_cpu_s"])
		}
		if _, ok := m["burst_cpu_cores"]; ok {
			cores = fmt.Sprintf("%.2f", m["burst_cpu_cores"])
		}
		pf("%3d %9s %7.2f %9.2f %8.1f %10.2f %10.2f %9.2f %9.2f %8s %11s\n", cfg.K,
			fmt.Sprintf("%.0f-%.0f", m["replica_foos_min"], m["replica_foos_max"]), m["ready_and_shared_s"],
			m["deployments_exist_s"], m["burst_foos_per_s"], m[doneKey], m["creates_sent_s"],
			m["requests_per_foo"], m["writes_per_foo"], cp, cores)
	}
	pf("\n%3s %16s %8s %16s %16s %8s %14s %10s\n", "k", "peak RSS MB", "x leader", "RSS settled MB",
		"live heap MB", "x leader", "CPU s", "total RSS")
	for _, cfg := range rep.Configs {
		m := cfg.Median
		pf("%3d %16s %8.2f %16s %16s %8.2f %14s %10.1f\n", cfg.K,
			fmt.Sprintf("%.1f / %.1f", m["replica_peak_rss_max_mb"], m["replica_peak_rss_mean_mb"]), m["peak_rss_max_vs_leader"],
			fmt.Sprintf("%.1f / %.1f", m["replica_rss_max_mb"], m["replica_rss_mean_mb"]),
			fmt.Sprintf("%.1f / %.1f", m["replica_live_heap_max_mb"], m["replica_live_heap_mean_mb"]), m["live_heap_max_vs_leader"],
			fmt.Sprintf("%.1f / %.1f", m["replica_cpu_max_s"], m["replica_cpu_mean_s"]), m["replica_rss_total_mb"])
	}
	pf("\nCPU by process (CP: the control plane; burst: until every Deployment exists; tail: until every Foo is done)\n")
	for _, cfg := range rep.Configs {
		for _, line := range cpuSummary(cfg.Median) {
			pf("  k=%d %s\n", cfg.K, line)
		}
	}
	pf("\nper process (first run): slots held, Foos in them, syncs, peak RSS, live heap, CPU during the converge\n")
	for _, cfg := range rep.Configs {
		for i, p := range cfg.Processes {
			held := fmt.Sprintf("%3d slots (%d worked)", p.Slots, p.SlotsWorked)
			if cfg.K == 0 {
				held = fmt.Sprintf("%-20s", "leader (no slots)")
			}
			pf("  k=%d #%d: %s %7d Foos %8.0f syncs %8.1f MB %8.1f MB %7.1f s\n",
				cfg.K, i, held, p.Foos, p.Syncs, p.PeakRSSMB, p.LiveHeapMB, p.CPUSeconds)
		}
	}
}
