package eventsink

import (
	"context"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/runtime"
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

// fakeRecorder stands in for client-go's recorder and broadcaster: each
// Event reaches the broadcaster (Arrived) after arrive, from a goroutine of
// its own, and its write begins write later.
type fakeRecorder struct {
	sink          *tracked
	arrive, write time.Duration
	written       chan struct{}
}

func (f fakeRecorder) Eventf(runtime.Object, runtime.Object, string, string, string, string, ...any) {
	go func() {
		time.Sleep(f.arrive)
		f.sink.Arrived(nil)
		time.Sleep(f.write)
		_, _ = f.sink.Create(context.Background(), &eventsv1.Event{})
		close(f.written)
	}()
}

func TestWait(t *testing.T) {
	s := slowSink{release: make(chan struct{})}
	tr := &tracked{Sink: s}
	start := time.Now()
	if !tr.Wait(time.Second) {
		t.Fatal("nothing ever recorded: Wait must return true")
	}
	if took := time.Since(start); took > quiet/2 {
		t.Fatalf("nothing ever recorded, yet Wait took %v", took)
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
	if !tr.Wait(5 * time.Second) {
		t.Fatal("the write finished: Wait must return true")
	}
}

// TestWaitCoversTheHandOff: an Event recorded just before shutdown reaches
// the broadcaster, and then the sink, from goroutines of their own, a
// moment later (TestLastChangeToldAtShutdown lost such an Event in CI: it
// reached the broadcaster after its Shutdown); Wait, called in that moment
// with nothing in flight, waits for both hand-offs, the first however
// long it takes.
func TestWaitCoversTheHandOff(t *testing.T) {
	for _, tc := range []struct {
		name          string
		arrive, write time.Duration
	}{
		// Slower than quiet, within refused (after which Wait stops
		// waiting for an Event that never arrived: at 2*quiet, exactly
		// refused, this raced with that deadline and failed under load).
		{"slow to the broadcaster", quiet + (refused-quiet)/2, 0},
		{"slow to the sink", 0, quiet / 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := slowSink{release: make(chan struct{})}
			close(s.release)
			tr := &tracked{Sink: s}
			written := make(chan struct{})
			tr.Recorder(fakeRecorder{sink: tr, arrive: tc.arrive, write: tc.write, written: written}).
				Eventf(nil, nil, "Normal", "Scaled", "ScaleDeployment", "")
			if !tr.Wait(10 * quiet) {
				t.Fatal("Wait timed out")
			}
			select {
			case <-written:
			default:
				t.Fatal("Wait returned before the Event recorded was written")
			}
		})
	}
}

// TestWaitAfterARefusedEvent: an Event client-go's recorder refused never
// arrives; Wait stops waiting for it refused after it was recorded, not at
// its timeout, at every later stop too.
func TestWaitAfterARefusedEvent(t *testing.T) {
	tr := &tracked{Sink: slowSink{}}
	tr.Recorder(refusingRecorder{}).Eventf(nil, nil, "Normal", "Scaled", "ScaleDeployment", "")
	start := time.Now()
	if !tr.Wait(10 * refused) {
		t.Fatal("Wait timed out")
	}
	if took := time.Since(start); took < refused || took > refused+quiet {
		t.Errorf("Wait took %v, want about %v", took, refused)
	}
}

type refusingRecorder struct{}

func (refusingRecorder) Eventf(runtime.Object, runtime.Object, string, string, string, string, ...any) {
}
