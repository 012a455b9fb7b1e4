// Package eventsink lets a process wait, at shutdown, for the Events it is
// still sending.
//
// client-go's event broadcaster sends each Event from a goroutine of its
// own, behind the client's rate limiter; nothing in it waits for them. A
// controller that stops right after its last sync would cut those requests
// off and lose the Events of its last changes. Tracked counts the writes in
// flight so that shutdown can give them a bounded time to finish.
package eventsink

import (
	"context"
	"sync"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/client-go/tools/events"
)

// Tracked is an events.EventSink that counts its in-flight writes. (Not a
// sync.WaitGroup: writes may start while Wait is waiting, which a
// WaitGroup does not allow.)
type Tracked struct {
	// Sink does the writing; usually an events.EventSinkImpl over the
	// Events client.
	Sink events.EventSink

	mu       sync.Mutex
	inFlight int
	started  uint64        // writes begun, ever: a write that began while Wait was quiet
	idle     chan struct{} // closed when inFlight drops to 0; nil if nobody waits
}

// Quiet is how long Wait also waits with nothing in flight: an Event handed
// to the broadcaster reaches the sink from a goroutine of its own a moment
// later, and a write not yet begun is not in flight.
const Quiet = 200 * time.Millisecond

var _ events.EventSink = (*Tracked)(nil)

func (t *Tracked) begin() {
	t.mu.Lock()
	t.inFlight++
	t.started++
	t.mu.Unlock()
}

func (t *Tracked) end() {
	t.mu.Lock()
	t.inFlight--
	if t.inFlight == 0 && t.idle != nil {
		close(t.idle)
		t.idle = nil
	}
	t.mu.Unlock()
}

// Create sends a new Event.
func (t *Tracked) Create(ctx context.Context, e *eventsv1.Event) (*eventsv1.Event, error) {
	t.begin()
	defer t.end()
	return t.Sink.Create(ctx, e)
}

// Update updates an Event.
func (t *Tracked) Update(ctx context.Context, e *eventsv1.Event) (*eventsv1.Event, error) {
	t.begin()
	defer t.end()
	return t.Sink.Update(ctx, e)
}

// Patch patches an Event (the broadcaster uses it to count a series).
func (t *Tracked) Patch(ctx context.Context, e *eventsv1.Event, data []byte) (*eventsv1.Event, error) {
	t.begin()
	defer t.end()
	return t.Sink.Patch(ctx, e, data)
}

// Wait waits until no write has been in flight for Quiet, or timeout
// passes. It reports whether everything was sent.
func (t *Tracked) Wait(timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		t.mu.Lock()
		if t.inFlight == 0 {
			started := t.started
			t.mu.Unlock()
			quiet := min(Quiet, time.Until(deadline))
			time.Sleep(max(quiet, 0))
			t.mu.Lock()
			done := t.inFlight == 0 && t.started == started
			t.mu.Unlock()
			if done {
				return true
			}
			if !time.Now().Before(deadline) {
				return false
			}
			continue
		}
		if t.idle == nil {
			t.idle = make(chan struct{})
		}
		idle := t.idle
		t.mu.Unlock()
		select {
		case <-idle:
		case <-time.After(time.Until(deadline)):
			return false
		}
	}
}
