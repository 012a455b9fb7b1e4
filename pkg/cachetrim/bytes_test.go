package cachetrim

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	samplev1beta1 "example.com/foo-controller/pkg/apis/samplecontroller/v1beta1"
)

// BenchmarkCachedBytes reports what one object costs in an informer's store
// (object, key, namespace index), in bytes of Go heap still live after a
// garbage collection: as decoded, with only managedFields and the
// last-applied annotation dropped (what Transform did before it cut
// Deployments down), and as Transform caches it now. The objects are a
// Foo and its Deployment as the API server served them in a bench run
// (testdata/, `kubectl get -o json --show-managed-fields`); the Deployment
// is decoded from protobuf, as the controller receives it.
//
//	go test -run '^$' -bench CachedBytes ./pkg/cachetrim/
func BenchmarkCachedBytes(b *testing.B) {
	dep := &appsv1.Deployment{}
	readJSON(b, "testdata/deployment.json", dep)
	depProto, err := dep.Marshal()
	if err != nil {
		b.Fatal(err)
	}
	fooJSON, err := os.ReadFile("testdata/foo.json")
	if err != nil {
		b.Fatal(err)
	}
	decodeDeployment := func() any {
		d := &appsv1.Deployment{}
		if err := d.Unmarshal(depProto); err != nil {
			b.Fatal(err)
		}
		return d
	}
	decodeFoo := func() any {
		f := &samplev1beta1.Foo{}
		if err := json.Unmarshal(fooJSON, f); err != nil {
			b.Fatal(err)
		}
		return f
	}
	for _, c := range []struct {
		name   string
		decode func() any
		cache  func(any) any
	}{
		{"Deployment/as-decoded", decodeDeployment, func(o any) any { return o }},
		{"Deployment/managedFields-dropped", decodeDeployment, dropManagedFields},
		{"Deployment/cached", decodeDeployment, transformed},
		{"Foo/as-decoded", decodeFoo, func(o any) any { return o }},
		{"Foo/managedFields-dropped", decodeFoo, dropManagedFields},
		{"Foo/cached", decodeFoo, transformed},
	} {
		b.Run(c.name, func(b *testing.B) {
			const n = 10000
			var perObject float64
			for range b.N {
				store := cache.NewIndexer(cache.MetaNamespaceKeyFunc,
					cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
				before := liveHeap()
				for i := range n {
					obj := c.decode()
					m := obj.(interface {
						SetName(string)
						SetUID(types.UID)
					})
					m.SetName(fmt.Sprintf("foo-%d", i))
					m.SetUID(types.UID(fmt.Sprintf("%08d-d6aa-4178-a1c8-906ef40fd35b", i)))
					if err := store.Add(c.cache(obj)); err != nil {
						b.Fatal(err)
					}
				}
				perObject = float64(liveHeap()-before) / n
				runtime.KeepAlive(store)
			}
			b.ReportMetric(perObject, "B/object")
		})
	}
}

func readJSON(b *testing.B, path string, into any) {
	raw, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	if err := json.Unmarshal(raw, into); err != nil {
		b.Fatal(err)
	}
}

// dropManagedFields is what Transform did to every object before it cut
// Deployments down to what the controller reads.
func dropManagedFields(obj any) any {
	m := obj.(interface {
		SetManagedFields([]metav1.ManagedFieldsEntry)
		GetAnnotations() map[string]string
	})
	m.SetManagedFields(nil)
	delete(m.GetAnnotations(), lastApplied)
	return obj
}

func transformed(obj any) any {
	out, _ := Transform(obj)
	return out
}

func liveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
