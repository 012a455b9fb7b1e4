// Package storagemigrate moves a CRD's stored objects to its storage
// version and then trims the CRD's status.storedVersions, the step that
// makes an old version removable (docs/evolving-the-api.md, section 8).
//
// The API server writes an object in the storage version of the moment and
// never rewrites it on its own: objects written before the storage version
// changed stay encoded in the old one until something writes them again,
// and status.storedVersions keeps naming it until told otherwise. Dropping
// that version from the CRD while objects are still stored in it makes
// them unreadable, which is why the API server refuses to let it go while
// storedVersions names it.
//
// Two ways to write every object again:
//   - StorageVersionMigration (storagemigration.k8s.io): the API server's
//     own migration, where it is served (beta in 1.36 and off by default:
//     kube-apiserver and kube-controller-manager need the
//     StorageVersionMigrator feature gate, the API server the API enabled,
//     the controller manager its storage-version-migrator-controller). It
//     trims storedVersions itself when it succeeds.
//   - Rewrite: read each object and write it back unchanged. The API server
//     encodes every write in the storage version, and skips writing an
//     object whose encoding has not changed, so an object already in the
//     storage version is not written at all.
package storagemigrate

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"time"

	svmv1beta1 "k8s.io/api/storagemigration/v1beta1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensions "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// Method is how the stored objects are written again.
type Method string

const (
	// Auto uses StorageVersionMigration where the API server serves it,
	// else Rewrite.
	Auto Method = "auto"
	// StorageVersionMigration asks the API server's own migration.
	StorageVersionMigration Method = "storageversionmigration"
	// Rewrite writes each object back unchanged from here.
	Rewrite Method = "rewrite"
)

// Clients are what Migrate talks to the API server with.
type Clients struct {
	Kube          kubernetes.Interface // discovery, StorageVersionMigrations
	APIExtensions apiextensions.Interface
	Dynamic       dynamic.Interface // the custom resources, for Rewrite
}

// Result says what Migrate did.
type Result struct {
	// Method is the one used; empty when there was nothing to do.
	Method Method
	// StorageVersion is the CRD's storage version, the one every object
	// is stored in now.
	StorageVersion string
	// Before is status.storedVersions as found.
	Before []string
	// Written and Unchanged count the objects Rewrite wrote (they were in
	// an older version) and those it found in the storage version already
	// (the write changed nothing, so the API server stored nothing). Gone
	// counts those deleted while it went.
	Written, Unchanged, Gone int
	// Migration is the StorageVersionMigration's name.
	Migration string
}

// pageSize bounds each list of Rewrite: one page of objects in memory at a
// time, whatever the number stored.
const pageSize = 500

// maxRestarts bounds how often Rewrite lists again from the start after
// its list expired.
const maxRestarts = 3

// conflictRetries bounds how often Rewrite reads an object again after
// another writer changed it between the read and the write.
const conflictRetries = 5

// Migrate moves every stored object of the CRD named crd to its storage
// version and trims status.storedVersions to it. It returns an error, and
// leaves storedVersions as it was, if any object could not be written (for
// example, its conversion webhook refused or is down) or if the CRD
// changed on the way; running it again is safe.
func Migrate(ctx context.Context, c Clients, crd string, method Method, pollEvery time.Duration) (Result, error) {
	logger := klog.FromContext(ctx)
	got, err := c.APIExtensions.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd, metav1.GetOptions{})
	if err != nil {
		return Result{}, err
	}
	res := Result{StorageVersion: storageVersion(got), Before: slices.Clone(got.Status.StoredVersions)}
	if res.StorageVersion == "" {
		return res, fmt.Errorf("CRD %s has no storage version", crd)
	}
	if slices.Equal(got.Status.StoredVersions, []string{res.StorageVersion}) {
		logger.Info("Nothing to migrate: every object is stored in the storage version", "crd", crd, "storageVersion", res.StorageVersion)
		return res, nil
	}
	// The API server switches storage versions some moments after the CRD
	// changes; a rewrite before that would write the old encoding again.
	if err := waitStoring(ctx, c.Kube, got, res.StorageVersion, pollEvery); err != nil {
		return res, err
	}
	if method == Auto {
		method = Rewrite
		if served, err := servesMigrations(c.Kube); err != nil {
			return res, err
		} else if served {
			method = StorageVersionMigration
		}
	}
	res.Method = method
	logger.Info("Migrating stored objects", "crd", crd, "storageVersion", res.StorageVersion, "storedVersions", got.Status.StoredVersions, "method", method)
	switch method {
	case StorageVersionMigration:
		if res.Migration, err = migrateOnServer(ctx, c.Kube, got, pollEvery); err != nil {
			return res, err
		}
		// The API server trims storedVersions itself, only if the CRD has
		// not changed since the migration began, which only it knows.
		return res, trimmedByServer(ctx, c.APIExtensions, got.Name, res, pollEvery)
	case Rewrite:
		if err := rewrite(ctx, c.Dynamic, got, &res); err != nil {
			return res, err
		}
	default:
		return res, fmt.Errorf("unknown method %q (want %s, %s or %s)", method, Auto, StorageVersionMigration, Rewrite)
	}
	return res, trim(ctx, c.APIExtensions, got)
}

func storageVersion(crd *apiextensionsv1.CustomResourceDefinition) string {
	for _, v := range crd.Spec.Versions {
		if v.Storage {
			return v.Name
		}
	}
	return ""
}

// waitStoring waits until the API server's discovery names version as the
// one the CRD's objects are stored in (the storageVersionHash of each
// resource). Behind a load balancer each poll may reach another API
// server; several in a row must agree.
func waitStoring(ctx context.Context, kube kubernetes.Interface, crd *apiextensionsv1.CustomResourceDefinition, version string, pollEvery time.Duration) error {
	want := storageVersionHash(crd.Spec.Group, version, crd.Spec.Names.Kind)
	ctx, cancel := context.WithTimeout(ctx, storingWait)
	defer cancel()
	const agree = 3
	var got string
	for n := 0; n < agree; {
		resources, err := kube.Discovery().ServerResourcesForGroupVersion(crd.Spec.Group + "/" + version)
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("discovering %s/%s: %w", crd.Spec.Group, version, err)
		}
		got = ""
		if resources != nil {
			for _, r := range resources.APIResources {
				if r.Name == crd.Spec.Names.Plural {
					got = r.StorageVersionHash
				}
			}
		}
		if got == want {
			n++
			continue
		}
		n = 0
		select {
		case <-ctx.Done():
			return fmt.Errorf("the API server does not store %s in %s yet (discovery's storageVersionHash %q, want %q): %w",
				crd.Spec.Names.Plural, version, got, want, context.Cause(ctx))
		case <-time.After(pollEvery):
		}
	}
	return nil
}

// storageVersionHash is discovery's hash of a storage version, as
// k8s.io/apiserver/pkg/endpoints/discovery.StorageVersionHash computes it
// (that package would bring the API server's dependencies into ours):
// the first 8 bytes of the SHA-256 of group/version/kind, in base64.
func storageVersionHash(group, version, kind string) string {
	sum := sha256.Sum256([]byte(group + "/" + version + "/" + kind))
	return base64.StdEncoding.EncodeToString(sum[:8])
}

// storingWait bounds waitStoring: an API server takes a moment to switch,
// not minutes.
const storingWait = time.Minute

// servesMigrations reports whether the API server serves
// StorageVersionMigrations.
func servesMigrations(kube kubernetes.Interface) (bool, error) {
	resources, err := kube.Discovery().ServerResourcesForGroupVersion(svmv1beta1.SchemeGroupVersion.String())
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("discovering %s: %w", svmv1beta1.SchemeGroupVersion, err)
	}
	return slices.ContainsFunc(resources.APIResources, func(r metav1.APIResource) bool { return r.Name == "storageversionmigrations" }), nil
}

// migrateOnServer waits for the CRD's resource's StorageVersionMigration
// that is not finished yet, if there is one (the API server runs one per
// resource at a time: another would only queue behind it), or else creates
// one; it returns when that one has succeeded or failed.
func migrateOnServer(ctx context.Context, kube kubernetes.Interface, crd *apiextensionsv1.CustomResourceDefinition, pollEvery time.Duration) (string, error) {
	logger := klog.FromContext(ctx)
	svms := kube.StoragemigrationV1beta1().StorageVersionMigrations()
	resource := metav1.GroupResource{Group: crd.Spec.Group, Resource: crd.Spec.Names.Plural}
	list, err := svms.List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", fmt.Errorf("listing StorageVersionMigrations: %w", err)
	}
	var svm *svmv1beta1.StorageVersionMigration
	for i := range list.Items {
		if m := &list.Items[i]; m.Spec.Resource == resource && !finished(m) {
			svm = m
			logger.Info("Waiting for the StorageVersionMigration already there", "migration", svm.Name, "since", svm.CreationTimestamp)
		}
	}
	if svm == nil {
		svm, err = svms.Create(ctx, &svmv1beta1.StorageVersionMigration{
			ObjectMeta: metav1.ObjectMeta{GenerateName: crd.Name + "-"},
			Spec:       svmv1beta1.StorageVersionMigrationSpec{Resource: resource},
		}, metav1.CreateOptions{})
		if err != nil {
			return "", fmt.Errorf("creating a StorageVersionMigration: %w", err)
		}
		logger.Info("Created a StorageVersionMigration; waiting for the API server", "migration", svm.Name)
	}
	for {
		if c := meta.FindStatusCondition(svm.Status.Conditions, string(svmv1beta1.MigrationSucceeded)); c != nil && c.Status == metav1.ConditionTrue {
			return svm.Name, nil
		}
		if c := meta.FindStatusCondition(svm.Status.Conditions, string(svmv1beta1.MigrationFailed)); c != nil && c.Status == metav1.ConditionTrue {
			return svm.Name, fmt.Errorf("StorageVersionMigration %s failed: %s: %s", svm.Name, c.Reason, c.Message)
		}
		select {
		case <-ctx.Done():
			return svm.Name, fmt.Errorf("StorageVersionMigration %s not finished (%v): kube-controller-manager retries the writes it could not make "+
				"with a growing backoff (a conversion webhook down, for one; its log says why), and goes on after this; run again to wait for it: %w",
				svm.Name, conditionSummary(svm.Status.Conditions), context.Cause(ctx))
		case <-time.After(pollEvery):
		}
		got, err := svms.Get(ctx, svm.Name, metav1.GetOptions{})
		if err != nil {
			return svm.Name, err
		}
		svm = got
	}
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

// rewrite writes every object of the CRD back unchanged, in pages, in the
// storage version (no conversion on the way for objects already in it).
func rewrite(ctx context.Context, dyn dynamic.Interface, crd *apiextensionsv1.CustomResourceDefinition, res *Result) error {
	logger := klog.FromContext(ctx)
	gvr := schema.GroupVersionResource{Group: crd.Spec.Group, Version: res.StorageVersion, Resource: crd.Spec.Names.Plural}
	client := dyn.Resource(gvr)
	var failed []error
	opts := metav1.ListOptions{Limit: pageSize}
	restarts := 0
	for {
		page, err := client.List(ctx, opts)
		if apierrors.IsResourceExpired(err) && restarts < maxRestarts {
			// The continue token outlived etcd's compaction (5 minutes by
			// default): list again from the start. What is written already
			// is not written again (its encoding is the stored one).
			restarts++
			logger.Info("The list expired; listing again from the start", "restarts", restarts)
			opts.Continue = ""
			continue
		}
		if err != nil {
			return fmt.Errorf("listing %s: %w", gvr.GroupResource(), err)
		}
		for i := range page.Items {
			obj := &page.Items[i]
			ns, name := obj.GetNamespace(), obj.GetName()
			ri := client.Namespace(ns)
			for try := 0; ; try++ {
				before := obj.GetResourceVersion()
				out, err := ri.Update(ctx, obj, metav1.UpdateOptions{FieldManager: "foo-migrate-storage"})
				if err == nil {
					if out.GetResourceVersion() == before {
						res.Unchanged++
					} else {
						res.Written++
					}
					break
				}
				if apierrors.IsNotFound(err) {
					res.Gone++
					break
				}
				if !apierrors.IsConflict(err) || try == conflictRetries {
					failed = append(failed, fmt.Errorf("%s/%s: %w", ns, name, err))
					break
				}
				// Changed since the list: whoever wrote it wrote it in
				// the storage version, but read it again and write that.
				if obj, err = ri.Get(ctx, name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
					res.Gone++
					break
				} else if err != nil {
					failed = append(failed, fmt.Errorf("%s/%s: %w", ns, name, err))
					break
				}
			}
		}
		logger.V(2).Info("Rewrote a page", "written", res.Written, "unchanged", res.Unchanged, "failed", len(failed))
		if opts.Continue = page.GetContinue(); opts.Continue == "" {
			break
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d of %s could not be written again, storedVersions left as they were; run again when the cause is fixed: %w",
			len(failed), gvr.GroupResource(), errors.Join(failed[:min(len(failed), 5)]...))
	}
	return nil
}

// trimmedByServer waits, for trimWait at most, for the API server to trim
// storedVersions after a StorageVersionMigration succeeded (a moment
// later).
func trimmedByServer(ctx context.Context, ext apiextensions.Interface, name string, res Result, pollEvery time.Duration) error {
	deadline := time.Now().Add(trimWait)
	for {
		now, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		want := []string{storageVersion(now)}
		if slices.Equal(now.Status.StoredVersions, want) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("StorageVersionMigration %s succeeded, but the API server left storedVersions %v, not %v (the CRD changed while it ran?); run again",
				res.Migration, now.Status.StoredVersions, want)
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(pollEvery):
		}
	}
}

// trimWait is how long after a StorageVersionMigration succeeded its trim
// of storedVersions may take.
const trimWait = 30 * time.Second

// trim sets status.storedVersions to the storage version alone, unless the
// CRD changed since the migration began (a new storage version, or a new
// version served: run again) or it is trimmed already (the API server's
// own migration does it).
func trim(ctx context.Context, ext apiextensions.Interface, began *apiextensionsv1.CustomResourceDefinition) error {
	crds := ext.ApiextensionsV1().CustomResourceDefinitions()
	now, err := crds.Get(ctx, began.Name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if now.Generation != began.Generation {
		return fmt.Errorf("CRD %s changed while its objects were migrated (generation %d, then %d); run again", began.Name, began.Generation, now.Generation)
	}
	want := []string{storageVersion(now)}
	if slices.Equal(now.Status.StoredVersions, want) {
		return nil
	}
	now.Status.StoredVersions = want
	// The update carries the resourceVersion just read: a CRD changed in
	// between is a conflict, not a lost write.
	if _, err := crds.UpdateStatus(ctx, now, metav1.UpdateOptions{FieldManager: "foo-migrate-storage"}); err != nil {
		return fmt.Errorf("trimming the storedVersions of CRD %s: %w", began.Name, err)
	}
	klog.FromContext(ctx).Info("Trimmed storedVersions", "crd", began.Name, "storedVersions", want)
	return nil
}
