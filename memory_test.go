package main

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"

	samplev1beta1 "example.com/foo-controller/pkg/apis/samplecontroller/v1beta1"
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

// BenchmarkRecordBytes reports the bytes a Foo's record costs once its
// status was written and its Deployments pruned (what every converged Foo
// holds), beside the caches' (make bench-cache): at 611698d the same state
// was a status pacer's entry and a pruned sync.Map's, 273.6 bytes a Foo at
// 100,000; the record is 271.
func BenchmarkRecordBytes(b *testing.B) {
	const n = 100000
	foos := make([]*samplev1beta1.Foo, n)
	for i := range foos {
		foos[i] = &samplev1beta1.Foo{ObjectMeta: metav1.ObjectMeta{
			Namespace: fmt.Sprintf("ns-%d", i%64), Name: fmt.Sprintf("foo-%06d", i), UID: types.UID(fmt.Sprintf("uid-%06d", i)), Generation: 1,
		}, Spec: samplev1beta1.FooSpec{Deployment: samplev1beta1.DeploymentSpec{Name: fmt.Sprintf("dep-%06d", i)}}}
	}
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	for b.Loop() {
		before := heap()
		m := newMemory()
		now := time.Now()
		for _, foo := range foos {
			rec := m.of(foo)
			rec.statusPace.Wrote(now)
			rec.pruned = prunedOf(foo)
		}
		b.ReportMetric(float64(heap()-before)/n, "B/Foo")
		runtime.KeepAlive(m)
	}
}
