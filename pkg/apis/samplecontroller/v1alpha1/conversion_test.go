package v1alpha1_test

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/apitesting/fuzzer"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metafuzzer "k8s.io/apimachinery/pkg/apis/meta/fuzzer"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/diff"
	"k8s.io/utils/ptr"
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
// trip through v1alpha1, minReadySeconds and revisionHistoryLimit (which
// v1alpha1 lacks) included: a v1alpha1 client's read-modify-write loses
// nothing.
func FuzzRoundTripFromV1beta1(f *testing.F) {
	for seed := range int64(1000) {
		f.Add(seed)
	}
	s := newScheme(f)
	f.Fuzz(func(t *testing.T, seed int64) {
		in := &v1beta1.Foo{}
		filler(s, seed).Fill(in)
		// The annotations are the conversion's own: on a v1beta1 Foo
		// they do not survive a trip (TestConversionExamples).
		dropConversions(in.Annotations)
		// Within the schema: conversion holds the annotations to it, as
		// admission holds the fields.
		withinSchema(&in.Spec.Deployment)
		zeroCounts(seed, &in.Status.Replicas, &in.Status.AvailableReplicas, &in.Status.ReadyReplicas)
		roundTrip(t, s, in, &v1alpha1.Foo{}, &v1beta1.Foo{}, nil)
	})
}

// v1beta1Only is, for the tests, each field of v1beta1 that v1alpha1
// carries in an annotation (conversion.go's v1beta1Fields): a field added
// there is added here, and the fuzzers below learn it. Integer fields;
// one of another type adds what it needs.
var v1beta1Only = []struct {
	annotation string
	max        int32
	get        func(*v1beta1.DeploymentSpec) *int32 // nil: unset
	set        func(*v1beta1.DeploymentSpec, *int32)
	zeroUnset  bool // 0 is unset (no pointer): written as no annotation
}{
	{v1alpha1.MinReadySecondsAnnotation, v1beta1.MaxMinReadySeconds,
		func(d *v1beta1.DeploymentSpec) *int32 { return &d.MinReadySeconds },
		func(d *v1beta1.DeploymentSpec, v *int32) { d.MinReadySeconds = ptr.Deref(v, 0) }, true},
	{v1alpha1.RevisionHistoryLimitAnnotation, v1beta1.MaxRevisionHistoryLimit,
		func(d *v1beta1.DeploymentSpec) *int32 { return d.RevisionHistoryLimit },
		func(d *v1beta1.DeploymentSpec, v *int32) { d.RevisionHistoryLimit = v }, false},
}

// withinSchema brings d's v1beta1-only fields within their bounds.
func withinSchema(d *v1beta1.DeploymentSpec) {
	for _, f := range v1beta1Only {
		if v := f.get(d); v != nil {
			f.set(d, ptr.To(int32(uint32(*v)%uint32(f.max+1))))
		}
	}
}

func dropConversions(annotations map[string]string) {
	for k := range annotations {
		if strings.HasPrefix(k, v1alpha1.V1beta1FieldPrefix) || k == v1alpha1.LegacyV1beta1SpecAnnotation {
			delete(annotations, k)
		}
	}
}

// unreadable are annotation values conversion cannot read, or that are
// out of bounds for every field, as a field's or as the legacy one
// (whose reader, the release before's, reads null as 0).
var unreadable = []string{"{not json", `"30"`, "-1", "30.5", "1e2", "3601000", "", "true", "[1]", "30 31", `{"deployment":{"minReadySeconds":-1}}`}

// FuzzRoundTripFromV1alpha1: any v1alpha1 Foo survives a trip through
// v1beta1, each v1beta1 field's annotation absent, as down-conversion
// writes it, or one conversion cannot read, independently of the others:
// an unreadable one is dropped alone, and nothing else changes. The
// legacy annotation, when present and readable, wins over
// minReadySeconds' own.
func FuzzRoundTripFromV1alpha1(f *testing.F) {
	for seed := range int64(1000) {
		f.Add(seed)
	}
	s := newScheme(f)
	f.Fuzz(func(t *testing.T, seed int64) {
		in := &v1alpha1.Foo{}
		fill := filler(s, seed)
		fill.Fill(in)
		zeroCounts(seed, &in.Status.Replicas, &in.Status.AvailableReplicas, &in.Status.ReadyReplicas)
		dropConversions(in.Annotations)
		want := in.DeepCopy()
		pick := func(n uint32) string { return unreadable[n%uint32(len(unreadable))] }
		choice := uint64(seed)
		for _, field := range v1beta1Only {
			var n uint32
			fill.Fill(&n)
			switch choice % 3 {
			case 1: // as down-conversion writes it
				v := n % uint32(field.max+1)
				if field.zeroUnset {
					v = 1 + n%uint32(field.max)
				}
				setAnnotation(in, field.annotation, strconv.Itoa(int(v)))
				setAnnotation(want, field.annotation, strconv.Itoa(int(v)))
			case 2:
				setAnnotation(in, field.annotation, pick(n))
			}
			choice /= 3
		}
		var legacy, junk uint32
		fill.Fill(&legacy)
		fill.Fill(&junk)
		switch choice % 4 { // the legacy one, rarely
		case 1:
			m := 1 + legacy%v1beta1.MaxMinReadySeconds
			setAnnotation(in, v1alpha1.LegacyV1beta1SpecAnnotation, fmt.Sprintf(`{"deployment":{"minReadySeconds":%d}}`, m))
			setAnnotation(want, v1alpha1.MinReadySecondsAnnotation, strconv.Itoa(int(m)))
		case 3: // what the release before read as 0: minReadySeconds unset
			setAnnotation(in, v1alpha1.LegacyV1beta1SpecAnnotation, []string{"null", " null ", "{}", `{"deployment":null}`, `{"deployment":{}}`}[legacy%5])
			delete(want.Annotations, v1alpha1.MinReadySecondsAnnotation)
		case 2:
			setAnnotation(in, v1alpha1.LegacyV1beta1SpecAnnotation, pick(legacy))
		}
		if choice/4%4 == 1 { // a name under the prefix that is no field
			setAnnotation(in, v1alpha1.V1beta1FieldPrefix+"paused", pick(junk))
		}
		roundTrip(t, s, in, &v1beta1.Foo{}, &v1alpha1.Foo{}, want)
	})
}

// FuzzV1alpha1WriterOfOneField: a v1alpha1 client that reads a Foo and
// writes one v1beta1 field's annotation (a new value, one conversion
// cannot read, or none: removed) changes that field alone; every other
// field of the v1beta1 Foo stays as it was.
func FuzzV1alpha1WriterOfOneField(f *testing.F) {
	for seed := range int64(500) {
		f.Add(seed, uint8(seed), int32(seed*7))
	}
	s := newScheme(f)
	f.Fuzz(func(t *testing.T, seed int64, which uint8, value int32) {
		stored := &v1beta1.Foo{}
		filler(s, seed).Fill(stored)
		dropConversions(stored.Annotations)
		withinSchema(&stored.Spec.Deployment)
		read := &v1alpha1.Foo{}
		if err := s.Convert(stored.DeepCopy(), read, nil); err != nil {
			t.Fatal(err)
		}
		field := v1beta1Only[int(which)%len(v1beta1Only)]
		want := stored.DeepCopy()
		raw := strconv.Itoa(int(value))
		var wantValue *int32
		if which/8%3 < 2 { // a value, in bounds or not
			setAnnotation(read, field.annotation, raw)
			if value >= 0 && value <= field.max {
				wantValue = &value
			}
		} else { // removed
			delete(read.Annotations, field.annotation)
		}
		field.set(&want.Spec.Deployment, wantValue)
		got := &v1beta1.Foo{}
		if err := s.Convert(read, got, nil); err != nil {
			t.Fatal(err)
		}
		if !apiequality.Semantic.DeepEqual(want, got) {
			t.Fatalf("%s set to %s through v1alpha1 changed more than that field:\n%s", field.annotation, raw, diff.Diff(want, got))
		}
	})
}

func setAnnotation(foo *v1alpha1.Foo, k, v string) {
	if foo.Annotations == nil {
		foo.Annotations = map[string]string{}
	}
	foo.Annotations[k] = v
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
		name: "v1beta1 to v1alpha1: minReadySeconds and revisionHistoryLimit kept, each in its annotation",
		from: `{"metadata":{"name":"a"},"spec":{"deployment":{"name":"web","image":"nginx:1.29","minReadySeconds":30,"revisionHistoryLimit":0}}}`,
		in:   &v1beta1.Foo{}, out: &v1alpha1.Foo{},
		want: `{"metadata":{"name":"a","annotations":{"samplecontroller.example.com/v1beta1.spec.deployment.minReadySeconds":"30","samplecontroller.example.com/v1beta1.spec.deployment.revisionHistoryLimit":"0"}},"spec":{"deploymentName":"web","image":"nginx:1.29"},"status":{"observedGeneration":0,"replicas":0,"availableReplicas":0,"readyReplicas":0}}`,
	}, {
		name: "v1alpha1 to v1beta1: the annotations read back and removed",
		from: `{"metadata":{"name":"a","annotations":{"samplecontroller.example.com/v1beta1.spec.deployment.minReadySeconds":"30","samplecontroller.example.com/v1beta1.spec.deployment.revisionHistoryLimit":"5","x":"y"}},"spec":{"deploymentName":"web","image":"nginx:1.29"}}`,
		in:   &v1alpha1.Foo{}, out: &v1beta1.Foo{},
		want: `{"metadata":{"name":"a","annotations":{"x":"y"}},"spec":{"deployment":{"name":"web","image":"nginx:1.29","minReadySeconds":30,"revisionHistoryLimit":5}},"status":{"observedGeneration":0,"replicas":0,"availableReplicas":0,"readyReplicas":0}}`,
	}, {
		name: "v1alpha1 to v1beta1: a value above its maximum drops that value alone",
		from: `{"metadata":{"name":"a","annotations":{"samplecontroller.example.com/v1beta1.spec.deployment.minReadySeconds":"30","samplecontroller.example.com/v1beta1.spec.deployment.revisionHistoryLimit":"101"}},"spec":{"deploymentName":"web","image":"nginx:1.29"}}`,
		in:   &v1alpha1.Foo{}, out: &v1beta1.Foo{},
		want: `{"metadata":{"name":"a"},"spec":{"deployment":{"name":"web","image":"nginx:1.29","minReadySeconds":30}},"status":{"observedGeneration":0,"replicas":0,"availableReplicas":0,"readyReplicas":0}}`,
	}, {
		name: "v1alpha1 to v1beta1: a value that is not a JSON integer, the same",
		from: `{"metadata":{"name":"a","annotations":{"samplecontroller.example.com/v1beta1.spec.deployment.minReadySeconds":"\"30\"","samplecontroller.example.com/v1beta1.spec.deployment.revisionHistoryLimit":"5"}},"spec":{"deploymentName":"web","image":"nginx:1.29"}}`,
		in:   &v1alpha1.Foo{}, out: &v1beta1.Foo{},
		want: `{"metadata":{"name":"a"},"spec":{"deployment":{"name":"web","image":"nginx:1.29","revisionHistoryLimit":5}},"status":{"observedGeneration":0,"replicas":0,"availableReplicas":0,"readyReplicas":0}}`,
	}, {
		name: "v1alpha1 to v1beta1: a value v1beta1's schema refuses, the same",
		from: `{"metadata":{"name":"a","annotations":{"samplecontroller.example.com/v1beta1.spec.deployment.minReadySeconds":"-5"}},"spec":{"deploymentName":"web","image":"nginx:1.29"}}`,
		in:   &v1alpha1.Foo{}, out: &v1beta1.Foo{},
		want: `{"metadata":{"name":"a"},"spec":{"deployment":{"name":"web","image":"nginx:1.29"}},"status":{"observedGeneration":0,"replicas":0,"availableReplicas":0,"readyReplicas":0}}`,
	}, {
		name: "v1alpha1 to v1beta1: a name under the prefix that is no field, or in other case, is dropped and sets nothing",
		from: `{"metadata":{"name":"a","annotations":{"samplecontroller.example.com/v1beta1.spec.deployment.paused":"true","samplecontroller.example.com/v1beta1.spec.deployment.MINREADYSECONDS":"30"}},"spec":{"deploymentName":"web","image":"nginx:1.29"}}`,
		in:   &v1alpha1.Foo{}, out: &v1beta1.Foo{},
		want: `{"metadata":{"name":"a"},"spec":{"deployment":{"name":"web","image":"nginx:1.29"}},"status":{"observedGeneration":0,"replicas":0,"availableReplicas":0,"readyReplicas":0}}`,
	}, {
		name: "v1alpha1 to v1beta1: the legacy annotation's minReadySeconds read and removed",
		from: `{"metadata":{"name":"a","annotations":{"samplecontroller.example.com/v1beta1-spec":"{\"deployment\":{\"minReadySeconds\":30}}"}},"spec":{"deploymentName":"web","image":"nginx:1.29"}}`,
		in:   &v1alpha1.Foo{}, out: &v1beta1.Foo{},
		want: `{"metadata":{"name":"a"},"spec":{"deployment":{"name":"web","image":"nginx:1.29","minReadySeconds":30}},"status":{"observedGeneration":0,"replicas":0,"availableReplicas":0,"readyReplicas":0}}`,
	}, {
		name: "v1alpha1 to v1beta1: the legacy annotation, sent beside the field's own, wins (a script of the release before)",
		from: `{"metadata":{"name":"a","annotations":{"samplecontroller.example.com/v1beta1-spec":"{\"deployment\":{\"minReadySeconds\":45}}","samplecontroller.example.com/v1beta1.spec.deployment.minReadySeconds":"30","samplecontroller.example.com/v1beta1.spec.deployment.revisionHistoryLimit":"5"}},"spec":{"deploymentName":"web","image":"nginx:1.29"}}`,
		in:   &v1alpha1.Foo{}, out: &v1beta1.Foo{},
		want: `{"metadata":{"name":"a"},"spec":{"deployment":{"name":"web","image":"nginx:1.29","minReadySeconds":45,"revisionHistoryLimit":5}},"status":{"observedGeneration":0,"replicas":0,"availableReplicas":0,"readyReplicas":0}}`,
	}, {
		name: "v1alpha1 to v1beta1: a legacy annotation it cannot read is dropped, the field's own stays",
		from: `{"metadata":{"name":"a","annotations":{"samplecontroller.example.com/v1beta1-spec":"{\"Deployment\":{\"MINREADYSECONDS\":45}}","samplecontroller.example.com/v1beta1.spec.deployment.minReadySeconds":"30"}},"spec":{"deploymentName":"web","image":"nginx:1.29"}}`,
		in:   &v1alpha1.Foo{}, out: &v1beta1.Foo{},
		want: `{"metadata":{"name":"a"},"spec":{"deployment":{"name":"web","image":"nginx:1.29","minReadySeconds":30}},"status":{"observedGeneration":0,"replicas":0,"availableReplicas":0,"readyReplicas":0}}`,
	}, {
		name: "v1alpha1 to v1beta1: a legacy annotation that leaves minReadySeconds out is 0, as the release before read it, and wins",
		from: `{"metadata":{"name":"a","annotations":{"samplecontroller.example.com/v1beta1-spec":" {\"deployment\":null} ","samplecontroller.example.com/v1beta1.spec.deployment.minReadySeconds":"30"}},"spec":{"deploymentName":"web","image":"nginx:1.29"}}`,
		in:   &v1alpha1.Foo{}, out: &v1beta1.Foo{},
		want: `{"metadata":{"name":"a"},"spec":{"deployment":{"name":"web","image":"nginx:1.29"}},"status":{"observedGeneration":0,"replicas":0,"availableReplicas":0,"readyReplicas":0}}`,
	}, {
		name: "v1alpha1 to v1beta1: a legacy annotation with an unknown field, the same",
		from: `{"metadata":{"name":"a","annotations":{"samplecontroller.example.com/v1beta1-spec":"{\"deployment\":{\"minReadySeconds\":30,\"paused\":true}}"}},"spec":{"deploymentName":"web","image":"nginx:1.29"}}`,
		in:   &v1alpha1.Foo{}, out: &v1beta1.Foo{},
		want: `{"metadata":{"name":"a"},"spec":{"deployment":{"name":"web","image":"nginx:1.29"}},"status":{"observedGeneration":0,"replicas":0,"availableReplicas":0,"readyReplicas":0}}`,
	}, {
		name: "v1beta1 to v1alpha1: conversion's annotations on a v1beta1 Foo without the fields are removed",
		from: `{"metadata":{"name":"a","annotations":{"samplecontroller.example.com/v1beta1.spec.deployment.minReadySeconds":"4000","samplecontroller.example.com/v1beta1-spec":"{}","samplecontroller.example.com/v1beta1.spec.deployment.paused":"true","x":"y"}},"spec":{"deployment":{"name":"web","image":"nginx:1.29"}}}`,
		in:   &v1beta1.Foo{}, out: &v1alpha1.Foo{},
		want: `{"metadata":{"name":"a","annotations":{"x":"y"}},"spec":{"deploymentName":"web","image":"nginx:1.29"},"status":{"observedGeneration":0,"replicas":0,"availableReplicas":0,"readyReplicas":0}}`,
	}, {
		name: "v1beta1 to v1alpha1: an annotation set on a v1beta1 Foo is overwritten by the field",
		from: `{"metadata":{"name":"a","annotations":{"samplecontroller.example.com/v1beta1.spec.deployment.revisionHistoryLimit":"mine"}},"spec":{"deployment":{"name":"web","image":"nginx:1.29","revisionHistoryLimit":3}}}`,
		in:   &v1beta1.Foo{}, out: &v1alpha1.Foo{},
		want: `{"metadata":{"name":"a","annotations":{"samplecontroller.example.com/v1beta1.spec.deployment.revisionHistoryLimit":"3"}},"spec":{"deploymentName":"web","image":"nginx:1.29"},"status":{"observedGeneration":0,"replicas":0,"availableReplicas":0,"readyReplicas":0}}`,
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
