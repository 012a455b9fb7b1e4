// Package eventsink sends a controller's Events (Start) and lets it wait,
// at shutdown, for those it is still sending.
//
// client-go's event broadcaster sends each Event from a goroutine of its
// own, behind the client's rate limiter; nothing in it waits for them. A
// controller that stops right after its last sync would cut those requests
// off and lose the Events of its last changes. Its sink (tracked) counts
// the Events on their way and the writes in flight, so that shutdown can
// give them a bounded time to finish.
package eventsink

import (
	"context"
	"sync"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
)

// tracked is an events.EventSink that counts its in-flight writes and the
// Events on their way to it: recorded through Recorder, and reaching the
// broadcaster (Arrived, a watcher of the broadcaster's). (Not a
// sync.WaitGroup: writes may start while Wait is waiting, which a
// WaitGroup does not allow.)
type tracked struct {
	// Sink does the writing; usually an events.EventSinkImpl over the
	// Events client.
	Sink events.EventSink

	mu       sync.Mutex
	inFlight int
	handed   uint64    // Events recorded through Recorder, ever
	arrived  uint64    // Events that reached the broadcaster, ever
	last     time.Time // an Event arrived or a write begun, the latest
	lastIn   time.Time // the last Event recorded through Recorder
}

// refused is how long after the last Event recorded Wait stops waiting for
// those not arrived: client-go's recorder drops an Event it cannot make
// (no reference to its object in the recorder's scheme; a type neither
// Normal nor Warning) before handing it over, and the broadcaster drops
// one for a watcher whose queue is full, so the count of those on their
// way can be wrong for good.
const refused = 2 * time.Second

// quiet is how long after the last Event reached the broadcaster, or the
// last write began, Wait still waits for a write to begin: the broadcaster
// writes each Event from goroutines of its own, a moment later. Counting
// writes cannot replace this wait: the broadcaster sends some Events in no
// write of their own (one it counts in a series) and others in several
// (retries, series refreshes).
const quiet = time.Second

var _ events.EventSink = (*tracked)(nil)

func (t *tracked) begin() {
	t.mu.Lock()
	t.inFlight++
	t.last = time.Now()
	t.mu.Unlock()
}

func (t *tracked) end() {
	t.mu.Lock()
	t.inFlight--
	t.mu.Unlock()
}

// Create sends a new Event.
func (t *tracked) Create(ctx context.Context, e *eventsv1.Event) (*eventsv1.Event, error) {
	t.begin()
	defer t.end()
	return t.Sink.Create(ctx, e)
}

// Update updates an Event.
func (t *tracked) Update(ctx context.Context, e *eventsv1.Event) (*eventsv1.Event, error) {
	t.begin()
	defer t.end()
	return t.Sink.Update(ctx, e)
}

// Patch patches an Event (the broadcaster uses it to count a series).
func (t *tracked) Patch(ctx context.Context, e *eventsv1.Event, data []byte) (*eventsv1.Event, error) {
	t.begin()
	defer t.end()
	return t.Sink.Patch(ctx, e, data)
}

// Recorder returns r, counting the Events recorded through it. client-go's
// recorder hands each Event to the broadcaster from a goroutine of its
// own; one that gets there after the broadcaster is shut down is dropped
// (TestLastChangeToldAtShutdown lost one so in CI), so Wait waits for each
// to arrive before the sender shuts the broadcaster down.
func (t *tracked) Recorder(r events.EventRecorder) events.EventRecorder {
	return countingRecorder{r, t}
}

type countingRecorder struct {
	events.EventRecorder
	t *tracked
}

func (c countingRecorder) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	c.t.mu.Lock()
	c.t.handed++
	c.t.lastIn = time.Now()
	c.t.mu.Unlock()
	c.EventRecorder.Eventf(regarding, related, eventtype, reason, action, note, args...)
}

// Arrived counts an Event that reached the broadcaster: pass it to the
// broadcaster's StartEventWatcher.
func (t *tracked) Arrived(runtime.Object) {
	t.mu.Lock()
	t.arrived++
	t.last = time.Now()
	t.mu.Unlock()
}

// pollEvery is how often Wait looks.
const pollEvery = 10 * time.Millisecond

// Wait waits until every Event recorded has reached the broadcaster (or
// refused has passed since the last was recorded), no write is in flight,
// and none has begun, nor an Event arrived, for quiet; or until timeout
// passes. It reports whether it did not time out. A process that recorded
// nothing in its last second does not wait at all.
func (t *tracked) Wait(timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		t.mu.Lock()
		inFlight, last := t.inFlight, t.last
		pending := t.handed > t.arrived && time.Since(t.lastIn) < refused
		t.mu.Unlock()
		now := time.Now()
		if inFlight == 0 && !pending && now.Sub(last) >= quiet {
			return true
		}
		if !now.Before(deadline) {
			return false
		}
		time.Sleep(min(pollEvery, time.Until(deadline)))
	}
}
