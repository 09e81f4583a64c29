package kubectlcertapi

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"

	"github.com/certapi/certapi/pkg/servedcert"
)

// podProber does the served certificate check's TLS handshake with a Pod's port through kube-apiserver's
// pods/portforward subresource (as `kubectl port-forward` does: websocket, falling back to SPDY), so
// that it works from wherever kube-apiserver is reachable. It needs create on pods/portforward in the
// Pod's namespace. Like servedcert.Probe, it sends no byte after the handshake.
type podProber struct {
	config *rest.Config
	kube   kubernetes.Interface
}

// tunnelError is a failure to reach a Pod's port through pods/portforward: the tunnel could not be
// opened (RBAC, the Pod is gone, kubelet unreachable), or kubelet could not connect to the port.
type tunnelError struct {
	pod  types.NamespacedName
	port int32
	err  error
}

func (e *tunnelError) Error() string {
	return fmt.Sprintf("through pods/portforward to pod %s port %d: %v", e.pod, e.port, e.err)
}

func (e *tunnelError) Unwrap() error { return e.err }

// probe returns the chain the Pod presents on port for serverName, within timeout.
func (p *podProber) probe(ctx context.Context, pod types.NamespacedName, port int32, serverName string, timeout time.Duration) ([]*x509.Certificate, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	fail := func(err error) ([]*x509.Certificate, error) { return nil, &tunnelError{pod: pod, port: port, err: err} }

	u := p.kube.CoreV1().RESTClient().Post().Resource("pods").Namespace(pod.Namespace).Name(pod.Name).SubResource("portforward").URL()
	transport, upgrader, err := spdy.RoundTripperFor(p.config)
	if err != nil {
		return fail(fmt.Errorf("making the SPDY transport: %w", err))
	}
	dialer := httpstream.Dialer(spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, u))
	if ws, err := portforward.NewSPDYOverWebsocketDialer(u, p.config); err == nil {
		dialer = portforward.NewFallbackDialer(ws, dialer, func(err error) bool {
			return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
		})
	}

	// Dial takes no context: it runs aside, and its connection is closed if it comes too late.
	type dialed struct {
		conn httpstream.Connection
		err  error
	}
	ch := make(chan dialed, 1)
	go func() {
		c, _, err := dialer.Dial(portforward.PortForwardProtocolV1Name)
		ch <- dialed{c, err}
	}()
	var conn httpstream.Connection
	select {
	case d := <-ch:
		if d.err != nil {
			return fail(d.err)
		}
		conn = d.conn
	case <-ctx.Done():
		go func() {
			if d := <-ch; d.conn != nil {
				_ = d.conn.Close()
			}
		}()
		return fail(fmt.Errorf("opening the tunnel: %w", ctx.Err()))
	}
	defer func() { _ = conn.Close() }()

	// One error stream and one data stream make one forwarded connection (the portforward v1 protocol).
	headers := http.Header{}
	headers.Set(corev1.StreamType, corev1.StreamTypeError)
	headers.Set(corev1.PortHeader, strconv.Itoa(int(port)))
	headers.Set(corev1.PortForwardRequestIDHeader, "0")
	errStream, err := conn.CreateStream(headers)
	if err != nil {
		return fail(fmt.Errorf("creating the error stream: %w", err))
	}
	_ = errStream.Close() // nothing is written to it
	remote := make(chan string, 1)
	go func() {
		msg, _ := io.ReadAll(errStream)
		remote <- strings.TrimSpace(string(msg))
	}()
	headers.Set(corev1.StreamType, corev1.StreamTypeData)
	data, err := conn.CreateStream(headers)
	if err != nil {
		return fail(fmt.Errorf("creating the data stream: %w", err))
	}
	addr := fmt.Sprintf("pod %s port %d", pod, port)
	chain, err := servedcert.ProbeConn(ctx, &streamConn{Stream: data, remote: addr}, addr, serverName)
	if err == nil {
		return chain, nil
	}
	// kubelet says on the error stream when it could not connect to the port; the data stream just ends.
	select {
	case msg := <-remote:
		if msg != "" {
			return fail(errors.New(msg))
		}
	case <-time.After(2 * time.Second):
	}
	return nil, err
}

// streamConn is a forwarded data stream as the net.Conn crypto/tls needs. Deadlines are not supported
// (the handshake is bounded by its context, which closes the connection).
type streamConn struct {
	httpstream.Stream
	remote string
}

// Close resets the stream, so that a read blocked in the handshake returns.
func (c *streamConn) Close() error                     { return c.Reset() }
func (c *streamConn) LocalAddr() net.Addr              { return tunnelAddr("kubectl-certapi") }
func (c *streamConn) RemoteAddr() net.Addr             { return tunnelAddr(c.remote) }
func (c *streamConn) SetDeadline(time.Time) error      { return nil }
func (c *streamConn) SetReadDeadline(time.Time) error  { return nil }
func (c *streamConn) SetWriteDeadline(time.Time) error { return nil }

// tunnelAddr names one end of a forwarded connection.
type tunnelAddr string

func (a tunnelAddr) Network() string { return "portforward" }
func (a tunnelAddr) String() string  { return string(a) }
