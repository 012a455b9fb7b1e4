package eventsink

import (
	"context"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
)

type slowSink struct{ release chan struct{} }

func (s slowSink) Create(context.Context, *eventsv1.Event) (*eventsv1.Event, error) {
	<-s.release
	return &eventsv1.Event{}, nil
}
func (s slowSink) Update(context.Context, *eventsv1.Event) (*eventsv1.Event, error) {
	return &eventsv1.Event{}, nil
}
func (s slowSink) Patch(context.Context, *eventsv1.Event, []byte) (*eventsv1.Event, error) {
	return &eventsv1.Event{}, nil
}

func TestWait(t *testing.T) {
	s := slowSink{release: make(chan struct{})}
	tr := &Tracked{Sink: s}
	if !tr.Wait(time.Second) {
		t.Fatal("nothing in flight: Wait must return true at once")
	}
	started := make(chan struct{})
	go func() {
		close(started)
		_, _ = tr.Create(context.Background(), &eventsv1.Event{})
	}()
	<-started
	time.Sleep(10 * time.Millisecond) // let Create begin
	if tr.Wait(50 * time.Millisecond) {
		t.Fatal("a write is in flight: Wait must time out")
	}
	close(s.release)
	if !tr.Wait(time.Second) {
		t.Fatal("the write finished: Wait must return true")
	}
}

// TestWaitCoversTheHandOff: an Event recorded just before shutdown reaches
// the sink from a goroutine of its own a moment later; Wait called in that
// moment, with nothing in flight yet, waits for it (TestLastChangeToldAtShutdown
// lost such an Event under load).
func TestWaitCoversTheHandOff(t *testing.T) {
	s := slowSink{release: make(chan struct{})}
	close(s.release)
	tr := &Tracked{Sink: s}
	created := make(chan struct{})
	go func() {
		time.Sleep(Quiet / 4) // the broadcaster's hand-off, slow under load
		_, _ = tr.Create(context.Background(), &eventsv1.Event{})
		close(created)
	}()
	if !tr.Wait(5 * time.Second) {
		t.Fatal("Wait timed out")
	}
	select {
	case <-created:
	default:
		t.Fatal("Wait returned before a write that began in its quiet period was done")
	}
}
