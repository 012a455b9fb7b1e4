package v1alpha1_test

import (
	"encoding/json"
	"math/rand"
	"testing"

	"k8s.io/apimachinery/pkg/api/apitesting/fuzzer"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metafuzzer "k8s.io/apimachinery/pkg/apis/meta/fuzzer"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/diff"
	"sigs.k8s.io/randfill"

	"example.com/foo-controller/pkg/apis/samplecontroller/v1alpha1"
	"example.com/foo-controller/pkg/apis/samplecontroller/v1beta1"
)

// newScheme holds both versions and the conversions between them, as the
// conversion webhook's does.
func newScheme(t testing.TB) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{v1alpha1.Install, v1beta1.Install} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// filler fills every field of a Foo at random, the metadata as the API
// server could hold it (apimachinery's fuzzer functions for ObjectMeta).
func filler(s *runtime.Scheme, seed int64) *randfill.Filler {
	return fuzzer.FuzzerFor(metafuzzer.Funcs, rand.NewSource(seed), serializer.NewCodecFactory(s)).
		Funcs(func(tm *metav1.TypeMeta, _ randfill.Continue) {}) // conversion leaves the kind to the caller
}

// roundTrip converts in to mid's version and back to out's, failing if
// either conversion errs or changes what it was given, or if out is not
// want (in, when want is nil).
func roundTrip(t *testing.T, s *runtime.Scheme, in, mid, out, want runtime.Object) {
	t.Helper()
	before := in.DeepCopyObject()
	if want == nil {
		want = before
	}
	if err := s.Convert(in, mid, nil); err != nil {
		t.Fatalf("convert %T to %T: %v", in, mid, err)
	}
	if !apiequality.Semantic.DeepEqual(before, in) {
		t.Fatalf("converting to %T changed its input:\n%s", mid, diff.Diff(before, in))
	}
	midBefore := mid.DeepCopyObject()
	if err := s.Convert(mid, out, nil); err != nil {
		t.Fatalf("convert %T to %T: %v", mid, out, err)
	}
	if !apiequality.Semantic.DeepEqual(midBefore, mid) {
		t.Fatalf("converting to %T changed its input:\n%s", out, diff.Diff(midBefore, mid))
	}
	// Semantic equality takes a nil and an empty map or list for the
	// same, as JSON with omitempty does: what a client reads.
	if !apiequality.Semantic.DeepEqual(want, out) {
		t.Fatalf("round trip through %T lost something:\n%s", mid, diff.Diff(want, out))
	}
	countsWritten(t, mid)
	countsWritten(t, out)
}

// countsWritten fails unless obj's JSON (what the webhook answers, and a
// client reads) holds each status count, 0 included: a count left out
// reads as an empty AVAILABLE column, not as 0.
func countsWritten(t *testing.T, obj runtime.Object) {
	t.Helper()
	raw, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Status map[string]json.RawMessage `json:"status"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"replicas", "availableReplicas", "readyReplicas"} {
		if _, ok := m.Status[k]; !ok {
			t.Fatalf("%T's JSON has no status.%s: %s", obj, k, raw)
		}
	}
}

// zeroCounts sets a status's counts to 0 for one seed in four: what a Foo
// scaled to 0, or not reported on yet, holds.
func zeroCounts(seed int64, replicas, available, ready *int32) {
	if seed%4 == 0 {
		*replicas, *available, *ready = 0, 0, 0
	}
}

// FuzzRoundTripFromV1beta1: any v1beta1 Foo its schema admits survives a
// trip through v1alpha1, minReadySeconds (which v1alpha1 lacks) included:
// a v1alpha1 client's read-modify-write loses nothing.
func FuzzRoundTripFromV1beta1(f *testing.F) {
	for seed := range int64(1000) {
		f.Add(seed)
	}
	s := newScheme(f)
	f.Fuzz(func(t *testing.T, seed int64) {
		in := &v1beta1.Foo{}
		filler(s, seed).Fill(in)
		// The annotation is the conversion's own: on a v1beta1 Foo it
		// does not survive a trip (TestConversionExamples).
		delete(in.Annotations, v1alpha1.V1beta1SpecAnnotation)
		// Within the schema (0 to 3600): conversion holds the annotation
		// to it, as admission holds the field.
		in.Spec.Deployment.MinReadySeconds = int32(uint32(in.Spec.Deployment.MinReadySeconds) % (v1beta1.MaxMinReadySeconds + 1))
		zeroCounts(seed, &in.Status.Replicas, &in.Status.AvailableReplicas, &in.Status.ReadyReplicas)
		roundTrip(t, s, in, &v1alpha1.Foo{}, &v1beta1.Foo{}, nil)
	})
}

// FuzzRoundTripFromV1alpha1: any v1alpha1 Foo survives a trip through
// v1beta1, whether it carries v1beta1's fields in the annotation (as
// down-conversion writes it) or none; an annotation of that name the
// conversion cannot read is dropped, and nothing else changes.
func FuzzRoundTripFromV1alpha1(f *testing.F) {
	for seed := range int64(1000) {
		f.Add(seed)
	}
	s := newScheme(f)
	f.Fuzz(func(t *testing.T, seed int64) {
		in := &v1alpha1.Foo{}
		fill := filler(s, seed)
		fill.Fill(in)
		var minReady int32
		fill.Fill(&minReady)
		zeroCounts(seed, &in.Status.Replicas, &in.Status.AvailableReplicas, &in.Status.ReadyReplicas)
		var want runtime.Object
		switch seed % 3 {
		case 0:
			delete(in.Annotations, v1alpha1.V1beta1SpecAnnotation)
		case 1:
			// 0 is written as no annotation at all.
			minReady = 1 + int32(uint32(minReady)%v1beta1.MaxMinReadySeconds)
			raw, _ := json.Marshal(map[string]any{"deployment": map[string]any{"minReadySeconds": minReady}})
			setAnnotation(in, string(raw))
		case 2:
			setAnnotation(in, "{not json")
			dropped := in.DeepCopy()
			delete(dropped.Annotations, v1alpha1.V1beta1SpecAnnotation)
			want = dropped
		}
		roundTrip(t, s, in, &v1beta1.Foo{}, &v1alpha1.Foo{}, want)
	})
}

func setAnnotation(foo *v1alpha1.Foo, v string) {
	if foo.Annotations == nil {
		foo.Annotations = map[string]string{}
	}
	foo.Annotations[v1alpha1.V1beta1SpecAnnotation] = v
}

// TestConversionExamples: what each version reads of a Foo written in the
// other, exactly, including the cases the round trips leave out.
func TestConversionExamples(t *testing.T) {
	s := newScheme(t)
	for _, tc := range []struct {
		name    string
		from    string
		in, out runtime.Object
		want    string
	}{{
		name: "v1alpha1 to v1beta1: the spec moves under spec.deployment",
		from: `{"metadata":{"name":"a","annotations":{"team":"x"}},"spec":{"deploymentName":"web","replicas":3,"image":"nginx:1.27","containerPort":8080,"podLabels":{"tier":"front"},"deletionPolicy":"Orphan"},"status":{"observedGeneration":2,"replicas":3,"availableReplicas":0,"readyReplicas":0}}`,
		in:   &v1alpha1.Foo{}, out: &v1beta1.Foo{},
		want: `{"metadata":{"name":"a","annotations":{"team":"x"}},"spec":{"deployment":{"name":"web","replicas":3,"image":"nginx:1.27","containerPort":8080,"podLabels":{"tier":"front"}},"deletionPolicy":"Orphan"},"status":{"observedGeneration":2,"replicas":3,"availableReplicas":0,"readyReplicas":0}}`,
	}, {
		name: "v1beta1 to v1alpha1: minReadySeconds kept in the annotation",
		from: `{"metadata":{"name":"a"},"spec":{"deployment":{"name":"web","image":"nginx:1.29","minReadySeconds":30}}}`,
		in:   &v1beta1.Foo{}, out: &v1alpha1.Foo{},
		want: `{"metadata":{"name":"a","annotations":{"samplecontroller.example.com/v1beta1-spec":"{\"deployment\":{\"minReadySeconds\":30}}"}},"spec":{"deploymentName":"web","image":"nginx:1.29"},"status":{"observedGeneration":0,"replicas":0,"availableReplicas":0,"readyReplicas":0}}`,
	}, {
		name: "v1alpha1 to v1beta1: the annotation read back and removed",
		from: `{"metadata":{"name":"a","annotations":{"samplecontroller.example.com/v1beta1-spec":"{\"deployment\":{\"minReadySeconds\":30}}"}},"spec":{"deploymentName":"web","image":"nginx:1.29"}}`,
		in:   &v1alpha1.Foo{}, out: &v1beta1.Foo{},
		want: `{"metadata":{"name":"a"},"spec":{"deployment":{"name":"web","image":"nginx:1.29","minReadySeconds":30}},"status":{"observedGeneration":0,"replicas":0,"availableReplicas":0,"readyReplicas":0}}`,
	}, {
		name: "v1alpha1 to v1beta1: an annotation it cannot read is dropped, and sets nothing",
		from: `{"metadata":{"name":"a","annotations":{"samplecontroller.example.com/v1beta1-spec":"{\"deployment\":{\"minReadySeconds\":\"30\"}}"}},"spec":{"deploymentName":"web","image":"nginx:1.29"}}`,
		in:   &v1alpha1.Foo{}, out: &v1beta1.Foo{},
		want: `{"metadata":{"name":"a"},"spec":{"deployment":{"name":"web","image":"nginx:1.29"}},"status":{"observedGeneration":0,"replicas":0,"availableReplicas":0,"readyReplicas":0}}`,
	}, {
		name: "v1alpha1 to v1beta1: an unknown field in the annotation, the same",
		from: `{"metadata":{"name":"a","annotations":{"samplecontroller.example.com/v1beta1-spec":"{\"deployment\":{\"minReadySeconds\":30,\"paused\":true}}"}},"spec":{"deploymentName":"web","image":"nginx:1.29"}}`,
		in:   &v1alpha1.Foo{}, out: &v1beta1.Foo{},
		want: `{"metadata":{"name":"a"},"spec":{"deployment":{"name":"web","image":"nginx:1.29"}},"status":{"observedGeneration":0,"replicas":0,"availableReplicas":0,"readyReplicas":0}}`,
	}, {
		name: "v1alpha1 to v1beta1: a name in other case, the same (encoding/json would take it)",
		from: `{"metadata":{"name":"a","annotations":{"samplecontroller.example.com/v1beta1-spec":"{\"Deployment\":{\"MINREADYSECONDS\":30}}"}},"spec":{"deploymentName":"web","image":"nginx:1.29"}}`,
		in:   &v1alpha1.Foo{}, out: &v1beta1.Foo{},
		want: `{"metadata":{"name":"a"},"spec":{"deployment":{"name":"web","image":"nginx:1.29"}},"status":{"observedGeneration":0,"replicas":0,"availableReplicas":0,"readyReplicas":0}}`,
	}, {
		name: "v1alpha1 to v1beta1: a value v1beta1's schema refuses, the same",
		from: `{"metadata":{"name":"a","annotations":{"samplecontroller.example.com/v1beta1-spec":"{\"deployment\":{\"minReadySeconds\":-5}}"}},"spec":{"deploymentName":"web","image":"nginx:1.29"}}`,
		in:   &v1alpha1.Foo{}, out: &v1beta1.Foo{},
		want: `{"metadata":{"name":"a"},"spec":{"deployment":{"name":"web","image":"nginx:1.29"}},"status":{"observedGeneration":0,"replicas":0,"availableReplicas":0,"readyReplicas":0}}`,
	}, {
		name: "v1alpha1 to v1beta1: above the maximum, the same",
		from: `{"metadata":{"name":"a","annotations":{"samplecontroller.example.com/v1beta1-spec":"{\"deployment\":{\"minReadySeconds\":3601}}"}},"spec":{"deploymentName":"web","image":"nginx:1.29"}}`,
		in:   &v1alpha1.Foo{}, out: &v1beta1.Foo{},
		want: `{"metadata":{"name":"a"},"spec":{"deployment":{"name":"web","image":"nginx:1.29"}},"status":{"observedGeneration":0,"replicas":0,"availableReplicas":0,"readyReplicas":0}}`,
	}, {
		name: "v1beta1 to v1alpha1: the annotation on a v1beta1 Foo without minReadySeconds is removed",
		from: `{"metadata":{"name":"a","annotations":{"samplecontroller.example.com/v1beta1-spec":"{\"deployment\":{\"minReadySeconds\":4000}}","x":"y"}},"spec":{"deployment":{"name":"web","image":"nginx:1.29"}}}`,
		in:   &v1beta1.Foo{}, out: &v1alpha1.Foo{},
		want: `{"metadata":{"name":"a","annotations":{"x":"y"}},"spec":{"deploymentName":"web","image":"nginx:1.29"},"status":{"observedGeneration":0,"replicas":0,"availableReplicas":0,"readyReplicas":0}}`,
	}, {
		name: "v1beta1 to v1alpha1: the annotation set on a v1beta1 Foo is overwritten",
		from: `{"metadata":{"name":"a","annotations":{"samplecontroller.example.com/v1beta1-spec":"mine"}},"spec":{"deployment":{"name":"web","image":"nginx:1.29","minReadySeconds":5}}}`,
		in:   &v1beta1.Foo{}, out: &v1alpha1.Foo{},
		want: `{"metadata":{"name":"a","annotations":{"samplecontroller.example.com/v1beta1-spec":"{\"deployment\":{\"minReadySeconds\":5}}"}},"spec":{"deploymentName":"web","image":"nginx:1.29"},"status":{"observedGeneration":0,"replicas":0,"availableReplicas":0,"readyReplicas":0}}`,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			if err := json.Unmarshal([]byte(tc.from), tc.in); err != nil {
				t.Fatal(err)
			}
			if err := s.Convert(tc.in, tc.out, nil); err != nil {
				t.Fatal(err)
			}
			if got, _ := json.Marshal(tc.out); string(got) != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}
