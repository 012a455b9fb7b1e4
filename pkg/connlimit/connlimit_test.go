package connlimit

import (
	"net"
	"os"
	"testing"
	"time"
)

// TestListener: connections over the bound per address are closed at
// once while another address still gets in; over the total, any address
// is refused; a connection closed gives its place back.
func TestListener(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := newListener(inner, 3, 2)
	defer func() { _ = l.Close() }()
	accepted := make(chan net.Conn, 10)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	dial := func(from string) net.Conn {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
		c, err := d.Dial("tcp", inner.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	// refused: the server closed it (a read ends at once).
	refused := func(c net.Conn) bool {
		_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		_, err := c.Read(make([]byte, 1))
		return err != nil && !os.IsTimeout(err)
	}
	a1, a2, a3 := dial("127.0.0.1"), dial("127.0.0.1"), dial("127.0.0.1")
	if refused(a1) || refused(a2) || !refused(a3) {
		t.Fatal("the third connection from one address must be refused, the first two kept")
	}
	b1 := dial("127.0.0.2")
	if refused(b1) {
		t.Fatal("another address is refused while the total is not reached")
	}
	if b2 := dial("127.0.0.3"); !refused(b2) {
		t.Fatal("a fourth connection is accepted over a total of 3")
	}
	if got := l.Refused.Load(); got != 2 {
		t.Errorf("refused %d, want 2", got)
	}
	first := <-accepted
	_ = first.Close()
	_ = first.Close() // twice: gives its place back once
	time.Sleep(50 * time.Millisecond)
	if again := dial("127.0.0.1"); refused(again) {
		t.Fatal("a place given back is not taken again")
	}
	if c := dial("127.0.0.4"); !refused(c) {
		t.Fatal("a place given back twice by one connection")
	}
}
