package webhook

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
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
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		TLSConfig:         &tls.Config{GetCertificate: cert, MinVersion: tls.VersionTLS12},
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
