package filters

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// serveBounded serves h behind boundRequestBodies with the given body timeout on a real HTTP/1.1 server,
// and returns its address.
func serveBounded(t *testing.T, timeout time.Duration, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(boundRequestBodies(h, timeout))
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

// sendHalf opens a connection and sends a POST that declares a body of declared bytes and sends sent of them.
func sendHalf(t *testing.T, addr string, declared, sent int) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	// A guard against a hang, not a measurement: every answer below comes well before it.
	if err := conn.SetDeadline(time.Now().Add(30 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Fprintf(conn, "POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", declared, strings.Repeat("y", sent)); err != nil {
		t.Fatal(err)
	}
	return conn, bufio.NewReader(conn)
}

func TestBoundRequestBodies(t *testing.T) {
	refuse := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "forbidden", http.StatusForbidden) // reads no body, as authorization does
	})

	t.Run("an error answer to a half-sent body closes the connection", func(t *testing.T) {
		addr := serveBounded(t, time.Minute, refuse)
		conn, br := sendHalf(t, addr, 64<<10, 32<<10)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("no answer while the body is half sent: %v", err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden || !resp.Close {
			t.Errorf("answer %d, Connection: close %v; want 403 and close", resp.StatusCode, resp.Close)
		}
		if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
			t.Errorf("after the answer: %v; want the server to close the connection", err)
		}
		_ = conn
	})

	t.Run("an error answer to a body sent in full keeps the connection", func(t *testing.T) {
		addr := serveBounded(t, time.Minute, refuse)
		conn, br := sendHalf(t, addr, 4<<10, 4<<10)
		for i := range 2 {
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("answer %d: %v", i, err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusForbidden || resp.Close {
				t.Fatalf("answer %d: %d, Connection: close %v; want 403 on a kept connection", i, resp.StatusCode, resp.Close)
			}
			if i == 0 {
				if _, err := fmt.Fprintf(conn, "POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc"); err != nil {
					t.Fatal(err)
				}
			}
		}
	})

	t.Run("a body that stops arriving ends at the timeout", func(t *testing.T) {
		readErr := make(chan error, 1)
		addr := serveBounded(t, 200*time.Millisecond, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, err := io.ReadAll(r.Body)
			readErr <- err
			http.Error(w, "body", http.StatusBadRequest)
		}))
		sendHalf(t, addr, 64<<10, 32<<10)
		select {
		case err := <-readErr:
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() {
				t.Fatalf("reading the half-sent body: %v; want a timeout", err)
			}
		case <-time.After(30 * time.Second): // a guard against a hang
			t.Fatal("reading a half-sent body never ended")
		}
	})

	t.Run("a request without a body is left alone", func(t *testing.T) {
		var sawDeadlineWrapper bool
		addr := serveBounded(t, time.Minute, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, sawDeadlineWrapper = w.(interface{ Unwrap() http.ResponseWriter })
		}))
		resp, err := http.Get("http://" + addr + "/watch")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if sawDeadlineWrapper {
			t.Error("a GET without a body got the body wrapper")
		}
	})
}
