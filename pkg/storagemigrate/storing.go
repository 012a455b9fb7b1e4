package storagemigrate

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// waitStoring waits until the API server's discovery has named version as
// the one the CRD's objects are stored in (each resource's
// storageVersionHash) in every poll for o.Settle. The API server switches
// a moment after the CRD changes, and requests already running on the old
// storage may still store in the old version until they end (Options).
// It sees one API server per poll: behind a load balancer, whichever
// answers; each of several must have switched, which a minute normally
// gives, but only waiting tells.
func waitStoring(ctx context.Context, kube kubernetes.Interface, crd *apiextensionsv1.CustomResourceDefinition, version string, o Options) error {
	want := storageVersionHash(crd.Spec.Group, version, crd.Spec.Names.Kind)
	// Any served version's discovery gives the hash (the storage version
	// need not be served).
	served := ""
	for _, v := range crd.Spec.Versions {
		if v.Served && (served == "" || v.Name == version) {
			served = v.Name
		}
	}
	if served == "" {
		return fmt.Errorf("CRD %s serves no version", crd.Name)
	}
	ctx, cancel := context.WithTimeout(ctx, o.Settle+storingWait)
	defer cancel()
	var since time.Time // when the hash last started to match
	got := ""
	var failed error // the condition's: the poll's own error is ctx's end
	// The first poll at once; a discovery that fails ends the wait.
	err := wait.PollUntilContextCancel(ctx, min(o.PollEvery, o.Settle), true, func(ctx context.Context) (bool, error) {
		resources, err := kube.Discovery().ServerResourcesForGroupVersion(crd.Spec.Group + "/" + served)
		if err != nil && !apierrors.IsNotFound(err) {
			failed = fmt.Errorf("discovering %s/%s: %w", crd.Spec.Group, served, err)
			return true, nil
		}
		got = ""
		if resources != nil {
			for _, r := range resources.APIResources {
				if r.Name == crd.Spec.Names.Plural {
					got = r.StorageVersionHash
				}
			}
		}
		switch {
		case got != want:
			since = time.Time{}
		case since.IsZero():
			since = time.Now()
			klog.FromContext(ctx).Info("The API server stores in the new version; letting requests begun before settle", "storageVersion", version, "settle", o.Settle)
		case time.Since(since) >= o.Settle:
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("the API server does not store %s in %s yet (discovery's storageVersionHash %q, want %q): %w",
			crd.Spec.Names.Plural, version, got, want, context.Cause(ctx))
	}
	return failed
}

// storingWait bounds how long waitStoring waits, past Settle, for the API
// server to switch: a moment, not minutes.
const storingWait = time.Minute

// storageVersionHash is discovery's hash of a storage version, as
// k8s.io/apiserver/pkg/endpoints/discovery.StorageVersionHash computes it
// (that package would bring the API server's dependencies into ours): the
// first 8 bytes of the SHA-256 of group/version/kind, in base64.
// TestStorageMigration checks it against a real API server's.
func storageVersionHash(group, version, kind string) string {
	sum := sha256.Sum256([]byte(group + "/" + version + "/" + kind))
	return base64.StdEncoding.EncodeToString(sum[:8])
}
