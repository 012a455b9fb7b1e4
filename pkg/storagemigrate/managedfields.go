package storagemigrate

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
)

// Moving the storage version does not move metadata.managedFields: each
// entry keeps its manager's fields as paths in the version it wrote in,
// and the API server, which cannot convert paths, converts the object to
// that version on every later write (docs/evolving-the-api.md, section
// 10). Only the CRD's author knows where a field moved, so the caller
// gives the conversions of paths, and the migration rewrites the entries
// with them.

// FieldsConversion re-expresses the field set of a managed-fields entry
// recorded in apiVersion From as the same fields' paths in apiVersion To.
// Convert must not change its input.
type FieldsConversion struct {
	From, To string
	Convert  func(*fieldpath.Set) *fieldpath.Set
}

// entryID is what the API server tells managed-fields entries apart by:
// the manager, the operation, the subresource and, for updates only, the
// apiVersion (an applier has one entry whatever version it applies in;
// two, set by hand, are merged as an editor's are).
type entryID struct {
	manager, apiVersion, subresource string
	operation                        metav1.ManagedFieldsOperationType
}

func idOf(e metav1.ManagedFieldsEntry) entryID {
	id := entryID{manager: e.Manager, apiVersion: e.APIVersion, subresource: e.Subresource, operation: e.Operation}
	if e.Operation == metav1.ManagedFieldsOperationApply {
		id.apiVersion = ""
	}
	return id
}

// MoveManagedFields rewrites, in obj, each managed-fields entry that a
// conversion in convs takes to apiVersion to, and reports whether any
// was. An update entry moved onto one its manager already has in to is
// merged into it (the union of both sets, the later time), as the API
// server keeps one entry per manager, operation and version.
func MoveManagedFields(obj *unstructured.Unstructured, to string, convs []FieldsConversion) (bool, error) {
	entries := obj.GetManagedFields()
	moved := false
	out := make([]metav1.ManagedFieldsEntry, 0, len(entries))
	at := map[entryID]int{}
	for _, e := range entries {
		if conv := conversionFor(convs, e.APIVersion, to); conv != nil && e.FieldsType == "FieldsV1" && e.FieldsV1 != nil {
			set, err := decodeFields(e)
			if err != nil {
				return false, err
			}
			raw, err := withoutAbsent(conv.Convert(set), obj.Object).ToJSON()
			if err != nil {
				return false, err
			}
			e.FieldsV1 = metav1.NewFieldsV1(string(raw))
			e.APIVersion = to
			moved = true
		}
		i, seen := at[idOf(e)]
		if !seen {
			at[idOf(e)] = len(out)
			out = append(out, e)
			continue
		}
		merged, err := mergeEntries(out[i], e)
		if err != nil {
			return false, err
		}
		out[i] = merged
	}
	if moved {
		obj.SetManagedFields(out)
	}
	return moved, nil
}

// withoutAbsent is set without the paths that name no field of obj: a
// manager cannot own a field the object does not have (the API server
// takes a removed field from every manager), but a conversion of paths,
// which does not see the object, may name one: a node that only the old
// version's shape had (an annotations map that held nothing but a field
// the new version keeps in its spec). Only paths of field names and map
// keys are checked; a path into a list is kept.
func withoutAbsent(set *fieldpath.Set, obj map[string]any) *fieldpath.Set {
	absent := fieldpath.NewSet()
	for p := range set.All() {
		names := make([]string, 0, len(p))
		for _, pe := range p {
			if pe.FieldName == nil {
				break
			}
			names = append(names, *pe.FieldName)
		}
		if len(names) < len(p) {
			continue
		}
		if _, found, err := unstructured.NestedFieldNoCopy(obj, names...); err == nil && !found {
			absent.Insert(p)
		}
	}
	return set.Difference(absent)
}

func conversionFor(convs []FieldsConversion, from, to string) *FieldsConversion {
	for i := range convs {
		if convs[i].From == from && convs[i].To == to {
			return &convs[i]
		}
	}
	return nil
}

func decodeFields(e metav1.ManagedFieldsEntry) (*fieldpath.Set, error) {
	set := &fieldpath.Set{}
	if e.FieldsV1 == nil {
		return set, nil
	}
	if err := set.FromJSON(e.FieldsV1.GetRawReader()); err != nil {
		return nil, fmt.Errorf("the managed fields of %s (%s, %s): %w", e.Manager, e.Operation, e.APIVersion, err)
	}
	return set, nil
}

// mergeEntries is a and b, one manager's two entries, as one: the union of
// their fields, the later time.
func mergeEntries(a, b metav1.ManagedFieldsEntry) (metav1.ManagedFieldsEntry, error) {
	sa, err := decodeFields(a)
	if err != nil {
		return a, err
	}
	sb, err := decodeFields(b)
	if err != nil {
		return a, err
	}
	raw, err := sa.Union(sb).ToJSON()
	if err != nil {
		return a, err
	}
	a.FieldsType, a.FieldsV1 = "FieldsV1", metav1.NewFieldsV1(string(raw))
	if b.Time != nil && (a.Time == nil || a.Time.Before(b.Time)) {
		a.Time = b.Time
	}
	return a, nil
}
