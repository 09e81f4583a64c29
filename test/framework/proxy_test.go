package framework

import (
	"bufio"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// echoServer is a tiny TCP server that greets every connection with its name on a line and then
// echoes what it reads.
type echoServer struct {
	name string
	ln   net.Listener

	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

func newEchoServer(t *testing.T, name string) *echoServer {
	t.Helper()
	return newEchoServerAt(t, name, "127.0.0.1:0")
}

func newEchoServerAt(t *testing.T, name, addr string) *echoServer {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	s := &echoServer{name: name, ln: ln}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer c.Close()
				if _, err := io.WriteString(c, name+"\n"); err != nil {
					return
				}
				io.Copy(c, c) //nolint:errcheck
			}()
		}
	}()
	t.Cleanup(s.close)
	return s
}

func (s *echoServer) addr() string { return s.ln.Addr().String() }

// close stops listening (so that dials are refused) and ends every open connection.
func (s *echoServer) close() {
	s.ln.Close()
	s.mu.Lock()
	for _, c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// deadAddr returns a loopback address that refuses connections: a TCP socket bound to a port
// but not listening, so that no other listener of the test can take the port meanwhile.
func deadAddr(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*syscall.SockaddrInet4).Port))
}

type proxyConn struct {
	net.Conn
	r *bufio.Reader
}

// dialProxy connects through the proxy and returns the connection and the greeting (the name of
// the backend), or "" when the proxy closed the connection without a backend.
func dialProxy(t *testing.T, p *rrProxy) (*proxyConn, string) {
	t.Helper()
	c, err := net.Dial("tcp", p.ln.Addr().String())
	if err != nil {
		t.Fatalf("dialling the proxy: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	pc := &proxyConn{Conn: c, r: bufio.NewReader(c)}
	line, err := pc.r.ReadString('\n')
	if err != nil {
		if errors.Is(err, io.EOF) && line == "" {
			return pc, ""
		}
		t.Fatalf("reading the greeting: %v", err)
	}
	return pc, strings.TrimSuffix(line, "\n")
}

func (pc *proxyConn) echo(t *testing.T, msg string) {
	t.Helper()
	if _, err := io.WriteString(pc, msg+"\n"); err != nil {
		t.Fatalf("writing through the proxy: %v", err)
	}
	got, err := pc.r.ReadString('\n')
	if err != nil {
		t.Fatalf("reading the echo: %v", err)
	}
	if got != msg+"\n" {
		t.Fatalf("echo: got %q, want %q", got, msg+"\n")
	}
}

// expectEOF checks that the proxy closed the connection.
func (pc *proxyConn) expectEOF(t *testing.T, why string) {
	t.Helper()
	b, err := pc.r.ReadByte()
	if err == nil {
		t.Fatalf("%s: read %q, want the connection closed", why, b)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("%s: the connection is still open", why)
	}
}

// TestRoundRobinProxy checks the proxy's round robin, that it skips a backend that refuses
// connections, that a backend closing its side closes the client's, and that Close ends everything.
func TestRoundRobinProxy(t *testing.T) {
	a := newEchoServer(t, "a")
	b := newEchoServer(t, "b")
	dead := deadAddr(t)

	p, err := newRRProxy("127.0.0.1:0", []string{a.addr(), dead, b.addr()}, []string{"a", "dead", "b"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	// Round robin over the live backends; "dead" is skipped every time.
	var got []string
	var conns []*proxyConn
	for range 6 {
		c, name := dialProxy(t, p)
		c.echo(t, "hello from "+name)
		got = append(got, name)
		conns = append(conns, c)
	}
	if want := "a b a b a b"; strings.Join(got, " ") != want {
		t.Fatalf("backends of 6 connections: %v, want %s", got, want)
	}
	if routes, want := p.Routes(), []int{0, 2, 0, 2, 0, 2}; !equalInts(routes, want) {
		t.Fatalf("Routes() = %v, want %v", routes, want)
	}
	if open, want := p.Open(), []int{3, 0, 3}; !equalInts(open, want) {
		t.Fatalf("Open() = %v, want %v", open, want)
	}
	// All six stay open and independent.
	for i, c := range conns {
		c.echo(t, "again "+strings.Repeat("x", i))
	}

	// b goes away: its connections are closed on the client side too, and new ones all go to a.
	b.close()
	for i, c := range conns {
		if got[i] == "b" {
			c.expectEOF(t, "connection to b after b closed")
		} else {
			c.echo(t, "a is still there")
		}
	}
	for range 3 {
		c, name := dialProxy(t, p)
		if name != "a" {
			t.Fatalf("with b down, a connection went to %q", name)
		}
		c.echo(t, "only a")
	}

	// a goes away too: the proxy accepts and closes at once.
	a.close()
	c, name := dialProxy(t, p)
	if name != "" {
		t.Fatalf("with every backend down, got a greeting from %q", name)
	}
	c.expectEOF(t, "no backend")
	if routes := p.Routes(); len(routes) != 9 {
		t.Fatalf("Routes() = %v, want 9 routed connections", routes)
	}

	// A new a on the same port is picked up again (a restarted replica keeps its port).
	newEchoServerAt(t, "a2", a.addr())
	open, name := dialProxy(t, p)
	if name != "a2" {
		t.Fatalf("after a restarted, connection went to %q", name)
	}
	open.echo(t, "back")

	// Close ends the open connection and stops listening.
	p.Close()
	open.expectEOF(t, "open connection after Close")
	if c, err := net.DialTimeout("tcp", p.ln.Addr().String(), time.Second); err == nil {
		c.Close()
		t.Fatal("the proxy still accepts connections after Close")
	}
	if open, want := p.Open(), []int{0, 0, 0}; !equalInts(open, want) {
		t.Fatalf("Open() after Close = %v, want %v", open, want)
	}
	p.Close() // idempotent
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
