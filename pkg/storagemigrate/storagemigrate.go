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
//   - StorageVersionMigration (storagemigration.k8s.io, svm.go):
//     kube-controller-manager's migration, where it is served (beta in 1.36
//     and off by default: kube-apiserver and kube-controller-manager need
//     the StorageVersionMigrator feature gate, the API server the API
//     enabled, the controller manager its
//     storage-version-migrator-controller). Its migration runner trims
//     storedVersions when a migration succeeds.
//   - Rewrite (rewrite.go): read each object and write it back unchanged.
//     The API server encodes every write in the storage version, and skips
//     writing an object whose encoding has not changed, so an object
//     already in the storage version is not written at all. Then trim.go
//     trims storedVersions.
//
// Either way, nothing is written before the API server has stored in the
// new version for a while (storing.go). With Options.ManagedFields, the
// managed-fields entries recorded in an old version are moved to the
// storage version too (managedfields.go), which the API server never does.
package storagemigrate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"k8s.io/apiextensions-apiserver/pkg/apihelpers"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensions "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// fieldManager names Migrate's writes.
const fieldManager = "foo-migrate-storage"

// Method is how the stored objects are written again.
type Method string

const (
	// Auto uses StorageVersionMigration where the API server serves it,
	// else Rewrite.
	Auto Method = "auto"
	// StorageVersionMigration asks kube-controller-manager's migration.
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

// Options tune Migrate; the zero value is the defaults.
type Options struct {
	// Method: default Auto.
	Method Method
	// Settle is how long the API server's discovery must go on naming the
	// new storage version before anything is written. Default: a minute,
	// the API server's default request timeout: a write that began on the
	// old storage before the switch may still be stored in the old version
	// until then (the API server drains the old storage's requests).
	Settle time.Duration
	// PollEvery is how often discovery, a StorageVersionMigration and the
	// CRD are read while waiting. Default: 2 s.
	PollEvery time.Duration
	// PageSize bounds each list of Rewrite: one page of objects in memory at
	// a time. Default: 500.
	PageSize int64
	// Force migrates even when storedVersions name the storage version
	// alone: for a storedVersions trimmed too early.
	Force bool
	// ManagedFields moves the managed-fields entries recorded in an older
	// version to the storage version (managedfields.go), in the rewrite's
	// write of each object, or, after a StorageVersionMigration or when
	// every object is stored in the storage version already, in a write of
	// each object that has such an entry. Default: none (entries stay in
	// the version they were recorded in).
	ManagedFields []FieldsConversion
}

func (o Options) withDefaults() Options {
	if o.Method == "" {
		o.Method = Auto
	}
	if o.Settle == 0 {
		o.Settle = time.Minute
	}
	if o.PollEvery == 0 {
		o.PollEvery = 2 * time.Second
	}
	if o.PageSize == 0 {
		o.PageSize = 500
	}
	return o
}

// Result says what Migrate did.
type Result struct {
	// Method is the one used; empty when there was nothing to do.
	Method Method
	// StorageVersion is the CRD's storage version, the one every object
	// is stored in now.
	StorageVersion string
	// StoredVersionsBefore is status.storedVersions as found.
	StoredVersionsBefore []string
	// Rewrite's counts: objects written (they were in an older version),
	// found in the storage version already (the write changed nothing,
	// so the API server stored nothing), written by another writer first
	// (in the storage version, after the switch settled), and deleted
	// while it went. With ManagedFields, the pass that moves managed
	// fields after a StorageVersionMigration counts the same way, an
	// object with no entry to move being unchanged.
	Written, Unchanged, Overtaken, Gone int
	// FieldsMoved counts the objects whose managed fields were moved
	// (written, among Written); FieldsLeft those whose managed fields
	// could not be (each logged; Migrate's error says how many).
	FieldsMoved, FieldsLeft int
	fieldsErrs              []error // the first few of FieldsLeft
	// Migration is the StorageVersionMigration's name.
	Migration string
}

// Migrate moves every stored object of the CRD named crd to its storage
// version and trims status.storedVersions to it. It returns an error, and
// leaves storedVersions as they were, if any object could not be written
// (for example, its conversion webhook refused or is down) or if the CRD
// changed on the way; running it again is safe. Managed fields it could
// not move (o.ManagedFields) do not hold up the trim, which does not
// depend on them: they are an error of their own, at the end.
func Migrate(ctx context.Context, c Clients, crd string, o Options) (Result, error) {
	res, err := migrate(ctx, c, crd, o)
	if res.FieldsLeft > 0 {
		err = errors.Join(err, fmt.Errorf("the managed fields of %d objects could not be moved (each logged); run again: %w",
			res.FieldsLeft, errors.Join(res.fieldsErrs...)))
	}
	return res, err
}

func migrate(ctx context.Context, c Clients, crd string, o Options) (Result, error) {
	o = o.withDefaults()
	if !slices.Contains([]Method{Auto, StorageVersionMigration, Rewrite}, o.Method) {
		return Result{}, fmt.Errorf("unknown method %q (want %s, %s or %s)", o.Method, Auto, StorageVersionMigration, Rewrite)
	}
	logger := klog.FromContext(ctx)
	got, err := c.APIExtensions.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd, metav1.GetOptions{})
	if err != nil {
		return Result{}, err
	}
	res := Result{StoredVersionsBefore: slices.Clone(got.Status.StoredVersions)}
	if res.StorageVersion, err = apihelpers.GetCRDStorageVersion(got); err != nil {
		return res, fmt.Errorf("CRD %s: %w", crd, err)
	}
	if slices.Equal(got.Status.StoredVersions, []string{res.StorageVersion}) {
		switch {
		case o.Force:
			logger.Info("storedVersions name the storage version alone; migrating all the same (-force)", "crd", crd, "storageVersion", res.StorageVersion)
		case apihelpers.IsCRDConditionTrue(got, apiextensionsv1.StorageMigrating):
			// kube-controller-manager 1.36 may have dropped the old
			// version from storedVersions as it began (svm.go,
			// coOwnStoredVersions): storedVersions cannot be trusted.
			logger.Info("storedVersions name the storage version alone, but a StorageVersionMigration is running: migrating all the same", "crd", crd, "storageVersion", res.StorageVersion)
		case len(o.ManagedFields) > 0:
			logger.Info("Every object is stored in the storage version; moving managed fields recorded in older versions", "crd", crd, "storageVersion", res.StorageVersion)
			return res, rewrite(ctx, c.Dynamic, got, &res, o, false)
		default:
			logger.Info("Nothing to migrate: every object is stored in the storage version", "crd", crd, "storageVersion", res.StorageVersion)
			return res, nil
		}
	}
	served, err := servesMigrations(c.Kube)
	if err != nil {
		return res, err
	}
	method := o.Method
	switch {
	case method == Auto && served:
		method = StorageVersionMigration
	case method == Auto:
		method = Rewrite
	case method == StorageVersionMigration && !served:
		return res, fmt.Errorf("the API server does not serve StorageVersionMigrations (%s): use -method=rewrite, or turn it on (docs/evolving-the-api.md, section 8)", svmGroupVersion)
	}
	if err := waitStoring(ctx, c.Kube, got, res.StorageVersion, o); err != nil {
		return res, err
	}
	res.Method = method
	logger.Info("Migrating stored objects", "crd", crd, "storageVersion", res.StorageVersion, "storedVersions", got.Status.StoredVersions, "method", method)
	if method == StorageVersionMigration {
		if err := coOwnStoredVersions(ctx, c.APIExtensions, crd); err != nil {
			return res, err
		}
		if res.Migration, err = migrateOnServer(ctx, c.Kube, got, o); err != nil {
			return res, err
		}
		if err := waitTrimmedByServer(ctx, c.APIExtensions, got.Name, res, o.PollEvery); err != nil {
			return res, err
		}
		// Its trim, forced, made kube-controller-manager the only owner
		// of storedVersions again: a migration created by anyone else
		// next would have them dropped as it began (svm.go).
		if err := coOwnStoredVersions(ctx, c.APIExtensions, crd); err != nil || len(o.ManagedFields) == 0 {
			return res, err
		}
		// kube-controller-manager's writes leave managed fields as they
		// were.
		return res, rewrite(ctx, c.Dynamic, got, &res, o, false)
	}
	if err := rewrite(ctx, c.Dynamic, got, &res, o, true); err != nil {
		return res, err
	}
	return res, trim(ctx, c.APIExtensions, got)
}
