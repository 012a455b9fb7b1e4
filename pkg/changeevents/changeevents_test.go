package changeevents

import (
	"slices"
	"testing"
	"time"
)

// TestHeld: the first change after an edit is told at once, the rest of
// an interval together when it ends (the update before the scale, with
// counts); a change that follows no edit is told at once, after what is
// held.
func TestHeld(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	const interval = 2 * time.Second
	scale := func(from, to int32) Change { return Change{Object: "d", From: from, To: to} }
	update := func(f ...string) Change { return Change{Object: "d", Fields: f} }
	notes := func(evs []Event) []string {
		var out []string
		for _, e := range evs {
			out = append(out, e.Reason+": "+e.Note)
		}
		return out
	}
	var h Held
	want := func(step string, got []Event, wantNotes ...string) {
		t.Helper()
		if g := notes(got); !slices.Equal(g, wantNotes) {
			t.Errorf("%s: told %q, want %q", step, g, wantNotes)
		}
	}
	want("an edit's change is held", h.Tell("foo", scale(1, 2), true, t0))
	told, wait := h.Flush(interval, t0)
	want("the first is told at once", told, "Scaled: Scaled Deployment d from 1 to 2 replicas")
	if wait != 0 {
		t.Errorf("wait %v after telling, want 0", wait)
	}
	h.Tell("foo", scale(2, 3), true, t0.Add(time.Second))
	h.Tell("foo", update("image"), true, t0.Add(time.Second))
	h.Tell("foo", scale(3, 1), true, t0.Add(1500*time.Millisecond))
	h.Tell("foo", update("containerPort", "image"), true, t0.Add(1500*time.Millisecond))
	if told, wait := h.Flush(interval, t0.Add(time.Second)); told != nil || wait != time.Second {
		t.Errorf("within the interval: told %q, wait %v; want nothing, 1s", notes(told), wait)
	}
	if h.Subject() != "foo" {
		t.Errorf("Subject %v while Events are held, want the owner", h.Subject())
	}
	told, _ = h.Flush(interval, t0.Add(interval))
	want("the interval over", told,
		"Updated: Updated Deployment d: [image containerPort], through 2 updates in 1s",
		"Scaled: Scaled Deployment d from 2 to 1 replicas, through 2 scales in 1s")
	if h.Subject() != nil {
		t.Errorf("Subject %v with nothing held, want nil", h.Subject())
	}
	h.Tell("foo", scale(1, 5), true, t0.Add(interval+time.Second))
	want("no edit: at once, after what is held", h.Tell("foo", scale(9, 5), false, t0.Add(interval+time.Second)),
		"Scaled: Scaled Deployment d from 1 to 5 replicas", "Scaled: Scaled Deployment d from 9 to 5 replicas")
}
