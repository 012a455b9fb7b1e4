package shard

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/sharding"
)

func mustSelector(t *testing.T, n Slots, slots ...int) sharding.Selector {
	t.Helper()
	s, err := n.Selector(slots)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestOfAgreesWithTheAPIServer: the slot Of gives a namespace is the one
// whose selector the API server's own matcher (apimachinery's sharding
// package, which kube-apiserver runs) lets its objects through, for
// namespaces at random and slot counts that do and do not divide 2^64.
func TestOfAgreesWithTheAPIServer(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []Slots{1, 2, 3, 7, 16, 100, 256} {
		for range 2000 {
			ns := fmt.Sprintf("ns-%x", r.Uint64())
			got := n.Of(ns)
			if got < 0 || got >= int(n) {
				t.Fatalf("%d slots: Of(%q) = %d", n, ns, got)
			}
			for i := range int(n) {
				sel := mustSelector(t, n, i)
				match, err := sel.Matches(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns}})
				if err != nil {
					t.Fatal(err)
				}
				if match != (i == got) {
					t.Fatalf("%d slots: namespace %q: Of says %d, slot %d's selector (%s) matches: %v", n, ns, got, i, sel, match)
				}
			}
		}
	}
}

// TestOfAtTheBoundaries: at every slot boundary, for every slot count from
// 1 to 256, the last hash before a slot's start belongs to the slot before
// and the start to the slot itself, by Of and by the API server's
// comparison (sharding.HexLess) of the selector's bounds. Random
// namespaces never land there: this is where floor instead of ceil would
// show.
func TestOfAtTheBoundaries(t *testing.T) {
	for n := Slots(1); n <= 256; n++ {
		for i := 1; i < int(n); i++ {
			start := n.Start(i)
			if got := n.ofHash(start); got != i {
				t.Fatalf("%d slots: hash %#x, slot %d's start, is in slot %d by Of", n, start, i, got)
			}
			if got := n.ofHash(start - 1); got != i-1 {
				t.Fatalf("%d slots: hash %#x, just before slot %d, is in slot %d by Of", n, start-1, i, got)
			}
			req := mustSelector(t, n, i).Requirements()[0]
			in := func(h uint64) bool {
				x := fmt.Sprintf("0x%016x", h)
				return !sharding.HexLess(x, req.Start) && sharding.HexLess(x, req.End)
			}
			if !in(start) || in(start-1) {
				t.Fatalf("%d slots: slot %d's selector [%s, %s) holds %#x: %v, %#x: %v", n, i, req.Start, req.End, start, in(start), start-1, in(start-1))
			}
		}
	}
}

// TestSlotsCoverTheHashSpace: slot 0 starts at 0, each slot starts after
// the one before, the last range ends at 2^64, and all slots together are
// one range over the whole space.
func TestSlotsCoverTheHashSpace(t *testing.T) {
	for n := Slots(1); n <= 256; n++ {
		if n.Start(0) != 0 {
			t.Errorf("%d slots start at %#x", n, n.Start(0))
		}
		for i := 1; i < int(n); i++ {
			if n.Start(i) <= n.Start(i-1) {
				t.Errorf("%d slots: slot %d starts at %#x, not after slot %d's %#x", n, i, n.Start(i), i-1, n.Start(i-1))
			}
		}
		if last := mustSelector(t, n, int(n)-1).Requirements()[0]; last.End != "0x10000000000000000" {
			t.Errorf("%d slots: the last ends at %s", n, last.End)
		}
		all := mustSelector(t, n, seq(int(n))...).Requirements()
		if len(all) != 1 || all[0].Start != "0x0000000000000000" || all[0].End != "0x10000000000000000" {
			t.Errorf("%d slots together: %v, want one range over the whole space", n, all)
		}
	}
	if got := Slots(4).Start(1); got != math.MaxUint64/4+1 {
		t.Errorf("4 slots: slot 1 starts at %#x", got)
	}
	if got := Slots(3).Start(1); got != math.MaxUint64/3+1 {
		t.Errorf("3 slots: slot 1 starts at %#x, want ceil(2^64/3)", got)
	}
}

func TestSelector(t *testing.T) {
	for _, tc := range []struct {
		slots []int
		want  string
	}{
		{[]int{0}, "shardRange(object.metadata.namespace, '0x0000000000000000', '0x4000000000000000')"},
		{[]int{3}, "shardRange(object.metadata.namespace, '0xc000000000000000', '0x10000000000000000')"},
		{[]int{2, 1}, "shardRange(object.metadata.namespace, '0x4000000000000000', '0xc000000000000000')"},
		{[]int{0, 3, 0}, "shardRange(object.metadata.namespace, '0x0000000000000000', '0x4000000000000000') || " +
			"shardRange(object.metadata.namespace, '0xc000000000000000', '0x10000000000000000')"},
	} {
		if got := mustSelector(t, 4, tc.slots...).String(); got != tc.want {
			t.Errorf("Selector(%v) = %q, want %q", tc.slots, got, tc.want)
		}
	}
	for _, bad := range [][]int{nil, {}, {4}, {-1}, {0, 9}} {
		if s, err := Slots(4).Selector(bad); err == nil {
			t.Errorf("Selector(%v) = %q, want an error", bad, s)
		}
	}
}

func TestValidate(t *testing.T) {
	for n, ok := range map[Slots]bool{0: false, -1: false, 1: true, 16: true, 256: true, 257: false} {
		if err := n.Validate(); (err == nil) != ok {
			t.Errorf("Slots(%d).Validate() = %v", n, err)
		}
	}
}

func seq(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

// TestSequentialNamesCrowd documents a property of the API server's hash
// that docs/sharding.md warns about: FNV-1a's high bits, which pick the
// slot, barely depend on a name's last characters, so namespaces named in
// sequence fall into few slots.
func TestSequentialNamesCrowd(t *testing.T) {
	const n = Slots(16)
	for _, tc := range []struct {
		format   string
		count    int
		maxSlots int
	}{
		{"prod-%03d", 100, 1},
		{"tenant-%d", 100, 2},
	} {
		used := map[int]int{}
		for i := range tc.count {
			used[n.Of(fmt.Sprintf(tc.format, i))]++
		}
		if len(used) > tc.maxSlots {
			t.Errorf("%q × %d: %d slots of 16 (%v); the docs say at most %d", tc.format, tc.count, len(used), used, tc.maxSlots)
		}
		t.Logf("%q × %d: slots %v", tc.format, tc.count, used)
	}
}
