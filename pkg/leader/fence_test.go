package leader

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

type recordingTransport struct{ sent []string }

func (r *recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	r.sent = append(r.sent, req.Method+" "+req.URL.Path)
	return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader("")), Request: req}, nil
}

func TestFence(t *testing.T) {
	const (
		deployment = "/apis/apps/v1/namespaces/ns/deployments/d"
		lease      = "/apis/coordination.k8s.io/v1/namespaces/ns/leases/foo-controller"
	)
	start := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		// renewed and closed set the Fence up; at is when the request is
		// sent, relative to start.
		renewed []time.Duration
		closed  bool
		at      time.Duration
		method  string
		path    string
		wantErr string
	}{
		{"a read while never leading", nil, false, 0, http.MethodGet, deployment, ""},
		{"a write while never leading", nil, false, 0, http.MethodPatch, deployment, "not leading"},
		{"a Lease write while never leading (acquiring)", nil, false, 0, http.MethodPut, lease, ""},
		{"a write just after a renewal", []time.Duration{0}, false, time.Second, http.MethodPatch, deployment, ""},
		{"a write just before the renew deadline", []time.Duration{0}, false, 4*time.Second - time.Nanosecond, http.MethodPost, deployment, ""},
		{"a write at the renew deadline (woken from a freeze)", []time.Duration{0}, false, 4 * time.Second, http.MethodDelete, deployment, "not leading"},
		{"a later renewal extends it", []time.Duration{0, 3 * time.Second}, false, 6 * time.Second, http.MethodPatch, deployment, ""},
		{"an older renewal does not shorten it", []time.Duration{3 * time.Second, 0}, false, 6 * time.Second, http.MethodPatch, deployment, ""},
		{"a write after the loss", []time.Duration{0}, true, time.Second, http.MethodPatch, deployment, "leader election lost"},
		{"a read after the loss", []time.Duration{0}, true, time.Second, http.MethodGet, deployment, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := NewFence(Config{RenewDeadline: 4 * time.Second})
			f.now = func() time.Time { return start.Add(tc.at) }
			for _, r := range tc.renewed {
				f.Renewed(start.Add(r))
			}
			if tc.closed {
				f.Close()
			}
			next := &recordingTransport{}
			req, err := http.NewRequest(tc.method, "https://apiserver"+tc.path, strings.NewReader("{}"))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := f.WrapTransport(next).RoundTrip(req)
			if resp != nil {
				_ = resp.Body.Close()
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("got %v, want an error containing %q", err, tc.wantErr)
			}
			if sent := len(next.sent) > 0; sent != (tc.wantErr == "") {
				t.Errorf("sent %v", next.sent)
			}
			if tc.closed && tc.wantErr != "" && !errors.Is(err, ErrLost) {
				t.Errorf("a refusal after the loss must wrap ErrLost: %v", err)
			}
		})
	}
}

func TestFenceDial(t *testing.T) {
	start := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	now := start
	f := NewFence(Config{RenewDeadline: 4 * time.Second})
	f.now = func() time.Time { return now }
	dial := f.Dial(func(context.Context, string, string) (net.Conn, error) {
		client, server := net.Pipe()
		go func() { _, _ = io.Copy(io.Discard, server) }()
		return client, nil
	})
	conn, err := dial(context.Background(), "tcp", "apiserver:443")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	write := func() error { _, err := conn.Write([]byte("x")); return err }

	if err := write(); err != nil {
		t.Errorf("a standby's connection (its informers) must not be guarded: %v", err)
	}
	f.Renewed(start)
	now = start.Add(time.Second)
	if err := write(); err != nil {
		t.Errorf("refused while leading: %v", err)
	}
	// Woken from a freeze: a request queued on the connection before it
	// must not go out now.
	now = start.Add(10 * time.Second)
	if err := write(); err == nil || !strings.Contains(err.Error(), "not leading") {
		t.Errorf("got %v, want the write refused", err)
	}
	f.Renewed(now) // even if leading again, that connection is done
	if err := write(); err == nil || strings.Contains(err.Error(), "not leading") {
		t.Errorf("got %v, want the connection closed by the refused write", err)
	}
}

// TestFenceStale: the liveness side of the Fence passes before the first
// renewal (a holder still joining) and within the renew deadline of the
// last one, and fails from the deadline on, whatever Close did. A Fence
// made with NewFenceFor words its refusals as it was told, and its loss
// still matches what it was given.
func TestFenceStale(t *testing.T) {
	start := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	now := start
	lostMember := errors.New("member lost")
	f := NewFenceFor(4*time.Second, lostMember, "not a live member (no renewal in the last %v)")
	f.now = func() time.Time { return now }
	if err := f.Stale(); err != nil {
		t.Errorf("before the first renewal: %v, want nil", err)
	}
	f.Renewed(start)
	for _, tc := range []struct {
		at    time.Duration
		stale bool
	}{{time.Second, false}, {4*time.Second - time.Nanosecond, false}, {4 * time.Second, true}, {time.Minute, true}} {
		now = start.Add(tc.at)
		if err := f.Stale(); (err != nil) != tc.stale {
			t.Errorf("%v after the renewal: %v, want stale %v", tc.at, err, tc.stale)
		}
	}
	if err := f.Check(); err == nil || !strings.Contains(err.Error(), "not a live member (no renewal in the last 4s)") {
		t.Errorf("past the deadline, Check: %v", err)
	}
	f.Close()
	if err := f.Check(); !errors.Is(err, lostMember) || errors.Is(err, ErrLost) {
		t.Errorf("after Close, Check: %v, want it to wrap the given loss only", err)
	}
	now = start.Add(time.Second)
	if err := f.Stale(); err != nil {
		t.Errorf("closed within the deadline: %v, want nil (Close does not change it)", err)
	}
}
