package storagemigrate

import (
	"context"
	"errors"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	dynfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
)

const (
	alphaGV = "samplecontroller.example.com/v1alpha1"
	betaGV  = "samplecontroller.example.com/v1beta1"
)

// renamed is a conversion of paths for the tests: v1alpha1's spec.old is
// v1beta1's spec.new.
var renamed = []FieldsConversion{{From: alphaGV, To: betaGV, Convert: func(s *fieldpath.Set) *fieldpath.Set {
	out := fieldpath.NewSet()
	for p := range s.All() {
		if p.String() == ".spec.old" {
			p = fieldpath.MakePathOrDie("spec", "new")
		}
		out.Insert(p)
	}
	return out
}}}

var t0 = time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)

func entry(manager string, op metav1.ManagedFieldsOperationType, gv, fields string, minute int) metav1.ManagedFieldsEntry {
	return metav1.ManagedFieldsEntry{Manager: manager, Operation: op, APIVersion: gv, FieldsType: "FieldsV1",
		FieldsV1: metav1.NewFieldsV1(fields), Time: &metav1.Time{Time: t0.Add(time.Duration(minute) * time.Minute)}}
}

// withFields is a Foo, as read in v1beta1, with spec.new, spec.other and
// status.replicas, and the entries given.
func withFields(name string, entries ...metav1.ManagedFieldsEntry) *unstructured.Unstructured {
	u := foo(name, "1")
	u.Object["spec"] = map[string]any{"new": "x", "other": int64(1)}
	u.Object["status"] = map[string]any{"replicas": int64(1)}
	u.SetManagedFields(entries)
	return u
}

func TestMoveManagedFields(t *testing.T) {
	const (
		old   = `{"f:spec":{"f:old":{}}}`
		moved = `{"f:spec":{"f:new":{}}}`
	)
	upd, apply := metav1.ManagedFieldsOperationUpdate, metav1.ManagedFieldsOperationApply
	for _, tc := range []struct {
		name      string
		in        []metav1.ManagedFieldsEntry
		want      []metav1.ManagedFieldsEntry
		wantMoved bool
	}{
		{"an applier's entry in the old version: its paths and version",
			[]metav1.ManagedFieldsEntry{entry("gitops", apply, alphaGV, old, 1)},
			[]metav1.ManagedFieldsEntry{entry("gitops", apply, betaGV, moved, 1)}, true},
		{"entries in the storage version, of the status too: kept as they are",
			[]metav1.ManagedFieldsEntry{entry("kubectl", upd, betaGV, moved, 1), entry("foo-controller", apply, betaGV, `{"f:status":{"f:replicas":{}}}`, 2)},
			nil, false},
		{"an editor in both versions: one entry, both sets, the later time",
			[]metav1.ManagedFieldsEntry{entry("kubectl-edit", upd, betaGV, `{"f:spec":{"f:other":{}}}`, 1), entry("kubectl-edit", upd, alphaGV, old, 2)},
			[]metav1.ManagedFieldsEntry{entry("kubectl-edit", upd, betaGV, `{"f:spec":{"f:new":{},"f:other":{}}}`, 2)}, true},
		{"the same manager, another operation: apart",
			[]metav1.ManagedFieldsEntry{entry("m", apply, betaGV, `{"f:spec":{"f:other":{}}}`, 1), entry("m", upd, alphaGV, old, 2)},
			[]metav1.ManagedFieldsEntry{entry("m", apply, betaGV, `{"f:spec":{"f:other":{}}}`, 1), entry("m", upd, betaGV, moved, 2)}, true},
		{"the same manager, another subresource: apart",
			[]metav1.ManagedFieldsEntry{onStatus(entry("m", upd, betaGV, `{"f:status":{"f:replicas":{}}}`, 1)), entry("m", upd, alphaGV, old, 2)},
			[]metav1.ManagedFieldsEntry{onStatus(entry("m", upd, betaGV, `{"f:status":{"f:replicas":{}}}`, 1)), entry("m", upd, betaGV, moved, 2)}, true},
		{"every path dropped: an empty entry, which the API server removes",
			[]metav1.ManagedFieldsEntry{entry("kubectl-annotate", upd, alphaGV, `{"f:metadata":{"f:annotations":{"f:gone":{}}}}`, 1)},
			[]metav1.ManagedFieldsEntry{entry("kubectl-annotate", upd, betaGV, `{}`, 1)}, true},
		{"a path the object does not have: dropped",
			[]metav1.ManagedFieldsEntry{entry("kubectl-patch", upd, alphaGV, `{"f:metadata":{"f:annotations":{}},"f:spec":{"f:old":{}}}`, 1)},
			[]metav1.ManagedFieldsEntry{entry("kubectl-patch", upd, betaGV, moved, 1)}, true},
		{"a version no conversion is given for: kept",
			[]metav1.ManagedFieldsEntry{entry("ancient", upd, "samplecontroller.example.com/v0", old, 1)},
			nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := withFields("a", tc.in...)
			before := obj.DeepCopy()
			got, err := MoveManagedFields(obj, betaGV, renamed)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.wantMoved {
				t.Errorf("moved %t, want %t", got, tc.wantMoved)
			}
			want := tc.want
			if !tc.wantMoved {
				want = tc.in
			}
			if gotEntries := obj.GetManagedFields(); !equalEntries(t, gotEntries, want) {
				t.Errorf("entries\n%v\nwant\n%v", describe(gotEntries), describe(want))
			}
			before.SetManagedFields(nil)
			obj.SetManagedFields(nil)
			if !equalObjects(before, obj) {
				t.Errorf("the object changed beyond its managed fields: %v", obj.Object)
			}
		})
	}
}

func onStatus(e metav1.ManagedFieldsEntry) metav1.ManagedFieldsEntry {
	e.Subresource = "status"
	return e
}

// equalEntries compares entries with their field sets as sets.
func equalEntries(t *testing.T, a, b []metav1.ManagedFieldsEntry) bool {
	t.Helper()
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		sa, err := decodeFields(a[i])
		if err != nil {
			t.Fatal(err)
		}
		sb, err := decodeFields(b[i])
		if err != nil {
			t.Fatal(err)
		}
		x, y := a[i], b[i]
		x.FieldsV1, y.FieldsV1 = nil, nil
		if !sa.Equals(sb) || !equalEntryMeta(x, y) {
			return false
		}
	}
	return true
}

func equalEntryMeta(a, b metav1.ManagedFieldsEntry) bool {
	return a.Manager == b.Manager && a.Operation == b.Operation && a.APIVersion == b.APIVersion &&
		a.Subresource == b.Subresource && a.FieldsType == b.FieldsType && a.Time.Equal(b.Time)
}

func equalObjects(a, b *unstructured.Unstructured) bool {
	ja, _ := a.MarshalJSON()
	jb, _ := b.MarshalJSON()
	return string(ja) == string(jb)
}

func describe(entries []metav1.ManagedFieldsEntry) string {
	var b strings.Builder
	for _, e := range entries {
		b.WriteString(e.Manager + " " + string(e.Operation) + " " + e.APIVersion + " " + e.FieldsV1.GetRawString() + " " + e.Time.String() + "\n")
	}
	return b.String()
}

// TestManagedFieldsPass: with every Foo stored in the storage version
// already, the migration writes only the Foos with entries to move; a Foo
// changed by another writer since the list is read again and its entries
// moved (the other writer, in v1alpha1, may have added one). (Run again,
// it writes nothing: TestManagedFieldsMovedToV1beta1, on the API server.)
func TestManagedFieldsPass(t *testing.T) {
	fresh := withFields("conflicted", entry("gitops", metav1.ManagedFieldsOperationApply, alphaGV, `{"f:spec":{"f:old":{}}}`, 1),
		entry("kubectl", metav1.ManagedFieldsOperationUpdate, alphaGV, `{"f:spec":{"f:other":{}}}`, 3))
	fresh.SetResourceVersion("9")
	objs := []runtime.Object{
		withFields("moved", entry("gitops", metav1.ManagedFieldsOperationApply, alphaGV, `{"f:spec":{"f:old":{}}}`, 1)),
		withFields("in-v1beta1", entry("gitops", metav1.ManagedFieldsOperationApply, betaGV, `{"f:spec":{"f:new":{}}}`, 1)),
		withFields("conflicted", entry("gitops", metav1.ManagedFieldsOperationApply, alphaGV, `{"f:spec":{"f:old":{}}}`, 1)),
	}
	c, ext := fixture(t, false, func(string) error { return nil }, objs...)
	ext.PrependReactor("get", "customresourcedefinitions", func(k8stesting.Action) (bool, runtime.Object, error) {
		stored := crd()
		stored.Status.StoredVersions = []string{"v1beta1"}
		return true, stored, nil
	})
	dyn := c.Dynamic.(*dynfake.FakeDynamicClient)
	written := map[string]*unstructured.Unstructured{}
	conflicts := 0
	dyn.PrependReactor("update", "foos", func(a k8stesting.Action) (bool, runtime.Object, error) {
		obj := a.(k8stesting.UpdateAction).GetObject().(*unstructured.Unstructured)
		if obj.GetName() == "conflicted" && obj.GetResourceVersion() != "9" {
			conflicts++
			return true, nil, apierrors.NewConflict(foos.GroupResource(), obj.GetName(), nil)
		}
		written[obj.GetName()] = obj.DeepCopy()
		out := obj.DeepCopy()
		out.SetResourceVersion(obj.GetResourceVersion() + "+")
		return true, out, nil
	})
	dyn.PrependReactor("get", "foos", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.(k8stesting.GetAction).GetName() == "conflicted" {
			return true, fresh.DeepCopy(), nil
		}
		return false, nil, nil
	})
	o := fast
	o.ManagedFields = renamed
	res, err := Migrate(context.Background(), c, crd().Name, o)
	if err != nil {
		t.Fatal(err)
	}
	if res.Method != "" || res.FieldsMoved != 2 || res.Written != 2 || res.Unchanged != 1 || conflicts != 1 {
		t.Errorf("%+v after %d conflicts; want no migration, 2 Foos' fields moved, 1 unchanged, after 1 conflict", res, conflicts)
	}
	if _, ok := written["in-v1beta1"]; ok {
		t.Error("a Foo with no entry to move was written")
	}
	if c := written["conflicted"]; c == nil || len(c.GetManagedFields()) != 2 || c.GetManagedFields()[1].APIVersion != betaGV {
		t.Errorf("the Foo changed since the list, as written: %v; want the fresh one's two entries, moved", c)
	}
}

// TestManagedFieldsKeptByTheAPIServer: an API server that keeps the
// managed fields it has (as it does when it cannot read those a request
// sets) fails the Foo, named, rather than have it counted moved.
func TestManagedFieldsKeptByTheAPIServer(t *testing.T) {
	listed := withFields("kept", entry("gitops", metav1.ManagedFieldsOperationApply, alphaGV, `{"f:spec":{"f:old":{}}}`, 1))
	c, ext := fixture(t, false, func(string) error { return nil }, listed)
	ext.PrependReactor("get", "customresourcedefinitions", func(k8stesting.Action) (bool, runtime.Object, error) {
		stored := crd()
		stored.Status.StoredVersions = []string{"v1beta1"}
		return true, stored, nil
	})
	c.Dynamic.(*dynfake.FakeDynamicClient).PrependReactor("update", "foos", func(a k8stesting.Action) (bool, runtime.Object, error) {
		out := listed.DeepCopy()
		out.SetResourceVersion("2")
		return true, out, nil
	})
	o := fast
	o.ManagedFields = renamed
	res, err := Migrate(context.Background(), c, crd().Name, o)
	if err == nil || !strings.Contains(err.Error(), "ns/kept") || !strings.Contains(err.Error(), "kept its managed fields") || res.FieldsMoved != 0 {
		t.Errorf("%+v, %v; want the Foo named, its managed fields said kept, none counted moved", res, err)
	}
}

// TestRewriteMovesManagedFields: the rewrite that stores each Foo in the
// storage version moves its managed fields in the same write. Another
// writer first: a Foo with entries still to move is read again and
// written; one with none is left, overtaken, with no second write; one
// changed at every try, or whose entries cannot be read, is stored as it
// should be, and only its managed fields are left: the trim goes on, and
// the error says how many were not moved.
func TestRewriteMovesManagedFields(t *testing.T) {
	defer func(w time.Duration) { retryWait = w }(retryWait)
	retryWait = time.Millisecond
	alphaEntry := entry("gitops", metav1.ManagedFieldsOperationApply, alphaGV, `{"f:spec":{"f:old":{}}}`, 1)
	corrupt := alphaEntry
	corrupt.FieldsV1 = metav1.NewFieldsV1(`{"spec":{}}`) // JSON, not a field set
	objs := []runtime.Object{
		withFields("plain", alphaEntry),
		withFields("conflicted-once", alphaEntry),
		withFields("overtaken", alphaEntry),
		withFields("always-conflicted", alphaEntry),
		withFields("corrupt", corrupt),
		withFields("deleted-meanwhile", alphaEntry),
	}
	updates := map[string]int{}
	c, ext := fixture(t, false, func(name string) error {
		updates[name]++
		switch {
		case name == "always-conflicted", name == "deleted-meanwhile", updates[name] == 1 && (name == "conflicted-once" || name == "overtaken"):
			return apierrors.NewConflict(foos.GroupResource(), name, nil)
		}
		return nil
	}, objs...)
	c.Dynamic.(*dynfake.FakeDynamicClient).PrependReactor("get", "foos", func(a k8stesting.Action) (bool, runtime.Object, error) {
		switch name := a.(k8stesting.GetAction).GetName(); name {
		case "overtaken": // moved by the writer that came first
			return true, withFields(name, entry("gitops", metav1.ManagedFieldsOperationApply, betaGV, `{"f:spec":{"f:new":{}}}`, 1)), nil
		case "deleted-meanwhile":
			return true, nil, apierrors.NewNotFound(foos.GroupResource(), name)
		default:
			return true, withFields(name, alphaEntry), nil
		}
	})
	o := fast
	o.ManagedFields = renamed
	res, err := Migrate(context.Background(), c, crd().Name, o)
	if err == nil || !strings.Contains(err.Error(), "the managed fields of 2 objects could not be moved") ||
		!strings.Contains(err.Error(), "ns/always-conflicted") || !strings.Contains(err.Error(), "ns/corrupt") {
		t.Errorf("%v; want the 2 Foos whose managed fields were left named", err)
	}
	if got := storedVersions(t, ext); !slices.Equal(got, []string{"v1beta1"}) {
		t.Errorf("storedVersions %v: every Foo is stored in v1beta1, want them trimmed", got)
	}
	want := Result{Method: Rewrite, StorageVersion: "v1beta1", StoredVersionsBefore: []string{"v1alpha1", "v1beta1"},
		Written: 3, Overtaken: 2, Gone: 1, FieldsMoved: 2, FieldsLeft: 2}
	res.fieldsErrs = nil
	if !reflect.DeepEqual(res, want) {
		t.Errorf("%+v, want %+v", res, want)
	}
	wantUpdates := map[string]int{"plain": 1, "conflicted-once": 2, "overtaken": 1, "always-conflicted": conflictRetries + 1, "corrupt": 1, "deleted-meanwhile": 1}
	if !maps.Equal(updates, wantUpdates) {
		t.Errorf("updates %v, want %v", updates, wantUpdates)
	}
}

// TestConflictWaitEndsWithCtx: a wait between tries after a conflict ends
// when ctx does, with its cause, at once (not after the wait).
func TestConflictWaitEndsWithCtx(t *testing.T) {
	defer func(w time.Duration) { retryWait = w }(retryWait)
	retryWait = time.Hour
	stop := errors.New("stopped by the test")
	ctx, cancel := context.WithCancelCause(context.Background())
	updates := 0
	c, _ := fixture(t, false, func(name string) error {
		updates++
		cancel(stop)
		return apierrors.NewConflict(foos.GroupResource(), name, nil)
	}, withFields("a", entry("gitops", metav1.ManagedFieldsOperationApply, alphaGV, `{"f:spec":{"f:old":{}}}`, 1)))
	obj, err := c.Dynamic.Resource(foos).Namespace("ns").Get(context.Background(), "a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, _, _, err := writeAgain(ctx, c.Dynamic.Resource(foos).Namespace("ns"), obj, betaGV, renamed, true); !errors.Is(err, stop) || updates != 1 {
		t.Errorf("%v after %d updates; want the cause after the first", err, updates)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("returned after %v; want at once", took)
	}
}
