package apiserver

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestServeUntilEtcdStops: the embedded member stopping ends the server's context, and the member's
// error is what the run function returns once the server has returned (cmd/certapi then exits non-zero
// after run's deferred stops); a context that ends, or a server that fails, is returned as before.
func TestServeUntilEtcdStops(t *testing.T) {
	memberErr := errors.New("the embedded etcd member certapi-0 stopped: etcd member certapi-0 stopped")
	serveErr := errors.New("listening: address in use")
	cases := []struct {
		name string
		// memberStops sends the member's error; endCtx ends the context instead; serveFails makes the
		// server return at once with serveErr.
		memberStops, endCtx, serveFails bool
		want                            error
	}{
		{name: "the member stops: the server stops, the member's error is returned", memberStops: true, want: memberErr},
		{name: "the context ends (SIGTERM): nil", endCtx: true},
		{name: "the server fails: its error", serveFails: true, want: serveErr},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			stopped := make(chan error, 1)
			served := make(chan struct{})
			serve := func(ctx context.Context) error {
				close(served)
				if tc.serveFails {
					return serveErr
				}
				<-ctx.Done() // the server shuts down when its context ends
				return nil
			}
			done := make(chan error, 1)
			go func() { done <- serveUntilEtcdStops(ctx, stopped, serve) }()
			<-served
			switch {
			case tc.memberStops:
				stopped <- memberErr
			case tc.endCtx:
				cancel()
			}
			select {
			case err := <-done:
				if !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
					t.Fatalf("returned %v; want %v", err, tc.want)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("did not return within 10s")
			}
		})
	}
}
