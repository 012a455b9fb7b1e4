package corrections

import (
	"testing"
	"time"
)

func TestReserve(t *testing.T) {
	t0 := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }

	tests := []struct {
		name string
		// steps: generation and time of each request, and the wanted wait.
		steps []step
	}{
		{"burst is immediate", []step{
			{1, at(0), 0}, {1, at(0), 0}, {1, at(0), 0},
		}},
		{"after the burst, one per period", []step{
			{1, at(0), 0}, {1, at(0), 0}, {1, at(0), 0},
			{1, at(0), time.Second},
			{1, at(400 * time.Millisecond), 600 * time.Millisecond},
			{1, at(time.Second), 0},
			{1, at(time.Second), time.Second},
		}},
		{"a refused request costs nothing", []step{
			{1, at(0), 0}, {1, at(0), 0}, {1, at(0), 0},
			{1, at(0), time.Second}, {1, at(0), time.Second}, {1, at(0), time.Second},
			{1, at(time.Second), 0},
		}},
		{"a new generation starts afresh", []step{
			{1, at(0), 0}, {1, at(0), 0}, {1, at(0), 0},
			{1, at(0), time.Second},
			{2, at(0), 0}, {2, at(0), 0}, {2, at(0), 0},
			{2, at(0), time.Second},
		}},
		{"quiet time refills the bucket", []step{
			{1, at(0), 0}, {1, at(0), 0}, {1, at(0), 0},
			{1, at(3 * time.Second), 0}, {1, at(3 * time.Second), 0}, {1, at(3 * time.Second), 0},
			{1, at(3 * time.Second), time.Second},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := New[string](time.Second, 3)
			for i, s := range tc.steps {
				if got := l.Reserve("ns/foo", s.generation, s.now).Wait; got != s.want {
					t.Fatalf("step %d (generation %d at +%v): wait %v, want %v",
						i, s.generation, s.now.Sub(t0), got, s.want)
				}
			}
		})
	}
}

type step struct {
	generation int64
	now        time.Time
	want       time.Duration
}

func TestKeysAreIndependentAndForgotten(t *testing.T) {
	now := time.Now()
	l := New[string](time.Minute, 1)
	if l.Reserve("a", 1, now).Wait != 0 || l.Reserve("b", 1, now).Wait != 0 {
		t.Fatal("each key has its own burst")
	}
	if l.Reserve("a", 1, now).Wait == 0 {
		t.Fatal("a's burst is spent")
	}
	if l.Len() != 2 {
		t.Fatalf("Len = %d, want 2", l.Len())
	}
	l.Forget("a")
	if l.Len() != 1 || l.Reserve("a", 1, now).Wait != 0 {
		t.Fatal("a forgotten key starts with a full bucket")
	}
}

func TestContested(t *testing.T) {
	now := time.Now()
	l := New[string](time.Second, 1)
	want := func(d Decision, contested, first bool) {
		t.Helper()
		if d.Contested != contested || d.FirstRefusal != first {
			t.Fatalf("got %+v, want contested=%v first refusal=%v", d, contested, first)
		}
	}
	want(l.Reserve("a", 1, now), false, false)                  // the burst
	want(l.Reserve("a", 1, now), true, true)                    // refused: a fight begins
	want(l.Reserve("a", 1, now), true, false)                   // refused again: said already
	want(l.Reserve("a", 1, now.Add(time.Second)), true, false)  // allowed, still a fight
	want(l.Reserve("a", 2, now.Add(time.Second)), false, false) // the owner changed: afresh
}
