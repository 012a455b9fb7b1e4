package storagemigrate

import (
	"context"
	"errors"
	"fmt"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/klog/v2"
)

// rewrite writes every object of the CRD back unchanged, in pages, in the
// storage version (no conversion on the way for objects already in it).
func rewrite(ctx context.Context, dyn dynamic.Interface, crd *apiextensionsv1.CustomResourceDefinition, res *Result, pageSize int64) error {
	logger := klog.FromContext(ctx)
	gvr := schema.GroupVersionResource{Group: crd.Spec.Group, Version: res.StorageVersion, Resource: crd.Spec.Names.Plural}
	client := dyn.Resource(gvr)
	failed := 0
	var firstErrs []error
	opts := metav1.ListOptions{Limit: pageSize}
	for {
		page, err := client.List(ctx, opts)
		if apierrors.IsResourceExpired(err) {
			// The continue token outlived etcd's compaction (5 minutes by
			// default). The API server offers another that goes on from
			// where it stopped, in a list no longer consistent: what was
			// written since is in the storage version already.
			var status apierrors.APIStatus
			if errors.As(err, &status) && status.Status().Continue != "" {
				logger.Info("The list expired; going on from where it stopped")
				opts.Continue = status.Status().Continue
				continue
			}
		}
		if err != nil {
			if failed > 0 {
				err = errors.Join(err, fmt.Errorf("and before that, %d could not be written again: %w", failed, errors.Join(firstErrs...)))
			}
			return fmt.Errorf("listing %s: %w", gvr.GroupResource(), err)
		}
		for i := range page.Items {
			obj := &page.Items[i]
			out, err := client.Namespace(obj.GetNamespace()).Update(ctx, obj, metav1.UpdateOptions{FieldManager: fieldManager})
			switch {
			case ctx.Err() != nil:
				return fmt.Errorf("stopped after %d written, %d already in it; storedVersions left as they were: %w", res.Written, res.Unchanged, context.Cause(ctx))
			case err == nil && out.GetResourceVersion() == obj.GetResourceVersion():
				res.Unchanged++
			case err == nil:
				res.Written++
			case apierrors.IsNotFound(err):
				res.Gone++
			case apierrors.IsConflict(err):
				// Written by another since the list, after the storage
				// version settled: in the new version (as
				// kube-controller-manager's migration reasons too).
				res.Overtaken++
			case apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err):
				// Every other write would be refused as well.
				return fmt.Errorf("writing %s/%s again: %w", obj.GetNamespace(), obj.GetName(), err)
			default:
				failed++
				err = fmt.Errorf("%s/%s: %w", obj.GetNamespace(), obj.GetName(), err)
				logger.Error(err, "Could not write a stored object again")
				if len(firstErrs) < 3 {
					firstErrs = append(firstErrs, err)
				}
			}
		}
		logger.V(2).Info("Rewrote a page", "written", res.Written, "unchanged", res.Unchanged, "overtaken", res.Overtaken, "failed", failed)
		if opts.Continue = page.GetContinue(); opts.Continue == "" {
			break
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d %s could not be written again (each logged), storedVersions left as they were; fix the cause (or the object, or delete it) and run again: %w",
			failed, gvr.GroupResource(), errors.Join(firstErrs...))
	}
	return nil
}
