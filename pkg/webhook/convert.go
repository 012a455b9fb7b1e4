// Package webhook is the CRD conversion webhook that the controller binary
// serves: the API server sends it a ConversionReview (apiextensions.k8s.io/v1)
// whenever a Foo is read or written in a version other than the one it is
// stored in, and it converts each object with the conversion functions of
// the API packages (pkg/apis/samplecontroller/v1alpha1/conversion.go),
// through a runtime.Scheme that holds both versions.
package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/sync/semaphore"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	sigsjson "sigs.k8s.io/json"

	"example.com/foo-controller/pkg/metrics"
	"example.com/foo-controller/pkg/trunc"
)

// MaxReviewBytes bounds a ConversionReview's body. The API server sends a
// list's objects in one review (a list of Foos read in the other version),
// so this is sized for lists, not for one object: some 200,000 Foos. The
// memory a review costs does not grow with it (see ServeHTTP): it bounds
// the time a review takes, not its memory.
const MaxReviewBytes = 256 << 20

// MaxObjectBytes bounds one object of a review. The API server refuses a
// request body over 3 MiB (k8s.io/apiserver's MaxRequestBodyBytes), so no
// Foo it stores, and sends back, can be larger.
const MaxObjectBytes = 3 << 20

// The memory the reviews being answered hold at once, all together, is
// bounded by two pools, whoever sends them. A review holds one of
// baseReviews shares of baseReviewBytes while it is read, converted and
// answered: enough for objects of up to baseObjectBytes (the bytes read,
// their decoding, the answer). A review whose object is larger gives its
// share back and waits for the one large share, largeReviewBytes (9
// times the largest object: a Foo of 3 MiB of U+2028, which an answer
// writes as six bytes for three, peaked at 25.4 MiB), for the rest of it. The API server's reviews of ordinary Foos, of one
// object or of a list of 100,000, need a base share each, and never wait
// behind a large one; a review waits for a share for up to budgetWait,
// then is refused (429, or a Failure once its answer has begun).
const (
	baseReviews      = 64
	baseReviewBytes  = 64 << 10
	baseObjectBytes  = 12 << 10
	largeReviewBytes = 9 * MaxObjectBytes

	// MemoryBudget is what the two pools hold at most: 31 MiB.
	MemoryBudget = baseReviews*baseReviewBytes + largeReviewBytes

	// budgetWait is how long a review waits for its share.
	budgetWait = 10 * time.Second

	// maxHeadValue bounds each value of the review before its objects
	// (uid, desiredAPIVersion, and what else a client puts there): the
	// API server's are short, and the answer repeats them.
	maxHeadValue = 256
	// maxMessage bounds a Failure's message and its log line: it names
	// the object and what was wrong, not what the client sent at length.
	maxMessage = 1024
)

// stallTimeout is how long a read of the review, or a write of its
// answer, may wait on the client: the API server sends a review and reads
// its answer at once, so a client that stalls longer is not one, and gives
// back the share it holds. A variable for the tests.
var stallTimeout = 5 * time.Second

// Converter serves ConversionReviews for the kinds its scheme knows.
type Converter struct {
	scheme *runtime.Scheme
	base   *semaphore.Weighted // baseReviews shares
	large  *semaphore.Weighted // the large share: one review at a time
}

// NewConverter returns a Converter converting through scheme, which must
// hold every served version and the conversions between them.
func NewConverter(scheme *runtime.Scheme) *Converter {
	return &Converter{scheme: scheme, base: semaphore.NewWeighted(baseReviews), large: semaphore.NewWeighted(1)}
}

// ServeHTTP answers one ConversionReview, as it reads it: each object is
// converted as soon as it is read and written out at once, so that a
// review costs the memory of one object, not of the review. A review that
// is not one (not JSON, no request, uid and desiredAPIVersion after the
// objects: the API server sends them first) is an HTTP error, and so is a
// body over MaxReviewBytes that says its length (413). Once the answer
// has begun, an object that cannot be converted, or read (over
// MaxObjectBytes, the body cut short), ends it with a Failure result, the
// objects before it already written: the API server reads the result
// first, and hands its message on to the client that asked (a kubectl
// user, or the controller's list), whatever objects came before.
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
	if r.ContentLength > MaxReviewBytes {
		http.Error(w, fmt.Sprintf("a ConversionReview of more than %d bytes", MaxReviewBytes), http.StatusRequestEntityTooLarge)
		return
	}
	share := &share{c: c}
	defer share.release()
	if err := share.takeBase(r.Context()); err != nil {
		result = metrics.ConversionBusy
		w.Header().Set("Retry-After", "1")
		http.Error(w, "the webhook is answering as many reviews as its memory allows: "+err.Error(), http.StatusTooManyRequests)
		return
	}
	rc := http.NewResponseController(w)
	body := &reviewBody{r: http.MaxBytesReader(w, r.Body, MaxReviewBytes), share: share, ctx: r.Context(), head: true,
		stall: func() { _ = rc.SetReadDeadline(stallDeadline(start, 30*time.Second)) }}
	dec := json.NewDecoder(body)
	req, err := readRequestHead(dec, body)
	if err != nil {
		code := http.StatusBadRequest
		if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
			code = http.StatusRequestEntityTooLarge
		}
		http.Error(w, trunc.Bytes(err.Error(), maxMessage), code)
		return
	}
	body.head = false
	// Read as the answer is written: without it, an HTTP/1 server stops
	// the body's reads once the answer has begun.
	if err := rc.EnableFullDuplex(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	logger := klog.FromContext(r.Context())
	out := &answer{w: w, stall: func() { _ = rc.SetWriteDeadline(stallDeadline(start, 60*time.Second)) }}
	n, err := c.convertAll(dec, body, req, out.begin(req.UID))
	metrics.ConversionObjects.Add(float64(n))
	result = metrics.ConversionSuccess
	status := metav1.Status{Status: metav1.StatusSuccess}
	switch {
	case err != nil && body.busy != nil:
		result = metrics.ConversionBusy
		status = metav1.Status{Status: metav1.StatusFailure, Message: trunc.Bytes(err.Error(), maxMessage)}
		logger.V(2).Info("Review given up: no share free", "uid", req.UID, "message", status.Message)
	case err != nil && (body.broken != nil || errors.Is(err, errObjectTooLarge) || errors.Is(err, errNotUTF8)):
		// Not what the API server sends: counted and logged apart
		// from its failures. (A client can still send a well-formed
		// review that fails to convert: a failure, logged, its message
		// within maxMessage.)
		result = metrics.ConversionInvalid
		status = metav1.Status{Status: metav1.StatusFailure, Message: trunc.Bytes(err.Error(), maxMessage)}
		logger.V(2).Info("Review cut off", "uid", req.UID, "message", status.Message)
	case err != nil:
		result = metrics.ConversionFailure
		status = metav1.Status{Status: metav1.StatusFailure, Message: trunc.Bytes(err.Error(), maxMessage)}
		logger.Info("Conversion refused", "uid", req.UID, "desiredAPIVersion", req.DesiredAPIVersion, "message", status.Message)
	}
	if err := out.end(status); err != nil {
		logger.V(2).Info("Conversion answer cut short", "uid", req.UID, "err", err)
	}
	// The rest of the body (the review's closing brackets; after a
	// failure, the objects not read) is read here, within the limits: an
	// HTTP/1 server, reading in full duplex, must not meet the body's end
	// after the handler has returned. A client that stalls or sends too
	// much has its connection closed, once it has the answer.
	share.release() // reading on costs no memory
	if body.broken == nil {
		_ = rc.SetReadDeadline(stallDeadline(start, 30*time.Second))
		_, body.broken = io.Copy(io.Discard, body.r)
	}
	if body.broken != nil && r.ProtoMajor == 1 {
		_ = rc.Flush()
		panic(http.ErrAbortHandler)
	}
}

// stallDeadline is when a read or write that starts now must be done: in
// stallTimeout, and never past limit from the review's start (the
// server's own timeouts, which a deadline set here replaces).
func stallDeadline(start time.Time, limit time.Duration) time.Time {
	d := time.Now().Add(stallTimeout)
	if end := start.Add(limit); end.Before(d) {
		return end
	}
	return d
}

// share is what a review holds of the two pools.
type share struct {
	c           *Converter
	base, large bool
}

func (s *share) takeBase(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, budgetWait)
	defer cancel()
	if err := s.c.base.Acquire(ctx, 1); err != nil {
		return fmt.Errorf("no share free within %v (%w)", budgetWait, err)
	}
	s.base = true
	return nil
}

// takeLarge gives the base share back, then waits for the large one: a
// review never waits holding a share, so reviews cannot wait for each
// other, and the base shares stay free for the API server's.
func (s *share) takeLarge(ctx context.Context) error {
	if s.large {
		return nil
	}
	if s.base {
		s.c.base.Release(1)
		s.base = false
	}
	ctx, cancel := context.WithTimeout(ctx, budgetWait)
	defer cancel()
	if err := s.c.large.Acquire(ctx, 1); err != nil {
		return fmt.Errorf("an object of more than %d bytes, and the share for one not free within %v (%w)", baseObjectBytes, budgetWait, err)
	}
	s.large = true
	return nil
}

func (s *share) release() {
	if s.base {
		s.c.base.Release(1)
	}
	if s.large {
		s.c.large.Release(1)
	}
	s.base, s.large = false, false
}

// reviewBody is a review's body, as its decoder reads it: it stops the
// value being read at MaxObjectBytes (a value before the objects at
// baseObjectBytes), and takes the large share before an object outgrows
// baseObjectBytes. A stalled client is cut off: each read must be done
// by stall's deadline.
type reviewBody struct {
	r     io.Reader
	ctx   context.Context
	share *share
	stall func()
	head  bool  // reading what comes before the objects
	read  int64 // bytes read
	from  int64 // where the value being decoded starts

	broken error // the client's read that failed (a stall, too many bytes), if one did
	busy   error // the large share not free in time, if so
}

var (
	errObjectTooLarge = fmt.Errorf("an object of more than %d bytes (the API server stores none so large)", MaxObjectBytes)
	errHeadTooLarge   = fmt.Errorf("a value of more than %d bytes before the objects", baseObjectBytes)
	errNotUTF8        = errors.New("not UTF-8 (the API server sends none such)")
)

// objectSlack is what a value's window holds beside the value: the comma
// and white space before it, the bracket after the last.
const objectSlack = 1 << 10

func (b *reviewBody) Read(p []byte) (int, error) {
	window := b.read - b.from // bytes of the value, and what follows, read so far
	switch {
	case window >= MaxObjectBytes+objectSlack:
		return 0, errObjectTooLarge
	case b.share.large:
		p = p[:min(int64(len(p)), MaxObjectBytes+objectSlack-window)]
	case window < baseObjectBytes:
		p = p[:min(int64(len(p)), baseObjectBytes-window)]
	case b.head:
		return 0, errHeadTooLarge
	default:
		if err := b.share.takeLarge(b.ctx); err != nil {
			b.busy = err
			return 0, err
		}
		p = p[:min(int64(len(p)), MaxObjectBytes+objectSlack-window)]
	}
	b.stall()
	n, err := b.r.Read(p)
	b.read += int64(n)
	if err != nil && err != io.EOF {
		b.broken = err
	}
	return n, err
}

// startValue: the decoder is about to read a value, which starts at off.
func (b *reviewBody) startValue(off int64) { b.from = off }

// requestHead is what of a ConversionRequest comes before its objects.
type requestHead struct {
	UID               types.UID `json:"uid"`
	DesiredAPIVersion string    `json:"desiredAPIVersion"`
	noObjects         bool      // "objects": null, as a Go client sends an empty list
}

// readRequestHead reads the review up to the first object of
// request.objects: the request's uid and desiredAPIVersion, which the
// API server sends first (ConversionRequest's field order), are needed
// to begin the answer. Other fields are read and passed over.
func readRequestHead(dec *json.Decoder, body *reviewBody) (requestHead, error) {
	var head requestHead
	if err := expectDelim(dec, '{'); err != nil {
		return head, fmt.Errorf("not a ConversionReview: %w", err)
	}
	for {
		key, err := nextKey(dec)
		if err != nil {
			return head, fmt.Errorf("not a ConversionReview: %w", err)
		}
		switch key {
		case "":
			return head, errors.New("not a ConversionReview with a request")
		case "request":
			if err := expectDelim(dec, '{'); err != nil {
				return head, fmt.Errorf("request: %w", err)
			}
			for {
				key, err := nextKey(dec)
				if err != nil {
					return head, fmt.Errorf("request: %w", err)
				}
				switch key {
				case "":
					return head, errors.New("request: no objects")
				case "uid":
					err = decodeHeadValue(dec, body, &head.UID)
				case "desiredAPIVersion":
					err = decodeHeadValue(dec, body, &head.DesiredAPIVersion)
				case "objects":
					if head.UID == "" || head.DesiredAPIVersion == "" {
						return head, errors.New("request: uid and desiredAPIVersion must come before objects, as the API server sends them")
					}
					tok, err := dec.Token()
					switch {
					case err != nil:
						return head, fmt.Errorf("request.objects: %w", err)
					case tok == nil:
						head.noObjects = true
					case tok != json.Delim('['):
						return head, fmt.Errorf("request.objects: %v, not a list", tok)
					}
					return head, nil
				default:
					err = skipValue(dec, body)
				}
				if err != nil {
					return head, fmt.Errorf("request.%s: %w", key, err)
				}
			}
		default:
			if err := skipValue(dec, body); err != nil {
				return head, fmt.Errorf("%s: %w", key, err)
			}
		}
	}
}

// decodeHeadValue reads the next value, a string of at most
// maxHeadValue bytes, into v.
func decodeHeadValue[T ~string](dec *json.Decoder, body *reviewBody, v *T) error {
	body.startValue(dec.InputOffset())
	if err := dec.Decode(v); err != nil {
		return err
	}
	if len(*v) > maxHeadValue {
		return fmt.Errorf("more than %d bytes", maxHeadValue)
	}
	return nil
}

// nextKey is the next key of the object being read, or "" at its end.
func nextKey(dec *json.Decoder) (string, error) {
	tok, err := dec.Token()
	if err != nil {
		return "", err
	}
	if tok == json.Delim('}') {
		return "", nil
	}
	key, ok := tok.(string)
	if !ok || key == "" {
		return "", fmt.Errorf("a key, not %v", tok)
	}
	return key, nil
}

func expectDelim(dec *json.Decoder, d json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if tok != d {
		return fmt.Errorf("%v, not %v", tok, d)
	}
	return nil
}

// skipValue reads the next value and drops it, within MaxObjectBytes.
func skipValue(dec *json.Decoder, body *reviewBody) error {
	body.startValue(dec.InputOffset())
	var v json.RawMessage
	return dec.Decode(&v)
}

// convertAll converts the objects of request.objects as it reads them,
// writing each to out, until the array ends, and says how many.
func (c *Converter) convertAll(dec *json.Decoder, body *reviewBody, head requestHead, out *answer) (int, error) {
	desired, err := schema.ParseGroupVersion(head.DesiredAPIVersion)
	if err != nil || head.noObjects {
		return 0, err
	}
	i := 0
	for ; dec.More(); i++ {
		body.startValue(dec.InputOffset())
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return i, fmt.Errorf("object %d: %w", i+1, err)
		}
		body.startValue(dec.InputOffset()) // what follows is not the object's
		if len(raw) > MaxObjectBytes {
			return i, fmt.Errorf("object %d: %w", i+1, errObjectTooLarge)
		}
		// The API server writes valid UTF-8; a byte that is not would
		// come back as six (\ufffd).
		if !utf8.Valid(raw) {
			return i, fmt.Errorf("object %d: %w", i+1, errNotUTF8)
		}
		converted, err := c.convert(raw, desired)
		if err != nil {
			return i, fmt.Errorf("object %d: %w", i+1, err)
		}
		if err := out.object(converted); err != nil {
			return i, err
		}
	}
	return i, expectDelim(dec, ']')
}

// answer writes a ConversionReview's answer as its objects come.
type answer struct {
	w     io.Writer
	stall func()
	n     int
	err   error // the first write that failed: the client is gone
}

func (a *answer) write(parts ...[]byte) {
	for _, p := range parts {
		if a.err == nil {
			a.stall()
			_, a.err = a.w.Write(p)
		}
	}
}

func (a *answer) begin(uid types.UID) *answer {
	if h, ok := a.w.(http.ResponseWriter); ok {
		h.Header().Set("Content-Type", "application/json")
	}
	id, _ := json.Marshal(uid)
	a.write([]byte(`{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","response":{"uid":`), id, []byte(`,"convertedObjects":[`))
	return a
}

func (a *answer) object(raw []byte) error {
	if a.n++; a.n > 1 {
		a.write([]byte{','})
	}
	a.write(raw)
	return a.err
}

func (a *answer) end(status metav1.Status) error {
	st, _ := json.Marshal(status)
	a.write([]byte(`],"result":`), st, []byte("}}"))
	return a.err
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
	// Not json.Marshal, which writes each <, > and & of a string as six
	// bytes: an object of them would come back six times its size.
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(out); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// name is namespace/name of obj, for messages.
func name(obj runtime.Object) string {
	m, ok := obj.(metav1.Object)
	if !ok {
		return ""
	}
	return klog.KObj(m).String()
}
