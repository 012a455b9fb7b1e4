// Package webhook is the CRD conversion webhook that the controller binary
// serves: the API server sends it a ConversionReview (apiextensions.k8s.io/v1)
// whenever a Foo is read or written in a version other than the one it is
// stored in, and it converts each object with the conversion functions of
// the API packages (pkg/apis/samplecontroller/v1alpha1/conversion.go),
// through a runtime.Scheme that holds both versions.
package webhook

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"
	sigsjson "sigs.k8s.io/json"

	"example.com/foo-controller/pkg/metrics"
)

// MaxReviewBytes bounds a ConversionReview's body. The API server sends a
// list's objects in one review (a list of Foos read in the other version),
// so this is sized for lists, not for one object: some 100,000 Foos.
const MaxReviewBytes = 256 << 20

// MaxConcurrentReviews bounds the reviews converted at once. A review holds
// some 7 times its size in memory while it is converted (a list of 16,000
// Foos: 63 MB in, 436 MB at the peak), so reviews that come together wait
// for each other, once read, rather than add up.
const MaxConcurrentReviews = 2

// Converter serves ConversionReviews for the kinds its scheme knows.
type Converter struct {
	scheme *runtime.Scheme
	slots  chan struct{}
}

// NewConverter returns a Converter converting through scheme, which must
// hold every served version and the conversions between them.
func NewConverter(scheme *runtime.Scheme) *Converter {
	return &Converter{scheme: scheme, slots: make(chan struct{}, MaxConcurrentReviews)}
}

// ServeHTTP answers one ConversionReview. A review that cannot be read is an
// HTTP error; a review whose objects cannot all be converted is answered
// with a Failure result, whose message the API server hands on to the
// client that asked (a kubectl user, or the controller's list).
func (c *Converter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	result := metrics.ConversionInvalid
	defer func() {
		metrics.ConversionReviews.WithLabelValues(result).Inc()
		metrics.ConversionDuration.Observe(time.Since(start).Seconds())
	}()
	if r.Method != http.MethodPost {
		http.Error(w, "a ConversionReview is POSTed", http.StatusMethodNotAllowed)
		return
	}
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
		http.Error(w, "a ConversionReview is sent as application/json", http.StatusUnsupportedMediaType)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxReviewBytes))
	if err != nil {
		if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
			http.Error(w, fmt.Sprintf("a ConversionReview of more than %d bytes", MaxReviewBytes), http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, "reading the ConversionReview: "+err.Error(), http.StatusBadRequest)
		return
	}
	// A slot once the body is in, so that a client that sends its body
	// slowly holds no slot (the server's read timeout bounds it).
	select {
	case c.slots <- struct{}{}:
		defer func() { <-c.slots }()
	case <-r.Context().Done():
		http.Error(w, "gave up waiting for the reviews before it", http.StatusServiceUnavailable)
		return
	}
	var review apiextensionsv1.ConversionReview
	if err := json.Unmarshal(body, &review); err != nil || review.Request == nil {
		http.Error(w, fmt.Sprintf("not a ConversionReview with a request (%v)", err), http.StatusBadRequest)
		return
	}
	resp := c.Convert(review.Request)
	result = metrics.ConversionSuccess
	metrics.ConversionObjects.Add(float64(len(resp.ConvertedObjects)))
	if resp.Result.Status != metav1.StatusSuccess {
		result = metrics.ConversionFailure
		klog.FromContext(r.Context()).Info("Conversion refused", "uid", resp.UID, "desiredAPIVersion", review.Request.DesiredAPIVersion, "message", resp.Result.Message)
	}
	out, err := json.Marshal(apiextensionsv1.ConversionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: apiextensionsv1.SchemeGroupVersion.String(), Kind: "ConversionReview"},
		Response: resp,
	})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out)
}

// Convert converts every object of req to req.DesiredAPIVersion, in order,
// or converts none and says why: the API server takes a review whole.
func (c *Converter) Convert(req *apiextensionsv1.ConversionRequest) *apiextensionsv1.ConversionResponse {
	resp := &apiextensionsv1.ConversionResponse{UID: req.UID}
	fail := func(err error) *apiextensionsv1.ConversionResponse {
		resp.ConvertedObjects = nil
		resp.Result = metav1.Status{Status: metav1.StatusFailure, Message: err.Error()}
		return resp
	}
	desired, err := schema.ParseGroupVersion(req.DesiredAPIVersion)
	if err != nil {
		return fail(err)
	}
	resp.ConvertedObjects = make([]runtime.RawExtension, 0, len(req.Objects))
	for i, obj := range req.Objects {
		out, err := c.convert(obj.Raw, desired)
		if err != nil {
			return fail(fmt.Errorf("object %d of %d: %w", i+1, len(req.Objects), err))
		}
		resp.ConvertedObjects = append(resp.ConvertedObjects, runtime.RawExtension{Raw: out})
	}
	resp.Result = metav1.Status{Status: metav1.StatusSuccess}
	return resp
}

func (c *Converter) convert(raw []byte, desired schema.GroupVersion) ([]byte, error) {
	var tm metav1.TypeMeta
	if err := json.Unmarshal(raw, &tm); err != nil {
		return nil, err
	}
	gvk := tm.GroupVersionKind()
	in, err := c.scheme.New(gvk)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", tm.APIVersion+", Kind="+tm.Kind, err)
	}
	// Strict in the spec and status: a field this binary's types do not
	// know would be dropped by the conversion, and lost for good on a write
	// (or on a client's read-modify-write). It means a CRD newer than the
	// webhook: refuse, visibly, rather than lose it. Not in the metadata:
	// the API server keeps its own metadata and takes only the labels and
	// annotations from the webhook's answer, so a metadata field newer than
	// our ObjectMeta loses nothing, and refusing it would stop every
	// conversion on an API server newer than this binary.
	strict, err := sigsjson.UnmarshalStrict(raw, in)
	if err == nil {
		var ours []error
		for _, e := range strict {
			if fe := sigsjson.FieldError(nil); errors.As(e, &fe) && strings.HasPrefix(fe.FieldPath(), "metadata.") {
				continue
			}
			ours = append(ours, e)
		}
		err = errors.Join(ours...)
	}
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w (is the webhook older than the CRD?)", gvk.Kind, name(in), err)
	}
	if gvk.GroupVersion() == desired {
		return raw, nil // nothing to do: the API server does not ask for it
	}
	out, err := c.scheme.New(desired.WithKind(gvk.Kind))
	if err != nil {
		return nil, fmt.Errorf("%s %s to %s: %w", gvk.Kind, name(in), desired, err)
	}
	if err := c.scheme.Convert(in, out, nil); err != nil {
		return nil, fmt.Errorf("%s %s to %s: %w", gvk.Kind, name(in), desired, err)
	}
	out.GetObjectKind().SetGroupVersionKind(desired.WithKind(gvk.Kind))
	return json.Marshal(out)
}

// name is namespace/name of obj, for messages.
func name(obj runtime.Object) string {
	m, ok := obj.(metav1.Object)
	if !ok {
		return ""
	}
	return klog.KObj(m).String()
}
