package shard

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/sharding"
)

// sequential names as people write them, which equal ranges crowd.
func sequential(prefix string, n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("%s%03d", prefix, i))
	}
	return out
}

func letters() []string {
	var out []string
	for c := 'a'; c <= 'z'; c++ {
		out = append(out, "team-"+string(c))
	}
	return out
}

func pointsOf(names []string, weight func(i int) int) []point {
	counts := map[string]int{}
	for i, n := range names {
		counts[n] = weight(i)
	}
	return summarize(counts, 1<<20)
}

// TestProposeSpreadsSequentialNames: the names equal ranges crowd into one
// or two slots spread evenly over balanced ones, as far as whole
// namespaces allow.
func TestProposeSpreadsSequentialNames(t *testing.T) {
	for _, tc := range []struct {
		name     string
		names    []string
		slots    Slots
		maxSkew  float64 // of the balanced layout
		minEqual float64 // the equal layout's skew is at least this
	}{
		{"s-0…s-63 in 16", func() []string {
			var s []string
			for i := range 64 {
				s = append(s, fmt.Sprintf("s-%d", i))
			}
			return s
		}(), 16, 1.0, 13},
		{"ns000…ns099 in 16", sequential("ns", 100), 16, 1.12, 10},
		{"team-a…team-z in 16", letters(), 16, 1.24, 10},
		{"team-a…team-z in 4", letters(), 4, 1.08, 3},
		{"prod-000…prod-999 in 64", sequential("prod-", 1000), 64, 1.03, 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pts := pointsOf(tc.names, func(int) int { return 100 })
			eq := EqualLayout(tc.slots)
			if s := skewOf(eq.weights(pts)); s < tc.minEqual {
				t.Fatalf("equal ranges: skew %.2f, want at least %.2f (the crowding this fixes)", s, tc.minEqual)
			} else {
				t.Logf("equal ranges: skew %.2f", s)
			}
			l, err := propose(tc.slots, pts)
			if err != nil {
				t.Fatal(err)
			}
			if s := skewOf(l.weights(pts)); s > tc.maxSkew {
				t.Errorf("balanced: skew %.3f, want at most %.3f; weights %v", s, tc.maxSkew, l.weights(pts))
			}
			// Every namespace is in exactly the slot Of says, and the API
			// server's selector for that slot matches it.
			for _, ns := range tc.names {
				i := l.Of(ns)
				sel, err := l.Selector([]int{i})
				if err != nil {
					t.Fatal(err)
				}
				if !matches(t, sel, ns) {
					t.Fatalf("%s: slot %d's selector %s does not match it", ns, i, sel)
				}
				if i > 0 {
					other, _ := l.Selector([]int{i - 1})
					if matches(t, other, ns) {
						t.Fatalf("%s: slot %d's selector matches it too", ns, i-1)
					}
				}
			}
		})
	}
}

func matches(t *testing.T, sel sharding.Selector, ns string) bool {
	t.Helper()
	h := "0x" + sharding.HashField(ns)
	for _, r := range sel.Requirements() {
		if !sharding.HexLess(h, r.Start) && sharding.HexLess(h, r.End) {
			return true
		}
	}
	return false
}

// TestProposeOneBigNamespace: a namespace is never split, so one holding
// most Foos fills a slot alone, and the rest share the others.
func TestProposeOneBigNamespace(t *testing.T) {
	names := sequential("ns", 64)
	pts := pointsOf(names, func(i int) int {
		if i == 10 {
			return 6300 // half of all Foos
		}
		return 100
	})
	l, err := propose(16, pts)
	if err != nil {
		t.Fatal(err)
	}
	w := l.weights(pts)
	big := l.Of(names[10])
	if w[big] != 6300 {
		t.Errorf("the big namespace's slot holds %d, want it alone (6300); weights %v", w[big], w)
	}
	// The other 6,300 Foos over the 15 other slots, none left nearly
	// empty beside the big one: 420 each at best, in whole namespaces of
	// 100.
	for i, x := range w {
		if i != big && (x > 500 || x < 300) {
			t.Errorf("slot %d holds %d of the small namespaces' Foos, want 300 to 500; weights %v", i, x, w)
		}
	}
	// Worth one re-cut from equal ranges, never a second: the same load
	// gains nothing more.
	p := Policy{Skew: 1.5, MinLoad: 160}
	next, _, _, ok := p.decide(EqualLayout(16), pts)
	if !ok || next.ID() != l.ID() {
		t.Fatalf("from equal ranges: re-cut %v to %s, want to %s", ok, next.ID(), l.ID())
	}
	if _, before, after, ok := p.decide(l, pts); ok {
		t.Errorf("re-cut again (skew %.2f → %.2f): the big namespace cannot be split", before, after)
	}
}

// TestDecideHysteresis: nothing is re-cut below the skew, below the
// minimum load, or for an improvement under gain; a drift past the skew is.
func TestDecideHysteresis(t *testing.T) {
	names := sequential("ns", 64)
	even := pointsOf(names, func(int) int { return 10 })
	p := Policy{Skew: 1.5, MinLoad: 160}
	l, _, _, ok := p.decide(EqualLayout(16), even)
	if !ok {
		t.Fatal("equal ranges over sequential names were not re-cut")
	}
	if _, _, _, ok := p.decide(l, even); ok {
		t.Error("re-cut a balanced layout")
	}
	if _, _, _, ok := (Policy{}).decide(EqualLayout(16), even); ok {
		t.Error("re-cut with the policy off")
	}
	if _, _, _, ok := (Policy{Skew: 1.5, MinLoad: 10000}).decide(EqualLayout(16), even); ok {
		t.Error("re-cut below the minimum load")
	}
	// A drift: new Foos in a few namespaces.
	grown := pointsOf(names, func(i int) int {
		if i < 4 {
			return 40
		}
		return 10
	})
	if s := skewOf(l.weights(grown)); s <= 1.5 {
		t.Fatalf("the drift made skew %.2f, the test needs past 1.5", s)
	}
	if _, _, _, ok := p.decide(l, grown); !ok {
		t.Error("a drift past the skew was not re-cut")
	}
	small := pointsOf(names, func(i int) int {
		if i < 4 {
			return 13
		}
		return 10
	})
	if _, _, _, ok := p.decide(l, small); ok {
		t.Error("a drift below the skew was re-cut")
	}
}

// TestLayoutRoundTrip: a layout written to its Lease reads back the same,
// equal cuts are the equal layout whatever wrote them, and what is not a
// layout is refused.
func TestLayoutRoundTrip(t *testing.T) {
	pts := pointsOf(letters(), func(int) int { return 7 })
	l, err := propose(8, pts)
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseLayout(8, l.FormatCuts())
	if err != nil || back.ID() != l.ID() || back.IsEqual() {
		t.Fatalf("read back %v %q, want %q", err, back.ID(), l.ID())
	}
	if !strings.HasPrefix(l.ID(), "8.") {
		t.Errorf("ID %q, want the slot count first", l.ID())
	}
	eq, err := ParseLayout(8, EqualLayout(8).FormatCuts())
	if err != nil || !eq.IsEqual() || eq.ID() != "8" {
		t.Errorf("equal cuts read back as %q (%v), want the equal layout, ID 8", eq.ID(), err)
	}
	for _, bad := range []string{"", "0x10", "zz,0x2,0x3,0x4,0x5,0x6,0x7", "0x5,0x4,0x6,0x7,0x8,0x9,0xa", "0x0,0x4,0x6,0x7,0x8,0x9,0xa"} {
		if _, err := ParseLayout(8, bad); err == nil {
			t.Errorf("%q parsed as a layout of 8", bad)
		}
	}
	// The equal layout agrees with Slots everywhere, its bounds included.
	for _, n := range []Slots{1, 3, 16, 256} {
		e := EqualLayout(n)
		for i := range int(n) {
			for _, h := range []uint64{n.Start(i), n.Start(i) + 1, n.Start(i) - 1} {
				if e.ofHash(h) != n.ofHash(h) {
					t.Fatalf("%d slots, hash %#x: layout says %d, Slots %d", n, h, e.ofHash(h), n.ofHash(h))
				}
			}
		}
	}
}

// TestProposeRandom: for random loads, the cuts are valid and tile the
// space, and no slot exceeds the mean by more than the heaviest point.
func TestProposeRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		n := Slots(1 + r.IntN(64))
		var pts []point
		for range 1 + r.IntN(300) {
			pts = append(pts, point{Hash: r.Uint64(), Weight: 1 + r.IntN(50)})
		}
		for range r.IntN(4) { // a few big namespaces now and then
			pts = append(pts, point{Hash: r.Uint64(), Weight: 200 + r.IntN(5000)})
		}
		l, err := propose(n, pts)
		if len(pts) < 2 {
			continue
		}
		if err != nil {
			t.Fatalf("%d slots, %d points: %v", n, len(pts), err)
		}
		w := l.weights(pts)
		total, heaviest := 0, 0
		for _, p := range pts {
			total += p.Weight
			heaviest = max(heaviest, p.Weight)
		}
		if slices.Max(w) > total/int(n)+2*heaviest {
			t.Fatalf("%d slots: heaviest slot %d, mean %d, heaviest point %d", n, slices.Max(w), total/int(n), heaviest)
		}
	}
}

// TestLoadAnnotation: what a member publishes reads back; what is
// malformed is refused, not half-read.
func TestLoadAnnotation(t *testing.T) {
	in := map[int][]point{0: {{Hash: 0xabc, Weight: 3}, {Hash: 1 << 63, Weight: 40}}, 5: {}}
	layout, out, err := parseLoad(formatLoad("16.00ff", in))
	if err != nil || layout != "16.00ff" || len(out) != 2 || len(out[5]) != 0 || !slices.Equal(out[0], in[0]) {
		t.Fatalf("read back %q %v %v", layout, out, err)
	}
	for _, bad := range []string{"", "16 x=1:2", "16 0=zz:1", "16 0=1:-2", "16 0=1"} {
		if _, _, err := parseLoad(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	// summarize bounds the points, and keeps every Foo.
	counts := map[string]int{}
	for i, ns := range sequential("ns", 5000) {
		counts[ns] = 1 + i%7
	}
	pts := summarize(counts, 128)
	if len(pts) > 2*128+1 {
		t.Errorf("%d points for a budget of 128", len(pts))
	}
	if sum(pts) != slotTotal(counts) {
		t.Errorf("summary holds %d Foos, want %d", sum(pts), slotTotal(counts))
	}
}
