package metrics

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/klog/v2"

	"example.com/foo-controller/pkg/connlimit"
	"example.com/foo-controller/pkg/trunc"
)

// protect returns handler behind the API server's delegated authentication
// and authorization, as kube-controller-manager serves its metrics: a
// request must carry a bearer token that the API server accepts
// (TokenReview), else 401, and the token's user must be allowed to get
// the request's path as a non-resource URL (SubjectAccessReview: `get` on
// `/metrics`), else 403. Both answers are cached (a minute for a token
// and an allow, 10 s for a deny), so that a scraper every 15 s costs the
// API server about two reviews a minute. It is k8s.io/apiserver's own
// delegating authenticator and authorizer, the ones an aggregated API
// server uses.
func protect(handler http.Handler, kube kubernetes.Interface) (http.Handler, error) {
	// Retries of a review the API server did not answer: 2, within a
	// scrape's usual 10 s (reviewTimeout bounds them all).
	backoff := &wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 3}
	authn, _, err := authenticatorfactory.DelegatingAuthenticatorConfig{
		TokenAccessReviewClient:  kube.AuthenticationV1(),
		TokenAccessReviewTimeout: 10 * time.Second,
		WebhookRetryBackoff:      backoff,
		CacheTTL:                 time.Minute,
	}.New()
	if err != nil {
		return nil, fmt.Errorf("metrics authentication: %w", err)
	}
	authz, err := authorizerfactory.DelegatingAuthorizerConfig{
		SubjectAccessReviewClient: kube.AuthorizationV1(),
		AllowCacheTTL:             time.Minute,
		DenyCacheTTL:              10 * time.Second,
		WebhookRetryBackoff:       backoff,
	}.New()
	if err != nil {
		return nil, fmt.Errorf("metrics authorization: %w", err)
	}
	return protected{next: handler, authn: authn, authz: authz}, nil
}

type protected struct {
	next  http.Handler
	authn authenticator.Request
	authz authorizer.Authorizer
}

func (p protected) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	logger := klog.FromContext(r.Context())
	// An API server that does not answer costs a scrape reviewTimeout,
	// not the retries' sum of TLS handshakes.
	ctx, cancel := context.WithTimeout(r.Context(), reviewTimeout)
	defer cancel()
	r = r.WithContext(ctx)
	res, ok, err := p.authn.AuthenticateRequest(r)
	if err != nil || !ok {
		// Why (no token, one the API server refused, or no answer) is for
		// the log, at V(2): a client that sends none is routine.
		logger.V(2).Info("Metrics request not authenticated", "remote", r.RemoteAddr, "err", err)
		http.Error(w, "Unauthorized", http.StatusUnauthorized)
		return
	}
	attrs := authorizer.AttributesRecord{User: res.User, Verb: strings.ToLower(r.Method), Path: r.URL.Path}
	decision, reason, err := p.authz.Authorize(r.Context(), attrs)
	if err != nil || decision != authorizer.DecisionAllow {
		path := trunc.Bytes(attrs.Path, 256)
		logger.V(2).Info("Metrics request not authorized", "user", res.User.GetName(), "verb", attrs.Verb, "path", path, "reason", reason, "err", err)
		http.Error(w, fmt.Sprintf("Forbidden (user=%s, verb=%s, path=%s)", res.User.GetName(), attrs.Verb, path), http.StatusForbidden)
		return
	}
	p.next.ServeHTTP(w, r)
}

// reviewTimeout bounds the reviews of one request. A variable for the
// tests.
var reviewTimeout = 10 * time.Second

// reviewClientConfig is the configuration protect's client should be
// made from: cfg, with its own rate limit (reviewQPS, a burst of twice
// that) and timeout. A cached token or decision costs no review; each
// request with a token or a path not seen recently costs one or two, so
// without a limit a client sending such requests in a loop would have the
// controller send the API server as many (as its own user, in its own
// priority and fairness flow). Over the limit, a request waits, up to
// reviewTimeout, then is refused.
func reviewClientConfig(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = reviewQPS, 2*reviewQPS
	cfg.RateLimiter = nil
	cfg.Timeout = reviewTimeout
	return cfg
}

const reviewQPS = 5

// serveTLS serves handler over HTTPS on addr (nothing for "" or "0")
// until ctx ends, with a certificate made at start, signed by itself: a
// scraper checks who it talks to by the token's answer, not by the
// certificate (Prometheus: insecure_skip_verify, as for
// kube-controller-manager's metrics; see docs/operations.md).
func serveTLS(ctx context.Context, name, addr string, handler http.Handler) error {
	if addr == "" || addr == "0" {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%s server: %w", name, err)
	}
	if host == "" {
		host = "localhost"
	}
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey(host, nil, nil)
	if err != nil {
		return fmt.Errorf("%s server: a certificate: %w", name, err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return fmt.Errorf("%s server: a certificate: %w", name, err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("%s server: %w", name, err)
	}
	srv := newServer(ctx, handler)
	srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	// HTTP/1 only: a scraper needs no more, and HTTP/2 lets a client send
	// a megabyte ahead on each connection.
	srv.TLSNextProto = map[string]func(*http.Server, *tls.Conn, http.Handler){}
	ln = limited(ctx, name, ln)
	serveUntil(ctx, name, srv, func() error { return srv.ServeTLS(ln, "", "") })
	klog.FromContext(ctx).Info("Serving", "server", name, "address", ln.Addr().String(), "https", true)
	return nil
}

// The metrics' and the probes' connections: a scraper and the kubelet
// hold one or two each; 64 in all, 8 from one address, bound what idle
// connections cost (some 30 KiB each) and keep one client from taking the
// kubelet's place.
const (
	maxConns           = 64
	maxConnsPerAddress = 8
)

// newServer is the HTTP server of the metrics and the probes: no
// connection held longer than its requests need (an idle one 30 s), and
// its own errors (a failed TLS handshake: a port scan) at V(4).
func newServer(ctx context.Context, handler http.Handler) *http.Server {
	return &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      60 * time.Second, // a CPU profile takes 30 s
		IdleTimeout:       30 * time.Second,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          log.New(v4Writer{klog.FromContext(ctx)}, "", 0),
	}
}

type v4Writer struct{ logger klog.Logger }

func (w v4Writer) Write(p []byte) (int, error) {
	w.logger.V(4).Info("HTTP server", "message", strings.TrimSpace(string(p)))
	return len(p), nil
}

// limited bounds ln's connections (maxConns, maxConnsPerAddress).
func limited(ctx context.Context, name string, ln net.Listener) net.Listener {
	logger := klog.FromContext(ctx)
	return connlimit.Logged(ln, maxConns, maxConnsPerAddress, func(addr string, n int64) {
		logger.Info("Refused a connection: too many open", "server", name, "from", addr, "refused", n,
			"max", maxConns, "maxPerAddress", maxConnsPerAddress)
	})
}

// serveUntil runs serve in the background and shuts srv down when ctx ends.
func serveUntil(ctx context.Context, name string, srv *http.Server, serve func() error) {
	logger := klog.FromContext(ctx)
	go func() {
		if err := serve(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error(err, "HTTP server stopped", "server", name)
		}
	}()
	context.AfterFunc(ctx, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	})
}
