package shard

import "slices"

// Share is how many of n slots the member self should hold while the given
// members (the live ones, self among them) share them: n / len(members),
// and one more for the first n % len(members) of them in sorted order, so
// that every member computes the same division without talking to the
// others. Fairness only: which replica may write for a slot is decided by
// the slot's Lease, never by this count.
func Share(n Slots, members []string, self string) int {
	sorted := slices.Clone(members)
	if !slices.Contains(sorted, self) {
		sorted = append(sorted, self)
	}
	slices.Sort(sorted)
	sorted = slices.Compact(sorted)
	m := len(sorted)
	share := int(n) / m
	if slices.Index(sorted, self) < int(n)%m {
		share++
	}
	return share
}

// rebalanceShare decides what a member does next, from the slots it holds,
// the slots no live member holds, and its share: release its highest slots
// beyond the share (each only after its writes for it have stopped), or try
// to acquire the lowest free slots up to it. Both are empty once the member
// holds its share.
func rebalanceShare(held, free []int, share int) (release, acquire []int) {
	h := slices.Sorted(slices.Values(held))
	if extra := len(h) - share; extra > 0 {
		return h[len(h)-extra:], nil
	}
	f := slices.Sorted(slices.Values(free))
	want := min(share-len(h), len(f))
	return nil, f[:want]
}
