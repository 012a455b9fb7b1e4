package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"

	"example.com/foo-controller/pkg/connlimit"
)

// Path is where the conversion webhook is served; the CRD's clientConfig
// names it.
const Path = "/convert"

// The webhook's connections: at most maxConns open, maxConnsPerAddress
// from one address (the API server holds one or a few, and opens another
// past maxStreams reviews at once; through konnectivity, each agent as
// many). What one can make the process hold, whatever it sends: some 30
// KiB of its own, the request headers of its streams (maxStreams ×
// maxHeaderBytes, 64 KiB) and the body bytes sent ahead of the handlers'
// reads (connWindow, 512 KiB): about 606 KiB, so 4.7 MiB from one
// address, 38 MiB from eight or more.
const (
	maxConns           = 64
	maxConnsPerAddress = 8
	maxStreams         = 8
	maxHeaderBytes     = 8 << 10 // the API server's are under 1 KiB
	// streamWindow: HTTP/2's initial window, the least a stream can have
	// (a client may send that much before it hears of less). connWindow
	// holds every stream's, so that a review waiting for a share, its
	// body unread, cannot stop the others on its connection
	// (TestReviewsShareAnHTTP2Connection: with a window of one stream's,
	// both reviews stalled).
	streamWindow = 64 << 10
	connWindow   = maxStreams * streamWindow
)

// serve serves converter at Path over TLS on lis, with the certificate
// cert gives each handshake, until ctx ends; then it lets the reviews in
// flight finish (for up to 10 s, the API server waits 30 s for one).
func serve(ctx context.Context, lis net.Listener, converter http.Handler, cert *newCert) error {
	cert.started()
	logger := klog.FromContext(ctx)
	lis = connlimit.Logged(lis, maxConns, maxConnsPerAddress, func(addr string, n int64) {
		logger.Info("Conversion webhook refused a connection: too many open", "from", addr, "refused", n,
			"max", maxConns, "maxPerAddress", maxConnsPerAddress)
	})
	mux := http.NewServeMux()
	mux.Handle(Path, converter)
	// The API server gives a review 30 s: a connection that sends its body
	// slower than that, or idles, is closed rather than held.
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       90 * time.Second,
		TLSConfig:         &tls.Config{GetCertificate: cert.GetCertificate, MinVersion: tls.VersionTLS12},
		// HTTP/2 (the API server's) buffers what a client sends ahead of
		// the handler's reads, 1 MiB a stream and a connection by default,
		// and decodes a stream's headers up to MaxHeaderBytes (1 MiB by
		// default): outside the converter's shares, so bounded here.
		MaxHeaderBytes: maxHeaderBytes,
		HTTP2: &http.HTTP2Config{MaxConcurrentStreams: maxStreams, MaxReceiveBufferPerStream: streamWindow,
			MaxReceiveBufferPerConnection: connWindow},
		// The server's own errors (a failed TLS handshake: a client that
		// does not trust the certificate) as the controller's log lines,
		// saying where they come from.
		ErrorLog: log.New(serverLog{klog.FromContext(ctx), new(atomic.Int64), cert.quiet}, "", 0),
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(shutdown); err != nil {
			klog.FromContext(ctx).Error(err, "Stopping the conversion webhook")
		}
	}()
	err := srv.ServeTLS(lis, "", "")
	if errors.Is(err, http.ErrServerClosed) {
		<-done
		return nil
	}
	return err
}

// serverLog writes the HTTP server's error log through klog: the first
// ten lines, then one in a hundred with their count, for a client that
// does not trust the certificate fails every handshake, and a port scan
// makes as many.
//
// Except while the certificate is new (quiet): a handshake that fails
// then because the client refuses the certificate, or because there is
// none yet, is what a new certificate looks like, not a fault, and goes
// to V(4), uncounted. When the keeper makes a new CA (a fresh Secret:
// every first `make run`), it serves a certificate of that CA at once and
// injects the CA into the CRD's caBundle a moment later, but the API
// server goes on calling with the caBundle it held before (none, or the
// previous CA) until its CRD handler has taken up the new one: about a
// second of "remote error: tls: bad certificate", ten lines at the
// default verbosity that read as a failure and were none. Past
// newCertFor, the same refusal is a client that does not trust this
// webhook (a caBundle that is wrong, or that another installation keeps:
// the keeper says which), logged as before: no refusal is kept from the
// default log for longer than newCertFor after a new certificate, and no
// other handshake error at all.
type serverLog struct {
	logger klog.Logger
	n      *atomic.Int64
	quiet  func(msg string) bool
}

func (l serverLog) Write(p []byte) (int, error) {
	msg := strings.TrimSpace(string(p))
	if l.quiet != nil && l.quiet(msg) {
		l.logger.V(4).Info("Conversion webhook server, its certificate new (none yet, or the API server still holding the CRD's previous caBundle: expected for a few seconds)",
			"message", msg)
		return len(p), nil
	}
	if n := l.n.Add(1); n <= 10 || n%100 == 0 {
		l.logger.Info("Conversion webhook server", "message", msg, "count", n)
	}
	return len(p), nil
}

// newCertFor is how long a certificate counts as new once served: the API
// server takes up a CRD's new caBundle within a second or two (about one
// on 2 cores, measured with `make run`); ten leave room for a busy one.
const newCertFor = 10 * time.Second

// newCert hands out the certificate get gives each handshake and knows
// since when: since the first handshake that got it, or, before there is
// one, since serving started. The first handshake, not the Secret's
// write: no client can refuse a certificate before it is shown one.
type newCert struct {
	get func(*tls.ClientHelloInfo) (*tls.Certificate, error)
	now func() time.Time

	mu     sync.Mutex
	leaf   []byte // the certificate handed out last (DER), nil before one
	since  time.Time
	failed string // get's last error, while there is no certificate
}

func (c *newCert) started() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.since = c.now()
}

func (c *newCert) GetCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	cert, err := c.get(hello)
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case err != nil:
		c.failed = err.Error()
	case cert != nil && len(cert.Certificate) > 0 && !bytes.Equal(c.leaf, cert.Certificate[0]):
		c.leaf, c.since, c.failed = cert.Certificate[0], c.now(), ""
	}
	return cert, err
}

// quiet: msg is a handshake that failed for the certificate's newness,
// less than newCertFor after it was first handed out (or, with none yet,
// after serving started): the client refused the certificate (a Go client
// sends "bad certificate" when the chain does not verify, others "unknown
// certificate authority"), or there was none to give it (get's error, the
// keeper's "no serving certificate yet").
func (c *newCert) quiet(msg string) bool {
	rest, handshake := strings.CutPrefix(msg, "http: TLS handshake error from ")
	if !handshake {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.now().Sub(c.since) >= newCertFor {
		return false
	}
	return strings.HasSuffix(rest, ": remote error: tls: bad certificate") ||
		strings.HasSuffix(rest, ": remote error: tls: unknown certificate authority") ||
		(c.failed != "" && strings.HasSuffix(rest, ": "+c.failed))
}

// Run is the webhook a replica serves: keeper keeps the certificate (and
// the CRD's caBundle) while converter answers reviews on lis with it, both
// until ctx ends, or one of them fails, which stops the other. It returns
// once both have stopped.
func Run(ctx context.Context, lis net.Listener, keeper *Keeper, converter http.Handler) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	kept, served := make(chan error, 1), make(chan error, 1)
	cert := &newCert{get: keeper.GetCertificate, now: time.Now}
	go func() { kept <- keeper.Run(ctx); cancel() }()
	go func() { served <- serve(ctx, lis, converter, cert); cancel() }()
	var errs []error
	if err := <-kept; err != nil {
		errs = append(errs, fmt.Errorf("certificate keeper: %w", err))
	}
	if err := <-served; err != nil {
		errs = append(errs, fmt.Errorf("serving: %w", err))
	}
	return errors.Join(errs...)
}
