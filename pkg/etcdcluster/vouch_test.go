package etcdcluster

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestVouches: a peer CA replaces the one a member holds only when it is the same CA or its successor
// through the cross-signatures Successor makes; a CA made anywhere else is refused, whatever its chain.
func TestVouches(t *testing.T) {
	now := time.Now()
	mk := func(ca *PeerCA, err error) *PeerCA {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return ca
	}
	held := mk(NewPeerCA(now, time.Hour))
	next := mk(held.Successor(now, time.Hour))
	afterNext := mk(next.Settled().Successor(now, time.Hour))
	foreign := mk(NewPeerCA(now, time.Hour))
	// A foreign CA that carries the legitimate successor's chain: the cross-signature certifies the
	// successor's key, not its own.
	borrowed := *foreign
	borrowed.Chain = next.Chain
	// A foreign CA cross-signed by a CA of its own making.
	accomplice := mk(NewPeerCA(now, time.Hour))
	selfVouched := mk(accomplice.Successor(now, time.Hour))

	for _, tc := range []struct {
		name    string
		next    *PeerCA
		vouched bool
	}{
		{"the same CA", held, true},
		{"the same CA, its bundle settled", held.Settled(), true},
		{"its successor, while rotating", next, true},
		{"its successor, settled", next.Settled(), true},
		{"two rotations on (a member that was down through one)", afterNext.Settled(), true},
		{"a CA made elsewhere", foreign, false},
		{"a CA made elsewhere with the successor's chain", &borrowed, false},
		{"a CA made elsewhere, cross-signed by another foreign CA", selfVouched, false},
		{"none", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := held.Vouches(tc.next)
			if tc.vouched && err != nil {
				t.Fatalf("refused: %v", err)
			}
			if !tc.vouched && !errors.Is(err, ErrPeerCANotVouched) {
				t.Fatalf("got %v; want ErrPeerCANotVouched", err)
			}
		})
	}
}

// TestHeldTrustVouches: at start, the CA read from the store must be vouched for by what the member
// trusted when it last ran; with no trust file (a first start) any CA is taken.
func TestHeldTrustVouches(t *testing.T) {
	now := time.Now()
	held, err := NewPeerCA(now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	next, err := held.Successor(now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := NewPeerCA(now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "ca.crt")
	if err := heldTrustVouches(file, foreign); err != nil {
		t.Fatalf("a first start (no trust file): %v", err)
	}
	if err := os.WriteFile(file, held.TrustPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		ca      *PeerCA
		vouched bool
	}{
		{"the CA it trusted", held, true},
		{"its successor", next.Settled(), true},
		{"a CA made elsewhere", foreign, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := heldTrustVouches(file, tc.ca)
			if tc.vouched != (err == nil) || (!tc.vouched && !errors.Is(err, ErrPeerCANotVouched)) {
				t.Fatalf("got %v; want vouched %v", err, tc.vouched)
			}
		})
	}
}
