package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
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
	betaFoo2  = `{"apiVersion":"samplecontroller.example.com/v1beta1","kind":"Foo","metadata":{"name":"b","namespace":"ns","uid":"u2","annotations":{"x":"y"}},"spec":{"deployment":{"name":"b","image":"nginx:1.29","minReadySeconds":9,"revisionHistoryLimit":0}},"status":{"observedGeneration":0,"replicas":0,"availableReplicas":0,"readyReplicas":0}}`
	alphaFoo2 = `{"apiVersion":"samplecontroller.example.com/v1alpha1","kind":"Foo","metadata":{"name":"b","namespace":"ns","uid":"u2","annotations":{"samplecontroller.example.com/v1beta1.spec.deployment.minReadySeconds":"9","samplecontroller.example.com/v1beta1.spec.deployment.revisionHistoryLimit":"0","x":"y"}},"spec":{"deploymentName":"b","image":"nginx:1.29"},"status":{"observedGeneration":0,"replicas":0,"availableReplicas":0,"readyReplicas":0}}`
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
		before  int      // and the objects before the one that failed, written out already
		invalid bool     // counted as invalid (not what the API server sends), not as a failure
	}{
		{name: "v1alpha1 to v1beta1", body: review("samplecontroller.example.com/v1beta1", alphaFoo), want: []string{betaFoo}},
		{name: "v1beta1 to v1alpha1", body: review("samplecontroller.example.com/v1alpha1", betaFoo), want: []string{alphaFoo}},
		{name: "a list's objects, in order, v1beta1's own field kept, observedGeneration and counts of 0 written out (kstatus: not reported on yet; the AVAILABLE column: 0)", body: review("samplecontroller.example.com/v1alpha1", betaFoo, betaFoo2, betaFoo),
			want: []string{alphaFoo, alphaFoo2, alphaFoo}},
		{name: "mixed versions in, one version out", body: review("samplecontroller.example.com/v1beta1", alphaFoo, betaFoo2), want: []string{betaFoo, betaFoo2}},
		{name: "no objects", body: review("samplecontroller.example.com/v1beta1"), want: []string{}},
		{name: "a version the webhook does not know", body: review("samplecontroller.example.com/v2", alphaFoo),
			failure: `object 1: Foo ns/a to samplecontroller.example.com/v2: no kind "Foo" is registered for version "samplecontroller.example.com/v2"`},
		{name: "a kind the webhook does not know", body: review("samplecontroller.example.com/v1beta1", betaFoo, `{"apiVersion":"samplecontroller.example.com/v1alpha1","kind":"Bar","metadata":{"name":"x"}}`),
			failure: `object 2: samplecontroller.example.com/v1alpha1, Kind=Bar: no kind "Bar" is registered`, before: 1},
		{name: "a field the webhook does not know is refused, not dropped", body: review("samplecontroller.example.com/v1beta1",
			strings.Replace(alphaFoo, `"image":"nginx:1.27"`, `"image":"nginx:1.27","paused":true`, 1)),
			failure: `object 1: Foo ns/a: unknown field "spec.paused" (is the webhook older than the CRD?)`},
		{name: "a metadata field the webhook does not know is passed over (the API server keeps its metadata)", body: review("samplecontroller.example.com/v1beta1",
			strings.Replace(alphaFoo, `"generation":2,`, `"generation":2,"shardKey":"x",`, 1)), want: []string{betaFoo}},
		{name: "an object that is not JSON", body: review("samplecontroller.example.com/v1beta1", `"x"`),
			failure: "object 1: json: cannot unmarshal string"},
		{name: "an object larger than the API server stores", body: review("samplecontroller.example.com/v1alpha1", betaFoo,
			strings.Replace(betaFoo2, `"x":"y"`, `"x":"`+strings.Repeat("y", MaxObjectBytes)+`"`, 1)),
			failure: "object 2: an object of more than 3145728 bytes", before: 1, invalid: true},
		{name: "a review cut short", body: review("samplecontroller.example.com/v1alpha1", betaFoo, betaFoo)[:250],
			failure: "object 1: unexpected EOF"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			result, objects := metrics.ConversionSuccess, len(tc.want)
			if tc.failure != "" {
				result, objects = metrics.ConversionFailure, tc.before
			}
			if tc.invalid {
				result = metrics.ConversionInvalid
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
				// The API server reads the result first: the objects
				// before the failure are passed over.
				if got.Response.Result.Status != metav1.StatusFailure || !strings.Contains(got.Response.Result.Message, tc.failure) || len(got.Response.ConvertedObjects) != tc.before {
					t.Fatalf("result %+v with %d objects, want a failure containing %q after %d", got.Response.Result, len(got.Response.ConvertedObjects), tc.failure, tc.before)
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
		{"too big, refused before it is read", http.MethodPost, "application/json", `{"request":{"objects":[` + strings.Repeat(" ", MaxReviewBytes) + `]}}`, http.StatusRequestEntityTooLarge},
		{"objects before the uid (the API server sends the uid first)", http.MethodPost, "application/json", `{"request":{"desiredAPIVersion":"samplecontroller.example.com/v1beta1","objects":[],"uid":"x"}}`, http.StatusBadRequest},
		{"objects not a list", http.MethodPost, "application/json", `{"request":{"uid":"x","desiredAPIVersion":"samplecontroller.example.com/v1beta1","objects":{}}}`, http.StatusBadRequest},
		{"a uid longer than any the API server sends (the answer repeats it)", http.MethodPost, "application/json", `{"request":{"uid":"` + strings.Repeat("<", maxHeadValue+1) + `","desiredAPIVersion":"samplecontroller.example.com/v1beta1","objects":[]}}`, http.StatusBadRequest},
		{"a desiredAPIVersion as long", http.MethodPost, "application/json", `{"request":{"uid":"x","desiredAPIVersion":"` + strings.Repeat("<", maxHeadValue+1) + `","objects":[]}}`, http.StatusBadRequest},
		{"a value before the objects over baseObjectBytes", http.MethodPost, "application/json", `{"request":{"uid":"x","desiredAPIVersion":"samplecontroller.example.com/v1beta1","extra":"` + strings.Repeat("y", baseObjectBytes) + `","objects":[]}}`, http.StatusBadRequest},
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

// TestConverterHoldsToItsMemoryBudget: a review holds one of baseReviews
// shares while it is answered and gives it back when done, even if it
// failed; with every share taken, a review waits, and answers 429 (with
// Retry-After) if its client gives up first; once one is back, it is
// served. A review whose body is still coming holds its base share and no
// more. A review with an object over baseObjectBytes gives its base share
// back and waits for the large one, so that ordinary reviews go on.
func TestConverterHoldsToItsMemoryBudget(t *testing.T) {
	metrics.Register("test", "")
	c := NewConverter(fooscheme.Scheme)
	post := func(ctx context.Context, body io.Reader) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, "/convert", body).WithContext(ctx)
		req.Header.Set("Content-Type", "application/json")
		c.ServeHTTP(rec, req)
		return rec
	}
	ok := func() io.Reader { return bytes.NewReader(review("samplecontroller.example.com/v1beta1", alphaFoo)) }
	free := func(base int64, large bool) bool { // base shares and the large one free
		if !c.base.TryAcquire(base) {
			return false
		}
		c.base.Release(base)
		if large {
			if !c.large.TryAcquire(1) {
				return false
			}
			c.large.Release(1)
		}
		return true
	}

	if err := c.base.Acquire(t.Context(), baseReviews); err != nil { // held by other reviews
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	busy := counted(t, metrics.ConversionBusy)
	if rec := post(ctx, ok()); rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") == "" {
		t.Errorf("a review with every share taken: %d (Retry-After %q), want 429 once its client gives up", rec.Code, rec.Header().Get("Retry-After"))
	}
	if got := counted(t, metrics.ConversionBusy) - busy; got != 1 {
		t.Errorf("counted %v busy reviews, want 1", got)
	}
	done := make(chan *httptest.ResponseRecorder)
	go func() { done <- post(t.Context(), ok()) }()
	select {
	case rec := <-done:
		t.Fatalf("served (%d) with every share taken", rec.Code)
	case <-time.After(100 * time.Millisecond):
	}
	c.base.Release(baseReviews)
	if rec := <-done; rec.Code != http.StatusOK {
		t.Errorf("once shares were back: %d", rec.Code)
	}
	if !free(baseReviews, true) {
		t.Errorf("a review served kept its share")
	}

	// A failed review gives its share back too, the large one included.
	huge := review("samplecontroller.example.com/v1alpha1", strings.Replace(betaFoo2, `"x":"y"`, `"x":"`+strings.Repeat("y", MaxObjectBytes)+`"`, 1))
	if rec := post(t.Context(), bytes.NewReader(huge)); rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "an object of more than") {
		t.Errorf("a review of an object too large: %d %.200s", rec.Code, rec.Body.String())
	}
	if !free(baseReviews, true) {
		t.Errorf("a failed review kept its share")
	}

	// A client still sending its body holds one base share, no more.
	body, send := io.Pipe()
	go func() { done <- post(t.Context(), body) }()
	full := review("samplecontroller.example.com/v1beta1", alphaFoo, alphaFoo)
	_, _ = send.Write(full[:200])
	time.Sleep(100 * time.Millisecond)
	if !free(baseReviews-1, true) || free(baseReviews, false) {
		t.Errorf("a review whose body is still coming does not hold exactly one base share")
	}
	_, _ = send.Write(full[200:])
	_ = send.Close()
	if rec := <-done; rec.Code != http.StatusOK {
		t.Errorf("the slow review: %d", rec.Code)
	}

	// A review with an object over baseObjectBytes waits for the large
	// share holding no base share: ordinary reviews are served meanwhile.
	if err := c.large.Acquire(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	large := review("samplecontroller.example.com/v1alpha1", strings.Replace(betaFoo2, `"x":"y"`, `"x":"`+strings.Repeat("y", 2*baseObjectBytes)+`"`, 1))
	go func() { done <- post(t.Context(), bytes.NewReader(large)) }()
	time.Sleep(100 * time.Millisecond)
	if !free(baseReviews, false) {
		t.Errorf("a review waiting for the large share holds a base share")
	}
	if rec := post(t.Context(), ok()); rec.Code != http.StatusOK {
		t.Errorf("an ordinary review while a large one waits: %d", rec.Code)
	}
	c.large.Release(1)
	if rec := <-done; rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"status":"Success"`) {
		t.Errorf("the large review once the large share was free: %d %.200s", rec.Code, rec.Body.String())
	}
	if !free(baseReviews, true) {
		t.Errorf("the large review kept a share")
	}
}

// TestConverterListOfOrdinaryFoosHoldsItsBaseShare: a list of 20,000
// Foos as the API server sends one (22 MB) is answered with one base
// share: the memory a review holds does not grow with the review.
func TestConverterListOfOrdinaryFoosHoldsItsBaseShare(t *testing.T) {
	c := NewConverter(fooscheme.Scheme)
	objects := make([]string, 20000)
	for i := range objects {
		objects[i] = storedBeta
	}
	body := review("samplecontroller.example.com/v1alpha1", objects...)
	// Every other share held by others: the review is served only if it
	// never needs more than one base share.
	if err := c.base.Acquire(t.Context(), baseReviews-1); err != nil {
		t.Fatal(err)
	}
	if err := c.large.Acquire(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/convert", bytes.NewReader(body)).WithContext(ctx)
	req.Header.Set("Content-Type", "application/json")
	c.ServeHTTP(rec, req)
	var got apiextensionsv1.ConversionReview
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || rec.Code != http.StatusOK {
		t.Fatalf("%d: %v", rec.Code, err)
	}
	if got.Response.Result.Status != metav1.StatusSuccess || len(got.Response.ConvertedObjects) != len(objects) {
		t.Fatalf("result %+v, %d objects of %d (%d bytes sent)", got.Response.Result, len(got.Response.ConvertedObjects), len(objects), len(body))
	}
}

// TestConverterObjectSizes: an object of exactly MaxObjectBytes is
// converted, one byte more is refused; a string of <, > and & comes back
// as it was sent, not six bytes a character (json.Marshal's escaping).
func TestConverterObjectSizes(t *testing.T) {
	c := NewConverter(fooscheme.Scheme)
	sized := func(n int, fill string) string {
		base := strings.Replace(betaFoo2, `"x":"y"`, `"x":""`, 1)
		return strings.Replace(base, `"x":""`, `"x":"`+strings.Repeat(fill, n-len(base))+`"`, 1)
	}
	for _, tc := range []struct {
		name   string
		object string
		want   string // in the answer
	}{
		{"exactly MaxObjectBytes", sized(MaxObjectBytes, "y"), `"status":"Success"`},
		{"one byte more", sized(MaxObjectBytes+1, "y"), "an object of more than 3145728 bytes"},
		{"a string of <, > and &", sized(100000, "<&>"), strings.Repeat("<&>", 1000)},
		{"bytes that are not UTF-8", sized(100000, "\xff"), "not UTF-8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			req := httptest.NewRequest(http.MethodPost, "/convert", bytes.NewReader(review("samplecontroller.example.com/v1alpha1", tc.object)))
			req.Header.Set("Content-Type", "application/json")
			c.ServeHTTP(rec, req)
			if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), tc.want) {
				t.Errorf("%d, %d bytes, without %.50q: %.300s", rec.Code, rec.Body.Len(), tc.want, rec.Body.String())
			}
			if rec.Body.Len() > 2*len(tc.object)+1024 {
				t.Errorf("an answer of %d bytes for an object of %d", rec.Body.Len(), len(tc.object))
			}
		})
	}
}

// TestConverterRefusalOverHTTP1: a review refused before its objects
// (400), with its body not all read, leaves the HTTP/1 server sound (Go's
// server panics if, reading in full duplex, it meets the body's end after
// the handler returned).
func TestConverterRefusalOverHTTP1(t *testing.T) {
	var serverLog bytes.Buffer
	srv := httptest.NewUnstartedServer(NewConverter(fooscheme.Scheme))
	srv.Config.ErrorLog = log.New(&serverLog, "", 0)
	srv.Start()
	defer srv.Close()
	body := `{"request":{"desiredAPIVersion":"x","objects":[]` + strings.Repeat(" ", 8000) + `}}`
	for range 3 { // on one connection, kept alive
		resp, err := http.Post(srv.URL, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%d, want 400", resp.StatusCode)
		}
	}
	if strings.Contains(serverLog.String(), "panic") {
		t.Errorf("the server: %s", serverLog.String())
	}
}

// TestConverterCutsOffAStalledClient: a client that stops sending its
// review mid-object is cut off after stallTimeout, and its share is given
// back: it cannot hold the budget for longer by sending slowly.
func TestConverterCutsOffAStalledClient(t *testing.T) {
	c := NewConverter(fooscheme.Scheme)
	srv := httptest.NewServer(c)
	defer srv.Close()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	full := review("samplecontroller.example.com/v1beta1", alphaFoo)
	_, _ = fmt.Fprintf(conn, "POST /convert HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(full), full[:200])
	start := time.Now()
	_ = conn.SetReadDeadline(time.Now().Add(3 * stallTimeout))
	answer, _ := io.ReadAll(conn) // until the server closes it
	took := time.Since(start)
	if took < stallTimeout-time.Second || took > 2*stallTimeout {
		t.Errorf("the stalled review ended after %v, want about %v", took, stallTimeout)
	}
	if strings.Contains(string(answer), `"status":"Success"`) {
		t.Errorf("a stalled review answered as converted: %s", answer)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !c.base.TryAcquire(baseReviews) {
		if time.Now().After(deadline) {
			t.Fatal("the stalled review kept its share")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
