package main

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	samplev1beta1 "example.com/foo-controller/pkg/apis/samplecontroller/v1beta1"
	"example.com/foo-controller/pkg/caches"
	"example.com/foo-controller/pkg/plan"
)

// syncFinalizer adds the orphan finalizer to a Foo whose deletionPolicy is
// Orphan and removes it when the policy is Delete. It returns the Foo to go
// on with: the API server's answer if it patched, nil if the Foo is gone,
// otherwise foo itself.
func (c *Controller) syncFinalizer(ctx context.Context, foo *samplev1beta1.Foo) (*samplev1beta1.Foo, error) {
	patch, needed, err := plan.FinalizerPatch(foo, plan.WantsOrphanFinalizer(foo))
	if err != nil || !needed {
		return foo, err
	}
	updated, err := c.fooclientset.SamplecontrollerV1beta1().Foos(foo.Namespace).Patch(ctx, foo.Name,
		types.MergePatchType, patch, metav1.PatchOptions{FieldManager: controllerName})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("updating finalizers: %w", err)
	}
	c.foosLister.Mutation(trimmedFoo(updated))
	klog.FromContext(ctx).V(2).Info("Updated finalizers", "finalizers", updated.Finalizers)
	return updated, nil
}

// finalize handles a Foo that is being deleted. Only a Foo holding our
// finalizer needs anything: with the Orphan policy, the controller first
// removes its owner reference from every Deployment it controls, and only
// then the finalizer. In that order a crash at any point is safe: the next
// sync finds the finalizer still there and repeats whatever is left (both
// steps are no-ops once done), and the garbage collector cannot delete the
// Deployment while the finalizer keeps the Foo in existence.
func (c *Controller) finalize(ctx context.Context, foo *samplev1beta1.Foo) error {
	if !plan.HasOrphanFinalizer(foo) {
		return nil
	}
	if foo.Spec.DeletionPolicy == samplev1beta1.DeletionPolicyOrphan {
		if err := c.orphanDeployments(ctx, foo); err != nil {
			return err
		}
	}
	patch, _, err := plan.FinalizerPatch(foo, false)
	if err != nil {
		return err
	}
	_, err = c.fooclientset.SamplecontrollerV1beta1().Foos(foo.Namespace).Patch(ctx, foo.Name,
		types.MergePatchType, patch, metav1.PatchOptions{FieldManager: controllerName})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("removing finalizer: %w", err)
	}
	klog.FromContext(ctx).V(2).Info("Removed finalizer; the Foo can go")
	return nil
}

// reasonOrphaned is the Event recorded for each Deployment the Orphan
// deletion policy leaves behind.
const reasonOrphaned = "Orphaned"

// orphanDeployments removes foo's controller reference from its Deployments.
// It lists them from the API server rather than the cache: a Deployment
// created moments ago may not be in the cache yet, and missing it here would
// let the garbage collector delete what the user asked to keep. This is the
// controller's only List call, made only while an Orphan Foo is terminating.
func (c *Controller) orphanDeployments(ctx context.Context, foo *samplev1beta1.Foo) error {
	list, err := c.kubeclientset.AppsV1().Deployments(foo.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(plan.SelectorLabels(foo)).String(),
	})
	if err != nil {
		return fmt.Errorf("listing Deployments to orphan: %w", err)
	}
	// The label may have been removed by hand; the index still knows the
	// Deployments by their owner reference.
	deps := map[string]*plan.DeploymentView{}
	for i := range list.Items {
		deps[list.Items[i].Name] = plan.NewDeploymentView(&list.Items[i])
	}
	cached, err := c.deploymentsLister.ByIndex(caches.DeploymentByFooUID, string(foo.UID))
	if err != nil {
		return err
	}
	for _, obj := range cached {
		if dep := obj.(*plan.DeploymentView); deps[dep.Name] == nil {
			deps[dep.Name] = dep
		}
	}
	for _, dep := range deps {
		patch, needed, err := plan.RemoveControllerRefPatch(dep, foo.UID)
		if err != nil {
			return err
		}
		if !needed {
			continue
		}
		patched, err := c.kubeclientset.AppsV1().Deployments(dep.Namespace).Patch(ctx, dep.Name, types.JSONPatchType, patch,
			metav1.PatchOptions{FieldManager: controllerName})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("removing owner reference from Deployment %s: %w", dep.Name, err)
		}
		c.deploymentsLister.Mutation(plan.NewDeploymentView(patched))
		klog.FromContext(ctx).V(2).Info("Orphaned Deployment", "deployment", klog.KObj(dep))
		c.event(foo, dep, corev1.EventTypeNormal, reasonOrphaned, "OrphanDeployment",
			"Removed owner reference from Deployment %s (deletionPolicy Orphan); it is kept", dep.Name)
	}
	return nil
}
