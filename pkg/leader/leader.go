// Package leader runs a function only while this process holds a leader
// Lease (coordination.k8s.io/v1), so that several replicas of the
// controller can run, one working and the others standing by.
//
// The hand-over is ordered so that two processes never work at once:
//   - on shutdown, the leader first lets its work function return (its
//     in-flight syncs finish), and only then releases the Lease, which a
//     standby acquires at its next retry (RetryPeriod);
//   - a leader that cannot renew within RenewDeadline, or that finds
//     another holder in the Lease, stops writing at once, and Run returns
//     ErrLost: the process must exit, because a standby may already be
//     leading. A standby takes over a leader that vanished without
//     releasing once LeaseDuration has passed since its last renewal.
package leader

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
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
	// OnLost, if set, is called the moment leadership is lost, before Run
	// returns: the place to stop writers that do not run under work's
	// context (the Event broadcaster).
	OnLost func()
	// Fence, if set, is opened by each renewal and closed for good when
	// leadership is lost; its WrapTransport must wrap the clients that
	// write (see Fence).
	Fence *Fence
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

// ErrLost is why leadership ended while the process still wanted to lead:
// the Lease was taken by another holder, or could not be renewed within
// RenewDeadline. It is the cause of the work context's cancellation (so the
// work can tell it from a shutdown, see Run) and the error Run returns.
var ErrLost = errors.New("leader election lost")

// Run campaigns for the Lease and calls work while leading.
//
// work's context is cancelled in one of two ways, and work must tell them
// apart with context.Cause:
//   - context.Canceled: ctx was cancelled (SIGTERM). This is a graceful
//     stop; Run releases the Lease only after work has returned, so no
//     standby can start while our last syncs finish. Run returns work's
//     error.
//   - ErrLost: leadership is gone. A standby may be leading already, so
//     every write we still send could fight it: work must stop writing at
//     once. Run returns ErrLost without waiting for more than a moment,
//     and the caller must exit; a restarted process campaigns again.
//
// Leadership is lost when the elector gives up renewing (RenewDeadline
// passed without a successful renewal), or as soon as a renewal finds
// another holder in the Lease. client-go's elector would keep retrying
// against another holder until RenewDeadline; we stop at the first sight
// of it (see watchedLock).
func Run(ctx context.Context, client kubernetes.Interface, c Config, health *leaderelection.HealthzAdaptor,
	work func(context.Context) error) error {
	logger := klog.FromContext(ctx)
	lost := make(chan struct{})
	var loseOnce sync.Once
	var (
		workMu     sync.Mutex
		cancelWork context.CancelCauseFunc = func(error) {} // set when we start leading
	)
	// lock.lost is the one record of the loss: set first, so that work
	// starting at the same moment sees it (see OnStartedLeading).
	var lock *watchedLock
	lose := func(why string) {
		loseOnce.Do(func() {
			lock.lost.Store(true)
			workMu.Lock()
			if c.Fence != nil {
				c.Fence.Close()
			}
			cancelWork(ErrLost)
			workMu.Unlock()
			if c.OnLost != nil {
				c.OnLost()
			}
			logger.Info("Lost the leader Lease; stopping all writes and exiting", "reason", why,
				"lease", klog.KRef(c.LeaseNamespace, c.LeaseName), "identity", c.Identity)
			close(lost)
		})
	}
	lock = &watchedLock{
		Interface: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Name: c.LeaseName, Namespace: c.LeaseNamespace},
			Client:     client.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: c.Identity},
		},
		onTaken: func(holder string) { lose(fmt.Sprintf("the Lease is held by %q", holder)) },
		onLapsed: func() {
			lose("could not renew the Lease within the renew deadline (a renewal came too late: paused, or a slow API server)")
		},
		fence: c.Fence,
	}

	// The elector runs under its own context, cancelled only once work
	// has returned (or, if we never led, at shutdown).
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
		Lock:          lock,
		LeaseDuration: c.LeaseDuration,
		RenewDeadline: c.RenewDeadline,
		RetryPeriod:   c.RetryPeriod,
		// We release the Lease ourselves after a graceful stop (see
		// release): the elector's ReleaseOnCancel releases before it ends
		// leadingCtx, so when the API server hangs, the news that it gave
		// up would come as much as RenewDeadline late.
		ReleaseOnCancel: false,
		Name:            c.LeaseName,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(leadingCtx context.Context) {
				// Work until shutdown (ctx: cause Canceled) or loss of the
				// Lease (cause ErrLost).
				workCtx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
				workMu.Lock()
				cancelWork = cancel
				if lock.lost.Load() { // lost between acquiring and this callback
					cancel(ErrLost)
				}
				workMu.Unlock()
				stopOnSignal := context.AfterFunc(ctx, func() { cancel(context.Canceled) })
				// The elector cancels leadingCtx when it gives up renewing
				// (and when we stop the election after work returned, by
				// which time ctx is done and this does nothing).
				stopOnGiveUp := context.AfterFunc(leadingCtx, func() {
					if ctx.Err() == nil {
						lose("could not renew the Lease within the renew deadline")
					}
				})
				close(led)
				onLeading(true)
				logger.Info("Started leading", "lease", klog.KRef(c.LeaseNamespace, c.LeaseName), "identity", c.Identity)
				workErr = work(klog.NewContext(workCtx, logger))
				stopOnSignal()
				stopOnGiveUp()
				cancel(context.Canceled)
				onLeading(false)
				close(workDone)
				stopElection()
			},
			OnStoppedLeading: func() {},
			OnNewLeader: func(identity string) {
				if identity != c.Identity && !lock.lost.Load() {
					logger.Info("Another process leads; standing by", "leader", identity)
				}
			},
		},
	})
	if err != nil {
		return fmt.Errorf("leader election: %w", err)
	}
	// The adaptor's check fails once our last renewal is older than
	// LeaseDuration plus its timeout (see HealthzTimeout). Only RunOrDie
	// connects it to the elector by itself; we call Run.
	if health != nil {
		health.SetLeaderElection(elector)
	}
	logger.Info("Waiting to lead", "lease", klog.KRef(c.LeaseNamespace, c.LeaseName), "identity", c.Identity)
	electorDone := make(chan struct{})
	go func() {
		defer close(electorDone)
		elector.Run(electionCtx)
	}()
	select {
	case <-lost:
	case <-electorDone:
		select {
		case <-led:
		default:
			return nil // never led; stopped while standing by
		}
		select {
		case <-workDone:
			if lock.lost.Load() {
				break
			}
			// Work returned (a graceful stop, or an error of its own) and
			// then stopped the election: hand the Lease over now, so that
			// a standby need not wait for it to expire.
			if released, err := release(context.WithoutCancel(ctx), lock.Interface, c.RenewDeadline); err != nil {
				logger.Error(err, "Could not release the Lease; a standby takes over when it expires")
			} else if released {
				logger.Info("Released the Lease; a standby can take over at once", "lease", klog.KRef(c.LeaseNamespace, c.LeaseName))
			}
			return workErr
		default:
			// The elector stopped renewing while work still ran.
			lose("could not renew the Lease within the renew deadline")
		}
	}
	// Work was cancelled with ErrLost; give its aborted syncs a moment to
	// log, but never wait for more: the process must exit now.
	select {
	case <-workDone:
	case <-time.After(abortWait):
	}
	return ErrLost
}

// release gives up the Lease if we still hold it, as client-go's
// ReleaseOnCancel does: a holder with a 1 s lease duration. The update is
// preconditioned on the Lease's resourceVersion from the read, so it
// cannot clear a newer holder.
func release(ctx context.Context, lock resourcelock.Interface, timeout time.Duration) (released bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	rec, _, err := lock.Get(ctx)
	if err != nil {
		return false, err
	}
	if rec.HolderIdentity != lock.Identity() {
		return false, nil
	}
	now := metav1.NewTime(time.Now())
	err = lock.Update(ctx, resourcelock.LeaderElectionRecord{
		LeaderTransitions: rec.LeaderTransitions, LeaseDurationSeconds: 1, RenewTime: now, AcquireTime: now,
	})
	return err == nil, err
}

// abortWait bounds how long Run waits for work to return after leadership
// was lost, before it returns anyway.
const abortWait = time.Second

// HealthzTimeout is the timeout to give leaderelection.NewLeaderHealthzAdaptor
// so that its check fails for a leader whose last renewal is older than the
// renew deadline: the point at which it should have given up leading. (The
// adaptor's check fails past LeaseDuration + timeout, so the timeout is
// negative.) A leader never stays there for long, since it exits when the
// elector gives up; the check is for one that is wedged.
func (c Config) HealthzTimeout() time.Duration { return c.RenewDeadline - c.LeaseDuration }

// watchedLock is the Lease lock with one addition: once we have written
// ourselves into the Lease, a read that finds another holder (or none)
// reports it through onTaken. That read happens at the first renewal after
// another process took the Lease over, where client-go's elector would go
// on retrying until its renew deadline while we kept working.
//
// Once leadership is lost it writes the Lease no more: client-go's elector
// goes on within the same attempt, and a Lease left with no holder would be
// taken back by the process that is about to exit, making its successor
// wait a whole LeaseDuration. Its successful writes naming us open the
// fence, if any.
type watchedLock struct {
	resourcelock.Interface
	onTaken func(holder string)
	// onLapsed is called instead of a write naming us once the fence has
	// lapsed: past the renew deadline, others may have taken over (or, in
	// the sharded mode, members deleted the Lease and took the slots), so
	// renewing, or creating the Lease anew, would make two writers.
	onLapsed func()
	fence    *Fence
	held     atomic.Bool // our last successful write named us as the holder
	lost     atomic.Bool // leadership was lost (set by Run's lose)
}

func (l *watchedLock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	rec, raw, err := l.Interface.Get(ctx)
	if err == nil && rec.HolderIdentity != l.Identity() && l.held.Swap(false) {
		l.onTaken(rec.HolderIdentity) // marks it lost
	}
	return rec, raw, err
}

func (l *watchedLock) Create(ctx context.Context, rec resourcelock.LeaderElectionRecord) error {
	return l.write(rec, func() error { return l.Interface.Create(ctx, rec) })
}

func (l *watchedLock) Update(ctx context.Context, rec resourcelock.LeaderElectionRecord) error {
	return l.write(rec, func() error { return l.Interface.Update(ctx, rec) })
}

func (l *watchedLock) write(rec resourcelock.LeaderElectionRecord, send func() error) error {
	if l.lost.Load() {
		return ErrLost
	}
	if rec.HolderIdentity == l.Identity() && l.fence != nil && l.fence.Stale() != nil {
		l.onLapsed()
		return ErrLost
	}
	sentAt := time.Now()
	if err := send(); err != nil {
		return err
	}
	ours := rec.HolderIdentity == l.Identity()
	l.held.Store(ours)
	if ours && l.fence != nil {
		l.fence.Renewed(sentAt)
	}
	return nil
}
