package lanes

import (
	"slices"
	"strings"
	"testing"

	"k8s.io/client-go/util/workqueue"
)

// TestQueue drives twoLanes directly with the calls a workqueue makes: "+k"
// pushes k, "!k" expedites k, "~k" touches k, "-" pops (the popped keys
// are compared with want).
func TestQueue(t *testing.T) {
	tests := []struct {
		name string
		ops  string
		want string
	}{
		{"one lane is FIFO", "+a +b +c - - -", "abc"},
		{"an expedited push goes first", "+a +b !c +c - - -", "cab"},
		{"expedited keys keep their order", "+a !b +b !c +c - - -", "bca"},
		{"a touched expedited key moves ahead", "+a +b +c !c ~c - - -", "cab"},
		{"a touch without a mark changes nothing", "+a +b +c ~c - - -", "abc"},
		{"a mark is used once", "!a +a - +a +b - -", "aab"},
		{"a touch of a key already fast keeps its place", "!a +a !b +b !a ~a - -", "ab"},
		{"a mark waits for the next push", "!a +b +a - -", "ab"},
		{"a popped key pushed again is not stale", "+a +b !a ~a - +a - -", "aba"},
		{"a stale entry is skipped", "+a +b !a ~a - - +c -", "abc"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := newTwoLanes[string]()
			var got strings.Builder
			for op := range strings.FieldsSeq(tt.ops) {
				switch op[0] {
				case '+':
					q.Push(op[1:])
				case '!':
					q.Expedite(op[1:])
				case '~':
					q.Touch(op[1:])
				case '-':
					got.WriteString(q.Pop())
				}
			}
			if got.String() != tt.want {
				t.Errorf("popped %q, want %q", got.String(), tt.want)
			}
			if q.Len() != 0 {
				t.Errorf("Len() = %d after popping everything, want 0", q.Len())
			}
		})
	}
}

// TestInWorkqueue checks the lanes inside a real client-go workqueue
// (NewWorkqueue's three layers): its deduplication and its rule that a key
// being processed is not handed out again until Done still hold.
func TestInWorkqueue(t *testing.T) {
	q := NewWorkqueue("lanes-test", workqueue.DefaultTypedControllerRateLimiter[string](), nil)
	defer q.ShutDown()
	expedite := q.AddExpedited
	get := func() string {
		key, _ := q.Get()
		return key
	}

	for _, k := range []string{"a", "b", "c", "d"} {
		q.Add(k)
	}
	a := get()        // a is being processed
	expedite("d")     // waiting in the slow lane: moves ahead
	expedite("a")     // being processed: comes back fast when Done
	expedite("d")     // twice is still once
	if q.Len() != 3 { // b, c, d
		t.Fatalf("Len() = %d, want 3", q.Len())
	}
	var order []string
	order = append(order, get()) // d
	q.Done(a)                    // a is stored again, in the fast lane
	for q.Len() > 0 {
		key := get()
		order = append(order, key)
		q.Done(key)
	}
	if want := []string{"d", "a", "b", "c"}; !slices.Equal(order, want) {
		t.Errorf("handed out %v after a, want %v", order, want)
	}
}
