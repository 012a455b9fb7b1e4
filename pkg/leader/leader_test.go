package leader

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/utils/ptr"
)

func TestValidate(t *testing.T) {
	ok := Config{LeaseName: "l", LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second}
	tests := []struct {
		name    string
		mutate  func(*Config)
		wantErr string
	}{
		{"defaults", func(*Config) {}, ""},
		{"renew deadline too close to lease duration", func(c *Config) { c.RenewDeadline = 13 * time.Second }, "renew deadline"},
		{"renew deadline past lease duration", func(c *Config) { c.RenewDeadline = 20 * time.Second }, "renew deadline"},
		{"zero retry period", func(c *Config) { c.RetryPeriod = 0 }, "positive"},
		{"negative lease duration", func(c *Config) { c.LeaseDuration = -time.Second }, "positive"},
		{"no lease name", func(c *Config) { c.LeaseName = "" }, "lease name"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			tc.mutate(&c)
			err := c.Validate()
			if (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("got %v, want error containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestIdentityIsUnique(t *testing.T) {
	a, b := Identity(), Identity()
	if a == b || !strings.Contains(a, "_") {
		t.Errorf("identities %q and %q", a, b)
	}
}

// fast is a Config with short durations, for tests on a fake clientset.
func fast(identity string) Config {
	return Config{LeaseName: "foo-controller", LeaseNamespace: "ns", Identity: identity,
		LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 100 * time.Millisecond}
}

// runInBackground starts Run and returns its result channel and a channel
// that receives work's context once it leads.
func runInBackground(ctx context.Context, t *testing.T, client *fake.Clientset, c Config, work func(context.Context) error) (<-chan error, <-chan context.Context) {
	t.Helper()
	started := make(chan context.Context, 1)
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, client, c, leaderelection.NewLeaderHealthzAdaptor(c.HealthzTimeout()), func(ctx context.Context) error {
			started <- ctx
			return work(ctx)
		})
	}()
	return done, started
}

func waitFor[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		var zero T
		return zero
	}
}

// leaseClient is a fake clientset that, like the API server, refuses to
// update a Lease from a stale resourceVersion (the fake's tracker does
// not): that conflict is how a leader's optimistic renewal finds out that
// someone else wrote the Lease.
func leaseClient() *fake.Clientset {
	client := fake.NewClientset()
	var rv atomic.Int64
	client.PrependReactor("*", "leases", func(action k8stesting.Action) (bool, runtime.Object, error) {
		var lease *coordinationv1.Lease
		switch action.GetVerb() {
		case "create":
			lease = action.(k8stesting.CreateAction).GetObject().(*coordinationv1.Lease)
		case "update":
			lease = action.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease)
			stored, err := client.Tracker().Get(action.GetResource(), lease.Namespace, lease.Name)
			if err != nil {
				return true, nil, err
			}
			if stored.(*coordinationv1.Lease).ResourceVersion != lease.ResourceVersion {
				return true, nil, apierrors.NewConflict(action.GetResource().GroupResource(), lease.Name, errors.New("stale resourceVersion"))
			}
		default:
			return false, nil, nil
		}
		lease.ResourceVersion = strconv.FormatInt(rv.Add(1), 10)
		return false, nil, nil // the tracker stores it
	})
	return client
}

func TestLeaseTakenByAnotherHolderCancelsWorkAtOnce(t *testing.T) {
	// "b": another process took over. "": someone cleared the holder (a
	// Lease with no holder is free for anyone, us included, to take).
	for _, holder := range []string{"b", ""} {
		t.Run(fmt.Sprintf("holder %q", holder), func(t *testing.T) {
			client := leaseClient()
			ctx := t.Context()
			lost := make(chan struct{})
			c := fast("a")
			c.OnLost = func() { close(lost) }
			c.Fence = NewFence(c)
			done, started := runInBackground(ctx, t, client, c, func(ctx context.Context) error {
				<-ctx.Done()
				return nil
			})
			workCtx := waitFor(t, started, "a to lead")
			if err := c.Fence.Check(); err != nil {
				t.Fatalf("the fence refuses writes while a leads: %v", err)
			}

			// Another writer changes the holder, with a fresh renewal, as a
			// new leader does after taking over an expired Lease.
			lease, err := client.CoordinationV1().Leases("ns").Get(ctx, "foo-controller", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			lease.Spec.HolderIdentity = ptr.To(holder)
			lease.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
			taken := time.Now()
			if _, err := client.CoordinationV1().Leases("ns").Update(ctx, lease, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}

			err = waitFor(t, done, "Run to return")
			if !errors.Is(err, ErrLost) {
				t.Errorf("Run returned %v, want ErrLost", err)
			}
			if cause := context.Cause(workCtx); !errors.Is(cause, ErrLost) {
				t.Errorf("work's context ended with %v, want ErrLost", cause)
			}
			waitFor(t, lost, "OnLost")
			if err := c.Fence.Check(); !errors.Is(err, ErrLost) {
				t.Errorf("the fence lets writes through after the loss: %v", err)
			}
			// Well before the renew deadline (2s): at the first renewal that
			// sees the change.
			if d := time.Since(taken); d > time.Second {
				t.Errorf("leadership ended %v after the Lease was taken, want within a few retry periods", d)
			}
			time.Sleep(3 * c.RetryPeriod) // an elector still running would write now
			lease, err = client.CoordinationV1().Leases("ns").Get(ctx, "foo-controller", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got := *lease.Spec.HolderIdentity; got != holder {
				t.Errorf("the Lease is held by %q after a lost it, want %q (a must not write it back)", got, holder)
			}
		})
	}
}

func TestShutdownIsGracefulAndReleasesTheLease(t *testing.T) {
	client := leaseClient()
	ctx, cancel := context.WithCancel(t.Context())
	workErr := errors.New("work's own result")
	done, started := runInBackground(ctx, t, client, fast("a"), func(ctx context.Context) error {
		<-ctx.Done()
		return workErr
	})
	workCtx := waitFor(t, started, "a to lead")
	cancel()
	if err := waitFor(t, done, "Run to return"); !errors.Is(err, workErr) {
		t.Errorf("Run returned %v, want work's error", err)
	}
	if cause := context.Cause(workCtx); !errors.Is(cause, context.Canceled) {
		t.Errorf("work's context ended with %v, want context.Canceled (a graceful stop)", cause)
	}
	lease, err := client.CoordinationV1().Leases("ns").Get(t.Context(), "foo-controller", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h := lease.Spec.HolderIdentity; h != nil && *h != "" {
		t.Errorf("the Lease is still held by %q after a graceful stop, want released", *h)
	}
}

func TestHealthzTimeoutFailsPastTheRenewDeadline(t *testing.T) {
	c := fast("a")
	if got := c.LeaseDuration + c.HealthzTimeout(); got != c.RenewDeadline {
		t.Errorf("the health check fails %v after the last renewal, want the renew deadline %v", got, c.RenewDeadline)
	}
}

func TestHealthCheckFailsForALeaderPastItsRenewDeadline(t *testing.T) {
	client := leaseClient()
	// A Lease write that never returns (until the test ends): an API
	// server that stopped answering. The elector's own timeout cannot end
	// it, which is the case the health check is for: a wedged leader.
	var hung atomic.Bool
	stuck := make(chan struct{})
	defer close(stuck)
	client.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if hung.Load() {
			<-stuck
		}
		return false, nil, nil
	})
	c := fast("a")
	// The check must fail at the renew deadline, not at the lease duration
	// (the adaptor's own threshold, were HealthzTimeout 0). A lease
	// duration far past the deadline tells the two apart with a second of
	// slack for a loaded machine: the check failed 2.17 s after the
	// renewals stopped (deadline 2 s) while go vet ran beside the test.
	c.LeaseDuration = 3 * c.RenewDeadline
	slack := time.Second
	health := leaderelection.NewLeaderHealthzAdaptor(c.HealthzTimeout())
	started := make(chan struct{})
	go func() {
		_ = Run(t.Context(), client, c, health, func(ctx context.Context) error {
			close(started)
			<-ctx.Done()
			return nil
		})
	}()
	waitFor(t, started, "a to lead")
	probe := httptest.NewRequest(http.MethodGet, "/healthz", nil)
	if err := health.Check(probe); err != nil {
		t.Fatalf("a leader that renews is unhealthy: %v", err)
	}
	hung.Store(true)
	since := time.Now()
	for health.Check(probe) == nil {
		if time.Since(since) > 2*c.LeaseDuration {
			t.Fatalf("the health check still passes %v after the renewals stopped (renew deadline %v)", time.Since(since), c.RenewDeadline)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if d := time.Since(since); d < c.RenewDeadline-c.RetryPeriod || d > c.RenewDeadline+slack {
		t.Errorf("the health check failed %v after the renewals stopped, want at the renew deadline %v (lease duration %v)", d, c.RenewDeadline, c.LeaseDuration)
	}
}
