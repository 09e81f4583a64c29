package framework

import (
	"context"
	"errors"
	"testing"
)

// TestRetryFreeze checks that PauseContainer asks again after runc's "unable to freeze", thawing first,
// and returns any other error, or the last one after its attempts, at once.
func TestRetryFreeze(t *testing.T) {
	unable := errors.New("ctr: OCI runtime pause failed: unable to freeze: unknown")
	other := errors.New("ctr: container not found")
	for _, tc := range []struct {
		name      string
		results   []error
		wantErr   error
		wantCalls int
		wantThaws int
	}{
		{"frozen at once", []error{nil}, nil, 1, 0},
		{"frozen at the third try", []error{unable, unable, nil}, nil, 3, 2},
		{"another error is not retried", []error{other}, other, 1, 0},
		{"unable every time", []error{unable, unable, unable}, unable, 3, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls, thaws := 0, 0
			err := retryFreeze(context.Background(), 3, func() error {
				calls++
				return tc.results[calls-1]
			}, func() { thaws++ })
			if !errors.Is(err, tc.wantErr) || calls != tc.wantCalls || thaws != tc.wantThaws {
				t.Errorf("err %v after %d calls and %d thaws, want %v after %d and %d", err, calls, thaws, tc.wantErr, tc.wantCalls, tc.wantThaws)
			}
		})
	}
}
