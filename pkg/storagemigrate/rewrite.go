package storagemigrate

import (
	"context"
	"errors"
	"fmt"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/klog/v2"
)

// rewrite writes objects of the CRD back in the storage version, in pages,
// their managed fields moved by o.ManagedFields: every object (all), for
// the rewrite that stores them in the storage version (no conversion on
// the way for objects already in it), or only those whose managed fields
// move, after a migration that stored them already.
func rewrite(ctx context.Context, dyn dynamic.Interface, crd *apiextensionsv1.CustomResourceDefinition, res *Result, o Options, all bool) error {
	logger := klog.FromContext(ctx)
	gvr := schema.GroupVersionResource{Group: crd.Spec.Group, Version: res.StorageVersion, Resource: crd.Spec.Names.Plural}
	client := dyn.Resource(gvr)
	failed := 0
	var firstErrs []error
	left := "storedVersions left as they were"
	if !all {
		left = "the managed fields of the rest left as they were"
	}
	opts := metav1.ListOptions{Limit: o.PageSize}
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
			got, moved, fieldsErr, err := writeAgain(ctx, client.Namespace(obj.GetNamespace()), obj, gvr.GroupVersion().String(), o.ManagedFields, all)
			switch {
			case ctx.Err() != nil:
				return fmt.Errorf("stopped after %d written, %d with nothing to write; %s: %w", res.Written, res.Unchanged, left, context.Cause(ctx))
			case err == nil:
				got.count(res)
				if moved {
					res.FieldsMoved++
				}
				if fieldsErr != nil {
					// The object is stored as it should be; only its
					// managed fields stay where they were, which the
					// trim does not depend on: Migrate reports them
					// at its end.
					res.FieldsLeft++
					fieldsErr = fmt.Errorf("%s/%s: %w", obj.GetNamespace(), obj.GetName(), fieldsErr)
					logger.Error(fieldsErr, "Could not move the managed fields of an object")
					if len(res.fieldsErrs) < 3 {
						res.fieldsErrs = append(res.fieldsErrs, fieldsErr)
					}
				}
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
		logger.V(2).Info("Rewrote a page", "written", res.Written, "unchanged", res.Unchanged, "overtaken", res.Overtaken, "fieldsMoved", res.FieldsMoved, "fieldsLeft", res.FieldsLeft, "failed", failed)
		if opts.Continue = page.GetContinue(); opts.Continue == "" {
			break
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d %s could not be written again (each logged), %s; fix the cause (or the object, or delete it) and run again: %w",
			failed, gvr.GroupResource(), left, errors.Join(firstErrs...))
	}
	return nil
}

// outcome is what became of one object.
type outcome int

const (
	written   outcome = iota // stored again
	unchanged                // nothing to write: in the storage version, its managed fields too
	overtaken                // written by another since the list, after the storage version settled
	gone                     // deleted since the list
)

func (o outcome) count(res *Result) {
	switch o {
	case written:
		res.Written++
	case unchanged:
		res.Unchanged++
	case overtaken:
		res.Overtaken++
	case gone:
		res.Gone++
	}
}

// conflictRetries bounds how often one object is read again after another
// writer's change, to move its managed fields; retryWait is the wait before
// the first, doubled for each next.
const conflictRetries = 5

var retryWait = 100 * time.Millisecond

// writeAgain writes obj back with its managed fields moved (if convs move
// any), and reports what became of it, and whether its managed fields
// were moved; fieldsErr says why some that should have been were not
// (then the object is written all the same, if all). Without all, an
// object with none to move is not written. The write carries the listed
// resourceVersion: an object changed since was written in the storage
// version, and its managed fields are read again to be moved (a writer in
// an old version may have added an entry).
func writeAgain(ctx context.Context, client dynamic.ResourceInterface, obj *unstructured.Unstructured, to string, convs []FieldsConversion, all bool) (got outcome, moved bool, fieldsErr, err error) {
	// One write, and conflictRetries more after conflicts: retryWait
	// before the first of those, doubled for each next (100 ms to 1.6 s),
	// without jitter. ExponentialBackoffWithContext rather than
	// retry.OnError: its waits end when ctx does (OnError's sleep on).
	backoff := wait.Backoff{Duration: retryWait, Factor: 2, Steps: conflictRetries + 1}
	var conflict error // the last write's, when another writer came first
	werr := wait.ExponentialBackoffWithContext(ctx, backoff, func(ctx context.Context) (done bool, _ error) {
		if conflict != nil {
			// Read the other writer's change, to move its managed
			// fields too.
			if obj, err = client.Get(ctx, obj.GetName(), metav1.GetOptions{}); apierrors.IsNotFound(err) {
				got, moved, fieldsErr, err = gone, false, nil, nil
				return true, nil
			} else if err != nil {
				got, moved, fieldsErr = 0, false, nil
				return true, nil
			}
		}
		got, moved, fieldsErr, err = writeOnce(ctx, client, obj, to, convs, all, conflict != nil)
		if apierrors.IsConflict(err) && len(convs) > 0 {
			conflict = err
			return false, nil
		}
		return true, nil
	})
	switch {
	case werr == nil:
		return got, moved, fieldsErr, err
	case errors.Is(werr, context.Canceled) || errors.Is(werr, context.DeadlineExceeded):
		// ctx ended before a write, in a wait between two most likely
		// (the condition itself returns no error).
		return 0, false, nil, context.Cause(ctx)
	default:
		// The steps ran out on a conflict. Stored in the storage version
		// by that writer; its managed fields left for the next run.
		return overtaken, false, fmt.Errorf("changed by other writers %d times while its managed fields were moved: %w", conflictRetries+1, conflict), nil
	}
}

// writeOnce is one write of writeAgain's; again says that obj was read
// again after a conflict. It returns the conflict of a write whose
// managed fields are to be moved, for writeAgain to try again.
func writeOnce(ctx context.Context, client dynamic.ResourceInterface, obj *unstructured.Unstructured, to string, convs []FieldsConversion, all, again bool) (got outcome, moved bool, fieldsErr, err error) {
	moved, fieldsErr = MoveManagedFields(obj, to, convs)
	switch {
	case fieldsErr != nil && !all:
		return unchanged, false, fieldsErr, nil
	case !moved && again:
		return overtaken, false, fieldsErr, nil
	case !moved && !all:
		return unchanged, false, nil, nil
	}
	out, err := client.Update(ctx, obj, metav1.UpdateOptions{FieldManager: fieldManager})
	if err == nil && moved {
		// The API server keeps the managed fields it has when it
		// cannot read those a request sets: say so, rather than
		// count them moved.
		if left, ierr := MoveManagedFields(out.DeepCopy(), to, convs); ierr != nil || left {
			moved, fieldsErr = false, errors.Join(errors.New("the API server kept its managed fields recorded in an older version"), ierr)
		}
	}
	switch {
	case err == nil && out.GetResourceVersion() == obj.GetResourceVersion():
		return unchanged, false, fieldsErr, nil
	case err == nil:
		return written, moved, fieldsErr, nil
	case apierrors.IsNotFound(err):
		return gone, false, nil, nil
	case apierrors.IsConflict(err) && len(convs) > 0:
		return 0, false, nil, err
	case apierrors.IsConflict(err):
		// Written by another since the list, after the storage
		// version settled: in the new version (as
		// kube-controller-manager's migration reasons too).
		return overtaken, false, nil, nil
	default:
		return 0, false, nil, err
	}
}
