package metrics

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
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
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/klog/v2"
)

// Protected is handler behind the API server's delegated authentication
// and authorization, as kube-controller-manager serves its metrics: a
// request must carry a bearer token that the API server accepts
// (TokenReview), else 401, and the token's user must be allowed to get
// the request's path as a non-resource URL (SubjectAccessReview: `get` on
// `/metrics`), else 403. Both answers are cached (a minute for a token
// and an allow, 10 s for a deny), so that a scraper every 15 s costs the
// API server about two reviews a minute. It is k8s.io/apiserver's own
// delegating authenticator and authorizer, the ones an aggregated API
// server uses.
func Protected(handler http.Handler, kube kubernetes.Interface) (http.Handler, error) {
	// Retries of a review the API server did not answer: 4 in some 3 s,
	// within a scrape's usual 10 s timeout.
	backoff := &wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}
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
		logger.V(2).Info("Metrics request not authorized", "user", res.User.GetName(), "verb", attrs.Verb, "path", attrs.Path, "reason", reason, "err", err)
		http.Error(w, fmt.Sprintf("Forbidden (user=%s, verb=%s, path=%s)", res.User.GetName(), attrs.Verb, attrs.Path), http.StatusForbidden)
		return
	}
	p.next.ServeHTTP(w, r)
}

// ServeTLS serves handler over HTTPS on addr (nothing for "" or "0")
// until ctx ends, with a certificate made at start, signed by itself: a
// scraper checks who it talks to by the token's answer, not by the
// certificate (Prometheus: insecure_skip_verify, as for
// kube-controller-manager's metrics; see docs/operations.md).
func ServeTLS(ctx context.Context, name, addr string, handler http.Handler) error {
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
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}}
	serveUntil(ctx, name, srv, func() error { return srv.ServeTLS(ln, "", "") })
	klog.FromContext(ctx).Info("Serving", "server", name, "address", ln.Addr().String(), "https", true)
	return nil
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
