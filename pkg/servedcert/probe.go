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
	"time"
)

// Probe connects to addr (host:port), does a TLS handshake with serverName as SNI (what kube-apiserver
// sends for a service reference) and returns the chain the server presented, leaf first. It sends no
// request byte: the connection is closed as soon as the handshake completes. It verifies nothing itself
// (Classify does, so that an untrusted chain can still be reported). The whole attempt is bounded by
// timeout and by ctx. An error is a connection or handshake failure; ProbeError classifies it.
func Probe(ctx context.Context, addr, serverName string, timeout time.Duration) ([]*x509.Certificate, error) {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	var d net.Dialer
	raw, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, &probeError{stage: stageConnect, addr: addr, err: err}
	}
	return ProbeConn(ctx, raw, addr, serverName)
}

// ProbeConn is Probe over a connection already made to addr (a tunnel such as kube-apiserver's
// pods/portforward): the TLS handshake with serverName as SNI, and nothing sent after it. It closes conn.
// Its errors are handshake failures for ProbeError; ctx bounds the handshake.
func ProbeConn(ctx context.Context, conn net.Conn, addr, serverName string) ([]*x509.Certificate, error) {
	defer func() { _ = conn.Close() }()
	tc := tls.Client(conn, &tls.Config{
		ServerName: serverName,
		MinVersion: tls.VersionTLS12,
		// Verification is Classify's, against the object's own bundle, so that what is presented can be
		// reported whatever it is. Nothing is sent over this connection after the handshake.
		InsecureSkipVerify: true, //nolint:gosec // verified by Classify
	})
	if err := tc.HandshakeContext(ctx); err != nil {
		return nil, &probeError{stage: stageHandshake, addr: addr, err: err}
	}
	certs := tc.ConnectionState().PeerCertificates
	_ = tc.Close()
	return certs, nil
}

// probe stages.
const (
	stageConnect   = "connect"
	stageHandshake = "handshake"
)

// probeError is Probe's error: where it failed and why.
type probeError struct {
	stage string
	addr  string
	err   error
}

func (e *probeError) Error() string {
	return fmt.Sprintf("%s to %s: %v", e.stage, e.addr, e.err)
}

func (e *probeError) Unwrap() error { return e.err }

// ProbeError classifies a failed Probe: Unreachable when no connection could be made or the network
// dropped it (refused, timed out, reset, no route, a NetworkPolicy), HandshakeFailed when the server
// answered but no TLS handshake completed (plain HTTP on the port, a TLS alert). A network failure is
// never reported as a trust failure.
func ProbeError(err error) Result {
	var pe *probeError
	connect := errors.As(err, &pe) && pe.stage == stageConnect
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return Result{State: Unreachable, Message: fmt.Sprintf("connection refused (%v): nothing listens on the port, or a NetworkPolicy rejects certapi", err)}
	case isTimeout(err):
		return Result{State: Unreachable, Message: fmt.Sprintf("timed out (%v): the endpoint does not answer, or a NetworkPolicy drops certapi's traffic", err)}
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return Result{State: Unreachable, Message: fmt.Sprintf("connection reset (%v)", err)}
	case connect:
		return Result{State: Unreachable, Message: fmt.Sprintf("cannot connect (%v)", err)}
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return Result{State: HandshakeFailed, Message: fmt.Sprintf("the server closed the connection during the TLS handshake (%v)", err)}
	}
	var rh tls.RecordHeaderError
	if errors.As(err, &rh) {
		return Result{State: HandshakeFailed, Message: fmt.Sprintf("the server does not speak TLS on this port (%v)", err)}
	}
	return Result{State: HandshakeFailed, Message: fmt.Sprintf("TLS handshake failed (%v)", err)}
}

// isTimeout reports whether err is a timeout of the dial or the handshake.
func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
