package webhook

import (
	"strings"
	"testing"
	"time"
)

// TestKeeperHoldsOffAFight: past writeBurst writes within writeWindow the
// keeper refuses to write, saying what to look for, and writes again once
// the window has passed.
func TestKeeperHoldsOffAFight(t *testing.T) {
	now := t0
	k := &Keeper{Now: func() time.Time { return now }}
	for i := range writeBurst {
		if err := k.mayWrite(); err != nil {
			t.Fatalf("write %d refused: %v", i+1, err)
		}
		now = now.Add(time.Second)
	}
	err := k.mayWrite()
	if err == nil || !strings.Contains(err.Error(), "another -webhook-secret") {
		t.Fatalf("write %d: %v, want it held off", writeBurst+1, err)
	}
	now = now.Add(writeWindow)
	if err := k.mayWrite(); err != nil {
		t.Errorf("after the window: %v", err)
	}
}
