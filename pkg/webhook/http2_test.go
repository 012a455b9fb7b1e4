package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	fooscheme "example.com/foo-controller/pkg/generated/clientset/versioned/scheme"
)

// TestReviewsShareAnHTTP2Connection: the API server sends its reviews
// over one HTTP/2 connection. A review that waits for a share does not
// read its body, and what its client sends ahead counts against the
// connection's window as well as its stream's; the connection's window
// holds every stream's (maxStreams × streamWindow), so that a waiting
// review cannot stop the one that holds the share. Two reviews of an
// object over baseObjectBytes at once, on one connection: the second
// waits for the large share, and both are served.
func TestReviewsShareAnHTTP2Connection(t *testing.T) {
	data, _, err := rotate(nil, nil, []string{"127.0.0.1"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(data[KeyCert], data[KeyKey])
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- serve(ctx, lis, NewConverter(fooscheme.Scheme), &newCert{get: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return &pair, nil }, now: time.Now})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	client := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // the test's own certificate
		ForceAttemptHTTP2: true, MaxConnsPerHost: 1,
	}}
	large := review("samplecontroller.example.com/v1alpha1", strings.Replace(betaFoo2, `"x":"y"`, `"x":"`+strings.Repeat("y", 400<<10)+`"`, 1))
	var wg sync.WaitGroup
	results := make([]string, 2)
	start := time.Now()
	for i := range 2 {
		wg.Go(func() {
			resp, err := client.Post("https://"+lis.Addr().String()+Path, "application/json", bytes.NewReader(large))
			if err != nil {
				results[i] = err.Error()
				return
			}
			defer func() { _ = resp.Body.Close() }()
			var b bytes.Buffer
			_, _ = b.ReadFrom(resp.Body)
			results[i] = resp.Proto + " " + resp.Status
			if !strings.Contains(b.String(), `"status":"Success"`) {
				results[i] += " " + b.String()[:min(300, b.Len())]
			}
		})
	}
	wg.Wait()
	for i, r := range results {
		if r != "HTTP/2.0 200 OK" {
			t.Errorf("review %d on one HTTP/2 connection: %.400s", i, r)
		}
	}
	if took := time.Since(start); took > stallTimeout {
		t.Errorf("the two reviews took %v, as long as a stall", took)
	}
}
