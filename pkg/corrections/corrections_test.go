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
			l := newKeyed(time.Second, 3)
			for i, s := range tc.steps {
				if got := correct(l, "ns/foo", s.generation, s.now).Wait; got != s.want {
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

func TestKeysAreIndependent(t *testing.T) {
	now := time.Now()
	l := newKeyed(time.Minute, 1)
	if correct(l, "a", 1, now).Wait != 0 || correct(l, "b", 1, now).Wait != 0 {
		t.Fatal("each key has its own burst")
	}
	if correct(l, "a", 1, now).Wait == 0 {
		t.Fatal("a's burst is spent")
	}
	if correct(l, "b", 1, now).Wait == 0 {
		t.Fatal("b's burst is spent too")
	}
}

func TestContested(t *testing.T) {
	now := time.Now()
	l := newKeyed(time.Second, 1)
	want := func(d Decision, contested, first bool) {
		t.Helper()
		if d.Contested != contested || d.FirstRefusal != first {
			t.Fatalf("got %+v, want contested=%v first refusal=%v", d, contested, first)
		}
	}
	want(correct(l, "a", 1, now), false, false)                  // the burst
	want(correct(l, "a", 1, now), true, true)                    // refused: a fight begins
	want(correct(l, "a", 1, now), true, false)                   // refused again: said already
	want(correct(l, "a", 1, now.Add(time.Second)), true, false)  // allowed, still a fight
	want(correct(l, "a", 2, now.Add(time.Second)), false, false) // the owner changed: afresh
}

// keyed is a Limiter with a Fight per key, as a caller keeps them.
type keyed struct {
	Limiter
	fights map[string]*Fight
}

func newKeyed(every time.Duration, burst int) *keyed {
	return &keyed{Limiter: New(every, burst), fights: map[string]*Fight{}}
}

func (k *keyed) fight(key string) *Fight {
	if k.fights[key] == nil {
		k.fights[key] = &Fight{}
	}
	return k.fights[key]
}

func (k *keyed) Reserve(key string, generation int64, now time.Time) Decision {
	return k.Limiter.Reserve(k.fight(key), generation, now)
}

// correct asks for a correction and, if allowed, makes it.
func correct(k *keyed, key string, generation int64, now time.Time) Decision {
	d := k.Reserve(key, generation, now)
	if d.Wait == 0 {
		k.Made(k.fight(key), generation, now)
	}
	return d
}

func TestOnlyCorrectionsMadeCount(t *testing.T) {
	now := time.Now()
	l := newKeyed(time.Second, 3)
	// A write refused ten times in a row, its retries a few milliseconds
	// apart as the workqueue's backoff begins: never made, never counted.
	for i := range 10 {
		if d := l.Reserve("a", 1, now.Add(time.Duration(i)*5*time.Millisecond)); d.Wait != 0 || d.Contested {
			t.Fatalf("request %d after %d writes not made: %+v, want an immediate, uncontested correction", i, i, d)
		}
	}
	// The whole burst is still there for corrections that are made.
	later := now.Add(100 * time.Millisecond)
	for i := range 3 {
		if d := correct(l, "a", 1, later); d.Wait != 0 {
			t.Fatalf("correction %d of the burst: %+v", i, d)
		}
	}
	if d := l.Reserve("a", 1, later); d.Wait == 0 {
		t.Fatal("after the burst made, a correction is held")
	}
}

func TestFights(t *testing.T) {
	t0 := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	type req struct {
		generation int64
		now        time.Time
		want       Decision
	}
	allowed := Decision{}
	fighting := Decision{Contested: true}
	refused := func(wait time.Duration, first bool) Decision {
		return Decision{Wait: wait, Contested: true, FirstRefusal: first}
	}
	// drain spends a fresh bucket of 3 at t and is refused once: a fight
	// begins.
	drain := func(t time.Time) []req {
		return []req{{1, t, allowed}, {1, t, allowed}, {1, t, allowed}, {1, t, refused(time.Second, true)}}
	}

	tests := []struct {
		name  string
		burst int
		reqs  []req
	}{
		{"a fight is over once no correction was needed for burst periods", 3, concat(
			drain(at(0)),
			[]req{{1, at(time.Second), fighting}}, // the refused one, made late
			// Quiet from +1s to +4s: the bucket is full, the fight over.
			[]req{{1, at(4 * time.Second), allowed}},
			// A new fight is a new refusal to report.
			[]req{{1, at(4 * time.Second), allowed}, {1, at(4 * time.Second), allowed}, {1, at(4 * time.Second), refused(time.Second, true)}},
		)},
		{"not a moment sooner", 3, concat(
			drain(at(0)),
			[]req{{1, at(time.Second), fighting}},
			[]req{{1, at(4*time.Second - time.Nanosecond), fighting}},
		)},
		{"a refused correction keeps the fight going until it is made", 1, []req{
			{1, at(0), allowed},
			{1, at(0), refused(time.Second, true)},
			// Exactly one window after the refusal, but this is the
			// correction it asked for: the same fight, not a new one.
			{1, at(time.Second), fighting},
			{1, at(time.Second), refused(time.Second, false)},
			{1, at(2 * time.Second), fighting},
			// Quiet for a period after the last correction: over.
			{1, at(3 * time.Second), allowed},
			{1, at(3 * time.Second), refused(time.Second, true)},
		}},
		// The bucket is full before the fight is over when the retry
		// comes late or not at all: the fight is counted from the last
		// correction needed, not from when the bucket refills.
		{"a fight outlasts its bucket refilling after a late retry", 3, concat(
			drain(at(0)),
			[]req{{1, at(2500 * time.Millisecond), fighting}}, // full at +4s
			[]req{{1, at(5500*time.Millisecond - time.Nanosecond), fighting}},
		)},
		{"a fight outlasts its bucket refilling without the retry", 3, concat(
			drain(at(0)), // full at +3s, the retry due at +1s
			[]req{{1, at(4*time.Second - time.Nanosecond), fighting}},
		)},
		{"a partly refilled bucket holds no more than burst", 3, []req{
			{1, at(0), allowed},
			{1, at(2 * time.Second), allowed}, {1, at(2 * time.Second), allowed}, {1, at(2 * time.Second), allowed},
			{1, at(2 * time.Second), refused(time.Second, true)},
		}},
		{"a new generation ends the fight at once", 3, concat(
			drain(at(0)),
			[]req{{2, at(0), allowed}, {2, at(0), allowed}, {2, at(0), allowed}, {2, at(0), refused(time.Second, true)}},
		)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := newKeyed(time.Second, tc.burst)
			for i, r := range tc.reqs {
				if got := correct(l, "uid-1", r.generation, r.now); got != r.want {
					t.Fatalf("request %d (generation %d at +%v): got %+v, want %+v",
						i, r.generation, r.now.Sub(t0), got, r.want)
				}
			}
		})
	}
}

func concat[T any](s ...[]T) []T {
	var all []T
	for _, x := range s {
		all = append(all, x...)
	}
	return all
}
