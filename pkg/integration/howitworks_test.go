//go:build integration

package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	samplev1beta1 "example.com/foo-controller/pkg/apis/samplecontroller/v1beta1"
)

// TestHowItWorksLog keeps the log quoted in docs/how-it-works.md ("One
// Foo's journey, in the log") true: it runs the page's scenario against the
// controller built from this tree, with the page's flags, and checks that
// every log line the page quotes is one this run logged, in the page's
// order where the order is causal (see threadOf).
//
// To recapture the page, set FOO_HOWITWORKS_LOG to a file: the run's log
// (and what kubectl describe showed) is written there, from a controller
// built as the page builds it (go build, no race detector, so that the
// durations are those of a plain build).
func TestHowItWorksLog(t *testing.T) {
	t.Parallel()
	page := readHowItWorks(t, filepath.Join(repoRoot, "docs", "how-it-works.md"))
	bin := controllerBin
	capture := os.Getenv("FOO_HOWITWORKS_LOG")
	if capture != "" {
		bin = filepath.Join(t.TempDir(), "foo-controller")
		build := exec.Command("go", "build", "-o", bin, ".")
		build.Dir = repoRoot
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go build: %v\n%s", err, out)
		}
	}
	s := scenarioInExisting(t, privateCluster(t, clusterOptions{}), howItWorksNamespace)
	run := s.runHowItWorks(bin)
	if capture != "" {
		if err := os.WriteFile(capture, []byte(run.log+"\n--- kubectl describe foo "+howItWorksFoo+"\n"+run.describe), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("the run's log is in %s", capture)
	}
	t.Logf("the run: %s", summarizeHowItWorks(run.lines))
	for _, problem := range checkHowItWorks(page, run) {
		t.Error(problem)
	}
}

const (
	// pageNamespace is the namespace of the page's run; the scenario's
	// (howItWorksNamespace) is mapped to it where it is named in the
	// run's log.
	pageNamespace       = "default"
	howItWorksNamespace = "default"
	howItWorksFoo       = "example-foo"
	howItWorksSection   = "## One Foo's journey, in the log"
)

// The page's run has a control plane to itself (privateCluster): the
// controller runs cluster-wide, as the page runs it.
// howItWorksRun is what the page's scenario left: the controller's log,
// its klog lines normalized, and what kubectl describe showed before the
// delete.
type howItWorksRun struct {
	log      string
	lines    []klogLine
	describe string
	events   []string // the Events of kubectl describe, normalized
}

// runHowItWorks runs the page's scenario (its sh block): the controller
// cluster-wide with the page's flags, the example Foo, Ready, kubectl scale
// (the Foo's /scale subresource) to 3, 3 available, kubectl describe, the
// delete, the Deployment garbage-collected, SIGTERM. Where the page sleeps,
// the test waits until the controller has been quiet for 3 s: the key a
// deferred status write requeued (at most 2 s) has come back by then.
func (s *scenario) runHowItWorks(bin string) howItWorksRun {
	t := s.t
	p := s.launch(bin, nil,
		"-kubeconfig="+s.cl.ctrlKC, "-v=4", "-vmodule=round_trippers=6",
		"-metrics-bind-address=0", "-health-probe-bind-address=0")
	s.controller = p
	s.waitLog(p, `"Started workers"`, time.Minute)

	if out, err := s.kubectl("apply", "-f", filepath.Join(repoRoot, "artifacts", "examples", "example-foo.yaml")); err != nil {
		t.Fatalf("kubectl apply: %v: %s", err, out)
	}
	s.waitReady(howItWorksFoo, 1, 0, time.Minute)
	s.waitQuiet(p, 3*time.Second)

	if out, err := s.kubectl("scale", "foo/"+howItWorksFoo, "--replicas=3"); err != nil {
		t.Fatalf("kubectl scale: %v: %s", err, out)
	}
	s.waitReady(howItWorksFoo, 2, 3, time.Minute)
	s.waitQuiet(p, 3*time.Second)

	describe, err := s.kubectl("describe", "foo", howItWorksFoo)
	if err != nil {
		t.Fatalf("kubectl describe: %v: %s", err, describe)
	}
	if out, err := s.kubectl("delete", "foo", howItWorksFoo); err != nil {
		t.Fatalf("kubectl delete: %v: %s", err, out)
	}
	deleted, polls := time.Now(), 0
	s.eventually(time.Minute, "the garbage collector to delete the Deployment", func() (bool, string) {
		polls++
		_, err := s.getDeployment(howItWorksFoo)
		if apierrors.IsNotFound(err) {
			return true, ""
		}
		return false, fmt.Sprintf("the Deployment is still there (%v)", err)
	})
	if polls == 1 {
		t.Logf("the garbage collector had deleted the Deployment when kubectl delete returned")
	} else {
		t.Logf("the garbage collector deleted the Deployment %v after kubectl delete returned", time.Since(deleted).Round(100*time.Millisecond))
	}
	s.waitQuiet(p, time.Second)
	if err := p.stop(30 * time.Second); err != nil {
		t.Fatalf("the controller did not exit 0 on SIGTERM: %v\n%s", err, p.tail(30))
	}

	b, err := os.ReadFile(p.log)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "WARNING: DATA RACE") {
		t.Errorf("the race detector reported a data race (log: %s)", p.log)
	}
	run := howItWorksRun{log: string(b), describe: describe}
	for i, l := range strings.Split(string(b), "\n") {
		if kl, ok := parseKlog(l, i+1, s.ns); ok {
			run.lines = append(run.lines, kl)
		}
	}
	for _, l := range strings.Split(describe, "\n") {
		if e, ok := parseEventRow(l); ok {
			run.events = append(run.events, e)
		}
	}
	return run
}

// waitReady waits until the Foo is Ready at the generation, with available
// replicas (0: any).
func (s *scenario) waitReady(name string, generation int64, available int32, timeout time.Duration) {
	s.t.Helper()
	s.eventually(timeout, fmt.Sprintf("Foo %s Ready at generation %d", name, generation), func() (bool, string) {
		foo, err := s.getFoo(name)
		if err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(foo.Status.Conditions, samplev1beta1.ConditionReady)
		done := c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == generation &&
			foo.Status.ObservedGeneration == generation && (available == 0 || foo.Status.AvailableReplicas == available)
		return done, fmt.Sprintf("generation %d, status %+v", foo.Generation, foo.Status)
	})
}

// waitLog waits until the process's log holds substr.
func (s *scenario) waitLog(p *process, substr string, timeout time.Duration) {
	s.t.Helper()
	s.eventually(timeout, "the controller to log "+substr, func() (bool, string) {
		b, err := os.ReadFile(p.log)
		if err != nil {
			return false, err.Error()
		}
		return strings.Contains(string(b), substr), p.tail(3)
	})
}

// waitQuiet waits until the process has logged nothing for quiet.
func (s *scenario) waitQuiet(p *process, quiet time.Duration) {
	s.t.Helper()
	size, since := int64(-1), time.Now()
	s.eventually(30*time.Second+quiet, "the controller to log nothing for "+quiet.String(), func() (bool, string) {
		info, err := os.Stat(p.log)
		if err != nil {
			return false, err.Error()
		}
		if info.Size() != size {
			size, since = info.Size(), time.Now()
		}
		return time.Since(since) >= quiet, p.tail(3)
	})
}

// klogLine is one klog line, normalized: the header keeps the severity and
// the file name, not the time, the pid or the line number; the values that
// vary from run to run are replaced by "…" (see runVarying).
type klogLine struct {
	at   int    // line number: in the page, or in the run's log
	raw  string // as written
	file string // "sync.go"
	msg  string // the message, unquoted
	foo  string // the foo= value: the line is one of that Foo's syncs
	norm string // what is compared: "I sync.go] "Finished syncing Foo" foo=…"
}

var klogHeader = regexp.MustCompile(`^([IWEF])\d{4} \d{2}:\d{2}:\d{2}\.\d{6}\s+\d+ ([\w.-]+):\d+\] (.*)$`)

// runVarying are the values that vary from run to run, and what they
// become: durations, timings, the process identity and the build, the API
// server's host:port, the random timeout of a watch.
var runVarying = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`\b(duration|after|waited|giveUpIn|identity|version|commit)="[^"]*"`), `$1="…"`},
	{regexp.MustCompile(`\bmilliseconds=\d+`), `milliseconds=…`},
	{regexp.MustCompile(`\bhttps?://[^/"\s]+`), `https://…`},
	{regexp.MustCompile(`\btimeout=[0-9hms]+&timeoutSeconds=\d+`), `timeout=…&timeoutSeconds=…`},
	{regexp.MustCompile(`\bresourceVersion=\d+`), `resourceVersion=…`},
}

var (
	klogMessage = regexp.MustCompile(`^"((?:[^"\\]|\\.)*)"`)
	klogFoo     = regexp.MustCompile(`\bfoo="([^"]*)"`)
)

// parseKlog parses and normalizes one klog line. ns is the namespace of
// the run the line comes from: named where the page names its own, it is
// replaced by the page's.
func parseKlog(line string, at int, ns string) (klogLine, bool) {
	m := klogHeader.FindStringSubmatch(strings.TrimSpace(line))
	if m == nil {
		return klogLine{}, false
	}
	rest := m[3]
	if ns != pageNamespace {
		rest = strings.NewReplacer(`"`+ns+`/`, `"`+pageNamespace+`/`, "/namespaces/"+ns+"/", "/namespaces/"+pageNamespace+"/",
			"/namespaces/"+ns+`"`, "/namespaces/"+pageNamespace+`"`, "/namespaces/"+ns+"?", "/namespaces/"+pageNamespace+"?").Replace(rest)
	}
	for _, v := range runVarying {
		rest = v.re.ReplaceAllString(rest, v.with)
	}
	kl := klogLine{at: at, raw: line, file: m[2], norm: m[1] + " " + m[2] + "] " + rest}
	if mm := klogMessage.FindStringSubmatch(rest); mm != nil {
		kl.msg = mm[1]
	}
	if mm := klogFoo.FindStringSubmatch(rest); mm != nil {
		kl.foo = mm[1]
	}
	return kl, true
}

var eventRow = regexp.MustCompile(`^\s*(Normal|Warning)\s+(\S+)\s+\S+\s+(\S+)\s+(.*\S)\s*$`)

// parseEventRow parses a row of the Events table of kubectl describe,
// without its age: "Normal Created foo-controller Created Deployment …".
func parseEventRow(line string) (string, bool) {
	m := eventRow.FindStringSubmatch(line)
	if m == nil || m[2] == "------" {
		return "", false
	}
	return strings.Join(append(m[1:4], strings.Join(strings.Fields(m[4]), " ")), " "), true
}

// howItWorksPage is what the section quotes: its ```text blocks, each a
// list of klog lines and elisions ("…"), and the Events of kubectl
// describe.
type howItWorksPage struct {
	blocks [][]pageItem
	events []pageEvent
	bad    []string // lines that are none of these
}

type pageItem struct {
	elided bool // a "…" line: lines left out
	line   klogLine
}

type pageEvent struct {
	at  int
	row string
}

// readHowItWorks reads the ```text blocks of the page's section.
func readHowItWorks(t *testing.T, path string) howItWorksPage {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var page howItWorksPage
	in, block := false, -1
	for i, line := range strings.Split(string(b), "\n") {
		n := i + 1
		switch {
		case line == howItWorksSection:
			in = true
			continue
		case in && strings.HasPrefix(line, "## "):
			in = false
		}
		if !in {
			continue
		}
		switch {
		case block < 0 && line == "```text":
			page.blocks, block = append(page.blocks, nil), len(page.blocks)
		case block >= 0 && line == "```":
			block = -1
		case block >= 0 && strings.TrimSpace(line) == "…":
			page.blocks[block] = append(page.blocks[block], pageItem{elided: true})
		case block >= 0:
			if kl, ok := parseKlog(line, n, pageNamespace); ok {
				page.blocks[block] = append(page.blocks[block], pageItem{line: kl})
			} else if e, ok := parseEventRow(line); ok {
				page.events = append(page.events, pageEvent{at: n, row: e})
			} else if strings.TrimSpace(line) != "" {
				page.bad = append(page.bad, fmt.Sprintf("how-it-works.md:%d: neither a klog line, nor an Event row, nor \"…\": %q", n, line))
			}
		}
	}
	quoted := 0
	for _, b := range page.blocks {
		quoted += len(b)
	}
	if quoted == 0 {
		t.Fatalf("%s: no ```text block with log lines in the section %q", path, howItWorksSection)
	}
	return page
}

// The order the check enforces. Lines of one goroutine are in the order it
// logged them; lines of different goroutines interleave as they like. So
// the page's lines fall into threads, and within each thread the page's
// order (across the whole section) must be the run's:
//
//   - A Foo's syncs (lines with foo=): the workqueue hands a key to one
//     worker at a time, so its syncs never overlap. The lines of one sync,
//     up to its "Finished syncing Foo", must be exactly those of one sync
//     of the run, in order (a "…" inside or beside it allows lines left
//     out). The syncs that send a request or log a change come in the
//     page's order: each is caused by the one before (our apply, then the
//     Deployment controller, kwok...). Syncs that only defer or find
//     nothing to do need only occur: how many there are depends on how
//     many steps the Deployment controller and kwok take.
//   - The process's own start-up and shut-down: every line that is no
//     other thread's (run and main, the requests of startup.CheckAPI, the
//     controller's Run and its wait for the caches).
//   - Each informer's reflector: its lines that name the type, and its
//     watch request.
//
// Unordered: the Event requests (sent from the broadcaster's goroutine),
// "Exiting watch…" (it does not say which informer logs it) and client-go's
// feature gates (logged in no fixed order).
func threadOf(l klogLine) string {
	switch {
	case l.foo != "":
		return "syncs of " + l.foo
	case l.file == "envvar.go", strings.HasPrefix(l.msg, "Exiting watch"):
		return ""
	case l.file == "reflector.go":
		if m := reflectorType.FindStringSubmatch(l.norm); m != nil {
			return "informer of " + strings.ToLower(m[1]) + "s"
		}
		return ""
	case l.file == "round_trippers.go" && strings.Contains(l.norm, "/events"):
		return ""
	case l.file == "round_trippers.go" && strings.Contains(l.norm, "watch=true"):
		if m := watchedResource.FindStringSubmatch(l.norm); m != nil {
			return "informer of " + m[1]
		}
		return ""
	}
	return "process"
}

var (
	reflectorType   = regexp.MustCompile(`\btype="\*\w+\.(\w+)"`)
	watchedResource = regexp.MustCompile(`/(\w+)\?`)
)

// syncUnit is one sync's lines in a Foo's thread.
type syncUnit struct {
	lines []klogLine
	exact bool // whole, with nothing left out: must equal a sync of the run
}

func (u syncUnit) significant() bool {
	for _, l := range u.lines {
		if l.msg != "Finished syncing Foo" && l.msg != "Deferring a progress-only status update" {
			return true
		}
	}
	return false
}

func (u syncUnit) String() string {
	var b strings.Builder
	for _, l := range u.lines {
		fmt.Fprintf(&b, "\n\t\t%s", l.norm)
	}
	return b.String()
}

func (u syncUnit) how() string {
	if u.exact {
		return "exactly these lines"
	}
	return "these lines (among others)"
}

func (u syncUnit) matches(run syncUnit) bool {
	if u.exact {
		return slices.EqualFunc(u.lines, run.lines, func(a, b klogLine) bool { return a.norm == b.norm })
	}
	return isSubsequence(u.lines, run.lines)
}

func isSubsequence(want, have []klogLine) bool {
	i := 0
	for _, h := range have {
		if i < len(want) && want[i].norm == h.norm {
			i++
		}
	}
	return i == len(want)
}

// splitSyncs splits a Foo's lines into syncs, each ending with "Finished
// syncing Foo".
func splitSyncs(lines []klogLine) []syncUnit {
	var out []syncUnit
	cur := syncUnit{exact: true}
	for _, l := range lines {
		cur.lines = append(cur.lines, l)
		if l.msg == "Finished syncing Foo" {
			out = append(out, cur)
			cur = syncUnit{exact: true}
		}
	}
	if len(cur.lines) > 0 {
		out = append(out, cur)
	}
	return out
}

// pageSyncs splits the lines of a Foo's syncs in one ```text block into
// syncs. A sync is exact, quoted whole, unless a "…" comes before it (with
// none of its lines between) or among its lines (lines of that sync left
// out), or the block ends before its "Finished syncing Foo".
func pageSyncs(block []pageItem, foo string) []syncUnit {
	var out []syncUnit
	var cur syncUnit
	cut := false
	for _, it := range block {
		switch {
		case it.elided:
			cut, cur.exact = true, false
		case it.line.foo == foo:
			if len(cur.lines) == 0 {
				cur.exact = !cut
			}
			cut = false
			cur.lines = append(cur.lines, it.line)
			if it.line.msg == "Finished syncing Foo" {
				out = append(out, cur)
				cur = syncUnit{}
			}
		}
	}
	if len(cur.lines) > 0 {
		cur.exact = false
		out = append(out, cur)
	}
	return out
}

// checkHowItWorks returns what the page says that the run does not.
func checkHowItWorks(page howItWorksPage, run howItWorksRun) []string {
	problems := slices.Clone(page.bad)
	where := func(l klogLine) string { return fmt.Sprintf("how-it-works.md:%d", l.at) }

	// Every quoted line occurs in the run.
	logged := map[string]bool{}
	for _, l := range run.lines {
		logged[l.norm] = true
	}
	for _, b := range page.blocks {
		for _, it := range b {
			if it.elided || logged[it.line.norm] {
				continue
			}
			problems = append(problems, fmt.Sprintf("%s: not in the run's log:\n\t%s\n\t(normalized: %s)%s",
				where(it.line), it.line.raw, it.line.norm, closest(it.line, run.lines)))
		}
	}
	// Every quoted Event is one kubectl describe showed.
	for _, e := range page.events {
		if !slices.Contains(run.events, e.row) {
			problems = append(problems, fmt.Sprintf("how-it-works.md:%d: kubectl describe did not show the Event %q; it showed %q", e.at, e.row, run.events))
		}
	}
	if len(problems) > 0 {
		return problems // the order of lines that are not there says nothing
	}

	// Each thread's lines in the page's order.
	pageThreads := map[string][]klogLine{}
	var threads []string
	for _, b := range page.blocks {
		for _, it := range b {
			if th := threadOf(it.line); !it.elided && th != "" {
				if _, ok := pageThreads[th]; !ok {
					threads = append(threads, th)
				}
				pageThreads[th] = append(pageThreads[th], it.line)
			}
		}
	}
	runThreads := map[string][]klogLine{}
	for _, l := range run.lines {
		if th := threadOf(l); th != "" {
			runThreads[th] = append(runThreads[th], l)
		}
	}
	for _, th := range threads {
		have := runThreads[th]
		foo, isSyncs := strings.CutPrefix(th, "syncs of ")
		if !isSyncs {
			if p := firstOutOfOrder(pageThreads[th], have); p != nil {
				problems = append(problems, fmt.Sprintf("%s: in the run's log, not after the lines quoted before it in the thread of the %s:\n\t%s\n\tthe run's lines of that thread:%s",
					where(*p), th, p.raw, indent(have)))
			}
			continue
		}
		runSyncs := splitSyncs(have)
		next := 0
		for _, b := range page.blocks {
			for _, u := range pageSyncs(b, foo) {
				if !u.significant() {
					if !slices.ContainsFunc(runSyncs, u.matches) {
						problems = append(problems, fmt.Sprintf("%s: no sync of %s in the run logged %s:%s\n\tthe run's syncs:%s",
							where(u.lines[0]), foo, u.how(), u, syncsString(runSyncs)))
					}
					continue
				}
				i := slices.IndexFunc(runSyncs[next:], u.matches)
				if i < 0 {
					what := "after the sync quoted before it"
					if !slices.ContainsFunc(runSyncs, u.matches) {
						what = "at all"
					}
					problems = append(problems, fmt.Sprintf("%s: no sync of %s in the run (%s) logged %s:%s\n\tthe run's syncs:%s",
						where(u.lines[0]), foo, what, u.how(), u, syncsString(runSyncs)))
					continue
				}
				next += i + 1
			}
		}
	}
	return problems
}

// firstOutOfOrder returns the first of want that is not found, in order,
// in have.
func firstOutOfOrder(want, have []klogLine) *klogLine {
	i := 0
	for _, w := range want {
		for i < len(have) && have[i].norm != w.norm {
			i++
		}
		if i == len(have) {
			return &w
		}
		i++
	}
	return nil
}

// closest shows the run's lines with the same message that are most like
// a quoted line the run did not log.
func closest(l klogLine, run []klogLine) string {
	var same []string
	for _, r := range run {
		if r.msg == l.msg && !slices.Contains(same, r.norm) {
			same = append(same, r.norm)
		}
	}
	if len(same) == 0 {
		return "\n\tthe run logged no line with that message"
	}
	// Most alike: the longest common prefix and suffix together.
	alike := func(s string) int {
		a, b, n := l.norm, s, 0
		for n < len(a) && n < len(b) && a[n] == b[n] {
			n++
		}
		m := 0
		for m < len(a)-n && m < len(b)-n && a[len(a)-1-m] == b[len(b)-1-m] {
			m++
		}
		return n + m
	}
	slices.SortStableFunc(same, func(a, b string) int { return alike(b) - alike(a) })
	if len(same) > 2 {
		same = same[:2]
	}
	return "\n\tthe run's most alike:\n\t\t" + strings.Join(same, "\n\t\t")
}

func indent(lines []klogLine) string {
	var b strings.Builder
	for _, l := range lines {
		fmt.Fprintf(&b, "\n\t\t%s", l.norm)
	}
	return b.String()
}

func syncsString(units []syncUnit) string {
	var b strings.Builder
	for i, u := range units {
		fmt.Fprintf(&b, "\n\t\tsync %d:%s", i+1, strings.ReplaceAll(u.String(), "\n\t\t", "\n\t\t\t"))
	}
	return b.String()
}

// summarizeHowItWorks counts what the page's prose counts: syncs, applies,
// status writes, deferrals, Events, requests (in all, and from syncs).
func summarizeHowItWorks(lines []klogLine) string {
	var syncs, deployApplies, statusApplies, deferred, events, requests, fromSyncs int
	for _, l := range lines {
		switch l.msg {
		case "Finished syncing Foo":
			syncs++
		case "Deferring a progress-only status update":
			deferred++
		case "Response":
			requests++
			if l.foo != "" {
				fromSyncs++
			}
			switch {
			case strings.Contains(l.norm, "/events"):
				events++
			case strings.Contains(l.norm, `verb="PATCH"`) && strings.Contains(l.norm, "/deployments/"):
				deployApplies++
			case strings.Contains(l.norm, `verb="PATCH"`) && strings.Contains(l.norm, "/status?"):
				statusApplies++
			}
		}
	}
	return fmt.Sprintf("%d syncs, %d Deployment applies, %d status applies, %d Events, %d deferrals, %d requests (%d from syncs)",
		syncs, deployApplies, statusApplies, events, deferred, requests, fromSyncs)
}
