// Package leader runs a function only while this process holds a leader
// Lease (coordination.k8s.io/v1), so that several replicas of the
// controller can run, one working and the others standing by.
//
// The hand-over is ordered so that two processes never work at once:
//   - on shutdown, the leader first lets its work function return (its
//     in-flight syncs finish), and only then releases the Lease, which a
//     standby acquires at its next retry (RetryPeriod);
//   - a leader that cannot renew within RenewDeadline stops, and Run
//     returns an error: the process must exit, because a standby may
//     already be leading. A standby takes over a leader that vanished
//     without releasing once LeaseDuration has passed since its last renewal.
package leader

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
)

// Config configures the election. See the -leader-elect-* flags.
type Config struct {
	// LeaseName and LeaseNamespace name the coordination.k8s.io Lease that
	// every replica campaigns for; replicas that should stand in for each
	// other must use the same one.
	LeaseName      string
	LeaseNamespace string
	// LeaseDuration is how long after the leader's last renewal a standby
	// may take the Lease over; it bounds the hand-over when a leader dies
	// without releasing the Lease.
	LeaseDuration time.Duration
	// RenewDeadline is how long the leader keeps failing to renew before it
	// stops working. It must end before LeaseDuration does (see Validate).
	RenewDeadline time.Duration
	// RetryPeriod is how often candidates try to acquire the Lease and the
	// leader renews it.
	RetryPeriod time.Duration
	// Identity names this process in the Lease; unique per process.
	Identity string
	// OnLeading is called with true when this process starts leading and
	// false when it stops (for the leader metric).
	OnLeading func(bool)
}

// Validate checks the timing rule that keeps a leader from being overtaken
// while it still believes it leads: it must give up (RenewDeadline) before
// a standby may take over (LeaseDuration), with at least one retry between.
func (c Config) Validate() error {
	if c.LeaseDuration <= 0 || c.RenewDeadline <= 0 || c.RetryPeriod <= 0 {
		return errors.New("leader election durations must be positive")
	}
	if c.RenewDeadline >= c.LeaseDuration-c.RetryPeriod {
		return fmt.Errorf("leader election: the renew deadline (%v) must be shorter than the lease duration (%v) minus the retry period (%v)",
			c.RenewDeadline, c.LeaseDuration, c.RetryPeriod)
	}
	if c.LeaseName == "" {
		return errors.New("leader election: the lease name must not be empty")
	}
	return nil
}

// Identity returns a name unique to this process: the host name (the pod
// name, in a cluster) and a random suffix, so that a restarted process is
// never mistaken for its predecessor.
func Identity() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "foo-controller"
	}
	return host + "_" + utilrand.String(8)
}

// serviceAccountNamespace is where Kubernetes mounts the pod's namespace.
const serviceAccountNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// DefaultNamespace is the pod's own namespace when running in a cluster,
// else "default".
func DefaultNamespace() string {
	if b, err := os.ReadFile(serviceAccountNamespace); err == nil {
		if ns := strings.TrimSpace(string(b)); ns != "" {
			return ns
		}
	}
	return metav1.NamespaceDefault
}

// Run campaigns for the Lease and calls work while leading. It returns nil
// when ctx is cancelled (after work has returned and the Lease has been
// released), and an error if leadership was lost while ctx was still live.
func Run(ctx context.Context, client kubernetes.Interface, c Config, health *leaderelection.HealthzAdaptor,
	work func(context.Context) error) error {
	logger := klog.FromContext(ctx)
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Name: c.LeaseName, Namespace: c.LeaseNamespace},
		Client:     client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: c.Identity},
	}

	// The elector runs under its own context, cancelled only once work
	// has returned (or, if we never led, at shutdown): cancelling it is
	// what releases the Lease.
	electionCtx, stopElection := context.WithCancel(context.WithoutCancel(ctx))
	defer stopElection()
	led := make(chan struct{})
	workDone := make(chan struct{})
	var workErr error // written before workDone is closed
	stopWaiting := context.AfterFunc(ctx, func() {
		select {
		case <-led: // leading: work returns first, then stops the election
		default:
			stopElection()
		}
	})
	defer stopWaiting()

	onLeading := c.OnLeading
	if onLeading == nil {
		onLeading = func(bool) {}
	}
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   c.LeaseDuration,
		RenewDeadline:   c.RenewDeadline,
		RetryPeriod:     c.RetryPeriod,
		ReleaseOnCancel: true,
		WatchDog:        health,
		Name:            c.LeaseName,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(leadingCtx context.Context) {
				close(led)
				onLeading(true)
				logger.Info("Started leading", "lease", klog.KRef(c.LeaseNamespace, c.LeaseName), "identity", c.Identity)
				// Work until shutdown (ctx) or loss of the Lease (leadingCtx).
				workCtx, cancel := context.WithCancel(leadingCtx)
				stop := context.AfterFunc(ctx, cancel)
				workErr = work(klog.NewContext(workCtx, logger))
				stop()
				cancel()
				onLeading(false)
				close(workDone)
				stopElection() // now release the Lease
			},
			OnStoppedLeading: func() {},
			OnNewLeader: func(identity string) {
				if identity != c.Identity {
					logger.Info("Another process leads; standing by", "leader", identity)
				}
			},
		},
	})
	if err != nil {
		return fmt.Errorf("leader election: %w", err)
	}
	logger.Info("Waiting to lead", "lease", klog.KRef(c.LeaseNamespace, c.LeaseName), "identity", c.Identity)
	elector.Run(electionCtx)
	select {
	case <-led:
	default:
		return nil // never led; stopped while standing by
	}
	if ctx.Err() == nil {
		// Lost the Lease: a standby may be leading already. Return at once
		// (the process exits, ending any sync still in flight) rather than
		// wait for our work to wind down.
		return errors.New("leader election lost: exiting so that a restart rejoins as a standby")
	}
	<-workDone
	return workErr
}
