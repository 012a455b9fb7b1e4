// Package connlimit bounds the connections a server holds open: in all,
// and from any one address. Every open connection costs the process its
// buffers (TLS, HTTP) whether or not it sends anything, so a server that
// accepts all of them can be made to run out of memory by one client that
// opens enough; the bound per address keeps one client from taking the
// connections that others (the kubelet, the API server, Prometheus) need.
package connlimit

import (
	"net"
	"sync"
	"sync/atomic"
)

// listener accepts at most Total connections open at once, and at most
// PerAddress of them from one IP address; it closes one over either at
// once (the client sees it reset) rather than leave it queued. Refused
// counts them.
type listener struct {
	net.Listener
	Total, PerAddress int
	Refused           atomic.Int64
	// OnRefuse, if set, is told of each refusal: the address and how many
	// so far.
	OnRefuse func(addr string, refused int64)

	mu     sync.Mutex
	open   int
	byAddr map[string]int
}

// newListener wraps l.
func newListener(l net.Listener, total, perAddress int) *listener {
	return &listener{Listener: l, Total: total, PerAddress: perAddress, byAddr: map[string]int{}}
}

// Logged wraps l, logging refusals through log: the first ten, then one
// in a hundred with their count (a client that opens connections in a
// loop would otherwise fill the log).
func Logged(l net.Listener, total, perAddress int, log func(addr string, refused int64)) net.Listener {
	ll := newListener(l, total, perAddress)
	ll.OnRefuse = func(addr string, n int64) {
		if n <= 10 || n%100 == 0 {
			log(addr, n)
		}
	}
	return ll
}

// Accept returns the next connection within the bounds.
func (l *listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		addr := c.RemoteAddr().String()
		if host, _, err := net.SplitHostPort(addr); err == nil {
			addr = host
		}
		l.mu.Lock()
		if l.open >= l.Total || l.byAddr[addr] >= l.PerAddress {
			l.mu.Unlock()
			n := l.Refused.Add(1)
			_ = c.Close()
			if l.OnRefuse != nil {
				l.OnRefuse(addr, n)
			}
			continue
		}
		l.open++
		l.byAddr[addr]++
		l.mu.Unlock()
		return &conn{Conn: c, release: sync.OnceFunc(func() { l.release(addr) })}, nil
	}
}

func (l *listener) release(addr string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open--
	if l.byAddr[addr]--; l.byAddr[addr] <= 0 {
		delete(l.byAddr, addr)
	}
}

// conn gives its place back when closed (once, however often it is).
type conn struct {
	net.Conn
	release func()
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.release()
	return err
}
