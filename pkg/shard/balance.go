package shard

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// point is some load at a place in the hash space: the Foos of one
// namespace, or of namespaces adjacent in hash order, Hash being the first
// one's. A cut at Hash puts the whole point on its right.
type point struct {
	Hash   uint64
	Weight int
}

// summarize turns a slot's Foo counts per namespace into at most about
// 2×budget points, sorted by hash: namespaces adjacent in hash order are
// merged while the merged weight stays under total/budget, and a heavier
// namespace is a point of its own. Cuts can then fall only between
// points, which costs at most total/budget of balance, while what a
// member publishes stays bounded whatever the number of namespaces.
func summarize(counts map[string]int, budget int) []point {
	type ns struct {
		h uint64
		w int
	}
	all := make([]ns, 0, len(counts))
	total := 0
	for name, w := range counts {
		if w > 0 {
			all = append(all, ns{hash(name), w})
			total += w
		}
	}
	slices.SortFunc(all, func(a, b ns) int { return cmp.Compare(a.h, b.h) })
	limit := max(1, total/max(1, budget))
	var out []point
	for _, n := range all {
		if k := len(out) - 1; k >= 0 && out[k].Weight+n.w <= limit {
			out[k].Weight += n.w
			continue
		}
		out = append(out, point{Hash: n.h, Weight: n.w})
	}
	return out
}

// weights is the load of each slot of l.
func (l Layout) weights(points []point) []int {
	w := make([]int, l.n)
	for _, p := range points {
		w[l.ofHash(p.Hash)] += p.Weight
	}
	return w
}

// skewOf is the heaviest slot's load over the mean (1 when even; 0 when
// there is no load).
func skewOf(weights []int) float64 {
	total, heaviest := 0, 0
	for _, w := range weights {
		total += w
		heaviest = max(heaviest, w)
	}
	if total == 0 {
		return 0
	}
	return float64(heaviest) * float64(len(weights)) / float64(total)
}

// propose cuts n slots so that each holds about an equal share of the
// points' load. A point is never split (a namespace is never split): one
// heavier than the mean of what the others leave over the slots they
// leave fills a slot alone, and the others, in the runs of light points
// between heavy ones, share the remaining slots by weight (each run at
// least one), cut within a run where its load to the left comes nearest
// to k/m of the run's. Points may be in any order. With fewer points than
// slots, the extra slots are empty ranges beside the last cuts.
func propose(n Slots, points []point) (Layout, error) {
	pts := merge(points)
	total := 0
	for _, p := range pts {
		total += p.Weight
	}
	if total == 0 || len(pts) < 2 {
		return Layout{}, fmt.Errorf("shard: no load to balance (%d points)", len(pts))
	}
	// The heavy points: found again after each, as the mean they are
	// measured against falls.
	heavy := map[int]bool{}
	for changed := true; changed; {
		changed = false
		light, slots := total, int(n)-len(heavy)
		for j := range heavy {
			light -= pts[j].Weight
		}
		for j, p := range pts {
			if !heavy[j] && slots > 1 && float64(p.Weight)*float64(slots) > float64(light) {
				heavy[j], changed = true, true
				slots--
			}
		}
	}
	// Segments in hash order: each heavy point alone, and each run of
	// light points between them.
	type segment struct {
		pts    []point
		weight int
		slots  int
		heavy  bool
	}
	var segs []segment
	lightWeight := 0
	for j := 0; j < len(pts); {
		if heavy[j] {
			segs = append(segs, segment{pts: pts[j : j+1], weight: pts[j].Weight, slots: 1, heavy: true})
			j++
			continue
		}
		sg := segment{}
		k := j
		for k < len(pts) && !heavy[k] {
			sg.weight += pts[k].Weight
			k++
		}
		sg.pts = pts[j:k]
		lightWeight += sg.weight
		segs = append(segs, sg)
		j = k
	}
	runs := len(segs) - len(heavy)
	lightSlots := int(n) - len(heavy)
	if runs > lightSlots || lightWeight == 0 {
		// Not a slot for every run (a rare mix of heavy and light
		// points): cut the whole load evenly instead.
		return proposeEven(n, pts, total)
	}
	// Each run at least one slot, the rest by weight, largest remainder
	// first.
	given := runs
	want := make([]float64, len(segs))
	for i := range segs {
		if segs[i].heavy {
			continue
		}
		want[i] = float64(segs[i].weight) * float64(lightSlots) / float64(lightWeight)
		segs[i].slots = 1
	}
	for ; given < lightSlots; given++ {
		best := -1
		for i := range segs {
			if !segs[i].heavy && (best < 0 || want[i]-float64(segs[i].slots) > want[best]-float64(segs[best].slots)) {
				best = i
			}
		}
		segs[best].slots++
	}
	var cuts []uint64
	for i, sg := range segs {
		if i > 0 {
			cuts = append(cuts, sg.pts[0].Hash)
		}
		if sg.slots > 1 {
			cuts = append(cuts, cutRun(sg.pts, sg.slots, sg.weight)...)
		}
	}
	return layoutFrom(n, cuts)
}

// proposeEven cuts n slots at k/n of the whole load, whatever the points.
func proposeEven(n Slots, pts []point, total int) (Layout, error) {
	return layoutFrom(n, cutRun(pts, int(n), total))
}

// cutRun returns the m-1 cuts of points (sorted, total their load) into m
// slots: cut k at the point where the load to its left comes nearest to
// k/m of the whole. With fewer points than slots, cuts repeat (empty
// slots, made distinct by layoutFrom).
func cutRun(pts []point, m, total int) []uint64 {
	if len(pts) < 2 {
		cuts := make([]uint64, m-1)
		for k := range cuts {
			cuts[k] = pts[len(pts)-1].Hash + 1
		}
		return cuts
	}
	left := make([]int, len(pts)+1)
	for j, p := range pts {
		left[j+1] = left[j] + p.Weight
	}
	cuts := make([]uint64, 0, m-1)
	j := 1
	for k := 1; k < m; k++ {
		target := float64(k) * float64(total) / float64(m)
		for j+1 < len(pts) && absDiff(float64(left[j+1]), target) <= absDiff(float64(left[j]), target) {
			j++
		}
		cuts = append(cuts, pts[j].Hash)
	}
	return cuts
}

// layoutFrom makes cuts valid and returns their layout: equal cuts (a
// point worth several slots, or too few points) become empty slots, each
// cut at least one above the one before, with room left below 2^64 for
// the ones after.
func layoutFrom(n Slots, cuts []uint64) (Layout, error) {
	for k := range cuts {
		if k > 0 && cuts[k] <= cuts[k-1] {
			cuts[k] = cuts[k-1] + min(1, ^uint64(0)-cuts[k-1])
		}
	}
	for k := len(cuts) - 1; k >= 0; k-- {
		limit := ^uint64(0) - uint64(len(cuts)-1-k)
		if k < len(cuts)-1 {
			limit = min(limit, cuts[k+1]-1)
		}
		cuts[k] = max(min(cuts[k], limit), 1)
	}
	return newLayout(n, cuts)
}

func absDiff(a, b float64) float64 {
	if a > b {
		return a - b
	}
	return b - a
}

// merge sorts points by hash and adds up those at one hash.
func merge(points []point) []point {
	pts := slices.Clone(points)
	slices.SortFunc(pts, func(a, b point) int { return cmp.Compare(a.Hash, b.Hash) })
	out := pts[:0]
	for _, p := range pts {
		if k := len(out) - 1; k >= 0 && out[k].Hash == p.Hash {
			out[k].Weight += p.Weight
			continue
		}
		out = append(out, p)
	}
	return out
}

// Policy is when a member re-balances (see Member.rebalance).
type Policy struct {
	// Skew is the heaviest slot's load over the mean past which the
	// layout is re-cut; 0 never re-balances.
	Skew float64
	// MinLoad is the load (Foos) below which nothing is re-cut: a few
	// Foos say little about where the many will be.
	MinLoad int
}

// gain is how much better a new layout must be (its skew times gain below
// the current one's) to be worth a hand-over of every slot: without it,
// a load that no layout can balance (one namespace with most Foos) would
// be re-cut again and again for a sliver.
const gain = 1.2

// Validate rejects a skew no re-cut could satisfy: below gain, a cut that
// balances the load perfectly would still not be better enough.
func (p Policy) Validate() error {
	if p.Skew != 0 && p.Skew < gain {
		return fmt.Errorf("a re-balance skew must be 0 (this replica never re-cuts) or at least %v (a re-cut must gain that much); got %v", gain, p.Skew)
	}
	return nil
}

// decide returns the layout to move to from cur, given the load of every
// slot of cur, or false to stay: only past the policy's skew, with enough
// load, and when the proposal is better by gain.
func (p Policy) decide(cur Layout, points []point) (Layout, float64, float64, bool) {
	if p.Skew <= 0 {
		return Layout{}, 0, 0, false
	}
	total := 0
	for _, pt := range points {
		total += pt.Weight
	}
	now := skewOf(cur.weights(points))
	if total < p.MinLoad || now <= p.Skew {
		return Layout{}, now, 0, false
	}
	next, err := propose(cur.N(), points)
	if err != nil || next.ID() == cur.ID() {
		return Layout{}, now, 0, false
	}
	then := skewOf(next.weights(points))
	if then*gain > now {
		return Layout{}, now, then, false
	}
	return next, now, then, true
}

// slotLoad counts the Foos of each namespace in one slot a member runs; the
// slot's informer keeps it (Add), and the member publishes a summary of
// it once it is Ready (its cache synced), for the member that re-cuts.
type slotLoad struct {
	mu     sync.Mutex
	counts map[string]int
	ready  bool
}

// Add counts delta Foos in namespace ns.
func (l *slotLoad) Add(ns string, delta int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.counts == nil {
		l.counts = map[string]int{}
	}
	if l.counts[ns] += delta; l.counts[ns] <= 0 {
		delete(l.counts, ns)
	}
}

// Ready marks the counts complete: the slot's cache has synced.
func (l *slotLoad) Ready() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ready = true
}

// Total is the Foos counted.
func (l *slotLoad) Total() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := 0
	for _, w := range l.counts {
		t += w
	}
	return t
}

// snapshot returns the counts, and false until Ready.
func (l *slotLoad) snapshot() (map[string]int, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.counts), l.ready
}

// A member's load annotation: its layout's ID, then each slot it runs as
// "slot=hash:weight,hash:weight" (hashes in hex), space-separated. Only
// slots whose cache has synced appear; a slot with no Foo appears empty
// ("3=").
func formatLoad(layout string, slots map[int][]point) string {
	var b strings.Builder
	b.WriteString(layout)
	for _, slot := range slices.Sorted(maps.Keys(slots)) {
		fmt.Fprintf(&b, " %d=", slot)
		for i, p := range slots[slot] {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "%x:%d", p.Hash, p.Weight)
		}
	}
	return b.String()
}

// parseLoad reads formatLoad's annotation; a malformed one is an error
// (and the member that wrote it is not counted as covering its slots).
func parseLoad(s string) (layout string, slots map[int][]point, err error) {
	fields := strings.Fields(s)
	if len(fields) == 0 {
		return "", nil, fmt.Errorf("shard: empty load")
	}
	slots = map[int][]point{}
	for _, f := range fields[1:] {
		k, v, ok := strings.Cut(f, "=")
		slot, err := strconv.Atoi(k)
		if !ok || err != nil || slot < 0 {
			return "", nil, fmt.Errorf("shard: load %q: bad slot", f)
		}
		pts := []point{}
		if v != "" {
			for _, e := range strings.Split(v, ",") {
				hs, ws, ok := strings.Cut(e, ":")
				h, err1 := strconv.ParseUint(hs, 16, 64)
				w, err2 := strconv.Atoi(ws)
				if !ok || err1 != nil || err2 != nil || w < 0 {
					return "", nil, fmt.Errorf("shard: load %q: bad point %q", f, e)
				}
				pts = append(pts, point{Hash: h, Weight: w})
			}
		}
		slots[slot] = pts
	}
	return fields[0], slots, nil
}
