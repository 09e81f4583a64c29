package servedcert

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

// TestProbe runs Probe against real listeners on 127.0.0.1: a TLS server (whose chain comes back and
// classifies, and which receives no request byte), a closed port, a port that accepts and never
// answers, and a plain-text server.
func TestProbe(t *testing.T) {
	ctx := context.Background()
	now := time.Now()
	const name = "webhook.tenant.svc"
	ca := newCA(t, "certapi", now.Add(-time.Hour), now.Add(24*time.Hour))
	leaf, key := ca.leaf(t, []string{name}, now.Add(-time.Hour), now.Add(12*time.Hour))

	t.Run("TLS server", func(t *testing.T) {
		ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{tlsCert(leaf, key)}})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = ln.Close() }()
		type seen struct {
			sni  string
			read int
			err  error
		}
		got := make(chan seen, 1)
		go func() {
			c, err := ln.Accept()
			if err != nil {
				got <- seen{err: err}
				return
			}
			defer func() { _ = c.Close() }()
			tc := c.(*tls.Conn)
			if err := tc.Handshake(); err != nil {
				got <- seen{err: err}
				return
			}
			_ = tc.SetReadDeadline(time.Now().Add(10 * time.Second))
			b, err := io.ReadAll(tc) // until the prober's close_notify
			got <- seen{sni: tc.ConnectionState().ServerName, read: len(b), err: err}
		}()
		chain, err := Probe(ctx, ln.Addr().String(), name, 5*time.Second)
		if err != nil {
			t.Fatalf("Probe: %v", err)
		}
		if len(chain) != 1 || !chain[0].Equal(leaf) {
			t.Fatalf("Probe returned %d certificates, want the server's leaf", len(chain))
		}
		if r := Classify(chain, []*x509.Certificate{ca.cert}, name, now, time.Hour); r.State != Verified {
			t.Errorf("classified %s (%s), want Verified", r.State, r.Message)
		}
		s := <-got
		if s.err != nil {
			t.Fatalf("server: %v", s.err)
		}
		if s.sni != name {
			t.Errorf("SNI %q, want %q", s.sni, name)
		}
		if s.read != 0 {
			t.Errorf("the server received %d bytes of application data, want none", s.read)
		}
	})

	t.Run("closed port", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		_ = ln.Close()
		_, err = Probe(ctx, addr, name, 5*time.Second)
		if r := ProbeError(err); r.State != Unreachable {
			t.Errorf("classified %s (%s), want Unreachable", r.State, r.Message)
		}
	})

	t.Run("never answers", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = ln.Close() }()
		go func() {
			c, err := ln.Accept()
			if err == nil {
				defer func() { _ = c.Close() }()
				_, _ = io.Copy(io.Discard, c) // holds the connection, says nothing
			}
		}()
		start := time.Now()
		_, err = Probe(ctx, ln.Addr().String(), name, 300*time.Millisecond)
		if r := ProbeError(err); r.State != Unreachable {
			t.Errorf("classified %s (%s), want Unreachable", r.State, r.Message)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("Probe took %s with a 300ms timeout", d)
		}
	})

	t.Run("plain HTTP", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = ln.Close() }()
		go func() {
			c, err := ln.Accept()
			if err == nil {
				defer func() { _ = c.Close() }()
				_, _ = fmt.Fprint(c, "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
			}
		}()
		_, err = Probe(ctx, ln.Addr().String(), name, 5*time.Second)
		if r := ProbeError(err); r.State != HandshakeFailed {
			t.Errorf("classified %s (%s), want HandshakeFailed", r.State, r.Message)
		}
	})
}

// TestProbeError covers the error classes Probe's listeners cannot all produce on one host.
func TestProbeError(t *testing.T) {
	connect := func(err error) error { return &probeError{stage: stageConnect, addr: "10.0.0.1:443", err: err} }
	handshake := func(err error) error { return &probeError{stage: stageHandshake, addr: "10.0.0.1:443", err: err} }
	for _, tc := range []struct {
		name string
		err  error
		want State
	}{
		{"refused", connect(&net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}), Unreachable},
		{"dial timeout", connect(context.DeadlineExceeded), Unreachable},
		{"no route", connect(&net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.EHOSTUNREACH)}), Unreachable},
		{"reset in the handshake", handshake(&net.OpError{Op: "read", Err: os.NewSyscallError("read", syscall.ECONNRESET)}), Unreachable},
		{"handshake timeout", handshake(os.ErrDeadlineExceeded), Unreachable},
		{"closed in the handshake", handshake(io.EOF), HandshakeFailed},
		{"not TLS", handshake(tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}), HandshakeFailed},
		{"alert", handshake(errors.New("remote error: tls: handshake failure")), HandshakeFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if r := ProbeError(tc.err); r.State != tc.want || r.Message == "" {
				t.Errorf("ProbeError = %s (%q), want %s", r.State, r.Message, tc.want)
			}
		})
	}
}
