package shard

import (
	"context"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// everything is an API server that ignores the shard selector (the
// ShardedListAndWatch gate off): it records the selector it was sent and
// returns every object.
type everything struct {
	items    []appsv1.Deployment
	selector string
	w        *watch.FakeWatcher
}

func (e *everything) ListWithContext(_ context.Context, o metav1.ListOptions) (runtime.Object, error) {
	e.selector = o.ShardSelector
	return &appsv1.DeploymentList{Items: append([]appsv1.Deployment(nil), e.items...)}, nil
}

func (e *everything) WatchWithContext(_ context.Context, o metav1.ListOptions) (watch.Interface, error) {
	e.selector = o.ShardSelector
	return e.w, nil
}

func dep(ns string) *appsv1.Deployment {
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "d"}}
}

// TestFilteredKeepsOnlyItsSlots: the selector goes to the server, and
// whatever else the server sends is dropped, in lists and in watches;
// bookmarks (the end of a streamed initial list among them) pass.
func TestFilteredKeepsOnlyItsSlots(t *testing.T) {
	server := &everything{items: []appsv1.Deployment{*dep("mine"), *dep("theirs"), *dep("mine")}, w: watch.NewFake()}
	f := &filtered{Next: server, Selector: "shardRange(object.metadata.namespace, '0x0', '0x8')", Keep: func(ns string) bool { return ns == "mine" }}

	list, err := f.ListWithContext(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if server.selector != f.Selector {
		t.Errorf("list sent selector %q, want %q", server.selector, f.Selector)
	}
	if items := list.(*appsv1.DeploymentList).Items; len(items) != 2 || items[0].Namespace != "mine" || items[1].Namespace != "mine" {
		t.Errorf("list kept %v, want the two of namespace mine", items)
	}

	w, err := f.WatchWithContext(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if server.selector != f.Selector {
		t.Errorf("watch sent selector %q", server.selector)
	}
	go func() {
		server.w.Add(dep("theirs"))
		server.w.Add(dep("mine"))
		server.w.Modify(dep("theirs"))
		server.w.Delete(dep("theirs"))
		server.w.Action(watch.Bookmark, dep(""))
		server.w.Modify(dep("mine"))
		server.w.Stop()
	}()
	var got []string
	for e := range w.ResultChan() {
		got = append(got, string(e.Type)+" "+e.Object.(*appsv1.Deployment).Namespace)
	}
	want := []string{"ADDED mine", "BOOKMARK ", "MODIFIED mine"}
	if len(got) != len(want) {
		t.Fatalf("watch passed %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("watch passed %q, want %q", got, want)
		}
	}
}
