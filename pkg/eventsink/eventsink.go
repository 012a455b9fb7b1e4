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

// Tracked is an events.EventSink that counts its in-flight writes.
type Tracked struct {
	Sink events.EventSink
	wg   sync.WaitGroup
}

var _ events.EventSink = (*Tracked)(nil)

// Create sends a new Event.
func (t *Tracked) Create(ctx context.Context, e *eventsv1.Event) (*eventsv1.Event, error) {
	t.wg.Add(1)
	defer t.wg.Done()
	return t.Sink.Create(ctx, e)
}

// Update updates an Event.
func (t *Tracked) Update(ctx context.Context, e *eventsv1.Event) (*eventsv1.Event, error) {
	t.wg.Add(1)
	defer t.wg.Done()
	return t.Sink.Update(ctx, e)
}

// Patch patches an Event (the broadcaster uses it to count a series).
func (t *Tracked) Patch(ctx context.Context, e *eventsv1.Event, data []byte) (*eventsv1.Event, error) {
	t.wg.Add(1)
	defer t.wg.Done()
	return t.Sink.Patch(ctx, e, data)
}

// Wait waits until no write is in flight, or timeout passes. It reports
// whether everything was sent.
func (t *Tracked) Wait(timeout time.Duration) bool {
	done := make(chan struct{})
	go func() {
		t.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return true
	case <-time.After(timeout):
		return false
	}
}
