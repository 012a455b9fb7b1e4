package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	samplev1beta1 "example.com/foo-controller/pkg/apis/samplecontroller/v1beta1"
	"example.com/foo-controller/pkg/caches"
	"example.com/foo-controller/pkg/cachetrim"
	"example.com/foo-controller/pkg/ownwrites"
	"example.com/foo-controller/pkg/plan"
)

// unseenRecheckAfter is when to look again at a Deployment known only from
// our own write: just after that copy expires from the MutationCache.
const unseenRecheckAfter = ownwrites.TTL + 5*time.Second

// recheckUnseen asks to sync again once our copy of dep has expired if the
// informer has not seen dep yet. It normally does within milliseconds. If
// it never does (the Deployment was deleted while the watch was down, and
// the relist missed both events), the copy hides its absence until it
// expires, and after that nothing would bring the Foo back before the next
// resync, which may be never (-resync-period=0). The sync after the copy
// expires reads the informer alone, finds no Deployment and applies it
// again.
func (c *Controller) recheckUnseen(dep *plan.DeploymentView) syncResult {
	if dep == nil {
		return syncResult{}
	}
	if _, seen, err := c.deploymentsLister.Informed.GetByKey(cache.MetaObjectToName(dep).String()); seen || err != nil {
		return syncResult{}
	}
	return requeueAfter(unseenRecheckAfter)
}

// trimmedFoo drops from a write's response what the Foo cache never keeps
// (see pkg/cachetrim) before it is remembered in a MutationCache. A
// Deployment written is remembered as the cache keeps it, a
// plan.DeploymentView.
func trimmedFoo(foo *samplev1beta1.Foo) *samplev1beta1.Foo {
	out, _ := cachetrim.Transform(foo)
	return out.(*samplev1beta1.Foo)
}

// namespaceGoing reports whether the namespace is being deleted, as far as
// the namespaces informer knows (false without one: see WithNamespaces).
func (c *Controller) namespaceGoing(namespace string) bool {
	if c.namespaces == nil {
		return false
	}
	ns, err := c.namespaces.Get(namespace)
	return err == nil && ns.DeletionTimestamp != nil
}

// prunedSpec is what a Foo declared when pruneDeployments last finished for
// it (the zero value: never).
type prunedSpec struct {
	generation     int64
	deploymentName string
}

func prunedOf(foo *samplev1beta1.Foo) prunedSpec {
	return prunedSpec{generation: foo.Generation, deploymentName: foo.Spec.Deployment.Name}
}

// needPrune reports whether foo may have Deployments left under another
// name. Looking is not free: the MutationCache's ByIndex also walks every
// copy of our recent writes (up to ownwrites.Size) on each call. Among
// those copies, only a new spec can leave a Deployment under another name
// (we create only under the declared one), so that walk is done once per
// spec of each Foo (and once per Foo after a restart), not on every sync.
// A leftover can also come from elsewhere (a Deployment restored from a
// backup with its owner reference, say): the informer's own index, a map
// lookup, shows those on every sync.
func (c *Controller) needPrune(foo *samplev1beta1.Foo, rec *record) bool {
	return rec.pruned != prunedOf(foo) || c.leftoverIndexed(foo)
}

// leftoverIndexed reports whether the informer holds a Deployment foo
// controls under a name other than the one it declares, and not already
// being deleted.
func (c *Controller) leftoverIndexed(foo *samplev1beta1.Foo) bool {
	keys, err := c.deploymentsLister.Informed.IndexKeys(caches.DeploymentByFooUID, string(foo.UID))
	if err != nil {
		return true // look the slow way
	}
	current := cache.ObjectName{Namespace: foo.Namespace, Name: foo.Spec.Deployment.Name}.String()
	return slices.ContainsFunc(keys, func(k string) bool {
		if k == current {
			return false
		}
		obj, exists, err := c.deploymentsLister.Informed.GetByKey(k)
		return err != nil || (exists && obj.(*plan.DeploymentView).DeletionTimestamp == nil)
	})
}

// errDeletedMeanwhile is deletedMeanwhile's answer for a Foo that is gone
// (or replaced by another of the same name) although the cache still has
// it.
var errDeletedMeanwhile = errors.New("the Foo was deleted meanwhile")

// deletedMeanwhile returns errDeletedMeanwhile if foo, whose Deployment the
// cache no longer has, is gone from the API server although the cache
// still has it. The garbage collector deletes a Foo's Deployment once the
// Foo is gone, and the two informers are independent: the Deployment's
// deletion can arrive first, and its sync would create the Deployment
// again (and tell the user so) for a Foo that no longer exists, and write
// its status onto a successor of the same name. Only a Foo whose Deployment of this
// name was in place at an earlier sync (its record says it was pruned with
// this name, in any generation: an edit just before the deletion must not
// hide it) is asked about, with one GET: a new Foo, a renamed Deployment,
// a create the API server refused cost nothing more, and a Deployment
// someone deleted by hand is created again after that one request.
func (c *Controller) deletedMeanwhile(ctx context.Context, foo *samplev1beta1.Foo, rec *record) error {
	if rec.pruned.deploymentName != foo.Spec.Deployment.Name {
		return nil
	}
	live, err := c.fooclientset.SamplecontrollerV1beta1().Foos(foo.Namespace).Get(ctx, foo.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) || (err == nil && live.UID != foo.UID) {
		klog.FromContext(ctx).V(2).Info("Foo was deleted; not creating its Deployment again")
		return errDeletedMeanwhile
	}
	if err != nil {
		return fmt.Errorf("reading the Foo before creating its Deployment again: %w", err)
	}
	return nil
}
