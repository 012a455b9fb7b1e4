// Command bench measures foo-controller on the local control plane: time to
// converge N Foos against a floor of the same writes sent directly, the
// requests it sends per Foo, its requests while idle, a restart with N
// converged Foos, and its peak RSS. Run it with `make bench` from the
// repository root; see docs/performance.md.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	apiextensions "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	clientset "example.com/foo-controller/pkg/generated/clientset/versioned"
	"example.com/foo-controller/pkg/shard"
)

var stderr io.Writer = os.Stderr

// figures are one run's measurements by name.
type figures map[string]float64

type options struct {
	// given are the flags set on the command line, by name.
	given       map[string]bool
	ns          []int // one bench per N, in this order
	replicas    int
	repeat      int
	jsonPath    string
	idle        time.Duration
	concurrency int
	timeout     time.Duration
	heapProfile bool
	cpuProfile  bool
	// burstProfile: save the controller's CPU profile over this much of
	// the burst (0: none).
	burstProfile time.Duration
	// restarts: restart the converged controller this many times, each
	// after a bare list, for medians of the start-up.
	restarts int
	// restartIdle: after the restarts, an idle window of the restarted
	// process (0: none), for the idle CPU of a process that has not just
	// converged a burst.
	restartIdle time.Duration
	// restartEnv is extra environment for the restarted controllers only:
	// two GC settings compared in one run.
	restartEnv []string
	// restartAltEnv, when given, makes every other restart run with it
	// on top of restartEnv (the last restart never does): its figures
	// are reported under "alt_", so that two settings of the start-up
	// are compared in one run, on the same objects and machine.
	restartAltEnv []string
	// deleteNamespace: after the restarts, delete the first namespace
	// with the controller running (deleteNamespaceWhileRunning).
	deleteNamespace bool
	// stamp names this run's profiles, so that a run does not overwrite
	// those of the runs before it.
	stamp      string
	plane      plane
	namespaces int // the Foos are spread over this many namespaces
	// namespaceNames is how those namespaces are named (namespaceStyles),
	// with more than one.
	namespaceNames string
	// bigNamespace is the fraction of the Foos in the first namespace
	// (0: as many in each).
	bigNamespace float64
	floor        bool // run the floor phase
	// singleVersion installs the CRD serving v1beta1 alone (no webhook).
	singleVersion bool
	// createInV1alpha1 creates the converge phase's Foos in v1alpha1.
	createInV1alpha1 bool
	// moveManagedFields scales every Foo before and after the migration
	// moves their managed fields to v1beta1.
	moveManagedFields bool
	// deploymentController: kube-controller-manager runs its Deployment
	// and ReplicaSet controllers. Without them nothing reports on the
	// Deployments, so no Foo becomes Ready: converged then means every
	// Foo's Deployment is as declared and its status written for its
	// generation, and what follows measures the controller alone.
	deploymentController bool
	// controller holds extra controller flags and environment, for
	// experiments only: the figures in docs/performance.md are for the
	// defaults.
	controller controllerExtras
	// shardReplicas: the scale-out run (shards.go), for each N the leader
	// and then each k of these sharded replicas sharing shardSlots slots,
	// instead of the phases of once.
	shardReplicas []int
	shardSlots    int
	// ownControlPlane: KUBECONFIG is unset, and the control plane is the
	// bench's (its state too: see resetLayout).
	ownControlPlane bool
}

// results is what -json writes: a report per N and, with two N or more,
// the slopes of memory against N.
type results struct {
	Reports []report `json:"reports"`
	Slopes  figures  `json:"slopes,omitempty"`
	// ScaleOut is the scale-out run's report per N (-shard-replicas).
	ScaleOut []scaleOutReport `json:"scaleOut,omitempty"`
}

// header opens every report: the run, as given.
type header struct {
	Date        string `json:"date"`
	Command     string `json:"command"`
	N           int    `json:"n"`
	Replicas    int    `json:"replicas"`
	Concurrency int    `json:"concurrency"`
	// DeploymentController is false when kube-controller-manager ran
	// without its Deployment and ReplicaSet controllers (no Foo Ready).
	DeploymentController bool `json:"deploymentController"`
	// Namespaces the Foos were spread over; with more than one, how they
	// were named (-namespace-names) and the fraction of the Foos in the
	// first (-big-namespace): with sharded replicas, these decide how the
	// slots divide the work.
	Namespaces     int     `json:"namespaces"`
	NamespaceNames string  `json:"namespaceNames,omitempty"`
	BigNamespace   float64 `json:"bigNamespace,omitempty"`
}

func newHeader(o options, n int) header {
	h := header{
		Date: time.Now().UTC().Format(time.RFC3339), Command: strings.Join(os.Args, " "),
		N: n, Replicas: o.replicas, Concurrency: o.concurrency, DeploymentController: o.deploymentController,
		Namespaces: o.namespaces,
	}
	if o.namespaces > 1 {
		h.NamespaceNames, h.BigNamespace = o.namespaceNames, o.bigNamespace
	}
	return h
}

type report struct {
	header
	Idle   string    `json:"idleWindow"`
	Runs   []figures `json:"runs"`
	Median figures   `json:"median"`
	// Series are the first run's curves (see series), for the plots.
	Series series `json:"series"`
}

func main() {
	o, err := parseFlags(os.Args[1:], os.Getenv("KUBECONFIG") == "", os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		// The flag package has printed its own errors, with the usage.
		if !errors.Is(err, errFlagSyntax) {
			fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		}
		os.Exit(2)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	if err := run(ctx, o); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(1)
	}
}

// errFlagSyntax is what parseFlags returns when the flag package refused
// the arguments: it has printed why, and the usage, already.
var errFlagSyntax = errors.New("bad flags")

// parseFlags reads the bench's flags and checks them together, apart from
// main so that every refusal has a test (TestParseFlags): a combination
// the bench cannot honour fails here, before it starts a control plane or
// creates a Foo. ownControlPlane: KUBECONFIG is unset, so the bench starts
// the local control plane and chooses its controllers. The flag package's
// own messages (a number that does not parse, an unknown flag) and the
// usage go to output.
func parseFlags(args []string, ownControlPlane bool, output io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(output)
	fs.Func("n", "Number of Foos to converge (default 200); a comma-separated list (1000,10000) runs the bench for each and reports memory per Foo from their difference.",
		func(v string) error {
			for f := range strings.SplitSeq(v, ",") {
				n, err := strconv.Atoi(strings.TrimSpace(f))
				if err != nil || n < 1 {
					return fmt.Errorf("want positive numbers, got %q", f)
				}
				o.ns = append(o.ns, n)
			}
			return nil
		})
	fs.IntVar(&o.replicas, "replicas", 1, "Replicas of each Foo (and of the floor's Deployments); 0 keeps pods out of it at large N: the Deployments and their ReplicaSets still exist.")
	fs.IntVar(&o.repeat, "repeat", 1, "Repeat the whole measurement this many times; medians are reported.")
	fs.StringVar(&o.jsonPath, "json", "_output/bench.json", "Write the figures as JSON to this file.")
	fs.DurationVar(&o.idle, "idle", 0,
		"Idle window. Default: the controller's -resync-period (as given with -controller-flag) and 10 s, so that the window holds one resync pass; 10m10s, with no pass, for a period over 10 minutes (the default, 10h).")
	fs.BoolVar(&o.deleteNamespace, "delete-namespace", false, "After the restarts, delete the first namespace with the controller running (needs -namespaces of at least 2): how long until it is gone, the controller's writes meanwhile (the target is none but the bystander's), and how soon a Foo elsewhere, edited during it, reaches its Deployment.")
	fs.DurationVar(&o.restartIdle, "restart-idle", 0, "After the restarts, an idle window of the restarted controller (0: none): the idle CPU and memory of a process that did not converge a burst.")
	fs.Func("restart-env", "An extra environment variable for the restarted controllers only, e.g. -restart-env=GOGC=off (repeatable): two settings compared in one run.",
		func(v string) error {
			if !strings.Contains(v, "=") {
				return fmt.Errorf("want NAME=VALUE, got %q", v)
			}
			o.restartEnv = append(o.restartEnv, v)
			return nil
		})
	fs.Func("restart-alt-env", "An extra environment variable for every other restart, on top of -restart-env (repeatable; needs -restarts of at least 2): its start-up figures are reported apart, as the alternative's.",
		func(v string) error {
			if !strings.Contains(v, "=") {
				return fmt.Errorf("want NAME=VALUE, got %q", v)
			}
			o.restartAltEnv = append(o.restartAltEnv, v)
			return nil
		})
	fs.IntVar(&o.concurrency, "concurrency", 50, "Concurrent creates (Foos, and the floor's writes).")
	fs.DurationVar(&o.timeout, "timeout", 15*time.Minute, "Give up converging (or waiting for the floor's Deployments to be available, or for a namespace to be deleted) after this long.")
	fs.IntVar(&o.namespaces, "namespaces", 1,
		"Spread the Foos over this many namespaces (the floor runs in one: use with -floor=false). Past some 10,000 Deployments in one namespace, kube-controller-manager's Deployment controller, which lists a namespace's ReplicaSets on every sync, is what bounds the run. See -namespace-names and -big-namespace.")
	fs.StringVar(&o.namespaceNames, "namespace-names", namesSequential,
		"With -namespaces above 1, in every run (the scale-out run's too), how the namespaces are named. sequential: as people number them, bench-00, bench-01, ... (zero-padded to the width of -namespaces), which the API server's hash (FNV-1a) crowds into one or two equal slots; letters: team-a to team-z, then team-aa, ...; spread: names chosen so that every one of -shard-slots equal slots (16 without it) holds as many, the best case for equal slots and how runs before the balanced slots were measured. The names are the same in every row and repeat, so that each faces the same placement over the slots.")
	fs.Float64Var(&o.bigNamespace, "big-namespace", 0,
		"With -namespaces above 1: put this fraction (0 <= f < 1, and at least 1/-namespaces) of the N Foos in the first namespace, and the rest evenly in the others, to measure one namespace holding most Foos. A namespace is never split among replicas, so k replicas hold them with a skew (max/mean) of at least f×k. 0: the same number in every namespace.")
	fs.BoolVar(&o.singleVersion, "single-version", false,
		"Install the CRD serving v1beta1 alone, converting with None and no webhook: the figures of a release that no longer serves v1alpha1, beside the default's (both versions served, every write converted by the bench's webhook: see conversion reviews per Foo).")
	fs.BoolVar(&o.moveManagedFields, "move-managed-fields", false,
		"With -create-in-v1alpha1: after the edit, scale every Foo (a merge patch in v1beta1 each) and wait until all are Ready, move their managed fields to v1beta1 as make migrate-storage does, and scale them all again: the time and the conversion reviews per Foo of each, and of the move.")
	fs.BoolVar(&o.createInV1alpha1, "create-in-v1alpha1", false,
		"Create the Foos through v1alpha1, as those of a cluster from before v1beta1: their managed fields are recorded under v1alpha1, and the API server converts each Foo to v1alpha1 (through the webhook) to track them when the controller writes it in v1beta1 (see conversion reviews per Foo). Not with -single-version.")
	fs.BoolVar(&o.floor, "floor", true, "Run the floor phase (the same work sent directly, for the ratios).")
	fs.BoolVar(&o.deploymentController, "deployment-controller", true,
		"Run kube-controller-manager's Deployment and ReplicaSet controllers. false: no Foo ever becomes Ready, and the bench waits instead for every Foo's status to be written for its generation; at N=100,000 those controllers take about an hour (see docs/performance.md). Only with the bench's own control plane (KUBECONFIG unset) and -floor=false.")
	fs.BoolVar(&o.heapProfile, "heap-profile", false,
		"Save the controller's heap profiles (first repeat): after the idle window to _output/heap-N-STAMP.pb.gz, and of the (last) restarted process to _output/heap-N-STAMP-restart.pb.gz. STAMP is the run's start, UTC (20261124T201500), so that no run overwrites another's.")
	fs.BoolVar(&o.cpuProfile, "cpu-profile", false,
		"Save the controller's CPU profile over the idle window (first repeat) to _output/cpu-N-STAMP.pb.gz: where the resyncs' CPU goes.")
	fs.DurationVar(&o.burstProfile, "burst-profile", 0,
		"Save the controller's CPU profile over this much of the burst, from the first create (first repeat), to _output/cpu-N-STAMP-burst.pb.gz: where the controller's share of the burst goes. With -shard-replicas, each replica's, to _output/cpu-N-STAMP-burst-kK-I.pb.gz (replica I of K; k0 is the leader). 0: none.")
	fs.IntVar(&o.restarts, "restarts", 1,
		"Restart the converged controller this many times, each right after a bare list of the same objects: the start-up figures and the restart's peak RSS are medians, and \"start-up vs a bare list\" the median of each pair's ratio; the RSS and live heap once keys are processed are the last restart's.")
	fs.Func("controller-flag", "An extra controller flag, e.g. -controller-flag=-workers=8 (repeatable). For experiments: the issue's figures are for the defaults.",
		func(v string) error { o.controller.args = append(o.controller.args, v); return nil })
	fs.Func("controller-env", "An extra environment variable for the controller only, e.g. -controller-env=GOGC=50 (repeatable). For experiments.",
		func(v string) error {
			if !strings.Contains(v, "=") {
				return fmt.Errorf("want NAME=VALUE, got %q", v)
			}
			o.controller.env = append(o.controller.env, v)
			return nil
		})
	fs.Func("shard-replicas", "Run the scale-out phase instead of the usual ones (no idle window, edit, restart or floor): for each N, the single leader (k=0), then k sharded replicas (-shard-slots) for each k of this comma-separated list (1,2,4), each converging N Foos spread over -namespaces namespaces; a row per k, with the Foos each replica holds, its memory and CPU, and the re-balances of the slots. Needs -floor=false and -namespaces of at least -shard-slots (see docs/sharding.md, \"Scale-out, measured\").",
		func(v string) error {
			for f := range strings.SplitSeq(v, ",") {
				k, err := strconv.Atoi(strings.TrimSpace(f))
				if err != nil || k < 1 {
					return fmt.Errorf("want positive numbers of replicas, got %q", f)
				}
				o.shardReplicas = append(o.shardReplicas, k)
			}
			return nil
		})
	fs.IntVar(&o.shardSlots, "shard-slots", 0, "With -shard-replicas: the replicas' -shard-slots (default 16).")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return o, err
		}
		return o, fmt.Errorf("%w: %w", errFlagSyntax, err)
	}
	// The flag package stops at the first argument that is not a flag
	// and leaves the rest unread: "-floor false -namespaces 100" would
	// run one namespace with the floor, and report it as asked.
	if fs.NArg() > 0 {
		return o, fmt.Errorf("%q and what follows it would be ignored: every setting is a flag, and a boolean one takes its value after '=' (-floor=false)", fs.Arg(0))
	}
	o.given = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { o.given[f.Name] = true })
	if o.idle == 0 {
		// One resync pass in the window when passes are frequent enough to
		// weigh; with the default 10h, the window has none.
		o.idle = min(resyncPeriod(o.controller.args), 10*time.Minute) + 10*time.Second
	}
	// The bench forces garbage collections through the profiles to
	// measure the live heap (controllerProc.liveHeap).
	o.controller.args = append(o.controller.args, "-profiling")
	if len(o.ns) == 0 {
		o.ns = []int{200}
	}
	if len(o.shardReplicas) > 0 && o.shardSlots == 0 {
		o.shardSlots = spreadOverSlots
	}
	o.ownControlPlane = ownControlPlane
	return o, o.validate(ownControlPlane)
}

// validate refuses what the bench cannot run as its report would claim:
// the floor runs in one namespace, so with the Foos spread over several
// its ratios would compare two different loads; without
// kube-controller-manager's Deployment controller the floor's Deployments
// never become available, and only the bench's own control plane can be
// started without it; the Foo API refuses replicas outside 0 to 100, so
// every create would fail.
func (o options) validate(ownControlPlane bool) error {
	if o.namespaces < 1 || (o.namespaces > 1 && o.floor) {
		return errors.New("-namespaces must be at least 1, and more than 1 only with -floor=false")
	}
	if !o.deploymentController && (o.floor || !ownControlPlane) {
		return errors.New("-deployment-controller=false needs -floor=false and the bench's own control plane (KUBECONFIG unset)")
	}
	if o.repeat < 1 || o.concurrency < 1 || o.restarts < 1 {
		return errors.New("-repeat, -concurrency and -restarts must be at least 1")
	}
	if len(o.restartAltEnv) > 0 && o.restarts < 2 {
		return errors.New("-restart-alt-env needs -restarts of at least 2: every other restart runs with it")
	}
	if o.burstProfile < 0 {
		return errors.New("-burst-profile must not be negative")
	}
	// An idle window shorter than a second measures nothing (and a CPU
	// profile of it asks pprof for 0 seconds, which it takes as 30).
	if o.idle < time.Second || o.timeout <= 0 {
		return errors.New("-idle must be at least 1s and -timeout positive")
	}
	if seen := map[int]bool{}; len(o.ns) > 0 {
		for _, n := range o.ns {
			if seen[n] {
				return fmt.Errorf("-n lists %d twice: memory per Foo comes from the difference between two N", n)
			}
			seen[n] = true
		}
	}
	if o.createInV1alpha1 && o.singleVersion {
		return errors.New("-create-in-v1alpha1 needs v1alpha1 served: not with -single-version")
	}
	if o.moveManagedFields && (!o.createInV1alpha1 || !o.deploymentController) {
		return errors.New("-move-managed-fields needs -create-in-v1alpha1 (managed fields to move) and the Deployment controller (Foos that become Ready)")
	}
	if o.replicas < 0 || o.replicas > 100 {
		return errors.New("-replicas must be 0 to 100 (the Foo API's maximum)")
	}
	if err := o.validateNamespaces(); err != nil {
		return err
	}
	return o.validateScaleOut()
}

// equalSlots are the equal slots -namespace-names=spread aims at: the
// replicas' in the scale-out run, else the count the docs advise.
func (o options) equalSlots() shard.Slots {
	if o.shardSlots > 0 {
		return shard.Slots(o.shardSlots)
	}
	return spreadOverSlots
}

// validateNamespaces refuses a naming the bench does not know, and what
// -namespace-names and -big-namespace would not apply to: one namespace is
// named for the run and holds every Foo whatever they say. A big namespace
// below the even share 1/-namespaces would be the smallest one.
func (o options) validateNamespaces() error {
	if !slices.Contains(namespaceStyles, o.namespaceNames) {
		return fmt.Errorf("-namespace-names must be one of %s, got %q", strings.Join(namespaceStyles, ", "), o.namespaceNames)
	}
	// Written so that NaN fails too.
	if !(o.bigNamespace >= 0 && o.bigNamespace < 1) {
		return fmt.Errorf("-big-namespace must be a fraction, 0 <= f < 1, got %v", o.bigNamespace)
	}
	if o.namespaces < 2 && (o.given["namespace-names"] || o.bigNamespace > 0) {
		return errors.New("-namespace-names and -big-namespace are for -namespaces above 1: one namespace holds every Foo")
	}
	if o.namespaces < 2 && o.deleteNamespace {
		return errors.New("-delete-namespace needs -namespaces of at least 2: a Foo in another namespace is edited during the deletion")
	}
	if even := 1 / float64(o.namespaces); o.bigNamespace > 0 && o.bigNamespace < even {
		return fmt.Errorf("-big-namespace %v is below the even share 1/-namespaces (%.4g): the first namespace would hold fewer Foos than the others", o.bigNamespace, even)
	}
	return nil
}

func run(ctx context.Context, o options) (err error) {
	if _, err := os.Stat("artifacts/examples/crd.yaml"); err != nil {
		return errors.New("run from the repository root (make bench)")
	}
	testbin, err := output("hack/install-testbin.sh", "--print-dir")
	if err != nil {
		return err
	}
	kubectl := filepath.Join(testbin, "kubectl")

	kubeconfig := os.Getenv("KUBECONFIG")
	o.stamp = time.Now().UTC().Format("20060102T150405")
	ownPlane := kubeconfig == ""
	if kubeconfig == "" {
		progress("KUBECONFIG not set: starting the local control plane (hack/local-up.sh)")
		cmd := exec.Command("hack/local-up.sh")
		cmd.Env = append(os.Environ(), envDefault("FOO_KUBE_API_QPS", "1000"), envDefault("FOO_KUBE_API_BURST", "2000"))
		// Set in both modes, so that one exported in the caller's shell
		// cannot change what the report says ran.
		without := ""
		if !o.deploymentController {
			progress("kube-controller-manager without its Deployment and ReplicaSet controllers: no Foo becomes Ready")
			without = "deployment-controller,replicaset-controller"
		}
		cmd.Env = append(cmd.Env, "FOO_KCM_WITHOUT="+without)
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		if err != nil {
			return fmt.Errorf("hack/local-up.sh: %w", err)
		}
		for line := range strings.Lines(string(out)) {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "export KUBECONFIG="); ok {
				kubeconfig = v
			}
		}
		if kubeconfig == "" {
			return fmt.Errorf("hack/local-up.sh printed no KUBECONFIG: %q", out)
		}
		if strings.Contains(string(out), "# reused:") {
			progress("the local control plane was already running: the bench leaves it running")
		} else {
			defer func() {
				progress("stopping the local control plane (hack/local-down.sh)")
				down := exec.Command("hack/local-down.sh")
				down.Stdout, down.Stderr = os.Stderr, os.Stderr
				err = errors.Join(err, down.Run())
			}()
		}
	} else {
		progress("using KUBECONFIG=%s (its control plane's client QPS is whatever it was started with)", kubeconfig)
	}
	o.plane = localPlane(ownPlane) // now that its pid files are written

	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	// The bench's own client must not be what limits the figures.
	cfg.QPS, cfg.Burst = 5000, 10000
	cfg.UserAgent = "foo-bench"
	// Until run returns: the deferred namespace deletions need it too.
	webhookCtx, stopWebhook := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWebhook()
	local := ownPlane || sameFile(kubeconfig, filepath.Join(localDir(), "kubeconfig"))
	restoreCRD, err := installCRD(webhookCtx, rest.CopyConfig(cfg), kubectl, kubeconfig, local, o.singleVersion)
	if err != nil {
		return err
	}
	defer restoreCRD()
	progress("building the controller")
	bin := "_output/bin/foo-controller"
	if _, err := output("go", "build", "-o", bin, "."); err != nil {
		return err
	}
	var c clients
	if c.kube, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	if c.foo, err = clientset.NewForConfig(cfg); err != nil {
		return err
	}
	c.inV1alpha1 = o.createInV1alpha1
	if c.ext, err = apiextensions.NewForConfig(cfg); err != nil {
		return err
	}
	if c.dyn, err = dynamic.NewForConfig(cfg); err != nil {
		return err
	}

	logPath, _ := filepath.Abs("_output/bench-controller.log")
	_ = os.Remove(logPath)
	var out results
	for _, n := range o.ns {
		if len(o.shardReplicas) > 0 {
			so, err := scaleOut(ctx, c, o, n, bin, kubeconfig, logPath)
			if err != nil {
				return fmt.Errorf("scale-out bench of %d Foos: %w (controller log: %s)", n, err, logPath)
			}
			out.ScaleOut = append(out.ScaleOut, so)
			continue
		}
		rep := report{header: newHeader(o, n), Idle: o.idle.String()}
		progress("idle window %v, N=%d, %d replica(s) each, concurrency %d, %d repeat(s)", o.idle, n, o.replicas, o.concurrency, o.repeat)
		for r := range o.repeat {
			fig, ser, err := once(ctx, c, o, n, r, bin, kubeconfig, logPath)
			if err != nil {
				return fmt.Errorf("bench of %d Foos, repeat %d: %w (controller log: %s)", n, r+1, err, logPath)
			}
			rep.Runs = append(rep.Runs, fig)
			if r == 0 {
				rep.Series = ser
			}
		}
		for _, f := range rep.Runs {
			// Sequential floor of "all Foos Ready": the Deployments made
			// available without us, then the status writes.
			if _, ok := f["floor_deployments_available_s"]; ok {
				f["floor_ready_s"] = f["floor_deployments_available_s"] + f["floor_status_writes_s"]
			}
			// The pipeline's floor (issue 25): what no controller can do
			// without, the Foo creates and the Deployment applies, sent by
			// one client with the bench's concurrency, one after the other.
			if _, ok := f["floor_deployment_applies_s"]; ok {
				f["floor_foos_and_applies_s"] = f["floor_foo_creates_s"] + f["floor_deployment_applies_s"]
			}
		}
		rep.Median = medians(rep.Runs)
		printTable(os.Stdout, rep)
		out.Reports = append(out.Reports, rep)
	}
	if len(out.Reports) > 1 {
		out.Slopes = slopes(out.Reports)
		printSlopes(os.Stdout, out)
	}
	if err := os.MkdirAll(filepath.Dir(o.jsonPath), 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(o.jsonPath, append(b, '\n'), 0o644); err != nil {
		return err
	}
	progress("figures written to %s", o.jsonPath)
	if len(out.Reports) == 0 {
		return nil // the scale-out run: nothing hack/plot draws
	}
	// The plots are a module of their own (hack/plot): a failure to draw
	// them is reported, but the figures stand.
	abs, _ := filepath.Abs(o.jsonPath)
	plots, err := output("go", "-C", "hack/plot", "run", ".", "-in", abs, "-out", filepath.Dir(abs))
	if err != nil {
		progress("no plots: %v", err)
		return nil
	}
	progress("plots written: %s", strings.ReplaceAll(plots, "\n", ", "))
	return nil
}

// slopes are the memory the controller holds per Foo (with its
// Deployment), from the difference between the smallest and the largest
// N: what grows with N, without the binary and the fixed costs.
func slopes(reps []report) figures {
	lo, hi := reps[0], reps[0]
	for _, r := range reps {
		if r.N < lo.N {
			lo = r
		}
		if r.N > hi.N {
			hi = r
		}
	}
	dn := float64(hi.N - lo.N)
	out := figures{"n_low": float64(lo.N), "n_high": float64(hi.N)}
	if dn == 0 {
		return out
	}
	for key, mb := range map[string]string{
		"steady_rss_bytes_per_foo":   "steady_rss_mb",
		"steady_anon_bytes_per_foo":  "steady_rss_anon_mb",
		"steady_heap_bytes_per_foo":  "steady_heap_inuse_mb",
		"peak_rss_bytes_per_foo":     "peak_rss_mb",
		"live_heap_bytes_per_foo":    "live_heap_mb",
		"restart_rss_bytes_per_foo":  "restart_rss_mb",
		"restart_live_bytes_per_foo": "restart_live_heap_mb",
	} {
		out[key] = (hi.Median[mb] - lo.Median[mb]) * (1 << 20) / dn
	}
	return out
}

func printSlopes(w io.Writer, out results) {
	s := out.Slopes
	_, _ = fmt.Fprintf(w, "\nmemory per Foo (and its Deployment), from N=%.0f to N=%.0f: steady RSS %.0f B, of which anonymous %.0f B; Go heap %.0f B, live %.0f B; peak RSS %.0f B; restarted: RSS %.0f B, live heap %.0f B (target: steady <= 4096 B)\n",
		s["n_low"], s["n_high"], s["steady_rss_bytes_per_foo"], s["steady_anon_bytes_per_foo"],
		s["steady_heap_bytes_per_foo"], s["live_heap_bytes_per_foo"], s["peak_rss_bytes_per_foo"],
		s["restart_rss_bytes_per_foo"], s["restart_live_bytes_per_foo"])
}

// once is one repeat: converge, idle, restart, then the floor.
func once(ctx context.Context, c clients, o options, n, r int, bin, kubeconfig, logPath string) (figures, series, error) {
	suffix := fmt.Sprintf("%d-%d", r+1, time.Now().Unix())
	spaces := []string{"bench-" + suffix}
	if o.namespaces > 1 {
		var err error
		if spaces, err = namespaceNames(o.namespaceNames, o.namespaces, o.equalSlots()); err != nil {
			return nil, nil, err
		}
	}
	foos := placeFoos(spaces, n, o.bigNamespace)
	if _, err := checkClean(ctx, c, spaces); err != nil {
		return nil, nil, err
	}
	// Whatever ends this run early (a signal, a timeout, the controller
	// dying), its Foos must not stay behind: the next run's controller
	// would hold and sync them too, and its figures be for more than N.
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
	progress("repeat %d: starting the controller", r+1)
	ctrl, err := startController(bin, kubeconfig, logPath, o.controller)
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		if ctrl != nil && ctrl.alive() == nil {
			_ = ctrl.stop()
		}
	}()
	if _, err := ctrl.waitReady(ctx, 2*time.Minute); err != nil {
		return nil, nil, err
	}
	burstPath := ""
	if o.burstProfile > 0 && r == 0 {
		burstPath = fmt.Sprintf("_output/cpu-%d-%s-burst.pb.gz", n, o.stamp)
	}
	all, ser, err := converge(ctx, c, ctrl, o.plane, foos, int32(o.replicas), o.concurrency, o.timeout, o.deploymentController, burstPath, o.burstProfile)
	if err != nil {
		return nil, nil, err
	}
	cpuPath := ""
	if o.cpuProfile && r == 0 {
		cpuPath = fmt.Sprintf("_output/cpu-%d-%s.pb.gz", n, o.stamp)
	}
	idl, err := idle(ctx, ctrl, o.idle, cpuPath)
	if err != nil {
		return nil, nil, err
	}
	merge(all, idl)
	profile := func(suffix string) string {
		if !o.heapProfile || r > 0 {
			return ""
		}
		return fmt.Sprintf("_output/heap-%d-%s%s.pb.gz", n, o.stamp, suffix)
	}
	live, err := ctrl.liveHeap(profile(""))
	if err != nil {
		return nil, nil, err
	}
	all["live_heap_mb"] = live / (1 << 20)
	if path := profile(""); path != "" {
		progress("heap profile after the idle window written to %s (go tool pprof -sample_index=inuse_space %s)", path, path)
	}
	ed, err := editOne(ctx, c, foos.of[0], "foo-0")
	if err != nil {
		return nil, nil, err
	}
	merge(all, ed)
	// The edit's tail (its status writes, paced) must be over before the
	// restart, or "restart: writes" would count it.
	if _, err := ctrl.settle(3*time.Second, time.Minute); err != nil {
		return nil, nil, err
	}
	if o.moveManagedFields {
		mv, err := scaleAroundTheMove(ctx, c, ctrl, foos, int32(o.replicas), o.concurrency, o.timeout)
		if err != nil {
			return nil, nil, err
		}
		merge(all, mv)
	}
	listed := spaces[0]
	if len(spaces) > 1 {
		listed = metav1.NamespaceAll
	}
	// Each restart right after a bare list, so that the two of a pair see
	// the same machine: its ratio is the figure, its median the result.
	var starts, alts []figures
	for i := range o.restarts {
		alt := len(o.restartAltEnv) > 0 && alternative(i, o.restarts)
		lf, err := listFloor(ctx, c, listed)
		if err != nil {
			return nil, nil, err
		}
		var rs figures
		restarted := o.controller
		restarted.env = append(slices.Clip(o.controller.env), o.restartEnv...)
		if alt {
			// os/exec keeps the last of a name given twice.
			restarted.env = append(restarted.env, o.restartAltEnv...)
		}
		ctrl, rs, err = restart(ctx, ctrl, o.plane, bin, kubeconfig, logPath, n, restarted)
		if err != nil {
			return nil, nil, err
		}
		merge(rs, lf)
		rs["startup_vs_list"] = rs["restart_processed_s"] / rs["floor_list_s"]
		if rss, err := ctrl.peakRSS(); err == nil {
			rs["restart_peak_rss_mb"] = float64(rss) / (1 << 20)
		}
		if o.restarts > 1 {
			which := ""
			if alt {
				which = " (alternative: " + strings.Join(o.restartAltEnv, " ") + ")"
			}
			progress("restart %d/%d%s: keys processed in %.2fs, bare list %.2fs: %.2fx, peak RSS %.0f MB", i+1, o.restarts, which,
				rs["restart_processed_s"], rs["floor_list_s"], rs["startup_vs_list"], rs["restart_peak_rss_mb"])
		}
		if alt {
			alts = append(alts, rs)
			continue
		}
		starts = append(starts, rs)
	}
	merge(all, medians(starts))
	if len(alts) > 0 {
		for k, v := range medians(alts) {
			all["alt_"+k] = v
		}
		all["alt_startup_vs_list_min"], all["alt_startup_vs_list_max"] = spread(alts, "startup_vs_list")
		for _, rs := range alts {
			all["restart_writes"] = max(all["restart_writes"], rs["restart_writes"])
		}
	}
	for _, rs := range starts {
		// A write in any restart is a failure of the figure: not a median.
		all["restart_writes"] = max(all["restart_writes"], rs["restart_writes"])
	}
	if o.restarts > 1 {
		all["startup_vs_list_min"], all["startup_vs_list_max"] = spread(starts, "startup_vs_list")
	}
	// The restarted process holds the same caches without what converging
	// left behind (the Events' series cache, which client-go keeps for 6
	// to 12 minutes; our writes' copies; maps grown to the burst's size),
	// read once its keys are processed and it is quiet: a replica that has
	// run for hours is not measured.
	if mem, err := ctrl.memStatus(); err == nil {
		all["restart_rss_mb"] = float64(mem["VmRSS"]) / (1 << 20)
	}
	if o.restartIdle > 0 {
		path := ""
		if o.cpuProfile && r == 0 {
			path = fmt.Sprintf("_output/cpu-%d-%s-restart.pb.gz", n, o.stamp)
		}
		idl, err := idle(ctx, ctrl, o.restartIdle, path)
		if err != nil {
			return nil, nil, err
		}
		for k, v := range idl {
			all["restart_"+k] = v
		}
	}
	live, err = ctrl.liveHeap(profile("-restart"))
	if err != nil {
		return nil, nil, err
	}
	all["restart_live_heap_mb"] = live / (1 << 20)
	if o.deleteNamespace {
		del, err := deleteNamespaceWhileRunning(ctx, c, ctrl, foos, o.timeout)
		if err != nil {
			return nil, nil, err
		}
		merge(all, del)
	}
	if err := ctrl.stop(); err != nil {
		return nil, nil, err
	}
	cleaned = true
	if err := deleteNamespaces(ctx, c, spaces, o.timeout); err != nil {
		return nil, nil, err
	}
	if !o.floor {
		return all, ser, nil
	}
	fns := "bench-floor-" + suffix
	if err := newNamespace(ctx, c, fns); err != nil {
		return nil, nil, err
	}
	fl, flSer, err := floor(ctx, c, o.plane, fns, n, int32(o.replicas), o.concurrency, o.timeout)
	if err != nil {
		return nil, nil, err
	}
	merge(all, fl)
	maps.Copy(ser, flSer)
	if err := deleteNamespaces(ctx, c, []string{fns}, o.timeout); err != nil {
		return nil, nil, err
	}
	return all, ser, nil
}

// alternative says whether restart i of n runs with -restart-alt-env:
// every other one, ending with one that does not, so that the last
// restart, measured on after the loop, has the usual settings.
func alternative(i, n int) bool { return (n-1-i)%2 == 1 }

// spread is the lowest and the highest of key over runs.
func spread(runs []figures, key string) (lo, hi float64) {
	for i, f := range runs {
		if v := f[key]; i == 0 || v < lo {
			lo = v
		}
		if v := f[key]; i == 0 || v > hi {
			hi = v
		}
	}
	return lo, hi
}

func merge(dst, src figures) {
	for k, v := range src {
		dst[k] = v
	}
}

func medians(runs []figures) figures {
	out := figures{}
	keys := map[string]bool{}
	for _, r := range runs {
		for k := range r {
			keys[k] = true
		}
	}
	for k := range keys {
		var vs []float64
		for _, r := range runs {
			vs = append(vs, r[k]) // absent = 0 (a method not used in that run)
		}
		sort.Float64s(vs)
		m := vs[len(vs)/2]
		if len(vs)%2 == 0 {
			m = (vs[len(vs)/2-1] + vs[len(vs)/2]) / 2
		}
		out[k] = m
	}
	return out
}

// row is one line of the table: a controller figure, its floor, the target.
type row struct {
	label, key, floorKey, target string
	ok                           func(v, floor float64) bool
}

func printTable(w io.Writer, rep report) {
	pf := func(format string, a ...any) { _, _ = fmt.Fprintf(w, format, a...) }
	m := rep.Median
	rows := []row{
		{"all Deployments exist (s)", "deployments_exist_s", "floor_deployment_creates_s", "<= 2x floor",
			func(v, f float64) bool { return v <= 2*f }},
		{"  vs the same N applies (s)", "deployments_exist_s", "floor_deployment_applies_s", "", nil},
		{"  vs N Foo creates + N applies (s)", "deployments_exist_s", "floor_foos_and_applies_s", "<= 2x floor",
			func(v, f float64) bool { return v <= 2*f }},
		{"  the bench's N Foo creates (s)", "creates_sent_s", "floor_foo_creates_s", "", nil},
		{"Foos/s during the burst", "burst_foos_per_s", "", "", nil},
		{"all Deployments available (s)", "deployments_available_s", "floor_deployments_available_s", "", nil},
		{"all Foos Ready (s)", "foos_ready_s", "floor_ready_s", "", nil},
		{"all Foos' status written (s)", "foos_reported_s", "", "", nil},
		{"last Ready - last available (s)", "ready_after_last_available", "", "<= 2s",
			func(v, _ float64) bool { return v <= 2 }},
		{"create->Ready p50 (s)", "latency_p50_s", "", "", nil},
		{"create->Ready p99 (s)", "latency_p99_s", "", "", nil},
		{"status lag p50 (s)", "status_lag_p50_s", "", "", nil},
		{"status lag p99 (s)", "status_lag_p99_s", "", "<= 1s", func(v, _ float64) bool { return v <= 1 }},
		{"requests per Foo", "requests_per_foo", "", "", nil},
		{"writes per Foo (incl. Events)", "writes_per_foo", "", "", nil},
		{"conversion reviews per Foo", "conversion_reviews_per_foo", "", "", nil},
		{"writes per Foo excl. Events", "writes_excl_events_per_foo", "", "<= 3", func(v, _ float64) bool { return v <= 3 }},
		{"Events per Foo", "events_per_foo", "", "<= 1", func(v, _ float64) bool { return v <= 1 }},
		{"idle requests/min", "idle_requests_per_min", "", "", nil},
		{"idle writes/min", "idle_writes_per_min", "", "0", func(v, _ float64) bool { return v == 0 }},
		{"idle CPU (% of a core)", "idle_cpu_pct", "", "<= 1", func(v, _ float64) bool { return v <= 1 }},
		{"  syncs in the window (resyncs)", "idle_syncs", "", "", nil},
		{"idle CPU restarted (% of a core)", "restart_idle_cpu_pct", "", "<= 1", func(v, _ float64) bool { return v <= 1 }},
		{"  steady RSS restarted, after idle (MB)", "restart_steady_rss_mb", "", "", nil},
		{"one edit -> its Deployment (s)", "edit_to_deployment_s", "", "", nil},
		{"scale all, fields in v1alpha1: all Ready (s)", "scale_all_s", "", "", nil},
		{"  conversion reviews per Foo", "scale_all_reviews_per_foo", "", "", nil},
		{"move the managed fields (s)", "move_fields_s", "", "", nil},
		{"scale all again, moved: all Ready (s)", "scale_all_moved_s", "", "", nil},
		{"  conversion reviews per Foo", "scale_all_moved_reviews_per_foo", "", "", nil},
		{"  time, moved / not moved", "scale_all_moved_vs_before", "", "", nil},
		{"restart: /readyz 200 (s)", "restart_ready_s", "floor_list_s", "", nil},
		{"restart: all keys processed (s)", "restart_processed_s", "floor_list_s", "<= 3s", func(v, _ float64) bool { return v <= 3 }},
		{"  vs a bare list (target at 100k)", "restart_processed_s", "floor_list_s", "<= 2x", func(v, f float64) bool { return v <= 2*f }},
		{"  ratio to the list just before", "startup_vs_list", "", "<= 2", func(v, _ float64) bool { return v <= 2 }},
		{"    lowest of the restarts", "startup_vs_list_min", "", "", nil},
		{"    highest of the restarts", "startup_vs_list_max", "", "", nil},
		{"restart with the alternative environment (-restart-alt-env): keys processed (s)", "alt_restart_processed_s", "alt_floor_list_s", "<= 2x", func(v, f float64) bool { return v <= 2*f }},
		{"  ratio to the list just before", "alt_startup_vs_list", "", "<= 2", func(v, _ float64) bool { return v <= 2 }},
		{"    lowest of the restarts", "alt_startup_vs_list_min", "", "", nil},
		{"    highest of the restarts", "alt_startup_vs_list_max", "", "", nil},
		{"  peak RSS (MB)", "alt_restart_peak_rss_mb", "", "", nil},
		{"restart: writes", "restart_writes", "", "0", func(v, _ float64) bool { return v == 0 }},
		{"peak RSS after converge (MB)", "peak_rss_mb", "", "<= 40", func(v, _ float64) bool { return v <= 40 }},
		{"  of which binary pages (RssFile)", "rss_file_mb", "", "", nil},
		{"  of which anonymous (RssAnon)", "rss_anon_mb", "", "", nil},
		{"  Go heap in use (MB)", "go_heap_inuse_mb", "", "", nil},
		{"steady RSS after idle (MB)", "steady_rss_mb", "", "", nil},
		{"  of which anonymous (RssAnon)", "steady_rss_anon_mb", "", "", nil},
		{"  Go heap in use (MB)", "steady_heap_inuse_mb", "", "", nil},
		{"  live heap, after a GC (MB)", "live_heap_mb", "", "", nil},
		{"namespace deleted, controller running: Foos", "nsdelete_foos", "", "", nil},
		{"  until it is gone (s)", "nsdelete_gone_s", "", "", nil},
		{"  controller writes meanwhile (a bystander's edit's among them)", "nsdelete_writes", "", "", nil},
		{"  the bystander's edit -> its Deployment (s)", "nsdelete_bystander_s", "", "", nil},
		{"RSS restarted, keys processed (MB)", "restart_rss_mb", "", "", nil},
		{"  live heap, after a GC (MB)", "restart_live_heap_mb", "", "", nil},
		{"peak RSS after restart (MB)", "restart_peak_rss_mb", "", "<= 1.5x steady", func(v, _ float64) bool { return v <= 1.5*m["steady_rss_mb"] }},
		{"rate-limiter wait per Foo (s)", "ratelimit_wait_s_per_foo", "", "", nil},
		{"workqueue depth max (every 250ms)", "workqueue_depth_max", "", "", nil},
	}
	pf("\nfoo-controller bench: N=%d %s, %d replica(s) each, concurrency %d, idle window %s, %d run(s), medians; %s\n\n",
		rep.N, describeNamespaces(rep.header), rep.Replicas, rep.Concurrency, rep.Idle, len(rep.Runs), rep.Date)
	if !rep.DeploymentController {
		pf("kube-controller-manager ran without its Deployment and ReplicaSet controllers: no Foo becomes Ready.\n\n")
	}
	pf("%-34s %10s %10s %7s %8s %s\n", "figure", "controller", "floor", "ratio", "target", "met")
	for _, r := range rows {
		v, measured := m[r.key]
		if !measured {
			continue // not in this mode (-deployment-controller=false)
		}
		fl, ratio := "", ""
		if _, measured := m[r.floorKey]; r.floorKey != "" && !measured {
			pf("%-34s %10.2f %10s\n", r.label, v, "(no floor)")
			continue
		}
		if r.floorKey != "" {
			fl = fmt.Sprintf("%.2f", m[r.floorKey])
			if m[r.floorKey] > 0 {
				ratio = fmt.Sprintf("%.2fx", v/m[r.floorKey])
			}
		}
		met := ""
		if r.ok != nil {
			met = "no"
			if r.ok(v, m[r.floorKey]) {
				met = "yes"
			}
		}
		pf("%-34s %10.2f %10s %7s %8s %s\n", r.label, v, fl, ratio, r.target, met)
	}
	var per []string
	for k := range m {
		// Per-method figures are named after the HTTP method, in capitals:
		// converge_PATCH_per_foo, idle_GET_per_min.
		for _, phase := range []string{"converge_", "idle_"} {
			if rest, ok := strings.CutPrefix(k, phase); ok && rest != strings.ToLower(rest) {
				per = append(per, k)
			}
		}
	}
	if lines := cpuSummary(m); len(lines) > 0 {
		pf("\nCPU seconds by process (burst: until every Deployment exists; tail: then until every Foo is done; floor: its Deployment creates; restart: until every key is processed):\n")
		for _, l := range lines {
			pf("  %s\n", l)
		}
	}
	slices.Sort(per)
	pf("\nby method:\n")
	for _, k := range per {
		pf("  %-30s %8.2f\n", k, m[k])
	}
	if _, ok := m["floor_deployment_creates_s"]; ok {
		pf("\nfloor: %d Deployment creates %.2fs, available %.2fs; %d Foo creates %.2fs; %d Foo status applies %.2fs; %d Deployment applies %.2fs\n",
			rep.N, m["floor_deployment_creates_s"], m["floor_deployments_available_s"],
			rep.N, m["floor_foo_creates_s"], rep.N, m["floor_status_writes_s"], rep.N, m["floor_deployment_applies_s"])
	}
}

func envDefault(k, v string) string {
	if cur := os.Getenv(k); cur != "" {
		return k + "=" + cur
	}
	return k + "=" + v
}

// output runs a command and returns its trimmed stdout; stderr is included
// in the error.
func output(name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, errb.String())
	}
	return strings.TrimSpace(string(out)), nil
}

// resyncPeriod is the controller's -resync-period among args, or its
// default (10h, pkg/options).
func resyncPeriod(args []string) time.Duration {
	period := 10 * time.Hour
	for _, a := range args {
		if v, ok := strings.CutPrefix(strings.TrimLeft(a, "-"), "resync-period="); ok {
			if d, err := time.ParseDuration(v); err == nil && d > 0 {
				period = d
			}
		}
	}
	return period
}
