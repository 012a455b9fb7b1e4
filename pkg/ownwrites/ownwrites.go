// Package ownwrites reads an informer's cache with the controller's own
// recent writes in front: typed listers (client-go's generic listers, which
// serve a type of our own as well as the built-in ones) over a client-go
// MutationCache fed with what each write returned.
package ownwrites

import (
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/listers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

const (
	// TTL bounds how long a copy of our own write is preferred
	// to the informer's (older) object: far longer than a watch event takes
	// to arrive, short enough that a lost event cannot mislead for long.
	TTL = time.Minute
	// Size is the number of recent writes remembered per
	// resource; past it the oldest are forgotten (and the informer cache,
	// perhaps a little stale, is read instead). Copies are trimmed like the
	// informer's objects (pkg/cachetrim), a few KB each.
	Size = 2048
)

// Lister reads one kind of object from an informer's store, typed (a
// lister of client-go's generic listers, which serve a type of our own as
// well as the built-in ones), with the objects our own writes returned in
// front: a MutationCache. An informer learns of our write only when its
// watch event arrives; a sync that ran in between would otherwise act on
// the old object again (a second create, a second status write, a second
// Event). A cached object newer than our copy always wins, and a copy
// expires after TTL. Mutation remembers a write.
type Lister[T runtime.Object] struct {
	listers.ResourceIndexer[T] // Get and List, our writes in front for Get
	cache.MutationCache        // Mutation, and ByIndex with our writes
	// Informed is the informer's store alone, without our writes: to tell
	// an object the informer has seen from one we know only from our own
	// write, and for its indexes.
	Informed cache.Indexer
}

// NewLister is a Lister over informed. With includeAdds, an object we
// created is seen before the informer has it.
func NewLister[T runtime.Object](logger klog.Logger, informed cache.Indexer, resource schema.GroupResource, includeAdds bool) Lister[T] {
	writes := cache.NewIntegerResourceVersionMutationCacheWithOptions(logger, informed, cache.MutationCacheOptions{
		Indexer: informed,
		TTL:     TTL, MaxCacheSize: Size,
		IncludeAdds: includeAdds,
	})
	return Lister[T]{ResourceIndexer: listers.New[T](writesFirst{informed, writes}, resource), MutationCache: writes, Informed: informed}
}

// In is the lister of one namespace.
func (l Lister[T]) In(namespace string) listers.ResourceIndexer[T] {
	return listers.NewNamespaced(l.ResourceIndexer, namespace)
}

// writesFirst is an informer's store whose lookups by key go through the
// MutationCache in front of it.
type writesFirst struct {
	cache.Indexer
	writes cache.MutationCache
}

func (w writesFirst) GetByKey(key string) (any, bool, error) { return w.writes.GetByKey(key) }
