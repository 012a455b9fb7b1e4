package main

import (
	"testing"

	"k8s.io/klog/v2/ktesting"
)

// TestMemoryIsForgottenWithTheFoo: what a sync remembers of a Foo (here its
// status pacing and the spec it pruned for) is one record, dropped whole
// by the sync that finds the Foo gone; a Foo recreated under the name gets
// a record of its own, not its predecessor's.
func TestMemoryIsForgottenWithTheFoo(t *testing.T) {
	foo := newFoo("a", 1)
	dep := ownedDeployment(foo)
	f := newFixture(t).withFoo(foo).withDeployment(dep)
	_, ctx := ktesting.NewTestContext(t)
	c := f.newController(ctx)
	if _, err := c.syncHandler(ctx, keyOf(foo)); err != nil {
		t.Fatal(err)
	}
	rec := c.memory.of(foo)
	if c.memory.len() != 1 || rec.pruned != prunedOf(foo) {
		t.Fatalf("after a sync: %d records, pruned %+v; want 1, %+v", c.memory.len(), rec.pruned, prunedOf(foo))
	}
	if rec.statusPace.Wait(statusProgressInterval, f.clock.Now()) == 0 {
		t.Fatal("after the first status write the next progress-only write waits: the record does not pace it")
	}

	successor := foo.DeepCopy()
	successor.UID = "a-successor"
	if got := c.memory.of(successor); got == rec || got.pruned != (prunedSpec{}) {
		t.Fatalf("a Foo recreated under the name got its predecessor's record: %+v", got)
	}

	if err := f.fooIndexer.Delete(foo); err != nil {
		t.Fatal(err)
	}
	if _, err := c.syncHandler(ctx, keyOf(foo)); err != nil {
		t.Fatal(err)
	}
	if n := c.memory.len(); n != 0 {
		t.Errorf("after the sync that found the Foo gone: %d records, want 0", n)
	}
}
