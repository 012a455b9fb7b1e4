package shard

import (
	"strings"
	"testing"
)

// TestShardReady: a sharded replica is ready once it has joined its group
// and every slot it holds has synced caches; holding no slot (more
// replicas than slots, or waiting for members of another slot count to
// leave) is ready, as a leader-election standby is; a slot just taken,
// its controller not built or its caches not synced, is not.
func TestShardReady(t *testing.T) {
	yes := func() bool { return true }
	no := func() bool { return false }
	for _, tc := range []struct {
		name    string
		joined  bool
		synced  map[int]func() bool
		wantErr string
	}{
		{"joining", false, nil, "not a member of the shard group"},
		{"left or lost, slots still stopping", false, map[int]func() bool{1: yes}, "not a member"},
		{"joined, no slot (a standby)", true, nil, ""},
		{"every slot synced", true, map[int]func() bool{0: yes, 3: yes}, ""},
		{"slots just taken", true, map[int]func() bool{0: yes, 3: no, 1: no}, "caches of slots [1 3] not synced yet"},
	} {
		err := Ready(tc.joined, tc.synced)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%s: not ready: %v", tc.name, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%s: %v, want an error containing %q", tc.name, err, tc.wantErr)
		}
	}
}
