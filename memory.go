package main

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	samplev1beta1 "example.com/foo-controller/pkg/apis/samplecontroller/v1beta1"
	"example.com/foo-controller/pkg/changeevents"
	"example.com/foo-controller/pkg/corrections"
	"example.com/foo-controller/pkg/pacer"
	"example.com/foo-controller/pkg/plan"
)

// memory is what the controller remembers of each Foo between its syncs,
// beyond what the caches hold: one record per Foo, made by its first sync
// and dropped whole, by forget, when a sync finds the Foo gone. Nothing in
// it is needed for correctness after a restart: a new process starts with
// none, and at worst writes a status or an Event sooner, or looks for
// leftovers once more.
//
// A key is synced by one worker at a time (the workqueue's promise), so a
// record is used by one goroutine at a time; only the map is shared.
type memory struct {
	mu      sync.Mutex
	records map[cache.ObjectName]*record
}

// record is one Foo's memory. It belongs to one object: a Foo deleted and
// recreated under the same name starts afresh, and inherits no pacing,
// fight or failure count from its predecessor.
type record struct {
	uid types.UID
	// statusPace spaces out status writes that only report progress
	// (status.go).
	statusPace pacer.Pacer
	// changes are the Scaled and Updated Events held back (events.go).
	changes changeevents.Held
	// fight limits how often the Deployment is put back while someone else
	// keeps changing it (pkg/corrections).
	fight corrections.Fight
	// pruned is the spec for which pruneDeployments last finished.
	pruned prunedSpec
	// overridden is what the API server made of our last correction when
	// it did not keep it (corrections.go).
	overridden corrections.Overridden
	// applyFailures counts the syncs in a row whose apply failed with an
	// answer that may lift by itself (failures.go).
	applyFailures plan.Failures
}

func newMemory() *memory {
	return &memory{records: map[cache.ObjectName]*record{}}
}

// of returns foo's record, a new one if there is none or the one there was
// its predecessor's.
func (m *memory) of(foo *samplev1beta1.Foo) *record {
	key := cache.MetaObjectToName(foo)
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.records[key]
	if r == nil || r.uid != foo.UID {
		r = &record{uid: foo.UID}
		m.records[key] = r
	}
	return r
}

// forget drops everything remembered of the Foo of key.
func (m *memory) forget(key cache.ObjectName) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.records, key)
}

// len is how many Foos are remembered.
func (m *memory) len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.records)
}

// each calls fn with every record, for the last flush at shutdown, once
// no worker runs.
func (m *memory) each(fn func(*record)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range m.records {
		fn(r)
	}
}
