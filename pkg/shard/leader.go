package shard

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// WaitForSlotsReleased is for a leader of the single-leader mode, before it
// starts work: it returns once no slot Lease of the group (of any slot
// count) names a live member, or when ctx is done; it retries what fails.
//
// In a rollout between the two modes, members hand their slots over as
// soon as they see the leader's Lease move (see Member.Run), and release
// each slot only once its writes have stopped. Waiting for those releases
// here means the two modes never write at once, whichever side started
// first: a leader elected the moment members took their slots (its
// predecessor killed), or a leader rolled back to. A member is live until
// its member Lease has not changed for leaseDuration by our clock (a Lease
// first seen counts as just changed), or, with no member Lease, until we
// have missed it for leaseDuration.
func WaitForSlotsReleased(ctx context.Context, client kubernetes.Interface, group, namespace string, leaseDuration, retryPeriod time.Duration) {
	logger := klog.FromContext(ctx)
	leases := client.CoordinationV1().Leases(namespace)
	seen := map[string]observed{}  // member identity → its Lease's last change
	gone := map[string]time.Time{} // holder with no member Lease → first missed
	waiting := false
	var clearSince time.Time // when the Leases first showed no slot held
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	// A look at once, then one retryPeriod after each ends (sliding: a
	// List that took its whole retryPeriod is not followed by another at
	// once), until ctx is done or the look finds the slots released.
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		lctx, cancel := context.WithTimeout(ctx, retryPeriod)
		list, err := leases.List(lctx, metav1.ListOptions{LabelSelector: labels.Set{GroupLabel: group}.String()})
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			// Transient or not, starting without knowing could give a slot
			// two writers: try again.
			logger.Info("Could not list the shard group's Leases before starting work; trying again", "err", err.Error())
			return
		}
		now := time.Now()
		members := map[string]bool{}
		liveMembers := 0
		for _, l := range list.Items {
			id := ptr.Deref(l.Spec.HolderIdentity, "")
			if l.Labels[RoleLabel] != "member" || id == "" {
				continue
			}
			members[id] = true
			if o, ok := seen[id]; !ok || o.resourceVersion != l.ResourceVersion {
				seen[id] = observed{resourceVersion: l.ResourceVersion, at: now}
			}
			if now.Sub(seen[id].at) < leaseDuration {
				liveMembers++
			}
		}
		var held []string
		for _, l := range list.Items {
			h := ptr.Deref(l.Spec.HolderIdentity, "")
			if l.Labels[RoleLabel] != "slot" || h == "" {
				continue
			}
			live := members[h] && now.Sub(seen[h].at) < leaseDuration
			if !members[h] {
				if _, ok := gone[h]; !ok {
					gone[h] = now
				}
				live = now.Sub(gone[h]) < leaseDuration
			}
			if live {
				held = append(held, l.Name)
			}
		}
		switch {
		case len(held) == 0 && clearSince.IsZero():
			clearSince = now
		case len(held) > 0:
			clearSince = time.Time{}
		}
		// A member that read no leader Lease just before ours was written
		// may still be taking slots: for up to half a retry period after
		// its read, each take bounded by a retry period. So with live
		// members about, "none held" must hold for two retry periods.
		if len(held) == 0 && (liveMembers == 0 || now.Sub(clearSince) >= 2*retryPeriod) {
			if waiting {
				logger.Info("Sharded replicas have handed every slot over; starting work")
			}
			stop()
			return
		}
		if len(held) > 0 && !waiting {
			logger.Info("Sharded replicas hold slots (a rollout from the sharded mode); waiting for them to hand over before starting work",
				"slotsHeld", len(held), "group", group)
			waiting = true
		}
	}, retryPeriod)
}
