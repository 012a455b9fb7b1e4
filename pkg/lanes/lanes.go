// Package lanes gives client-go's workqueue a second, faster lane.
//
// The workqueue is first in, first out. During a burst of N new Foos that
// means a Foo whose Deployment has just become available waits behind the
// first syncs of every Foo created after it before its status says so: at
// N=1000 its status lagged the Deployment by up to 6.6 s (docs/performance.md).
// Those wake-ups finish work already done, so they should not queue behind
// work not yet started.
//
// The lanes are the workqueue's storage (workqueue.TypedQueueConfig.Queue),
// not a workqueue of their own: NewWorkqueue builds client-go's workqueue
// over them, which keeps deduplicating keys and never hands one key to two
// workers, whichever lane it sits in. AddExpedited marks a key (Expedite)
// before it adds it; the next time the workqueue stores it (a new key,
// a key added again while waiting, or a key added again while it was being
// processed) it goes to, or moves to, the fast lane. Pop serves the fast
// lane first, each lane in order.
//
// The slow lane can only wait as long as the fast lane is never empty. A
// key is stored at most once, so the fast lane holds at most one entry per
// expedited key: it empties as soon as the workers outpace the expedited
// wake-ups, which a controller must do anyway to keep up.
package lanes

import (
	"sync"
)

// twoLanes is a two-lane FIFO implementing workqueue.Queue[T]. It is safe
// for concurrent use. The zero value is not usable; call newTwoLanes.
type twoLanes[T comparable] struct {
	mu sync.Mutex
	// marked holds the keys Expedite was called for since the workqueue
	// last stored them.
	marked map[T]struct{}
	// stored maps each key the queue holds to its live entry. A key that
	// moved to the fast lane leaves a stale entry behind in the slow lane,
	// skipped by Pop; seq tells the live entry from stale ones.
	stored     map[T]entry[T]
	fast, slow []entry[T]
	seq        uint64
}

type entry[T comparable] struct {
	key  T
	seq  uint64
	fast bool
}

// newTwoLanes returns empty lanes.
func newTwoLanes[T comparable]() *twoLanes[T] {
	return &twoLanes[T]{marked: map[T]struct{}{}, stored: map[T]entry[T]{}}
}

// Expedite asks for key to be stored in the fast lane the next time the
// workqueue adds it. Call it just before adding the key to the workqueue.
func (q *twoLanes[T]) Expedite(key T) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.marked[key] = struct{}{}
}

// Push stores a key the workqueue did not hold: in the fast lane if it was
// expedited, else in the slow one.
func (q *twoLanes[T]) Push(key T) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.store(key, q.takeMark(key))
}

// Touch is called when a key the queue holds is added again: an expedited
// key waiting in the slow lane moves to the back of the fast lane.
func (q *twoLanes[T]) Touch(key T) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.takeMark(key) {
		if e, ok := q.stored[key]; ok && !e.fast {
			q.store(key, true)
		}
	}
}

// Len returns the number of keys stored.
func (q *twoLanes[T]) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.stored)
}

// Pop removes and returns the first key of the fast lane, or when it is
// empty of the slow lane. The workqueue calls it only when Len() > 0.
func (q *twoLanes[T]) Pop() T {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, lane := range []*[]entry[T]{&q.fast, &q.slow} {
		for len(*lane) > 0 {
			e := (*lane)[0]
			(*lane)[0] = entry[T]{} // let the key be collected
			*lane = (*lane)[1:]
			if q.stored[e.key] == e {
				delete(q.stored, e.key)
				return e.key
			}
		}
	}
	panic("lanes: Pop on an empty queue")
}

func (q *twoLanes[T]) takeMark(key T) bool {
	_, ok := q.marked[key]
	delete(q.marked, key)
	return ok
}

func (q *twoLanes[T]) store(key T, fast bool) {
	q.seq++
	e := entry[T]{key: key, seq: q.seq, fast: fast}
	q.stored[key] = e
	if fast {
		q.fast = append(q.fast, e)
	} else {
		q.slow = append(q.slow, e)
	}
}
