// Package shard splits the namespaces of a cluster among replicas of
// foo-controller in the opt-in sharded mode (-shard-slots; one leader doing
// everything stays the default): the slots (this file) and their
// boundaries (layout.go, re-cut for the load by balance.go), the members'
// and slots' Leases and the write fence (member.go), a member's loop in
// named steps (run.go), and the filter on each slot's informers
// (filter.go). Nothing here is needed to read the single-leader loop.
//
// The unit of work is a slot: a range of the 64-bit FNV-1a hash of
// an object's namespace, the hash the API server itself computes for a
// shard selector (KEP-5866, ShardedListAndWatch). A namespace, and so a Foo
// and every Deployment it could own or collide with, falls in exactly one
// slot. The design (docs/sharding.md): a replica holding a slot's Lease
// lists and watches only that slot's objects and is the only one that
// writes to them.
package shard

import (
	"fmt"
	"hash/fnv"
	"math/bits"

	"k8s.io/apimachinery/pkg/sharding"
)

// hashKey is what slots hash: the namespace, so that the conflict and
// rename logic, which need every Deployment of a namespace, see them all in
// one replica. (The API server also accepts object.metadata.uid, which
// would split a namespace's Foos from the Deployments they could collide
// with.)
const hashKey = "object.metadata.namespace"

// Slots is a division of the hash space into n equal ranges, slot i
// covering [Start(i), Start(i+1)), the last one up to 2^64.
type Slots int

// Start is slot i's first hash: ceil(i * 2^64 / n), so that Of, which
// computes floor(h * n / 2^64), agrees with the ranges exactly. It panics
// unless 0 <= i < n.
func (n Slots) Start(i int) uint64 {
	if i < 0 || i >= int(n) {
		panic(fmt.Sprintf("shard: slot %d of %d", i, int(n)))
	}
	q, r := bits.Div64(uint64(i), 0, uint64(n))
	if r != 0 {
		q++
	}
	return q
}

// Of returns the slot of a namespace.
func (n Slots) Of(namespace string) int { return n.ofHash(hash(namespace)) }

func (n Slots) ofHash(h uint64) int {
	hi, _ := bits.Mul64(h, uint64(n))
	return int(hi)
}

// Selector returns the shard selector (metav1.ListOptions.ShardSelector)
// for the given slots, adjacent slots merged into one range: the API server
// then sends only their objects. No slots is an error: the empty selector
// would mean everything to the API server.
func (n Slots) Selector(slots []int) (sharding.Selector, error) {
	return EqualLayout(n).Selector(slots)
}

// hash is the API server's (sharding.HashField): 64-bit FNV-1a over the
// namespace's bytes.
func hash(namespace string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(namespace))
	return h.Sum64()
}

// Validate rejects a slot count the controller cannot run with.
func (n Slots) Validate() error {
	if n < 1 || n > 256 {
		return fmt.Errorf("shard slots must be 1 to 256, got %d", int(n))
	}
	return nil
}
