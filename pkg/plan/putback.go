package plan

import (
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	appsv1apply "k8s.io/client-go/applyconfigurations/apps/v1"
	"k8s.io/klog/v2"

	samplev1beta1 "example.com/foo-controller/pkg/apis/samplecontroller/v1beta1"
)

// DeploymentWrites are the requests PutBack makes, on one Deployment.
type DeploymentWrites struct {
	// Apply server-side applies the configuration, forcing conflicts.
	Apply func(*appsv1apply.DeploymentApplyConfiguration) (*DeploymentView, error)
	// JSONPatch sends a JSON patch to the named Deployment.
	JSONPatch func(name string, patch []byte) (*DeploymentView, error)
}

// PutBack applies foo's Deployment over dep, which has drifted, and
// reports whether it wrote anything. An apply
// takes back every field we own, but it cannot remove a list entry that
// another writer owns: when someone re-keyed our "http" port, the API
// server refuses the apply (duplicate port name), or, with the port unset
// on the Foo, accepts it and leaves theirs. Such strays are removed by a
// JSON patch. After an accepted apply, only if removing them converges the
// Deployment (removeStrayEntriesPatch): otherwise the API server is not
// keeping what we declare (a mutating admission policy), and
// syncDeployment reports that instead of fighting it. After a refused
// apply, the patch puts our entry in their place (replaceStrayEntriesPatch)
// and the apply is sent again; if the API server rewrote our entry once
// more, the apply is sent without it (desiredDeploymentWithoutPorts),
// so that the rest is still put back and no pod template ever lacks the
// port.
func PutBack(logger klog.Logger, foo *samplev1beta1.Foo, dep *DeploymentView, w DeploymentWrites) (updated *DeploymentView, wrote bool, err error) {
	updated, err = w.Apply(DesiredDeployment(foo))
	switch {
	case err == nil && (len(Drift(foo, updated)) == 0 || !removingStraysConverges(foo, updated)):
		return updated, true, nil
	case err == nil:
		updated, err = removeStrays(logger, foo, updated, removeStrayEntriesPatch, w)
		return updated, true, err
	case !apierrors.IsInvalid(err):
		return nil, false, err
	}
	if _, ok, _ := removeStrayEntriesPatch(foo, dep); !ok {
		return nil, false, err // refused for another reason
	}
	replaced, err := removeStrays(logger, foo, dep, replaceStrayEntriesPatch, w)
	if err != nil {
		return nil, false, err
	}
	if slices.Contains(Drift(foo, replaced), "containerPort") {
		logger.V(2).Info("The API server rewrote the port we put back; applying the other fields without it",
			"deployment", klog.KObj(replaced))
		updated, err = w.Apply(desiredDeploymentWithoutPorts(foo))
		return updated, true, err
	}
	updated, err = w.Apply(DesiredDeployment(foo))
	return updated, true, err
}

// removeStrays removes the list entries of dep that foo does not declare
// and that are ours to keep absent, with the patch strayPatch makes
// (removeStrayEntriesPatch, or replaceStrayEntriesPatch to put ours in
// their place), and returns dep as the API server then has it (dep itself
// when there is nothing to remove).
func removeStrays(logger klog.Logger, foo *samplev1beta1.Foo, dep *DeploymentView,
	strayPatch func(*samplev1beta1.Foo, *DeploymentView) ([]byte, bool, error), w DeploymentWrites) (*DeploymentView, error) {
	patch, ok, err := strayPatch(foo, dep)
	if err != nil || !ok {
		return dep, err
	}
	patched, err := w.JSONPatch(dep.Name, patch)
	if FailedTest(err) {
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
	logger.V(2).Info("Removed entries another writer left in our container", "deployment", klog.KObj(patched))
	return patched, nil
}
