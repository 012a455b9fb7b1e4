package leader

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Fence lets the process's writes reach the API server only while, by its
// own clock, it still holds the Lease: within RenewDeadline of the start of
// its last successful renewal, and never after leadership was lost.
//
// Knowing that the Lease is lost takes a renewal attempt, and a process can
// be unable to make one while its workers still run: frozen (SIGSTOP, a
// paused VM, a long GC or CPU starvation), then woken after a standby has
// taken over. Its workers would write the moment it wakes, before its
// elector runs. The Fence checks the clock at every write instead. A
// standby took over no sooner than LeaseDuration after our last renewal,
// and RenewDeadline ends before that (see Config.Validate).
//
// Reads always pass, and so do requests for Leases, which is how the
// elector renews. A Fence is safe for concurrent use.
//
// It guards at two levels. WrapTransport refuses a write request with a
// clear error. Dial guards the connections beneath: a request that passed
// WrapTransport just before the process froze can still be waiting to be
// written (HTTP/2 writes every request of a connection in turn), and would
// go out when it wakes. So once the process has led, nothing at all is
// written on those connections while the Fence is shut; the Lease must then
// be renewed over a client of its own, not built with Dial.
type Fence struct {
	validFor time.Duration
	now      func() time.Time
	// lost and stale word the refusals: after Close, and past the renew
	// deadline (a format taking it).
	lost  error
	stale string

	mu     sync.Mutex
	until  time.Time // writes pass before this
	closed bool      // leadership lost: nothing passes again
	led    bool      // renewed at least once: Dial's connections are guarded
}

// NewFence returns a Fence for c's timings, closed until the first renewal.
func NewFence(c Config) *Fence {
	return NewFenceFor(c.RenewDeadline, ErrLost, "not leading (no renewal of the Lease in the last %v)")
}

// NewFenceFor returns a Fence for a Lease other than the leader's (a shard
// member's), closed until the first renewal: its refusals say lost once it
// is closed, and stale (a format given renewDeadline) past the deadline.
func NewFenceFor(renewDeadline time.Duration, lost error, stale string) *Fence {
	return &Fence{validFor: renewDeadline, now: time.Now, lost: lost, stale: stale}
}

// Renewed records a successful write of the Lease naming us, sent at sentAt.
func (f *Fence) Renewed(sentAt time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.led = true
	if until := sentAt.Add(f.validFor); until.After(f.until) {
		f.until = until
	}
}

// Close shuts the Fence for good.
func (f *Fence) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
}

// Check returns why a write may not be sent now, or nil.
func (f *Fence) Check() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.checkLocked()
}

// Stale returns why the holder is overdue, or nil: once renewed at all, its
// last successful renewal was sent more than RenewDeadline ago. It is a
// liveness check (a shard member's /healthz) with the threshold of the
// leader's (Config.HealthzTimeout): a holder past it has stopped writing
// and should have given up, so one still running is wedged. Before the
// first renewal it passes, as the leader's does for a standby; Close does
// not change it (a lost holder exits by itself).
func (f *Fence) Stale() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.led {
		return nil
	}
	if now := f.now(); !now.Before(f.until) {
		since := now.Sub(f.until) + f.validFor
		return fmt.Errorf("last renewal of the Lease sent %v ago, past the renew deadline (%v)", since.Round(time.Millisecond), f.validFor)
	}
	return nil
}

// checkConn returns why nothing may be written on a connection now, or nil:
// a standby's connections (its informers' lists and watches) are never
// guarded.
func (f *Fence) checkConn() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.led {
		return nil
	}
	return f.checkLocked()
}

func (f *Fence) checkLocked() error {
	switch now := f.now(); {
	case f.closed:
		return fmt.Errorf("write refused: %w", f.lost)
	case !now.Before(f.until):
		return fmt.Errorf("write refused: "+f.stale, f.validFor)
	}
	return nil
}

// WrapTransport is a rest.Config WrapTransport that puts the Fence in front
// of every write of the clients built from that config.
func (f *Fence) WrapTransport(rt http.RoundTripper) http.RoundTripper {
	return GuardWrites(rt, func(*http.Request) error { return f.Check() })
}

// GuardWrites returns a RoundTripper that sends a write (any method but
// GET, HEAD and OPTIONS) only if check passes, and every read as it comes.
// Writes to Leases (coordination.k8s.io) always pass: renewing and
// releasing are what the check is built on.
func GuardWrites(rt http.RoundTripper, check func(*http.Request) error) http.RoundTripper {
	return &guardedTransport{check: check, next: rt}
}

type guardedTransport struct {
	check func(*http.Request) error
	next  http.RoundTripper
}

func (t *guardedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if isWrite(req.Method) && !strings.HasPrefix(req.URL.Path, "/apis/coordination.k8s.io/") {
		if err := t.check(req); err != nil {
			if req.Body != nil {
				_ = req.Body.Close() // RoundTrip must close it, even on error
			}
			return nil, err
		}
	}
	return t.next.RoundTrip(req)
}

// Dial wraps dial (a rest.Config's Dial) so that nothing is written on its
// connections while the Fence is shut, once the process has led. Such a
// connection is closed at the first refused write; the client dials anew.
func (f *Fence) Dial(dial func(ctx context.Context, network, address string) (net.Conn, error)) func(ctx context.Context, network, address string) (net.Conn, error) {
	return func(ctx context.Context, network, address string) (net.Conn, error) {
		conn, err := dial(ctx, network, address)
		if err != nil {
			return nil, err
		}
		return &fencedConn{Conn: conn, fence: f}, nil
	}
}

type fencedConn struct {
	net.Conn
	fence *Fence
}

func (c *fencedConn) Write(b []byte) (int, error) {
	if err := c.fence.checkConn(); err != nil {
		_ = c.Close()
		return 0, err
	}
	return c.Conn.Write(b)
}

func isWrite(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return false
	}
	return true
}
