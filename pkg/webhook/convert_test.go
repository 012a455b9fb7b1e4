package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/component-base/metrics/testutil"

	fooscheme "example.com/foo-controller/pkg/generated/clientset/versioned/scheme"
	"example.com/foo-controller/pkg/metrics"
)

const (
	alphaFoo  = `{"apiVersion":"samplecontroller.example.com/v1alpha1","kind":"Foo","metadata":{"name":"a","namespace":"ns","uid":"u1","resourceVersion":"7","generation":2,"creationTimestamp":"2026-11-27T00:00:00Z"},"spec":{"deploymentName":"web","replicas":3,"image":"nginx:1.27"},"status":{"observedGeneration":2,"replicas":3,"availableReplicas":0,"readyReplicas":0}}`
	betaFoo   = `{"apiVersion":"samplecontroller.example.com/v1beta1","kind":"Foo","metadata":{"name":"a","namespace":"ns","uid":"u1","resourceVersion":"7","generation":2,"creationTimestamp":"2026-11-27T00:00:00Z"},"spec":{"deployment":{"name":"web","replicas":3,"image":"nginx:1.27"}},"status":{"observedGeneration":2,"replicas":3,"availableReplicas":0,"readyReplicas":0}}`
	betaFoo2  = `{"apiVersion":"samplecontroller.example.com/v1beta1","kind":"Foo","metadata":{"name":"b","namespace":"ns","uid":"u2","annotations":{"x":"y"}},"spec":{"deployment":{"name":"b","image":"nginx:1.29","minReadySeconds":9}},"status":{"observedGeneration":0,"replicas":0,"availableReplicas":0,"readyReplicas":0}}`
	alphaFoo2 = `{"apiVersion":"samplecontroller.example.com/v1alpha1","kind":"Foo","metadata":{"name":"b","namespace":"ns","uid":"u2","annotations":{"samplecontroller.example.com/v1beta1-spec":"{\"deployment\":{\"minReadySeconds\":9}}","x":"y"}},"spec":{"deploymentName":"b","image":"nginx:1.29"},"status":{"observedGeneration":0,"replicas":0,"availableReplicas":0,"readyReplicas":0}}`
)

func review(desired string, objects ...string) []byte {
	req := &apiextensionsv1.ConversionRequest{UID: "r1", DesiredAPIVersion: desired}
	for _, o := range objects {
		req.Objects = append(req.Objects, runtime.RawExtension{Raw: []byte(o)})
	}
	b, _ := json.Marshal(apiextensionsv1.ConversionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "apiextensions.k8s.io/v1", Kind: "ConversionReview"},
		Request:  req,
	})
	return b
}

// TestConverterServesReviews: what the API server gets back for a review,
// converted objects in order or one failure that names the object and why.
func TestConverterServesReviews(t *testing.T) {
	srv := httptest.NewServer(NewConverter(fooscheme.Scheme))
	defer srv.Close()
	metrics.Register("test", "")
	for _, tc := range []struct {
		name    string
		body    []byte
		want    []string // converted objects, as JSON
		failure string   // or the failure's message contains this
	}{
		{name: "v1alpha1 to v1beta1", body: review("samplecontroller.example.com/v1beta1", alphaFoo), want: []string{betaFoo}},
		{name: "v1beta1 to v1alpha1", body: review("samplecontroller.example.com/v1alpha1", betaFoo), want: []string{alphaFoo}},
		{name: "a list's objects, in order, v1beta1's own field kept, observedGeneration and counts of 0 written out (kstatus: not reported on yet; the AVAILABLE column: 0)", body: review("samplecontroller.example.com/v1alpha1", betaFoo, betaFoo2, betaFoo),
			want: []string{alphaFoo, alphaFoo2, alphaFoo}},
		{name: "mixed versions in, one version out", body: review("samplecontroller.example.com/v1beta1", alphaFoo, betaFoo2), want: []string{betaFoo, betaFoo2}},
		{name: "no objects", body: review("samplecontroller.example.com/v1beta1"), want: []string{}},
		{name: "a version the webhook does not know", body: review("samplecontroller.example.com/v2", alphaFoo),
			failure: `object 1 of 1: Foo ns/a to samplecontroller.example.com/v2: no kind "Foo" is registered for version "samplecontroller.example.com/v2"`},
		{name: "a kind the webhook does not know", body: review("samplecontroller.example.com/v1beta1", betaFoo, `{"apiVersion":"samplecontroller.example.com/v1alpha1","kind":"Bar","metadata":{"name":"x"}}`),
			failure: `object 2 of 2: samplecontroller.example.com/v1alpha1, Kind=Bar: no kind "Bar" is registered`},
		{name: "a field the webhook does not know is refused, not dropped", body: review("samplecontroller.example.com/v1beta1",
			strings.Replace(alphaFoo, `"image":"nginx:1.27"`, `"image":"nginx:1.27","paused":true`, 1)),
			failure: `object 1 of 1: Foo ns/a: unknown field "spec.paused" (is the webhook older than the CRD?)`},
		{name: "a metadata field the webhook does not know is passed over (the API server keeps its metadata)", body: review("samplecontroller.example.com/v1beta1",
			strings.Replace(alphaFoo, `"generation":2,`, `"generation":2,"shardKey":"x",`, 1)), want: []string{betaFoo}},
		{name: "an object that is not JSON", body: review("samplecontroller.example.com/v1beta1", `"x"`),
			failure: "object 1 of 1: json: cannot unmarshal string"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			result, objects := metrics.ConversionSuccess, len(tc.want)
			if tc.failure != "" {
				result, objects = metrics.ConversionFailure, 0
			}
			before := counted(t, result)
			beforeObjects, _ := testutil.GetCounterMetricValue(metrics.ConversionObjects)
			defer func() {
				afterObjects, _ := testutil.GetCounterMetricValue(metrics.ConversionObjects)
				if got := counted(t, result) - before; got != 1 || afterObjects-beforeObjects != float64(objects) {
					t.Errorf("counted %v reviews of result %s and %v objects, want 1 and %d", got, result, afterObjects-beforeObjects, objects)
				}
			}()
			resp, err := http.Post(srv.URL, "application/json", bytes.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = resp.Body.Close() }()
			if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
				t.Fatalf("status %d, Content-Type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
			}
			var got apiextensionsv1.ConversionReview
			if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
				t.Fatal(err)
			}
			if got.APIVersion != "apiextensions.k8s.io/v1" || got.Kind != "ConversionReview" || got.Response == nil || got.Response.UID != "r1" {
				t.Fatalf("not a response to the review: %+v", got)
			}
			if tc.failure != "" {
				if got.Response.Result.Status != metav1.StatusFailure || !strings.Contains(got.Response.Result.Message, tc.failure) || got.Response.ConvertedObjects != nil {
					t.Fatalf("result %+v with %d objects, want a failure containing %q and none", got.Response.Result, len(got.Response.ConvertedObjects), tc.failure)
				}
				return
			}
			if got.Response.Result.Status != metav1.StatusSuccess {
				t.Fatalf("result %+v", got.Response.Result)
			}
			var objs []string
			same := len(got.Response.ConvertedObjects) == len(tc.want)
			for i, o := range got.Response.ConvertedObjects {
				objs = append(objs, string(o.Raw))
				same = same && sameJSON(t, o.Raw, []byte(tc.want[i]))
			}
			if !same {
				t.Errorf("converted\n%s\nwant\n%s", strings.Join(objs, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

// counted is conversion_reviews_total of result.
func counted(t *testing.T, result string) float64 {
	t.Helper()
	v, err := testutil.GetCounterMetricValue(metrics.ConversionReviews.WithLabelValues(result))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// sameJSON: a and b are the same JSON, whatever the order of the keys.
func sameJSON(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatal(err)
	}
	return reflect.DeepEqual(x, y)
}

// TestConverterRefusesWhatIsNotAReview: HTTP errors for what the API
// server never sends, so that a probe or a stray client learns so.
func TestConverterRefusesWhatIsNotAReview(t *testing.T) {
	h := NewConverter(fooscheme.Scheme)
	metrics.Register("test", "")
	for _, tc := range []struct {
		name, method, contentType, body string
		code                            int
	}{
		{"GET", http.MethodGet, "", "", http.StatusMethodNotAllowed},
		{"YAML", http.MethodPost, "application/yaml", string(review("samplecontroller.example.com/v1beta1")), http.StatusUnsupportedMediaType},
		{"not JSON", http.MethodPost, "application/json", "{", http.StatusBadRequest},
		{"a review without a request", http.MethodPost, "application/json", `{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview"}`, http.StatusBadRequest},
		{"too big", http.MethodPost, "application/json", `{"request":{"objects":[` + strings.Repeat(" ", MaxReviewBytes) + `]}}`, http.StatusRequestEntityTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			req := httptest.NewRequest(tc.method, "/convert", strings.NewReader(tc.body))
			req.Header.Set("Content-Type", tc.contentType)
			before := counted(t, metrics.ConversionInvalid)
			h.ServeHTTP(rec, req)
			if rec.Code != tc.code {
				t.Errorf("status %d (%s), want %d", rec.Code, strings.TrimSpace(rec.Body.String()), tc.code)
			}
			if got := counted(t, metrics.ConversionInvalid) - before; got != 1 {
				t.Errorf("counted %v invalid reviews, want 1", got)
			}
		})
	}
}

// TestConverterConvertsTwoReviewsAtOnce: with MaxConcurrentReviews being
// converted, a third waits, and answers 503 if its client gives up first;
// once one is done, it is served. A review whose body is still coming
// holds no slot.
func TestConverterConvertsTwoReviewsAtOnce(t *testing.T) {
	c := NewConverter(fooscheme.Scheme)
	for range MaxConcurrentReviews {
		c.slots <- struct{}{} // reviews being converted
	}
	post := func(ctx context.Context) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, "/convert", bytes.NewReader(review("samplecontroller.example.com/v1beta1", alphaFoo))).WithContext(ctx)
		req.Header.Set("Content-Type", "application/json")
		c.ServeHTTP(rec, req)
		return rec
	}
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	if rec := post(ctx); rec.Code != http.StatusServiceUnavailable {
		t.Errorf("a third review while two are converted: %d, want 503 once its client gives up", rec.Code)
	}
	done := make(chan *httptest.ResponseRecorder)
	go func() { done <- post(t.Context()) }()
	select {
	case rec := <-done:
		t.Fatalf("served (%d) while two reviews were converted", rec.Code)
	case <-time.After(100 * time.Millisecond):
	}
	<-c.slots // one is done
	if rec := <-done; rec.Code != http.StatusOK {
		t.Errorf("after one was done: %d", rec.Code)
	}
	<-c.slots

	// A client still sending its body holds no slot.
	body, send := io.Pipe()
	go func() {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, "/convert", body)
		req.Header.Set("Content-Type", "application/json")
		c.ServeHTTP(rec, req)
		done <- rec
	}()
	time.Sleep(100 * time.Millisecond)
	if n := len(c.slots); n != 0 {
		t.Errorf("%d slots taken by a review whose body is still coming", n)
	}
	_, _ = send.Write(review("samplecontroller.example.com/v1beta1", alphaFoo))
	_ = send.Close()
	if rec := <-done; rec.Code != http.StatusOK {
		t.Errorf("the slow review: %d", rec.Code)
	}
}
