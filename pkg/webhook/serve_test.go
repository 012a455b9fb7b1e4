package webhook

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"k8s.io/klog/v2"
)

// TestServerLogQuietWhileTheCertificateIsNew: a client refusing the
// certificate in the seconds after it is first served (the API server
// still holding the caBundle from before a new CA, on every fresh `make
// run`), or a handshake before there is any certificate, is logged at
// V(4) only; the same refusal once the certificate is newCertFor old is
// logged at the default verbosity, counted from 1 as if the quiet ones
// never were; and no other handshake error is ever kept quiet.
func TestServerLogQuietWhileTheCertificateIsNew(t *testing.T) {
	var (
		mu    sync.Mutex
		now   = t0
		lines []string // "V<level> <message>"
	)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); defer mu.Unlock(); now = now.Add(d) }
	logger := funcr.New(func(_, args string) {
		mu.Lock()
		defer mu.Unlock()
		level := "V0"
		if strings.Contains(args, `"level"=4`) {
			level = "V4"
		}
		lines = append(lines, level+" "+args)
	}, funcr.Options{Verbosity: 4})

	pair := func(hosts ...string) *tls.Certificate {
		t.Helper()
		data, _, err := rotate(nil, nil, hosts, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		p, err := tls.X509KeyPair(data[KeyCert], data[KeyKey])
		if err != nil {
			t.Fatal(err)
		}
		return &p
	}
	var current atomic.Pointer[tls.Certificate]
	get := func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
		if c := current.Load(); c != nil {
			return c, nil
		}
		return nil, errors.New("no serving certificate yet")
	}

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	done := make(chan error, 1)
	go func() { done <- serve(ctx, lis, http.NotFoundHandler(), &newCert{get: get, now: clock}) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})

	// Each handshake below fails; expect waits for the line it logs.
	refusing := func() { // a client with a bundle not holding the CA
		conn, err := tls.Dial("tcp", lis.Addr().String(), &tls.Config{RootCAs: x509.NewCertPool(), ServerName: "127.0.0.1"})
		if err == nil {
			_ = conn.Close()
			t.Fatal("a client trusting no CA completed the handshake")
		}
	}
	plainHTTP := func() { // not a failure of the certificate's
		conn, err := net.Dial("tcp", lis.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = conn.Close() }()
		_, _ = conn.Write([]byte("GET / HTTP/1.0\r\n\r\n"))
		_, _ = conn.Read(make([]byte, 512))
	}
	expect := func(what, level, contains string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			mu.Lock()
			got := lines
			lines = nil
			mu.Unlock()
			if len(got) > 1 {
				t.Fatalf("%s: want one line, got %q", what, got)
			}
			if len(got) == 1 {
				if !strings.HasPrefix(got[0], level+" ") || !strings.Contains(got[0], contains) {
					t.Errorf("%s: got %q, want a %s line containing %q", what, got[0], level, contains)
				}
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: nothing logged", what)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	refusing()
	expect("no certificate yet, at the start", "V4", "no serving certificate yet")
	plainHTTP()
	expect("plain HTTP at the start", "V0", `"count"=1`)
	advance(newCertFor)
	refusing()
	expect("no certificate newCertFor after the start", "V0", `no serving certificate yet" "count"=2`)

	current.Store(pair("127.0.0.1"))
	for i := range 15 { // more than the ten logged in full: none counted
		refusing()
		expect("refused, the certificate new", "V4", "remote error: tls: bad certificate")
		if i == 7 {
			plainHTTP()
			expect("plain HTTP, the certificate new", "V0", `"count"=3`)
		}
	}
	advance(newCertFor - time.Second)
	refusing()
	expect("refused, the certificate newCertFor-1s old", "V4", "remote error: tls: bad certificate")
	advance(time.Second)
	refusing()
	expect("refused, the certificate newCertFor old", "V0", `remote error: tls: bad certificate" "count"=4`)

	current.Store(pair("127.0.0.1", "localhost")) // another certificate (of another CA): new again
	advance(time.Hour)
	refusing()
	expect("refused, a new certificate", "V4", "remote error: tls: bad certificate")
	advance(newCertFor)
	refusing()
	expect("refused, that certificate newCertFor old", "V0", `"count"=5`)
	current.Store(current.Load())
	refusing()
	expect("refused, the same certificate stored again", "V0", `"count"=6`)
}
