package main

import (
	"context"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	samplev1beta1 "example.com/foo-controller/pkg/apis/samplecontroller/v1beta1"
	"example.com/foo-controller/pkg/plan"
)

// putBack applies foo's Deployment over dep, which has drifted. An apply
// takes back every field we own, but it cannot remove a list entry that
// another writer owns: when someone re-keyed our "http" port, the API
// server refuses the apply (duplicate port name), or, with the port unset
// on the Foo, accepts it and leaves theirs. Such strays are removed by a
// JSON patch. After an accepted apply, only if removing them converges the
// Deployment (plan.StrayEntriesPatch): otherwise the API server is not
// keeping what we declare (a mutating admission policy), and
// syncDeployment reports that instead of fighting it. After a refused
// apply, the patch puts our entry in their place (plan.ReplaceStrayEntriesPatch)
// and the apply is sent again; if the API server rewrote our entry once
// more, the apply is sent without it (plan.DesiredDeploymentWithoutPorts),
// so that the rest is still put back and no pod template ever lacks the
// port.
func (c *Controller) putBack(ctx context.Context, foo *samplev1beta1.Foo, dep *plan.DeploymentView) (updated *plan.DeploymentView, wrote bool, err error) {
	updated, err = c.applyDeployment(ctx, foo)
	switch {
	case err == nil && (len(plan.Drift(foo, updated)) == 0 || !plan.RemovingStraysConverges(foo, updated)):
		return updated, true, nil
	case err == nil:
		updated, err = c.removeStrays(ctx, foo, updated, plan.StrayEntriesPatch)
		return updated, true, err
	case !apierrors.IsInvalid(err):
		return nil, false, err
	}
	if _, ok, _ := plan.StrayEntriesPatch(foo, dep); !ok {
		return nil, false, err // refused for another reason
	}
	replaced, err := c.removeStrays(ctx, foo, dep, plan.ReplaceStrayEntriesPatch)
	if err != nil {
		return nil, false, err
	}
	if slices.Contains(plan.Drift(foo, replaced), "containerPort") {
		klog.FromContext(ctx).V(2).Info("The API server rewrote the port we put back; applying the other fields without it",
			"deployment", klog.KObj(replaced))
		updated, err = c.apply(ctx, foo, plan.DesiredDeploymentWithoutPorts(foo))
		return updated, true, err
	}
	updated, err = c.applyDeployment(ctx, foo)
	return updated, true, err
}

// removeStrays removes the list entries of dep that foo does not declare
// and that are ours to keep absent, with the patch strayPatch makes
// (plan.StrayEntriesPatch, or ReplaceStrayEntriesPatch to put ours in
// their place), and returns dep as the API server then has it (dep itself
// when there is nothing to remove).
func (c *Controller) removeStrays(ctx context.Context, foo *samplev1beta1.Foo, dep *plan.DeploymentView,
	strayPatch func(*samplev1beta1.Foo, *plan.DeploymentView) ([]byte, bool, error)) (*plan.DeploymentView, error) {
	patch, ok, err := strayPatch(foo, dep)
	if err != nil || !ok {
		return dep, err
	}
	patched, err := c.kubeclientset.AppsV1().Deployments(dep.Namespace).Patch(ctx, dep.Name, types.JSONPatchType, patch,
		metav1.PatchOptions{FieldManager: controllerName})
	if plan.FailedTest(err) {
		// Not wrapped (%v): a failed "test" comes back as 422 Invalid, but
		// it means only that our copy is behind; the watch brings the
		// newer one. It is retried like any failed request, not reported
		// as a refused Deployment.
		return nil, fmt.Errorf("removing entries another writer left in Deployment %s: %v", dep.Name, err) //nolint:errorlint // not a refusal: see above
	}
	if err != nil {
		// Anything else is what it says: an admission policy refusing the
		// patch is reported on the Foo like a refused apply.
		return nil, fmt.Errorf("removing entries another writer left in Deployment %s: %w", dep.Name, err)
	}
	klog.FromContext(ctx).V(2).Info("Removed entries another writer left in our container", "deployment", klog.KObj(patched))
	view := plan.NewDeploymentView(patched)
	c.deployments.Mutation(view)
	return view, nil
}
