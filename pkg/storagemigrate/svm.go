package storagemigrate

import (
	"context"
	"fmt"
	"slices"
	"time"

	svmv1beta1 "k8s.io/api/storagemigration/v1beta1"
	"k8s.io/apiextensions-apiserver/pkg/apihelpers"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	applyextensionsv1 "k8s.io/apiextensions-apiserver/pkg/client/applyconfiguration/apiextensions/v1"
	apiextensions "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

var svmGroupVersion = svmv1beta1.SchemeGroupVersion.String()

// servesMigrations reports whether the API server serves
// StorageVersionMigrations.
func servesMigrations(kube kubernetes.Interface) (bool, error) {
	resources, err := kube.Discovery().ServerResourcesForGroupVersion(svmGroupVersion)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("discovering %s: %w", svmGroupVersion, err)
	}
	return slices.ContainsFunc(resources.APIResources, func(r metav1.APIResource) bool { return r.Name == "storageversionmigrations" }), nil
}

// coOwnStoredVersions makes Migrate's field manager an owner of the CRD's
// status.storedVersions, at their value now, before a
// StorageVersionMigration begins. kube-controller-manager 1.36's migration
// runner applies the CRD's status as it begins a migration (and as it ends
// one it may not trim) without storedVersions; if the field is its alone,
// from the trim of a migration before, server-side apply removes it, and
// the API server puts back the storage version alone: storedVersions
// trimmed before a single object moved, and the old version removable
// from the CRD over objects still stored in it (found by the attack on a
// second migration, TestStorageMigration/StorageVersionMigration shows
// it). A field with another owner is not removed when one applier drops
// it; the runner's trim, forced, still replaces it. The apply carries the
// resourceVersion just read: it sets nothing new.
func coOwnStoredVersions(ctx context.Context, ext apiextensions.Interface, name string) error {
	crds := ext.ApiextensionsV1().CustomResourceDefinitions()
	crd, err := crds.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	apply := applyextensionsv1.CustomResourceDefinition(name).
		WithResourceVersion(crd.ResourceVersion).
		WithStatus(applyextensionsv1.CustomResourceDefinitionStatus().WithStoredVersions(crd.Status.StoredVersions...))
	if _, err := crds.ApplyStatus(ctx, apply, metav1.ApplyOptions{FieldManager: fieldManager}); err != nil {
		return fmt.Errorf("owning the storedVersions of CRD %s before the migration (so that kube-controller-manager cannot drop them as it begins): %w", name, err)
	}
	return nil
}

// migrateOnServer waits for a StorageVersionMigration of the CRD's
// resource to succeed or fail: one not finished yet, if it began after the
// storage version settled (kube-controller-manager runs one per resource
// at a time: another would only queue behind it), else a new one.
func migrateOnServer(ctx context.Context, kube kubernetes.Interface, crd *apiextensionsv1.CustomResourceDefinition, o Options) (string, error) {
	logger := klog.FromContext(ctx)
	svms := kube.StoragemigrationV1beta1().StorageVersionMigrations()
	resource := metav1.GroupResource{Group: crd.Spec.Group, Resource: crd.Spec.Names.Plural}
	list, err := svms.List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", fmt.Errorf("listing StorageVersionMigrations: %w", err)
	}
	var svm *svmv1beta1.StorageVersionMigration
	changed := lastChanged(crd)
	for i := range list.Items {
		m := &list.Items[i]
		if m.Spec.Resource != resource || finished(m) {
			continue
		}
		if !reusable(m, changed, o.Settle) {
			logger.Info("A StorageVersionMigration begun before the storage version settled is still there; a new one queues behind it",
				"migration", m.Name, "created", m.CreationTimestamp, "crdChanged", changed)
			continue
		}
		svm = m
		logger.Info("Waiting for the StorageVersionMigration already there", "migration", svm.Name, "created", svm.CreationTimestamp)
	}
	if svm == nil {
		svm, err = svms.Create(ctx, &svmv1beta1.StorageVersionMigration{
			ObjectMeta: metav1.ObjectMeta{GenerateName: crd.Name + "-"},
			Spec:       svmv1beta1.StorageVersionMigrationSpec{Resource: resource},
		}, metav1.CreateOptions{})
		if err != nil {
			return "", fmt.Errorf("creating a StorageVersionMigration: %w", err)
		}
		logger.Info("Created a StorageVersionMigration; waiting for kube-controller-manager", "migration", svm.Name)
	}
	waiting := time.Now()
	reread := false  // the migration listed or created is looked at first
	var failed error // the condition's: the poll's own error is ctx's end
	err = wait.PollUntilContextCancel(ctx, o.PollEvery, true, func(ctx context.Context) (bool, error) {
		if reread {
			got, err := svms.Get(ctx, svm.Name, metav1.GetOptions{})
			if err != nil {
				failed = err
				return true, nil
			}
			svm = got
		}
		reread = true
		if c := meta.FindStatusCondition(svm.Status.Conditions, string(svmv1beta1.MigrationSucceeded)); c != nil && c.Status == metav1.ConditionTrue {
			return true, nil
		}
		if c := meta.FindStatusCondition(svm.Status.Conditions, string(svmv1beta1.MigrationFailed)); c != nil && c.Status == metav1.ConditionTrue {
			failed = fmt.Errorf("StorageVersionMigration %s failed: %s: %s", svm.Name, c.Reason, c.Message)
			return true, nil
		}
		// kube-controller-manager notes the resourceVersion to migrate up
		// to as soon as it sees a migration, queued or not.
		if svm.Status.ResourceVersion == "" && time.Since(waiting) > svmStartWait {
			failed = fmt.Errorf("StorageVersionMigration %s not begun after %v (no status.resourceVersion): kube-controller-manager is not running its storage-version-migrator-controller, "+
				"or cannot list %s (a conversion webhook down?); its log says which. -method=rewrite needs neither; the migration left behind runs when it can",
				svm.Name, svmStartWait, crd.Spec.Names.Plural)
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		return svm.Name, fmt.Errorf("StorageVersionMigration %s not finished when this stopped waiting (%v); kube-controller-manager goes on with it, "+
			"retrying the writes it could not make with a growing backoff (a conversion webhook down, for one: its log says why); run again to wait for it: %w",
			svm.Name, conditionSummary(svm.Status.Conditions), context.Cause(ctx))
	}
	return svm.Name, failed
}

// svmStartWait is how long a StorageVersionMigration may go without a
// status.resourceVersion before Migrate says nothing runs it. (A variable
// for the tests.)
var svmStartWait = time.Minute

// reusable reports whether a migration can stand for the one Migrate would
// create: one created at least settle after the CRD last changed. It skips
// every object written after the resourceVersion it noted at its start, as
// written in the new version already, which holds only once the switch
// had settled.
func reusable(svm *svmv1beta1.StorageVersionMigration, crdChanged time.Time, settle time.Duration) bool {
	return !crdChanged.IsZero() && !svm.CreationTimestamp.Time.Before(crdChanged.Add(settle))
}

// lastChanged is when the CRD's spec or metadata was last written, from
// its managedFields (the zero time if it cannot tell).
func lastChanged(crd *apiextensionsv1.CustomResourceDefinition) time.Time {
	var last time.Time
	for _, mf := range crd.ManagedFields {
		if mf.Subresource == "" && mf.Time != nil && mf.Time.After(last) {
			last = mf.Time.Time
		}
	}
	return last
}

func finished(svm *svmv1beta1.StorageVersionMigration) bool {
	return meta.IsStatusConditionTrue(svm.Status.Conditions, string(svmv1beta1.MigrationSucceeded)) ||
		meta.IsStatusConditionTrue(svm.Status.Conditions, string(svmv1beta1.MigrationFailed))
}

func conditionSummary(cs []metav1.Condition) []string {
	out := make([]string, 0, len(cs))
	for _, c := range cs {
		out = append(out, c.Type+"="+string(c.Status))
	}
	return out
}

// waitTrimmedByServer waits, for trimWait at most, for
// kube-controller-manager's migration runner to trim storedVersions after a
// StorageVersionMigration succeeded (a moment later). It trims them only
// if the CRD's generation has not moved since the migration began, which
// only it knows (the CRD's StorageMigrating condition).
func waitTrimmedByServer(ctx context.Context, ext apiextensions.Interface, name string, res Result, pollEvery time.Duration) error {
	var (
		now    *apiextensionsv1.CustomResourceDefinition // as last read
		want   []string
		failed error // the condition's: the poll's own error is a ctx's end
	)
	// The first read at once. Each read is under ctx, not the poll's
	// deadline: one under way at trimWait ends as it would have.
	werr := wait.PollUntilContextTimeout(ctx, pollEvery, trimWait, true, func(context.Context) (bool, error) {
		var err error
		if now, err = ext.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, name, metav1.GetOptions{}); err != nil {
			failed = fmt.Errorf("reading CRD %s after StorageVersionMigration %s: %w", name, res.Migration, err)
			return true, nil
		}
		storage, err := apihelpers.GetCRDStorageVersion(now)
		if err != nil {
			failed = fmt.Errorf("CRD %s: %w", name, err)
			return true, nil
		}
		want = []string{storage}
		return slices.Equal(now.Status.StoredVersions, want), nil
	})
	switch {
	case werr == nil:
		return failed
	case ctx.Err() != nil:
		return fmt.Errorf("waiting for storedVersions to be trimmed after StorageVersionMigration %s: %w", res.Migration, context.Cause(ctx))
	default: // trimWait ran out
		why := ""
		if c := apihelpers.FindCRDCondition(now, apiextensionsv1.StorageMigrating); c != nil {
			why = ": " + c.Message
		}
		return fmt.Errorf("StorageVersionMigration %s succeeded, but kube-controller-manager left storedVersions %v, not %v (the CRD changed while it ran%s); run again",
			res.Migration, now.Status.StoredVersions, want, why)
	}
}

// trimWait is how long after a StorageVersionMigration succeeded its trim
// of storedVersions may take. (A variable for the tests.)
var trimWait = 30 * time.Second
