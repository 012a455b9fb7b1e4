package eventsink

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
)

// Sender sends the recorder's Events from goroutines of its own, behind
// the Events client's rate limiter.
type Sender struct {
	broadcaster events.EventBroadcaster
	sink        *tracked
	cancel      context.CancelFunc
}

// Start returns the recorder a controller emits Events with, as
// controllerName, and the Sender that sends them through client. It names
// objects through a scheme of its own, client-go's types and those install
// adds (ours), rather than by adding our types to client-go's global
// scheme.
func Start(ctx context.Context, client kubernetes.Interface, install func(*runtime.Scheme) error, controllerName string) (events.EventRecorder, *Sender, error) {
	scheme := runtime.NewScheme()
	if err := errors.Join(clientgoscheme.AddToScheme(scheme), install(scheme)); err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s := &Sender{sink: &tracked{Sink: &events.EventSinkImpl{Interface: client.EventsV1()}}, cancel: cancel}
	s.broadcaster = events.NewBroadcaster(s.sink)
	if err := s.broadcaster.StartRecordingToSinkWithContext(ctx); err != nil {
		cancel()
		return nil, nil, fmt.Errorf("starting event recorder: %w", err)
	}
	if _, err := s.broadcaster.StartEventWatcher(s.sink.Arrived); err != nil {
		cancel()
		return nil, nil, fmt.Errorf("starting event recorder: %w", err)
	}
	return s.sink.Recorder(s.broadcaster.NewRecorder(scheme, controllerName)), s, nil
}

// Stop gives the Events still queued a bounded time to go out at a
// graceful stop, so that those of the last changes are not lost; after a
// lost Lease it drops them: nothing more may be written.
func (s *Sender) Stop(logger klog.Logger, lost bool) {
	if !lost {
		// Wait first: an Event that reaches the broadcaster after its
		// Shutdown is dropped.
		if !s.sink.Wait(5 * time.Second) {
			logger.Info("Some Events were still being sent at exit and are dropped")
		}
		s.broadcaster.Shutdown()
	}
	s.cancel()
}

// Drop sends nothing more, at once (leader.Config.OnLost).
func (s *Sender) Drop() { s.cancel() }
