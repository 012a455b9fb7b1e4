package shard

import (
	"fmt"
	"maps"
	"slices"
	"testing"
)

func TestShare(t *testing.T) {
	for _, tc := range []struct {
		n       Slots
		members []string
		want    map[string]int
	}{
		{16, []string{"a"}, map[string]int{"a": 16}},
		{16, []string{"b", "a"}, map[string]int{"a": 8, "b": 8}},
		{16, []string{"c", "a", "b"}, map[string]int{"a": 6, "b": 5, "c": 5}},
		{3, []string{"a", "b", "c", "d"}, map[string]int{"a": 1, "b": 1, "c": 1, "d": 0}},
		// self not yet among the members it saw: counted all the same.
		{16, []string{"a"}, map[string]int{"b": 8}},
		{16, []string{"a", "a"}, map[string]int{"a": 16}},
	} {
		total := 0
		for self, want := range tc.want {
			got := Share(tc.n, tc.members, self)
			total += got
			if got != want {
				t.Errorf("Share(%d, %v, %q) = %d, want %d", tc.n, tc.members, self, got, want)
			}
		}
		everyone := slices.Compact(slices.Sorted(slices.Values(tc.members)))
		if slices.Equal(everyone, slices.Sorted(maps.Keys(tc.want))) && total != int(tc.n) {
			t.Errorf("Share(%d, %v): the members' shares add up to %d", tc.n, tc.members, total)
		}
	}
}

func TestRebalance(t *testing.T) {
	for _, tc := range []struct {
		held, free       []int
		share            int
		release, acquire []int
	}{
		{nil, []int{0, 1, 2, 3}, 4, nil, []int{0, 1, 2, 3}},
		{[]int{0, 1, 2, 3}, nil, 2, []int{2, 3}, nil},
		{[]int{3, 0, 2, 1}, nil, 3, []int{3}, nil},
		{[]int{0}, []int{5, 2, 7}, 3, nil, []int{2, 5}},
		{[]int{0, 1}, nil, 4, nil, []int{}},
		{[]int{0, 1}, []int{2}, 2, nil, []int{}},
	} {
		release, acquire := rebalanceShare(tc.held, tc.free, tc.share)
		if fmt.Sprint(release) != fmt.Sprint(tc.release) || fmt.Sprint(acquire) != fmt.Sprint(tc.acquire) {
			t.Errorf("rebalanceShare(%v, %v, %d) = release %v, acquire %v; want %v, %v",
				tc.held, tc.free, tc.share, release, acquire, tc.release, tc.acquire)
		}
	}
}
