package main

import (
	"math"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8sfake "k8s.io/client-go/kubernetes/fake"

	samplev1beta1 "example.com/foo-controller/pkg/apis/samplecontroller/v1beta1"
	foofake "example.com/foo-controller/pkg/generated/clientset/versioned/fake"
	"example.com/foo-controller/pkg/shard"
)

// TestNamespaceNames: each style names as many distinct, valid namespaces
// as asked, the same every time, as people would write them; the
// sequential ones, as the docs warn, crowd into few of 16 equal slots,
// and the spread ones fill them all.
func TestNamespaceNames(t *testing.T) {
	for _, tc := range []struct {
		style      string
		count      int
		first, end string
		maxSlots   int // of 16 equal slots, at most this many used (0: not checked)
		minSlots   int // at least this many
	}{
		{namesSequential, 64, "bench-00", "bench-63", 2, 0},
		{namesSequential, 100, "bench-000", "bench-099", 2, 0},
		{namesSequential, 10, "bench-00", "bench-09", 2, 0},
		{namesSequential, 9, "bench-0", "bench-8", 2, 0},
		{namesSequential, 1000, "bench-0000", "bench-0999", 0, 0},
		{namesLetters, 26, "team-a", "team-z", 2, 0},
		{namesLetters, 64, "team-a", "team-bl", 0, 0},
		{namesLetters, 703, "team-a", "team-aaa", 0, 0},
		{namesSpread, 64, "bench-", "", 0, 16},
		{namesSpread, 16, "bench-", "", 0, 16},
	} {
		names, err := namespaceNames(tc.style, tc.count, 16)
		if err != nil {
			t.Fatalf("%s × %d: %v", tc.style, tc.count, err)
		}
		if len(names) != tc.count {
			t.Fatalf("%s × %d: %d names", tc.style, tc.count, len(names))
		}
		if tc.style == namesSpread {
			if !strings.HasPrefix(names[0], tc.first) {
				t.Errorf("%s × %d: first %q", tc.style, tc.count, names[0])
			}
		} else if names[0] != tc.first || names[len(names)-1] != tc.end {
			t.Errorf("%s × %d: %q to %q, want %q to %q", tc.style, tc.count, names[0], names[len(names)-1], tc.first, tc.end)
		}
		if len(slices.Compact(slices.Sorted(slices.Values(names)))) != tc.count {
			t.Errorf("%s × %d: names repeat", tc.style, tc.count)
		}
		used := map[int]bool{}
		for _, n := range names {
			used[shard.Slots(16).Of(n)] = true
			if len(n) > 63 || strings.Trim(n, "abcdefghijklmnopqrstuvwxyz0123456789-") != "" {
				t.Errorf("%s: %q is not a namespace name", tc.style, n)
			}
		}
		if (tc.maxSlots > 0 && len(used) > tc.maxSlots) || len(used) < tc.minSlots {
			t.Errorf("%s × %d: %d slots of 16 used", tc.style, tc.count, len(used))
		}
		again, _ := namespaceNames(tc.style, tc.count, 16)
		if !slices.Equal(again, names) {
			t.Errorf("%s × %d: other names the second time", tc.style, tc.count)
		}
	}
	if _, err := namespaceNames("random", 4, 16); err == nil || !strings.Contains(err.Error(), `"random"`) {
		t.Errorf("an unknown style: %v", err)
	}
}

func TestLetters(t *testing.T) {
	for i, want := range map[int]string{0: "a", 1: "b", 25: "z", 26: "aa", 27: "ab", 51: "az", 52: "ba", 701: "zz", 702: "aaa"} {
		if got := letters(i); got != want {
			t.Errorf("letters(%d) = %q, want %q", i, got, want)
		}
	}
}

// TestFooCounts: the split always sums to N exactly (converge waits for
// every Foo it created), the big namespace holds round(f·N) and the
// others differ by one at most; with no big namespace, what round-robin
// gives.
func TestFooCounts(t *testing.T) {
	for _, tc := range []struct {
		n, m int
		big  float64
		want []int // nil: only the rules above
	}{
		{10, 1, 0, []int{10}},
		{10, 3, 0, []int{4, 3, 3}},
		{10000, 64, 0, nil},
		{10000, 4, 0.5, []int{5000, 1667, 1667, 1666}},
		{10, 3, 0.34, []int{3, 4, 3}}, // the even share, rounded: not above the others
		{7, 3, 0.5, []int{4, 2, 1}},   // 3.5 rounds up; the rest 3 over 2
		{100, 64, 0.99, nil},          // 99 in the first, 1 left for 63 namespaces
		{100000, 100, 0.9, nil},
		{3, 10, 0.5, nil}, // fewer Foos than namespaces
		{1, 2, 0.6, []int{1, 0}},
	} {
		got := fooCounts(tc.n, tc.m, tc.big)
		sum := 0
		for _, c := range got {
			sum += c
		}
		if len(got) != tc.m || sum != tc.n {
			t.Errorf("fooCounts(%d, %d, %v) = %v: %d namespaces, %d Foos", tc.n, tc.m, tc.big, got, len(got), sum)
		}
		if tc.want != nil && !slices.Equal(got, tc.want) {
			t.Errorf("fooCounts(%d, %d, %v) = %v, want %v", tc.n, tc.m, tc.big, got, tc.want)
		}
		rest := got
		if tc.big > 0 {
			if want := int(math.Round(tc.big * float64(tc.n))); got[0] != want {
				t.Errorf("fooCounts(%d, %d, %v): %d in the first, want %d", tc.n, tc.m, tc.big, got[0], want)
			}
			rest = got[1:]
		}
		if slices.Max(rest)-slices.Min(rest) > 1 {
			t.Errorf("fooCounts(%d, %d, %v) = %v: the others are not even", tc.n, tc.m, tc.big, got)
		}
	}
}

// TestPlaceFoos: each namespace gets the Foos fooCounts gives it; without
// a big namespace in round-robin as before; with one, spread over the
// creates, so that the big one is still filling at the end of the burst
// and a small one already at its start.
func TestPlaceFoos(t *testing.T) {
	spaces := []string{"a", "b", "c", "d"}
	p := placeFoos(spaces, 10, 0)
	if got := strings.Join(p.of, ""); got != "abcdabcdab" {
		t.Errorf("round-robin: %s", got)
	}
	for _, tc := range []struct {
		n   int
		big float64
	}{{10000, 0.5}, {10, 0.25}, {1000, 0.9}, {7, 0.5}} {
		p := placeFoos(spaces, tc.n, tc.big)
		if len(p.of) != tc.n || !slices.Equal(p.spaces, spaces) {
			t.Fatalf("placeFoos(%d, %v): %d Foos over %v", tc.n, tc.big, len(p.of), p.spaces)
		}
		count := map[string]int{}
		for _, ns := range p.of {
			count[ns]++
		}
		want := fooCounts(tc.n, len(spaces), tc.big)
		for j, ns := range spaces {
			if count[ns] != want[j] {
				t.Errorf("placeFoos(%d, %v): %d Foos in %s, want %d", tc.n, tc.big, count[ns], ns, want[j])
			}
		}
		if tc.n >= 1000 {
			tenth := tc.n / 10
			for _, part := range [][]string{p.of[:tenth], p.of[len(p.of)-tenth:]} {
				if !slices.Contains(part, "a") || !slices.Contains(part, "d") {
					t.Errorf("placeFoos(%d, %v): a tenth of the creates without a or d", tc.n, tc.big)
				}
			}
		}
	}
}

// TestDescribeNamespaces: the tables' titles say how the Foos were spread.
func TestDescribeNamespaces(t *testing.T) {
	for _, tc := range []struct {
		h    header
		want string
	}{
		{header{Namespaces: 1}, "in one namespace"},
		{header{Namespaces: 64, NamespaceNames: namesSequential}, "over 64 namespaces (bench-00 to bench-63)"},
		{header{Namespaces: 30, NamespaceNames: namesLetters, BigNamespace: 0.5}, "over 30 namespaces (team-a to team-ad; 50% of the Foos in the first)"},
		{header{Namespaces: 64, NamespaceNames: namesSpread}, "over 64 namespaces (names spread over equal slots)"},
	} {
		if got := describeNamespaces(tc.h); got != tc.want {
			t.Errorf("describeNamespaces(%+v) = %q, want %q", tc.h, got, tc.want)
		}
	}
}

// TestCheckClean: the bench refuses to start over an earlier bench's
// namespaces (by name or by label: team-a does not start "bench-") and
// over a namespace of the run's names that is not a bench's, which it
// would fill and then delete; otherwise it counts the Foos outside the
// bench, which the replicas hold too.
func TestCheckClean(t *testing.T) {
	ns := func(name string, labels map[string]string) *corev1.Namespace {
		return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	}
	foo := &samplev1beta1.Foo{ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: "web"}}
	spaces := []string{"team-a", "team-b"}
	for _, tc := range []struct {
		name    string
		objects []runtime.Object
		foos    []runtime.Object
		refused string
		others  int
	}{
		{name: "clean", objects: []runtime.Object{ns("default", nil), ns("prod", nil)}, foos: []runtime.Object{foo}, others: 1},
		{name: "an earlier bench's, by name", objects: []runtime.Object{ns("bench-07", nil)}, refused: "from an earlier bench are still there (bench-07"},
		{name: "an earlier bench's, by label", objects: []runtime.Object{ns("team-c", map[string]string{benchLabel: fieldMgr})},
			refused: "from an earlier bench are still there (team-c"},
		{name: "one of the run's names, someone else's", objects: []runtime.Object{ns("team-b", nil)},
			refused: "1 of the run's namespaces exist already, and not from a bench (team-b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := clients{kube: k8sfake.NewClientset(tc.objects...), foo: foofake.NewClientset(tc.foos...)}
			others, err := checkClean(t.Context(), c, spaces)
			if tc.refused != "" {
				if err == nil || !strings.Contains(err.Error(), tc.refused) {
					t.Errorf("checkClean: %v, want it to say %q", err, tc.refused)
				}
				return
			}
			if err != nil || others != tc.others {
				t.Errorf("checkClean = %d, %v; want %d, nil", others, err, tc.others)
			}
		})
	}
}

// TestNewNamespaces: what an early end deletes is what the run created,
// labelled as the bench's, never a namespace that was there before it.
func TestNewNamespaces(t *testing.T) {
	kube := k8sfake.NewClientset(
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-b"}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "default"}},
	)
	var made []string
	err := newNamespaces(t.Context(), clients{kube: kube}, []string{"team-a", "team-b", "team-c"}, &made)
	if err == nil || !slices.Equal(made, []string{"team-a"}) {
		t.Fatalf("newNamespaces: made %v, err %v; want [team-a] and an error for team-b", made, err)
	}
	a, err := kube.CoreV1().Namespaces().Get(t.Context(), "team-a", metav1.GetOptions{})
	if err != nil || a.Labels[benchLabel] != fieldMgr {
		t.Errorf("team-a: %v, labels %v", err, a.GetLabels())
	}
}
