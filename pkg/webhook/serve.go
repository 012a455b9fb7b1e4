package webhook

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"
)

// Path is where the conversion webhook is served; the CRD's clientConfig
// names it.
const Path = "/convert"

// Serve serves converter at Path over TLS on lis, with the certificate
// cert gives each handshake, until ctx ends; then it lets the reviews in
// flight finish (for up to 10 s, the API server waits 30 s for one).
func Serve(ctx context.Context, lis net.Listener, converter http.Handler, cert func(*tls.ClientHelloInfo) (*tls.Certificate, error)) error {
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
		TLSConfig:         &tls.Config{GetCertificate: cert, MinVersion: tls.VersionTLS12},
		// The server's own errors (a failed TLS handshake: a client that
		// does not trust the certificate) as the controller's log lines,
		// saying where they come from.
		ErrorLog: log.New(serverLog{klog.FromContext(ctx), new(atomic.Int64)}, "", 0),
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
type serverLog struct {
	logger klog.Logger
	n      *atomic.Int64
}

func (l serverLog) Write(p []byte) (int, error) {
	if n := l.n.Add(1); n <= 10 || n%100 == 0 {
		l.logger.Info("Conversion webhook server", "message", strings.TrimSpace(string(p)), "count", n)
	}
	return len(p), nil
}

// Run is the webhook a replica serves: keeper keeps the certificate (and
// the CRD's caBundle) while converter answers reviews on lis with it, both
// until ctx ends, or one of them fails, which stops the other. It returns
// once both have stopped.
func Run(ctx context.Context, lis net.Listener, keeper *Keeper, converter http.Handler) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	kept, served := make(chan error, 1), make(chan error, 1)
	go func() { kept <- keeper.Run(ctx); cancel() }()
	go func() { served <- Serve(ctx, lis, converter, keeper.GetCertificate); cancel() }()
	var errs []error
	if err := <-kept; err != nil {
		errs = append(errs, fmt.Errorf("certificate keeper: %w", err))
	}
	if err := <-served; err != nil {
		errs = append(errs, fmt.Errorf("serving: %w", err))
	}
	return errors.Join(errs...)
}
