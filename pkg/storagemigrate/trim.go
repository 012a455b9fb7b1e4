package storagemigrate

import (
	"context"
	"fmt"
	"slices"

	"k8s.io/apiextensions-apiserver/pkg/apihelpers"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensions "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
)

// trim sets status.storedVersions to the storage version alone after a
// rewrite, unless the CRD changed since the rewrite began (a new storage
// version, for one, whose switch the rewrite did not wait for: run again).
func trim(ctx context.Context, ext apiextensions.Interface, began *apiextensionsv1.CustomResourceDefinition) error {
	crds := ext.ApiextensionsV1().CustomResourceDefinitions()
	now, err := crds.Get(ctx, began.Name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if now.Generation != began.Generation {
		return fmt.Errorf("CRD %s changed while its objects were written again (generation %d, then %d); storedVersions left as they were; run again",
			began.Name, began.Generation, now.Generation)
	}
	storage, err := apihelpers.GetCRDStorageVersion(now)
	if err != nil {
		return fmt.Errorf("CRD %s: %w", began.Name, err)
	}
	want := []string{storage}
	if slices.Equal(now.Status.StoredVersions, want) {
		return nil
	}
	now.Status.StoredVersions = want
	// The update carries the resourceVersion just read: a CRD changed in
	// between is a conflict, not a lost write.
	if _, err := crds.UpdateStatus(ctx, now, metav1.UpdateOptions{FieldManager: fieldManager}); err != nil {
		return fmt.Errorf("trimming the storedVersions of CRD %s: %w", began.Name, err)
	}
	klog.FromContext(ctx).Info("Trimmed storedVersions", "crd", began.Name, "storedVersions", want)
	return nil
}
