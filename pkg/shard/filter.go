package shard

import (
	"context"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// filtered is a ListerWatcher that asks the API server for the given
// slots' objects only (a shard selector in every list and watch) and drops
// on our side whatever else comes back: an API server without the
// ShardedListAndWatch feature ignores the selector and sends everything,
// and an informer built on this then still caches only its slots, at the
// price of decoding the rest.
type filtered struct {
	Next     cache.ListerWatcherWithContext
	Selector string               // metav1.ListOptions.ShardSelector
	Keep     func(ns string) bool // whether an object of namespace ns is ours
}

func (f *filtered) ListWithContext(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	opts.ShardSelector = f.Selector
	list, err := f.Next.ListWithContext(ctx, opts)
	if err != nil {
		return nil, err
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return nil, err
	}
	kept := items[:0]
	for _, item := range items {
		if m, err := meta.Accessor(item); err == nil && f.Keep(m.GetNamespace()) {
			kept = append(kept, item)
		}
	}
	if len(kept) == len(items) {
		return list, nil
	}
	return list, meta.SetList(list, kept)
}

func (f *filtered) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.ShardSelector = f.Selector
	w, err := f.Next.WatchWithContext(ctx, opts)
	if err != nil {
		return nil, err
	}
	return watch.Filter(w, func(e watch.Event) (watch.Event, bool) {
		switch e.Type {
		case watch.Added, watch.Modified, watch.Deleted:
			if m, err := meta.Accessor(e.Object); err == nil {
				return e, f.Keep(m.GetNamespace())
			}
		}
		return e, true // bookmarks (the end of a streamed list among them) and errors
	}), nil
}

// List and Watch complete cache.ListerWatcher, which informers take; the
// reflector calls the context-aware methods above.
func (f *filtered) List(opts metav1.ListOptions) (runtime.Object, error) {
	return f.ListWithContext(context.Background(), opts)
}

func (f *filtered) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	return f.WatchWithContext(context.Background(), opts)
}
