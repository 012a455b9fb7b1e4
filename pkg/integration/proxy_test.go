//go:build integration

package integration

import (
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// tcpProxy forwards loopback TCP connections to a target: the network
// between the controller and the API server, which a test can slow down or
// cut.
type tcpProxy struct {
	t      *testing.T
	addr   string
	target string
	delay  time.Duration // added to every chunk, in both directions

	hold holdGate // forwarding waits while held

	mu    sync.Mutex
	ln    net.Listener // nil while cut
	conns map[net.Conn]struct{}
}

// holdGate holds whoever waits on it while it is held: the proxy's
// forwarding, or a watch's response body (a stalled watch).
type holdGate struct {
	mu   sync.Mutex
	held chan struct{} // non-nil while held; closed when released
}

func (g *holdGate) set(held bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case held && g.held == nil:
		g.held = make(chan struct{})
	case !held && g.held != nil:
		close(g.held)
		g.held = nil
	}
}

// wait returns once the gate is not held.
func (g *holdGate) wait() {
	g.mu.Lock()
	held := g.held
	g.mu.Unlock()
	if held != nil {
		<-held
	}
}

func newProxy(t *testing.T, target string, delay time.Duration) *tcpProxy {
	t.Helper()
	p := &tcpProxy{t: t, addr: "127.0.0.1:0", target: target, delay: delay, conns: map[net.Conn]struct{}{}}
	p.listen()
	t.Cleanup(func() { p.setCut(true) })
	return p
}

func (p *tcpProxy) listen() {
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		p.t.Fatal(err)
	}
	p.addr, p.ln = ln.Addr().String(), ln
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.serve(c)
		}
	}()
}

func (p *tcpProxy) serve(c net.Conn) {
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = c.Close()
		return
	}
	p.mu.Lock()
	p.conns[c], p.conns[up] = struct{}{}, struct{}{}
	p.mu.Unlock()
	go p.pipe(up, c)
	p.pipe(c, up)
}

func (p *tcpProxy) pipe(dst, src net.Conn) {
	defer func() {
		_ = dst.Close()
		_ = src.Close()
		p.mu.Lock()
		delete(p.conns, dst)
		delete(p.conns, src)
		p.mu.Unlock()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.hold.wait()
			time.Sleep(p.delay)
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// setCut cuts the network or restores it. A cut closes every open
// connection (every watch breaks at once) and refuses new ones, as when the
// API server's address is unreachable; restoring listens on the same
// address again.
func (p *tcpProxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case cut && p.ln != nil:
		_ = p.ln.Close()
		p.ln = nil
		for c := range p.conns {
			_ = c.Close()
		}
	case !cut && p.ln == nil:
		p.listen()
	}
}

// setHeld holds the traffic or lets it go. While held, connections stay
// open (and new ones are accepted) but nothing is forwarded, in either
// direction: an API server that stopped answering, or a network that
// drops everything without resetting connections. Held bytes are
// forwarded when released, late; a cut while held drops them.
func (p *tcpProxy) setHeld(held bool) { p.hold.set(held) }

// proxyToAPIServer puts a proxy in front of the cluster's API server.
func proxyToAPIServer(t *testing.T, cl *cluster, delay time.Duration) *tcpProxy {
	t.Helper()
	u, err := url.Parse(cl.admin.Host)
	if err != nil {
		t.Fatal(err)
	}
	return newProxy(t, u.Host, delay)
}

// kubeconfigVia writes a copy of kubeconfig whose server is reached through
// the proxy (the certificates stay valid: the proxy does not terminate TLS).
func (p *tcpProxy) kubeconfigVia(t *testing.T, kubeconfig string) string {
	t.Helper()
	kc, err := os.ReadFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(kc), p.target) {
		t.Fatalf("kubeconfig %s does not name %s", kubeconfig, p.target)
	}
	path := filepath.Join(t.TempDir(), "proxied.kubeconfig")
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(string(kc), p.target, p.addr)), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
