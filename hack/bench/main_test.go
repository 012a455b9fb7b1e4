package main

import (
	"errors"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestResyncPeriod: the idle window follows the controller's resync
// period, so that it holds a pass whatever flags the run gives (up to
// 10 minutes: see the defaults case of TestParseFlags).
func TestResyncPeriod(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want time.Duration
	}{
		{nil, 10 * time.Hour},
		{[]string{"-workers=8"}, 10 * time.Hour},
		{[]string{"-resync-period=1m"}, time.Minute},
		{[]string{"--resync-period=90s", "-workers=8"}, 90 * time.Second},
		{[]string{"-resync-period=0"}, 10 * time.Hour}, // no resync: the window stays the default
		{[]string{"-resync-period=soon"}, 10 * time.Hour},
	} {
		if got := resyncPeriod(tc.args); got != tc.want {
			t.Errorf("resyncPeriod(%q) = %v, want %v", tc.args, got, tc.want)
		}
	}
}

// TestByMethodListsMethodsOnly: the table's "by method" part lists the
// per-method figures, not the idle totals that share their prefix.
func TestByMethodListsMethodsOnly(t *testing.T) {
	var b strings.Builder
	printTable(&b, report{header: header{N: 1}, Median: figures{
		"converge_PATCH_per_foo": 2, "idle_GET_per_min": 0.2,
		"idle_requests_per_min": 0.2, "idle_writes_per_min": 0, "idle_cpu_pct": 0.4,
	}})
	_, byMethod, _ := strings.Cut(b.String(), "by method:")
	for _, want := range []string{"converge_PATCH_per_foo", "idle_GET_per_min"} {
		if !strings.Contains(byMethod, want) {
			t.Errorf("by method lacks %s:\n%s", want, byMethod)
		}
	}
	for _, not := range []string{"idle_requests_per_min", "idle_writes_per_min", "idle_cpu_pct"} {
		if strings.Contains(byMethod, not) {
			t.Errorf("by method lists %s:\n%s", not, byMethod)
		}
	}
}

// TestParseFlags: each combination the bench cannot run is refused before
// it starts anything, with the message that says why; the defaults and a
// few combinations the docs use are accepted.
func TestParseFlags(t *testing.T) {
	for _, tc := range []struct {
		name            string
		args            []string
		foreignKubeconf bool   // KUBECONFIG set: a control plane the bench did not start
		refused         string // in the error, or (flag syntax) in what the flag package printed
	}{
		{name: "n zero", args: []string{"-n", "0"}, refused: `invalid value "0" for flag -n: want positive numbers, got "0"`},
		{name: "n negative", args: []string{"-n", "-5"}, refused: `want positive numbers, got "-5"`},
		{name: "n not a number", args: []string{"-n", "1k"}, refused: `want positive numbers, got "1k"`},
		{name: "n list with a hole", args: []string{"-n", "1000,,10000"}, refused: `want positive numbers, got ""`},
		{name: "replicas not a number", args: []string{"-replicas", "one"}, refused: `invalid value "one" for flag -replicas`},
		{name: "idle not a duration", args: []string{"-idle", "20"}, refused: `invalid value "20" for flag -idle`},
		{name: "unknown flag", args: []string{"-workers", "8"}, refused: "flag provided but not defined: -workers"},
		{name: "controller-env without =", args: []string{"-controller-env", "GOGC"}, refused: `want NAME=VALUE, got "GOGC"`},
		{name: "a boolean's value after a space", args: []string{"-floor", "false", "-namespaces", "100"},
			refused: `"false" and what follows it would be ignored`},
		{name: "namespaces zero", args: []string{"-namespaces", "0", "-floor=false"},
			refused: "-namespaces must be at least 1, and more than 1 only with -floor=false"},
		{name: "namespaces with the floor", args: []string{"-namespaces", "100"},
			refused: "-namespaces must be at least 1, and more than 1 only with -floor=false"},
		{name: "no deployment controller with the floor", args: []string{"-deployment-controller=false"},
			refused: "-deployment-controller=false needs -floor=false and the bench's own control plane (KUBECONFIG unset)"},
		{name: "no deployment controller on a foreign control plane", args: []string{"-deployment-controller=false", "-floor=false"},
			foreignKubeconf: true,
			refused:         "-deployment-controller=false needs -floor=false and the bench's own control plane (KUBECONFIG unset)"},
		{name: "repeat zero", args: []string{"-repeat", "0"}, refused: "-repeat, -concurrency and -restarts must be at least 1"},
		{name: "concurrency zero", args: []string{"-concurrency", "0"}, refused: "-repeat, -concurrency and -restarts must be at least 1"},
		{name: "restarts zero", args: []string{"-restarts", "0"}, refused: "-repeat, -concurrency and -restarts must be at least 1"},
		{name: "idle negative", args: []string{"-idle", "-5s"}, refused: "-idle must be at least 1s and -timeout positive"},
		{name: "idle below a second", args: []string{"-idle", "500ms"}, refused: "-idle must be at least 1s and -timeout positive"},
		{name: "timeout zero", args: []string{"-timeout", "0s"}, refused: "-idle must be at least 1s and -timeout positive"},
		{name: "the same N twice", args: []string{"-n", "1000,1000"}, refused: "-n lists 1000 twice"},
		{name: "burst profile negative", args: []string{"-burst-profile", "-5s"}, refused: "-burst-profile must not be negative"},
		{name: "replicas negative", args: []string{"-replicas", "-1"}, refused: "-replicas must be 0 to 100 (the Foo API's maximum)"},
		{name: "replicas above the API's maximum", args: []string{"-replicas", "101"}, refused: "-replicas must be 0 to 100 (the Foo API's maximum)"},
		{name: "shard replicas zero", args: []string{"-shard-replicas", "1,0"}, refused: `want positive numbers of replicas, got "0"`},
		{name: "shard slots without shard replicas", args: []string{"-shard-slots", "8"},
			refused: "-shard-slots is for the scale-out run: give -shard-replicas too"},
		{name: "shard replicas with the floor", args: []string{"-shard-replicas", "2"}, refused: "-shard-replicas runs no floor phase: give -floor=false"},
		{name: "shard replicas over too few namespaces", args: []string{"-shard-replicas", "2", "-namespaces", "8", "-floor=false"},
			refused: "-shard-replicas needs -namespaces of at least -shard-slots (16): a namespace is never split"},
		{name: "namespace names unknown", args: []string{"-namespaces", "8", "-floor=false", "-namespace-names", "random"},
			refused: `-namespace-names must be one of sequential, letters, spread, got "random"`},
		{name: "namespace names empty", args: []string{"-namespaces", "8", "-floor=false", "-namespace-names="},
			refused: `-namespace-names must be one of sequential, letters, spread, got ""`},
		{name: "namespace names in capitals", args: []string{"-namespaces", "8", "-floor=false", "-namespace-names=Sequential"},
			refused: `-namespace-names must be one of sequential, letters, spread, got "Sequential"`},
		{name: "namespace names for one namespace", args: []string{"-namespace-names=letters"},
			refused: "-namespace-names and -big-namespace are for -namespaces above 1"},
		{name: "big namespace for one namespace", args: []string{"-big-namespace=0.5", "-floor=false"},
			refused: "-namespace-names and -big-namespace are for -namespaces above 1"},
		{name: "an alternative start-up with one restart", args: []string{"-restart-alt-env=GOMEMLIMIT=800MiB"},
			refused: "-restart-alt-env needs -restarts of at least 2"},
		{name: "an alternative start-up without a value", args: []string{"-restarts=2", "-restart-alt-env=GOGC"},
			refused: `want NAME=VALUE, got "GOGC"`},
		{name: "a namespace deleted, of one", args: []string{"-delete-namespace"},
			refused: "-delete-namespace needs -namespaces of at least 2"},
		{name: "big namespace negative", args: []string{"-namespaces", "8", "-floor=false", "-big-namespace=-0.1"},
			refused: "-big-namespace must be a fraction, 0 <= f < 1, got -0.1"},
		{name: "big namespace of every Foo", args: []string{"-namespaces", "8", "-floor=false", "-big-namespace=1"},
			refused: "-big-namespace must be a fraction, 0 <= f < 1, got 1"},
		{name: "big namespace a percentage", args: []string{"-namespaces", "8", "-floor=false", "-big-namespace=50"},
			refused: "-big-namespace must be a fraction, 0 <= f < 1, got 50"},
		{name: "big namespace not a number", args: []string{"-namespaces", "8", "-floor=false", "-big-namespace=NaN"},
			refused: "-big-namespace must be a fraction, 0 <= f < 1, got NaN"},
		{name: "big namespace not a number at all", args: []string{"-namespaces", "8", "-floor=false", "-big-namespace=half"},
			refused: `invalid value "half" for flag -big-namespace`},
		{name: "big namespace below the even share", args: []string{"-namespaces", "8", "-floor=false", "-big-namespace=0.1"},
			refused: "-big-namespace 0.1 is below the even share 1/-namespaces (0.125)"},
		{name: "shard slots out of range", args: []string{"-shard-replicas", "2", "-shard-slots", "257", "-namespaces", "300", "-floor=false"},
			refused: "-shard-slots must be 1 to 256"},
		{name: "more shard replicas than slots", args: []string{"-shard-replicas", "1,8", "-shard-slots", "4", "-namespaces", "8", "-floor=false"},
			refused: "-shard-replicas 8 is more replicas than -shard-slots (4)"},
		{name: "shard replicas with a heap profile", args: []string{"-shard-replicas", "2", "-namespaces", "16", "-floor=false", "-heap-profile"},
			refused: "are for the idle window and the restarts, which the scale-out run (-shard-replicas) skips"},
		{name: "shard replicas with restarts", args: []string{"-shard-replicas", "2", "-namespaces", "16", "-floor=false", "-restarts=3"},
			refused: "are for the idle window and the restarts"},
		{name: "shard replicas with an idle window", args: []string{"-shard-replicas", "2", "-namespaces", "16", "-floor=false", "-idle=1m"},
			refused: "are for the idle window and the restarts"},
		{name: "shard replicas given their slots twice", args: []string{"-shard-replicas", "2", "-namespaces", "16", "-floor=false", "-controller-flag=-shard-slots=8"},
			refused: "the bench gives the replicas their slots itself"},
		{name: "shard replicas with leader election", args: []string{"-shard-replicas", "2", "-namespaces", "16", "-floor=false", "-controller-flag=--leader-elect"},
			refused: "the controller refuses -leader-elect beside -shard-slots"},
		{name: "shard replicas with leader election, spelt 1", args: []string{"-shard-replicas", "2", "-namespaces", "16", "-floor=false", "-controller-flag=-leader-elect=1"},
			refused: "the controller refuses -leader-elect beside -shard-slots"},
		{name: "shard replicas with one namespace", args: []string{"-shard-replicas", "2", "-namespaces", "16", "-floor=false", "-controller-flag=-namespace=a"},
			refused: "refuses -namespace beside -shard-slots"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var printed strings.Builder
			_, err := parseFlags(tc.args, !tc.foreignKubeconf, &printed)
			if err == nil {
				t.Fatalf("parseFlags(%q) accepted", tc.args)
			}
			got := err.Error()
			if errors.Is(err, errFlagSyntax) {
				got = printed.String()
			}
			if !strings.Contains(got, tc.refused) {
				t.Errorf("parseFlags(%q): got %q, want it to say %q", tc.args, got, tc.refused)
			}
		})
	}

	for _, tc := range []struct {
		name            string
		args            []string
		foreignKubeconf bool
		check           func(options) bool
	}{
		{name: "defaults", check: func(o options) bool {
			return slices.Equal(o.ns, []int{200}) && o.replicas == 1 && o.repeat == 1 && o.concurrency == 50 &&
				o.namespaces == 1 && o.floor && o.deploymentController && o.idle == 10*time.Minute+10*time.Second &&
				o.shardReplicas == nil && o.shardSlots == 0 && o.namespaceNames == namesSequential && o.bigNamespace == 0 &&
				slices.Equal(o.controller.args, []string{"-profiling"})
		}},
		{name: "memory per Foo", args: []string{"-n", "1000, 10000", "-replicas", "0"}, check: func(o options) bool {
			return slices.Equal(o.ns, []int{1000, 10000}) && o.replicas == 0
		}},
		{name: "the 1-minute resync sets the idle window", args: []string{"-controller-flag=-resync-period=1m"}, check: func(o options) bool {
			return o.idle == 70*time.Second && slices.Equal(o.controller.args, []string{"-resync-period=1m", "-profiling"})
		}},
		{name: "restarted with other settings, then idle", args: []string{"-restart-env=GOGC=off", "-restart-env", "GOMEMLIMIT=1GiB", "-restart-idle", "5m"},
			check: func(o options) bool {
				return o.restartIdle == 5*time.Minute && slices.Equal(o.restartEnv, []string{"GOGC=off", "GOMEMLIMIT=1GiB"}) && o.controller.env == nil
			}},
		{name: "two settings of the start-up compared", args: []string{"-restarts", "6", "-restart-env=GOGC=off", "-restart-env=GOMEMLIMIT=540MiB", "-restart-alt-env=GOMEMLIMIT=800MiB"},
			check: func(o options) bool {
				return o.restarts == 6 && slices.Equal(o.restartEnv, []string{"GOGC=off", "GOMEMLIMIT=540MiB"}) && slices.Equal(o.restartAltEnv, []string{"GOMEMLIMIT=800MiB"})
			}},
		{name: "a namespace deleted", args: []string{"-namespaces", "2", "-floor=false", "-delete-namespace"}, check: func(o options) bool {
			return o.deleteNamespace && o.namespaces == 2
		}},
		{name: "an idle window given wins", args: []string{"-n", "50", "-idle", "20s", "-controller-flag=-resync-period=1m"}, check: func(o options) bool {
			return o.idle == 20*time.Second
		}},
		{name: "100,000 without the Deployment controller", args: []string{"-n", "10000,100000", "-namespaces", "100",
			"-floor=false", "-replicas", "0", "-deployment-controller=false", "-heap-profile", "-cpu-profile", "-timeout", "45m"},
			check: func(o options) bool {
				return o.namespaces == 100 && !o.floor && !o.deploymentController && o.heapProfile && o.cpuProfile && o.timeout == 45*time.Minute
			}},
		{name: "many namespaces on a foreign control plane", args: []string{"-namespaces", "100", "-floor=false"}, foreignKubeconf: true,
			check: func(o options) bool { return o.namespaces == 100 }},
		{name: "the scale-out run", args: []string{"-n", "10000", "-namespaces", "64", "-floor=false", "-replicas", "0",
			"-deployment-controller=false", "-shard-replicas", "1, 2,4"},
			check: func(o options) bool {
				return slices.Equal(o.shardReplicas, []int{1, 2, 4}) && o.shardSlots == 16 && o.namespaces == 64
			}},
		{name: "the scale-out run with one big namespace of letters", args: []string{"-n", "10000", "-namespaces", "64", "-floor=false",
			"-shard-replicas", "1,2,4", "-namespace-names=letters", "-big-namespace=0.5"},
			check: func(o options) bool {
				return o.namespaceNames == namesLetters && o.bigNamespace == 0.5 && o.shardSlots == 16
			}},
		{name: "names spread for one leader", args: []string{"-namespaces", "100", "-floor=false", "-namespace-names", "spread"},
			check: func(o options) bool { return o.namespaceNames == namesSpread && o.equalSlots() == 16 }},
		{name: "a big namespace of the even share", args: []string{"-namespaces", "8", "-floor=false", "-big-namespace=0.125"},
			check: func(o options) bool { return o.bigNamespace == 0.125 }},
		{name: "the scale-out run with its slots", args: []string{"-n", "300", "-namespaces", "8", "-floor=false", "-shard-replicas", "2",
			"-shard-slots", "8", "-controller-flag=-leader-elect-retry-period=1s", "-controller-flag=-leader-elect=false", "-burst-profile=20s"},
			check: func(o options) bool { return slices.Equal(o.shardReplicas, []int{2}) && o.shardSlots == 8 }},
		{name: "replicas at the API's maximum, n given twice", args: []string{"-replicas", "100", "-n", "10", "-n", "20", "-controller-env=GOGC=50"},
			check: func(o options) bool {
				return o.replicas == 100 && slices.Equal(o.ns, []int{10, 20}) && slices.Equal(o.controller.env, []string{"GOGC=50"})
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var printed strings.Builder
			o, err := parseFlags(tc.args, !tc.foreignKubeconf, &printed)
			if err != nil {
				t.Fatalf("parseFlags(%q): %v (%s)", tc.args, err, printed.String())
			}
			if !tc.check(o) {
				t.Errorf("parseFlags(%q) = %+v", tc.args, o)
			}
		})
	}
}

// TestSampleMax: the workqueue's depth is read from the start (a short
// run's peak is in its first second), the highest read is kept, failed
// reads are skipped, and stopping twice is harmless.
func TestSampleMax(t *testing.T) {
	t.Run("first read at once", func(t *testing.T) {
		read := make(chan struct{}, 1)
		stop := sampleMax(time.Hour, func() (float64, error) {
			select {
			case read <- struct{}{}:
			default:
			}
			return 42, nil
		})
		<-read // with an hour's interval, only the read at the start
		if got := stop(); got != 42 {
			t.Errorf("max = %v, want 42", got)
		}
	})
	t.Run("highest of the reads", func(t *testing.T) {
		reads := []struct {
			v   float64
			err error
		}{{3, nil}, {0, nil}, {900, errors.New("scrape failed")}, {17, nil}, {5, nil}}
		var i int
		consumed := make(chan struct{})
		stop := sampleMax(time.Millisecond, func() (float64, error) {
			if i == len(reads) {
				close(consumed)
			}
			if i >= len(reads) {
				i++
				return 0, nil
			}
			r := reads[i]
			i++
			return r.v, r.err
		})
		<-consumed
		if got := stop(); got != 17 {
			t.Errorf("max = %v, want 17 (900 was a failed read)", got)
		}
		if got := stop(); got != 17 {
			t.Errorf("second stop = %v, want 17", got)
		}
	})
}

func TestCPUFigures(t *testing.T) {
	t0 := time.Unix(100, 0)
	a := cpuMark{at: t0, busy: 100, cpu: map[string]float64{"kube-apiserver": 10, "etcd": 2, "controller": 1, "gone": 5}}
	b := cpuMark{at: t0.Add(4 * time.Second), busy: 107.6, cpu: map[string]float64{"kube-apiserver": 15, "etcd": 3, "controller": 3, "late": 9}}
	got := cpuFigures("burst", a, b)
	want := figures{
		"burst_cpu_kube_apiserver_s": 5, "burst_cpu_etcd_s": 1, "burst_cpu_controller_s": 2,
		// 8 CPU seconds in 4 s of wall time; "gone" exited and "late"
		// started within the phase: neither counts.
		"burst_cpu_cores": 2,
		// 7.6 busy seconds of the machine's in 4 s: 1.9 cores.
		"burst_machine_cores": 1.9,
	}
	if len(got) != len(want) {
		t.Errorf("cpuFigures = %v, want %v", got, want)
	}
	for k, v := range want {
		if math.Abs(got[k]-v) > 1e-9 {
			t.Errorf("cpuFigures[%s] = %v, want %v", k, got[k], v)
		}
	}
	lines := cpuSummary(got)
	if len(lines) != 1 || lines[0] != "burst    2.00 cores: kube_apiserver 5.0s, controller 2.0s, etcd 1.0s; the machine 1.90 cores busy (others: -0.10)" {
		t.Errorf("cpuSummary = %q", lines)
	}
}

// TestStatCPU: utime and stime are read past the command name, which may
// hold spaces and parentheses.
// The CPU counters are procfs's reading of /proc: this process's own
// grows while it spins, and the machine's busy time with it. It spins until
// it has used 0.1 s of CPU (on a loaded machine that takes longer than
// 0.1 s), at most 10 s.
func TestCPUSeconds(t *testing.T) {
	before, err1 := pidCPUSeconds(os.Getpid())
	busy, err2 := machineBusy()
	if err := errors.Join(err1, err2); err != nil {
		t.Fatal(err)
	}
	after := before
	for deadline := time.Now().Add(10 * time.Second); after-before < 0.1 && time.Now().Before(deadline); {
		for end := time.Now().Add(10 * time.Millisecond); time.Now().Before(end); {
		}
		var err error
		if after, err = pidCPUSeconds(os.Getpid()); err != nil {
			t.Fatal(err)
		}
	}
	busyAfter, err := machineBusy()
	if err != nil {
		t.Fatal(err)
	}
	if after-before < 0.1 || busyAfter-busy < after-before-0.02 {
		t.Errorf("this process's CPU grew %.3f s in 10 s of spinning (want 0.1), the machine's busy time %.3f s (want at least as much)", after-before, busyAfter-busy)
	}
}

// TestAlternative: restarts alternate, and the last one, which the idle
// window and the restarted heap are measured on, has the usual settings.
func TestAlternative(t *testing.T) {
	for n, want := range map[int]string{2: "au", 3: "uau", 6: "auauau"} {
		var got strings.Builder
		for i := range n {
			if alternative(i, n) {
				got.WriteByte('a')
			} else {
				got.WriteByte('u')
			}
		}
		if got.String() != want {
			t.Errorf("restarts of %d: %s, want %s (a: alternative, u: usual)", n, got.String(), want)
		}
	}
}
