package main

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"

	samplev1beta1 "example.com/foo-controller/pkg/apis/samplecontroller/v1beta1"
	"example.com/foo-controller/pkg/caches"
	"example.com/foo-controller/pkg/plan"
)

// addEventHandlers turns every change the informers see into the keys of
// the Foos it concerns. The handlers only enqueue: the queue remains the
// only place where work is decided.
func (c *Controller) addEventHandlers(deploymentInformer, fooInformer cache.SharedIndexInformer) error {
	if _, err := fooInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueueFoo,
		UpdateFunc: c.handleFooUpdate,
		DeleteFunc: c.handleFooDelete,
	}); err != nil {
		return fmt.Errorf("adding Foo event handler: %w", err)
	}
	if _, err := deploymentInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.handleDeployment,
		UpdateFunc: c.handleDeploymentUpdate,
		DeleteFunc: c.handleDeploymentDelete,
	}); err != nil {
		return fmt.Errorf("adding Deployment event handler: %w", err)
	}
	return nil
}

// enqueueFoo adds a Foo's key to the queue, in the slow lane: a new Foo's
// first sync waits its turn.
func (c *Controller) enqueueFoo(obj any) {
	c.addFoo(obj, false)
}

// handleFooUpdate enqueues an updated Foo. A spec change (a new generation,
// as kubectl scale makes) or the start of its deletion is a user asking for
// something of a Foo that already runs: it is expedited, so that it does
// not wait behind the first syncs of a burst of new Foos. Other updates (our
// own status writes coming back, a label) wait their turn.
func (c *Controller) handleFooUpdate(oldObj, newObj any) {
	oldFoo, okOld := oldObj.(*samplev1beta1.Foo)
	newFoo, okNew := newObj.(*samplev1beta1.Foo)
	asked := okOld && okNew && (newFoo.Generation != oldFoo.Generation ||
		(newFoo.DeletionTimestamp != nil && oldFoo.DeletionTimestamp == nil))
	c.addFoo(newObj, asked)
}

// handleFooDelete enqueues a deleted Foo, expedited like the start of its
// deletion. It still gets a sync, which finds it gone and forgets what the
// controller kept about it.
func (c *Controller) handleFooDelete(obj any) {
	c.addFoo(obj, true)
}

// addFoo adds a Foo's key, in the fast lane if expedite is set. It accepts
// the tombstone an informer hands to DeleteFunc when it missed the deletion
// itself.
func (c *Controller) addFoo(obj any, expedite bool) {
	key, err := cache.DeletionHandlingObjectToName(obj)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	if expedite {
		c.workqueue.AddExpedited(key)
		return
	}
	c.workqueue.Add(key)
}

// handleDeployment enqueues every Foo a Deployment event may concern: the
// Foo that controls it (checked by UID, so a recreated Foo of the same name
// is not confused with its predecessor) and the Foos that want its name
// (so a Foo blocked by a foreign Deployment notices when it changes or goes).
func (c *Controller) handleDeployment(obj any) {
	dep, ok := obj.(*plan.DeploymentView)
	if !ok {
		tombstone, ok := obj.(cache.DeletedFinalStateUnknown)
		if !ok {
			utilruntime.HandleError(fmt.Errorf("unexpected object type %T in Deployment handler", obj))
			return
		}
		if dep, ok = tombstone.Obj.(*plan.DeploymentView); !ok {
			utilruntime.HandleError(fmt.Errorf("unexpected tombstone object type %T in Deployment handler", tombstone.Obj))
			return
		}
	}
	if ref := plan.ControllerFoo(dep); ref != nil {
		foo, err := c.foosLister.In(dep.Namespace).Get(ref.Name)
		if err == nil && foo.UID == ref.UID {
			// Its Deployment exists and changed: report or repair before
			// starting on Foos that have no Deployment yet.
			c.workqueue.AddExpedited(cache.MetaObjectToName(foo))
		}
	}
	// Every Foo that wants this name, ours or blocked by it (the
	// controlling Foo is among them, added twice: the queue keeps one).
	foos, err := c.foosLister.ByIndex(caches.FooByDeploymentName, dep.Namespace+"/"+dep.Name)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	for _, obj := range foos {
		c.workqueue.Add(cache.MetaObjectToName(obj.(*samplev1beta1.Foo)))
	}
}

// handleDeploymentUpdate is handleDeployment for updates.
func (c *Controller) handleDeploymentUpdate(oldObj, newObj any) {
	oldDep, newDep := oldObj.(*plan.DeploymentView), newObj.(*plan.DeploymentView)
	if oldDep.ResourceVersion == newDep.ResourceVersion {
		// A re-delivery of an unchanged object (a relist after a watch
		// expired; Deployments are not resynced, see caches.New): nothing new.
		return
	}
	// If the controller reference changed, the old controller must hear of
	// it too (it may have lost its Deployment).
	if !equalControllerRef(oldDep, newDep) {
		c.handleDeployment(oldDep)
	}
	c.handleDeployment(newDep)
}

// handleDeploymentDelete is handleDeployment for deletions.
func (c *Controller) handleDeploymentDelete(obj any) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	if dep, ok := obj.(*plan.DeploymentView); ok {
		// So that our copy of a Deployment we wrote does not outlive the
		// Deployment itself.
		c.deploymentsLister.OnDelete(dep)
	}
	c.handleDeployment(obj)
}

func equalControllerRef(a, b *plan.DeploymentView) bool {
	ra, rb := metav1.GetControllerOfNoCopy(a), metav1.GetControllerOfNoCopy(b)
	if ra == nil || rb == nil {
		return ra == rb
	}
	return ra.UID == rb.UID
}
