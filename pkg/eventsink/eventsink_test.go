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
