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
	"text/tabwriter"
	"time"

	dto "github.com/prometheus/client_model/go"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"example.com/foo-controller/pkg/promtext"
	"example.com/foo-controller/pkg/shard"
)

// validateScaleOut refuses what the scale-out run cannot measure as its
// table would claim. It has no floor phase, so -floor=true would be
// ignored. A namespace is never split, so with fewer namespaces than slots
// some slots hold no Foo wherever their boundaries are cut, and a
// replica's share of the work would depend on which slots it happens to
// hold, not on k. (With as many or more, the skew left is that of the
// names and of -big-namespace, which is what the run measures: the
// controller re-cuts the boundaries for the load.) A replica beyond the
// slot count holds nothing. Its only phase is converge: the profiles (of
// the idle window and the restart) would not be taken. The bench gives the replicas -shard-slots itself, and
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
		return fmt.Errorf("-shard-replicas needs -namespaces of at least -shard-slots (%d): a namespace is never split, so with fewer some slots hold no Foo wherever their boundaries are, and a replica's share would depend on which slots it holds, not on k", o.shardSlots)
	}
	if k := slices.Max(o.shardReplicas); k > o.shardSlots {
		return fmt.Errorf("-shard-replicas %d is more replicas than -shard-slots (%d): the extra ones would hold no slot", k, o.shardSlots)
	}
	if o.heapProfile || o.cpuProfile || o.given["idle"] || o.given["restarts"] || o.given["restart-idle"] || o.given["restart-env"] || o.given["restart-alt-env"] || o.deleteNamespace {
		return errors.New("-heap-profile, -cpu-profile, -idle, -restarts, -restart-idle, -restart-env, -restart-alt-env and -delete-namespace are for the idle window and the restarts, which the scale-out run (-shard-replicas) skips")
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
// (lease_puts). A re-balance's Leases created or deleted (the layout's,
// the new boundaries' slots) are a few per re-balance and stay in the
// writes.
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
// checkClean), so that every one of the equal slots holds count/slots of
// them or one more (-namespace-names=spread): the best case for equal
// slots, and how the scale-out run was measured before the controller
// re-cut them for the load. Names that differ only at their end crowd
// into a few slots (the hash's high bits barely depend on the last
// characters: docs/sharding.md, "Why the namespace"), so the counter
// comes first and the suffix after it; and of the candidates, a name is
// kept only while its slot has fewer than its due, so the skew left is
// that of the Foos per namespace (none without -big-namespace) and of the
// slots per replica.
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
// in any order, are the fair shares. Boundaries re-cut for the load
// change what a slot holds, not how many slots each replica holds, so
// this stays the test of "shared"; but a re-balance hands every slot over
// once, so a group shared out can fail it for a while (waitHeld).
func sharedOut(held []int, slots int) bool {
	h := slices.Sorted(slices.Values(held))
	slices.Reverse(h)
	return slices.Equal(h, fairShares(slots, len(held)))
}

// waitShared waits until the processes have shared the slots out, then
// until each one's /readyz passes again: a slot's Lease is counted as soon
// as it is taken, its caches are synced later. It runs before the first
// create, when the group has none of the run's Foos to re-cut for: its
// boundaries are equal, or those a group before it left in the plane
// (the layout's Lease outlives the replicas); the re-cuts for the run's
// Foos come within the converge (layout_changes_converge).
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
// leader's (k=0) first. Its header says how the namespaces were named and
// filled, which decides how far any layout of the slots can balance them.
type scaleOutReport struct {
	header
	Slots   int              `json:"slots"`
	Configs []scaleOutConfig `json:"configs"`
}

type scaleOutConfig struct {
	// K is the number of sharded replicas; 0 is the single leader (the
	// default mode).
	K      int       `json:"k"`
	Runs   []figures `json:"runs"`
	Median figures   `json:"median"`
	// Processes are the first run's figures per process, in the order
	// they were started.
	Processes []processFigures `json:"processes"`
}

// processFigures are one controller process's share and costs in a
// converge of the scale-out run.
type processFigures struct {
	// Slots it held once every Foo was held (foo_controller_shard_slots);
	// the leader's are all of them (and so are its SlotsWorked).
	Slots int `json:"slots"`
	// SlotsWorked: the slots whose workqueue took keys during the
	// converge, as far as its last scrape shows (slotsWorked).
	SlotsWorked int `json:"slotsWorked"`
	// Foos it held once every Foo was held by one replica
	// (foo_controller_shard_foos: its caches' count): its share of the N,
	// and of any Foo outside the bench. The leader's: all of them.
	Foos int `json:"foos"`
	// LayoutChanges: the times it wrote new slot boundaries since it
	// started (foo_controller_shard_layout_changes_total), each a
	// re-balance of the whole group; 0 for the leader.
	LayoutChanges int     `json:"layoutChanges"`
	Syncs         float64 `json:"syncs"` // foo_controller_reconcile_total during the converge
	// Memory in MB: VmHWM and VmRSS once converged and quiet, and the Go
	// heap still allocated after a forced collection.
	PeakRSSMB  float64 `json:"peakRssMb"`
	RSSMB      float64 `json:"rssMb"`
	LiveHeapMB float64 `json:"liveHeapMb"`
	// AnonMB: RssAnon once settled, the process's own memory; the rest
	// of its RSS is the binary's pages read from the file (RssFile:
	// about 27 MB, whatever the Foos), which replicas on one node share
	// through the page cache and the kernel can drop and read again.
	AnonMB float64 `json:"anonMb"`
	// CPUSeconds: user and system CPU from the first create until the
	// converge had settled (and, for replicas, every Foo was held).
	CPUSeconds float64 `json:"cpuSeconds"`
}

// scaleOut runs the leader and each k of -shard-replicas on n Foos, -repeat
// times (the configurations interleaved, so that a drift of the control
// plane over the run spreads over them all), and prints the table.
func scaleOut(ctx context.Context, c clients, o options, n int, bin, kubeconfig, logPath string) (scaleOutReport, error) {
	rep := scaleOutReport{header: newHeader(o, n), Slots: o.shardSlots}
	for _, k := range append([]int{0}, o.shardReplicas...) {
		rep.Configs = append(rep.Configs, scaleOutConfig{K: k})
	}
	progress("scale-out: N=%d %s, the leader then %v replica(s) sharing %d slots, %d repeat(s)",
		n, describeNamespaces(rep.header), o.shardReplicas, o.shardSlots, o.repeat)
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
			"anon_max_vs_leader":      "replica_anon_max_mb",
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
	// The same names in every row and repeat (namespaceNames): the leader
	// and each k face the same namespaces over the same hash.
	spaces, err := namespaceNames(o.namespaceNames, o.namespaces, o.equalSlots())
	if err != nil {
		return nil, nil, err
	}
	foos := placeFoos(spaces, n, o.bigNamespace)
	others, err := checkClean(ctx, c, spaces)
	if err != nil {
		return nil, nil, err
	}
	cleaned := false
	var made []string
	defer func() {
		if !cleaned && len(made) > 0 {
			progress("deleting the run's namespaces")
			_ = deleteNamespaces(context.WithoutCancel(ctx), c, made, o.timeout)
		}
	}()
	if err := newNamespaces(ctx, c, spaces, &made); err != nil {
		return nil, nil, err
	}
	if k > 0 {
		if err := resetLayout(ctx, c, o); err != nil {
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
	fig, _, err := converge(ctx, c, target, o.plane, foos, int32(o.replicas), o.concurrency, o.timeout, o.deploymentController, burstPath, o.burstProfile)
	if err != nil {
		return nil, nil, err
	}
	window := time.Since(t0).Seconds()

	// The last scrape of each process: for replicas, once every Foo is
	// held by one of them, which a re-balance late in the converge can
	// leave for after it.
	last := make([]sample, len(ps))
	var held float64
	if k > 0 {
		t := time.Now()
		if last, err = waitHeld(ctx, ps, n+others, o.shardSlots, 2*time.Minute); err != nil {
			return nil, nil, err
		}
		held = time.Since(t).Seconds()
	} else if last[0], err = ps[0].scrape(); err != nil {
		return nil, nil, err
	}

	per := make([]processFigures, len(ps))
	var puts, changes float64
	for i, p := range ps {
		after := last[i]
		puts += after.requestsByMethod()["PUT"] - before[i].requestsByMethod()["PUT"]
		changes += after.sum(layoutChangesMetric) - before[i].sum(layoutChangesMetric)
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
			Slots: o.shardSlots, SlotsWorked: o.shardSlots, Foos: n + others,
			Syncs:     after.sum("foo_controller_reconcile_total") - before[i].sum("foo_controller_reconcile_total"),
			PeakRSSMB: float64(mem["VmHWM"]) / (1 << 20), RSSMB: float64(mem["VmRSS"]) / (1 << 20),
			LiveHeapMB: live / (1 << 20), CPUSeconds: cpu - cpuBefore[i],
			AnonMB: float64(mem["RssAnon"]) / (1 << 20),
		}
		if k > 0 {
			pf.Slots = int(after.sum("foo_controller_shard_slots"))
			pf.SlotsWorked = slotsWorked(before[i], after, o.shardSlots)
			pf.Foos = int(after.sum(shardFoosMetric))
			pf.LayoutChanges = int(after.sum(layoutChangesMetric))
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
	// From the end of the converge until every Foo was held once: the
	// tail of a re-balance, if one was under way (0 for the leader).
	fig["held_after_converge_s"] = held
	// The re-balances within the converge; layout_changes (spreadFigures)
	// counts those from the start, before the first create too.
	fig["layout_changes_converge"] = changes
	// The replicas' PUTs over the window (left out of the figures per
	// Foo, see withoutLeaseWrites): their Lease renewals and hand-overs;
	// 0 for the leader.
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

// resetLayout deletes the slot boundaries a group before this row left:
// the layout's Lease outlives the replicas, and a row started on the
// boundaries the row before it cut for the same namespaces would neither
// re-balance as a new group does nor wait as one does (a member re-cuts at
// once from equal ranges, but only -shard-rebalance-interval after it
// first sees a layout Lease). Every row then starts from equal ranges.
// Only on the bench's own control plane: on another, the Lease may be a
// running group's.
func resetLayout(ctx context.Context, c clients, o options) error {
	if !o.ownControlPlane {
		return nil
	}
	// The group is the controller's -leader-elect-lease-name, its Leases
	// in -leader-elect-namespace: their defaults, unless given.
	group := controllerFlag(o.controller.args, "leader-elect-lease-name", "foo-controller")
	ns := controllerFlag(o.controller.args, "leader-elect-namespace", "")
	if ns == "" {
		ns = metav1.NamespaceDefault // the kubeconfig of our own plane names no namespace
	}
	sel := labels.Set{shard.GroupLabel: group, shard.RoleLabel: shard.LayoutRole}.String()
	leases, err := c.kube.CoordinationV1().Leases(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return fmt.Errorf("the layout Lease left by an earlier group: %w", err)
	}
	for _, l := range leases.Items {
		err := c.kube.CoordinationV1().Leases(ns).Delete(ctx, l.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &l.UID}})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("the layout Lease left by an earlier group: %w", err)
		}
		progress("deleted the layout Lease %s/%s an earlier group left: the replicas start from equal ranges", ns, l.Name)
	}
	return nil
}

// controllerFlag is the value of the controller's flag name among args,
// or def: the last one given wins, as with the flag package.
func controllerFlag(args []string, name, def string) string {
	v := def
	for _, a := range args {
		if val, ok := strings.CutPrefix(strings.TrimLeft(a, "-"), name+"="); ok {
			v = val
		}
	}
	return v
}

// The controller's metrics of the balanced slots (pkg/metrics).
const (
	shardFoosMetric     = "foo_controller_shard_foos"
	layoutChangesMetric = "foo_controller_shard_layout_changes_total"
)

// waitHeld waits until the replicas hold every Foo there is (want)
// exactly once between them (their foo_controller_shard_foos sum to it)
// with the slots shared out, the same in every read for heldQuiet, and
// returns each one's last scrape. A re-balance hands every slot over:
// while it does, the slots and Foos held dip, or the giver and the taker
// both count a slot's Foos, and figures read then would be of the
// hand-over, not of the layout. A re-balance that starts only after the
// quiet is neither waited for nor counted.
func waitHeld(ctx context.Context, ps procs, want, slots int, timeout time.Duration) ([]sample, error) {
	deadline := time.Now().Add(timeout)
	last := make([]sample, len(ps))
	var seen string
	var since time.Time
	for {
		if err := ps.alive(); err != nil {
			return nil, err
		}
		held, foos, total, changes := make([]int, len(ps)), make([]int, len(ps)), 0, 0.0
		for i, p := range ps {
			s, err := p.scrape()
			if err != nil {
				return nil, fmt.Errorf("replica %d: %w", i, err)
			}
			v, found := promtext.Families(s).Sum(shardFoosMetric)
			if !found {
				return nil, fmt.Errorf("replica %d exports no %s: the scale-out run needs a controller that counts the Foos of its slots", i, shardFoosMetric)
			}
			last[i], held[i], foos[i] = s, int(s.sum("foo_controller_shard_slots")), int(v)
			total += foos[i]
			changes += s.sum(layoutChangesMetric)
		}
		now := fmt.Sprint(held, foos, changes)
		switch {
		case total != want || !sharedOut(held, slots):
			seen = ""
		case now != seen:
			seen, since = now, time.Now()
		case time.Since(since) >= heldQuiet:
			return last, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("after converging, the replicas hold %v Foos (%d of %d) and %v slots after %v, not every Foo once with the slots shared out %v", foos, total, want, held, timeout, fairShares(slots, len(ps)))
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// heldQuiet is how long waitHeld wants the holdings unchanged: longer than
// the default retry period (2 s) at which members take and hand over
// slots, so that a hand-over in progress shows in it.
const heldQuiet = 3 * time.Second

// slotsWorked counts the slots whose workqueue took keys between two
// scrapes of one replica. A slot's series leave with the slot and start
// again from 0 when it is taken again, which a re-balance does to every
// slot: a count that changed counts, whether it rose or started afresh. A
// slot handed away for good is in neither case, so this is a lower bound.
func slotsWorked(before, after sample, slots int) int {
	worked := 0
	for slot := range slots {
		q := fmt.Sprintf(`name="foo-controller-slot-%d"`, slot)
		if a := after.sum("workqueue_adds_total", q); a > 0 && a != before.sum("workqueue_adds_total", q) {
			worked++
		}
	}
	return worked
}

// skew is the most Foos a replica holds over the mean (1 when even; 0
// with none held): how far the slowest replica is from its fair share.
func skew(held []float64) float64 {
	var sum, most float64
	for _, v := range held {
		sum += v
		most = max(most, v)
	}
	if sum == 0 {
		return 0
	}
	return most * float64(len(held)) / sum
}

// spreadFigures are the per-process figures' maxima, means and sums, the
// skew of the Foos held, and the re-balances of the group.
func spreadFigures(per []processFigures) figures {
	fig := figures{}
	for name, get := range map[string]func(processFigures) float64{
		"replica_peak_rss":  func(p processFigures) float64 { return p.PeakRSSMB },
		"replica_rss":       func(p processFigures) float64 { return p.RSSMB },
		"replica_live_heap": func(p processFigures) float64 { return p.LiveHeapMB },
		"replica_anon":      func(p processFigures) float64 { return p.AnonMB },
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
			fig[name+"_skew"] = skew(vs)
		}
	}
	var changes int
	for _, p := range per {
		changes += p.LayoutChanges
	}
	fig["layout_changes"] = float64(changes)
	return fig
}

func describeProcesses(per []processFigures) string {
	var parts []string
	for _, p := range per {
		parts = append(parts, fmt.Sprintf("[%d slots, %s Foos, %d layout change(s), peak RSS %.1f MB, live heap %.1f MB, CPU %.1fs]",
			p.Slots, thousands(p.Foos), p.LayoutChanges, p.PeakRSSMB, p.LiveHeapMB, p.CPUSeconds))
	}
	return strings.Join(parts, " ")
}

// thousands writes n with a comma between thousands (10,000): the Foos
// per replica are compared by eye.
func thousands(n int) string {
	s := strconv.Itoa(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, d := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(d)
	}
	return b.String()
}

// perReplica writes one figure of each replica, in the order they were
// started: "5,012 / 4,988".
func perReplica(per []processFigures, format func(processFigures) string) string {
	parts := make([]string, len(per))
	for i, p := range per {
		parts[i] = format(p)
	}
	return strings.Join(parts, " / ")
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
	pf("\nfoo-controller scale-out bench: N=%d %s, %d Pod replica(s) per Foo, concurrency %d, %d slots, %d run(s), medians; %s\n",
		rep.N, describeNamespaces(rep.header), rep.Replicas, rep.Concurrency, rep.Slots, runs, rep.Date)
	done, doneKey := "Ready", "foos_ready_s"
	if !rep.DeploymentController {
		pf("kube-controller-manager ran without its Deployment and ReplicaSet controllers: no Foo becomes Ready.\n")
		done, doneKey = "reported", "foos_reported_s"
	}
	pf("k=0 is the single leader; k>0, k sharded replicas. skew: max / mean of the Foos each replica holds; re-bal: new slot boundaries\n" +
		"written (a re-balance), summed over the replicas. Per replica: max / mean over the replicas; x leader: the max against k=0.\n\n")
	pf("%3s %5s %6s %7s %9s %8s %10s %10s %9s %9s %8s %11s\n", "k", "skew", "re-bal", "ready s", "Deps s", "Foos/s", done+" s", "creates s",
		"req/Foo", "wr/Foo", "CP CPU s", "burst cores")
	for _, cfg := range rep.Configs {
		m := cfg.Median
		cp, cores, rebal := "-", "-", "-"
		if _, ok := m["control_plane_cpu_s"]; ok {
			cp = fmt.Sprintf("%.1f", m["control_plane_cpu_s"])
		}
		if _, ok := m["burst_cpu_cores"]; ok {
			cores = fmt.Sprintf("%.2f", m["burst_cpu_cores"])
		}
		if cfg.K > 0 {
			rebal = strconv.FormatFloat(m["layout_changes"], 'f', -1, 64)
		}
		pf("%3d %5.2f %6s %7.2f %9.2f %8.1f %10.2f %10.2f %9.2f %9.2f %8s %11s\n", cfg.K,
			m["replica_foos_skew"], rebal, m["ready_and_shared_s"],
			m["deployments_exist_s"], m["burst_foos_per_s"], m[doneKey], m["creates_sent_s"],
			m["requests_per_foo"], m["writes_per_foo"], cp, cores)
	}
	pf("\n%3s %16s %8s %16s %16s %8s %16s %8s %14s %10s\n", "k", "peak RSS MB", "x leader", "RSS settled MB",
		"of it anon MB", "x leader", "live heap MB", "x leader", "CPU s", "total RSS")
	for _, cfg := range rep.Configs {
		m := cfg.Median
		pf("%3d %16s %8.2f %16s %16s %8.2f %16s %8.2f %14s %10.1f\n", cfg.K,
			fmt.Sprintf("%.1f / %.1f", m["replica_peak_rss_max_mb"], m["replica_peak_rss_mean_mb"]), m["peak_rss_max_vs_leader"],
			fmt.Sprintf("%.1f / %.1f", m["replica_rss_max_mb"], m["replica_rss_mean_mb"]),
			fmt.Sprintf("%.1f / %.1f", m["replica_anon_max_mb"], m["replica_anon_mean_mb"]), m["anon_max_vs_leader"],
			fmt.Sprintf("%.1f / %.1f", m["replica_live_heap_max_mb"], m["replica_live_heap_mean_mb"]), m["live_heap_max_vs_leader"],
			fmt.Sprintf("%.1f / %.1f", m["replica_cpu_max_s"], m["replica_cpu_mean_s"]), m["replica_rss_total_mb"])
	}
	pf("\nCPU by process (CP: the control plane; burst: until every Deployment exists; tail: until every Foo is done)\n")
	for _, cfg := range rep.Configs {
		for _, line := range cpuSummary(cfg.Median) {
			pf("  k=%d %s\n", cfg.K, line)
		}
	}
	// Each replica's own figures side by side, in the order started: the
	// skew is the work one replica is left with, which maxima and means
	// over the replicas hide.
	pf("\nper replica (first run, in the order started): Foos held once settled, peak RSS, CPU seconds from the first create until then\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	_, _ = fmt.Fprintf(tw, "  k\tskew\tre-bal\tFoos held\tpeak RSS MB\tCPU s\n")
	for _, cfg := range rep.Configs {
		foos := make([]float64, len(cfg.Processes))
		changes := 0
		for i, p := range cfg.Processes {
			foos[i] = float64(p.Foos)
			changes += p.LayoutChanges
		}
		rebal := "-"
		if cfg.K > 0 {
			rebal = strconv.Itoa(changes)
		}
		_, _ = fmt.Fprintf(tw, "  %d\t%.2f\t%s\t%s\t%s\t%s\n", cfg.K, skew(foos), rebal,
			perReplica(cfg.Processes, func(p processFigures) string { return thousands(p.Foos) }),
			perReplica(cfg.Processes, func(p processFigures) string { return fmt.Sprintf("%.1f", p.PeakRSSMB) }),
			perReplica(cfg.Processes, func(p processFigures) string { return fmt.Sprintf("%.1f", p.CPUSeconds) }))
	}
	_ = tw.Flush()
	pf("\nper process (first run): slots held, Foos in them, syncs, peak RSS, live heap, CPU during the converge\n")
	for _, cfg := range rep.Configs {
		for i, p := range cfg.Processes {
			held := fmt.Sprintf("%3d slots (%d worked)", p.Slots, p.SlotsWorked)
			if cfg.K == 0 {
				held = fmt.Sprintf("%-20s", "leader (no slots)")
			}
			pf("  k=%d #%d: %s %7s Foos %8.0f syncs %8.1f MB %8.1f MB %7.1f s\n",
				cfg.K, i, held, thousands(p.Foos), p.Syncs, p.PeakRSSMB, p.LiveHeapMB, p.CPUSeconds)
		}
	}
}
