package keyplugin

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

// ShutdownGrace bounds how long Serve waits for calls in flight once its context is done.
const ShutdownGrace = 5 * time.Second

// SocketPath returns the path of socket, given as a path or as unix:///path.
func SocketPath(socket string) string {
	return strings.TrimPrefix(socket, "unix://")
}

// Listen listens on the Unix socket socket (a path or unix:///path), removing a stale socket file an
// earlier run left there, and makes the socket readable and writable by this process's user only. The
// mode is set right after the socket is made: a process that must leave no moment in which others could
// connect sets its umask to 077 first (certapi-kms-pkcs11 does). Closing the listener removes the file.
func Listen(socket string) (net.Listener, error) {
	path := SocketPath(socket)
	if path == "" {
		return nil, errors.New("the socket path is empty")
	}
	if err := removeStaleSocket(path); err != nil {
		return nil, err
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		_ = ln.Close()
		return nil, fmt.Errorf("making %s private to its user: %w", path, err)
	}
	return ln, nil
}

// removeStaleSocket removes a socket file left at path by an earlier run; anything else there is an error.
func removeStaleSocket(path string) error {
	info, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("checking %s: %w", path, err)
	}
	if info.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("%s exists and is not a socket; refusing to remove it", path)
	}
	// A live server there answers a dial: two servers on one socket would take turns at random.
	if conn, err := net.DialTimeout("unix", path, time.Second); err == nil {
		_ = conn.Close()
		return fmt.Errorf("another process serves on %s", path)
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("removing the stale socket %s: %w", path, err)
	}
	return nil
}

// Serve listens on socket (see Listen) and serves h there until ctx is done, then lets calls in flight
// finish for up to ShutdownGrace and removes the socket.
func Serve(ctx context.Context, socket string, h http.Handler) error {
	ln, err := Listen(socket)
	if err != nil {
		return err
	}
	return ServeListener(ctx, ln, h)
}

// ServeListener serves h on ln until ctx is done, then lets calls in flight finish for up to
// ShutdownGrace and closes ln. Requests' contexts carry ctx's values (its logger) but not its end, so
// that a signature under way when shutdown starts is finished rather than cut off.
func ServeListener(ctx context.Context, ln net.Listener, h http.Handler) error {
	base := context.WithoutCancel(ctx)
	server := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      2 * time.Minute,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    16 << 10,
		BaseContext:       func(net.Listener) context.Context { return base },
	}
	served := make(chan error, 1)
	go func() { served <- server.Serve(ln) }()
	select {
	case err := <-served:
		_ = ln.Close()
		return fmt.Errorf("serving on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(base, ShutdownGrace)
	defer cancel()
	if err := server.Shutdown(shutdownCtx); err != nil {
		_ = server.Close()
	}
	<-served // http.ErrServerClosed
	return nil
}
