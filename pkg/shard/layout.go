package shard

import (
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/sharding"
)

// Layout is where a group's slots begin: n ranges of the hash space,
// slot i covering [start(i), start(i+1)), the last one up to 2^64.
//
// Equal ranges (EqualLayout, Slots) are where a group starts. They do not
// spread namespaces named in sequence: the API server's FNV-1a leaves the
// high bits, which pick an equal slot, nearly untouched by a name's last
// characters, so "team-a" to "team-z" all fall in one slot of 16
// (TestSequentialNamesCrowd). The hash cannot change; the cuts can. A
// balanced layout (propose) puts them between the namespaces that exist,
// weighted by their Foos, and is stored in the group's layout Lease so
// that every member cuts the same way (docs/sharding.md, "Balanced
// slots").
type Layout struct {
	n    Slots
	cuts []uint64 // n-1 strictly increasing starts of slots 1..n-1, none 0
	id   string
}

// EqualLayout is n equal ranges: the layout of a group whose layout Lease
// is absent (or unreadable). Its ID is the slot count alone, as the
// Leases of a group were named before layouts existed.
func EqualLayout(n Slots) Layout {
	cuts := make([]uint64, 0, max(int(n)-1, 0))
	for i := 1; i < int(n); i++ {
		cuts = append(cuts, n.Start(i))
	}
	return Layout{n: n, cuts: cuts, id: strconv.Itoa(int(n))}
}

// newLayout returns the layout of n slots starting at cuts (slots 1 to
// n-1; slot 0 starts at 0). Cuts must be strictly increasing and above 0,
// so that no slot is empty of hashes and the ranges tile the space.
func newLayout(n Slots, cuts []uint64) (Layout, error) {
	if err := n.Validate(); err != nil {
		return Layout{}, err
	}
	if len(cuts) != int(n)-1 {
		return Layout{}, fmt.Errorf("shard: %d slots need %d cuts, got %d", int(n), int(n)-1, len(cuts))
	}
	for i, c := range cuts {
		if c == 0 || (i > 0 && c <= cuts[i-1]) {
			return Layout{}, errors.New("shard: cuts must be strictly increasing and above 0")
		}
	}
	if eq := EqualLayout(n); slices.Equal(eq.cuts, cuts) {
		return eq, nil
	}
	h := fnv.New64a()
	for _, c := range cuts {
		_, _ = fmt.Fprintf(h, "%x,", c)
	}
	// The ID names the slots' Leases and labels members: two different
	// layouts must never share one, or their overlapping slots could be
	// held at once. 64 bits of the cuts' hash make that a non-event.
	return Layout{n: n, cuts: slices.Clone(cuts), id: fmt.Sprintf("%d.%016x", int(n), h.Sum64())}, nil
}

// ParseLayout reads a layout as FormatCuts wrote it.
func ParseLayout(n Slots, s string) (Layout, error) {
	var cuts []uint64
	if s != "" {
		for _, f := range strings.Split(s, ",") {
			c, err := strconv.ParseUint(strings.TrimPrefix(f, "0x"), 16, 64)
			if err != nil {
				return Layout{}, fmt.Errorf("shard: cut %q: %w", f, err)
			}
			cuts = append(cuts, c)
		}
	}
	return newLayout(n, cuts)
}

// FormatCuts writes the layout's cuts for its Lease: "0x…,0x…".
func (l Layout) FormatCuts() string {
	parts := make([]string, len(l.cuts))
	for i, c := range l.cuts {
		parts[i] = fmt.Sprintf("0x%016x", c)
	}
	return strings.Join(parts, ",")
}

// ID names the layout in Lease names and labels: the slot count for equal
// ranges, the count and a hash of the cuts otherwise ("16.1f…").
func (l Layout) ID() string { return l.id }

// N is the slot count.
func (l Layout) N() Slots { return l.n }

// IsEqual reports whether these are equal ranges.
func (l Layout) IsEqual() bool { return l.id == strconv.Itoa(int(l.n)) }

// start is slot i's first hash.
func (l Layout) start(i int) uint64 {
	if i == 0 {
		return 0
	}
	return l.cuts[i-1]
}

// Of returns the slot of a namespace.
func (l Layout) Of(namespace string) int { return l.ofHash(hash(namespace)) }

func (l Layout) ofHash(h uint64) int {
	// The number of cuts at or below h.
	i, found := slices.BinarySearch(l.cuts, h)
	if found {
		i++
	}
	return i
}

// Contains reports whether namespace falls in slot i.
func (l Layout) Contains(i int, namespace string) bool { return l.Of(namespace) == i }

// bound formats slot i's lower bound as the API server expects it: 0x and
// 16 lowercase hex digits, or 2^64 (17 digits) past the last slot.
func (l Layout) bound(i int) string {
	if i == int(l.n) {
		return "0x10000000000000000"
	}
	return fmt.Sprintf("0x%016x", l.start(i))
}

// Selector returns the shard selector (metav1.ListOptions.ShardSelector)
// for the given slots, adjacent slots merged into one range: the API server
// then sends only their objects. No slots is an error: the empty selector
// would mean everything to the API server.
func (l Layout) Selector(slots []int) (sharding.Selector, error) {
	if len(slots) == 0 {
		return nil, fmt.Errorf("shard: a selector for no slots would select everything")
	}
	for _, i := range slots {
		if i < 0 || i >= int(l.n) {
			return nil, fmt.Errorf("shard: slot %d of %d", i, int(l.n))
		}
	}
	s := slices.Clone(slots)
	slices.Sort(s)
	s = slices.Compact(s)
	var reqs []sharding.ShardRangeRequirement
	for i := 0; i < len(s); {
		j := i
		for j+1 < len(s) && s[j+1] == s[j]+1 {
			j++
		}
		reqs = append(reqs, sharding.ShardRangeRequirement{Key: hashKey, Start: l.bound(s[i]), End: l.bound(s[j] + 1)})
		i = j + 1
	}
	return sharding.NewSelector(reqs...), nil
}
