package shard

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestOfAgreesWithTheAPIServer: the slot Of gives a namespace is the one
// whose selector the API server's own matcher (apimachinery's sharding
// package, which kube-apiserver runs) lets its objects through, for every
// slot count and for namespaces at random.
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
				match, err := n.Selector([]int{i}).Matches(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns}})
				if err != nil {
					t.Fatal(err)
				}
				if match != (i == got) {
					t.Fatalf("%d slots: namespace %q: Of says %d, slot %d's selector (%s) matches: %v",
						n, ns, got, i, n.Selector([]int{i}), match)
				}
			}
		}
	}
}

// TestSlotsCoverTheHashSpace: the ranges start at 0, end at 2^64, and each
// starts where the one before ends.
func TestSlotsCoverTheHashSpace(t *testing.T) {
	for _, n := range []Slots{1, 3, 16, 255, 256} {
		if n.Start(0) != 0 {
			t.Errorf("%d slots start at %#x", n, n.Start(0))
		}
		all := n.Selector(seq(int(n))).Requirements()
		if len(all) != 1 || all[0].Start != "0x0000000000000000" || all[0].End != "0x10000000000000000" {
			t.Errorf("%d slots together: %v, want one range over the whole space", n, all)
		}
		for i := 1; i < int(n); i++ {
			if n.Start(i) <= n.Start(i-1) {
				t.Errorf("%d slots: slot %d starts at %#x, not after slot %d's %#x", n, i, n.Start(i), i-1, n.Start(i-1))
			}
		}
	}
	if got := Slots(4).Start(1); got != math.MaxUint64/4+1 {
		t.Errorf("4 slots: slot 1 starts at %#x", got)
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
		{nil, ""},
	} {
		if got := Slots(4).Selector(tc.slots).String(); got != tc.want {
			t.Errorf("Selector(%v) = %q, want %q", tc.slots, got, tc.want)
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
