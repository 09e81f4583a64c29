package etcdcluster

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/certapi/certapi/test/framework"
)

// TestMaintainerReusesItsClient runs a real embedded member (the etcd leader of its one-member cluster)
// for many rounds of its maintenance loop: the health checks, the key's custody and the peer CA's
// rotation go through one etcd client of the member, made once and reused, never one per round; Stop
// closes it.
func TestMaintainerReusesItsClient(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	m, _ := startOneMember(ctx, t, func(cfg *Config) {
		// The key's custody runs through the same client: it writes the record and the marker once.
		cfg.PeerCARecordKey = "/certapi.dev/etcd-peer-ca"
		// Health checks run on the leader only when members can be removed.
		cfg.DeadMemberTimeout = time.Minute
		cfg.CheckInterval = 10 * time.Millisecond
	})
	before := m.clients.made.Load()

	runCtx, stopRun := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- m.Run(runCtx) }()
	const wantRounds = 20
	rounds, last := 0, time.Time{}
	err := wait.PollUntilContextTimeout(ctx, 2*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		if st := m.Status(); st.Leader && !st.CheckedAt.Equal(last) {
			rounds, last = rounds+1, st.CheckedAt
		}
		return rounds >= wantRounds, nil
	})
	if err != nil {
		t.Fatalf("saw %d rounds of the maintenance loop as the etcd leader, want %d: %v", rounds, wantRounds, err)
	}
	if st := m.Status(); !st.Healthy["certapi-0"] {
		t.Fatalf("the leader's rounds did not check health: %+v", st)
	}
	if made := m.clients.made.Load() - before; made != 1 {
		t.Fatalf("the maintenance loop made %d etcd clients over at least %d rounds; want 1, made once and reused", made, rounds)
	}

	c, err := m.clients.localClient()
	if err != nil {
		t.Fatal(err)
	}
	stopRun()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	m.Stop()
	if c.Ctx().Err() == nil {
		t.Fatal("Stop left the member's client open")
	}
	if _, err := m.clients.localClient(); !errors.Is(err, errClientsClosed) {
		t.Fatalf("a client made after Stop: %v; want errClientsClosed", err)
	}
}

// TestMaintainerWakesForANewPeerCA runs a real embedded member whose maintenance rounds are an hour
// apart: its first round runs at once, a peer CA that SetPeerCA brings wakes a round that re-issues the
// member certificate from it without waiting for the next, and Run says so when etcd stops under it.
func TestMaintainerWakesForANewPeerCA(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	m, ca := startOneMember(ctx, t, func(cfg *Config) { cfg.CheckInterval = time.Hour })
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()

	if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return !m.Status().CheckedAt.IsZero(), nil
	}); err != nil {
		t.Fatal("no maintenance round at the start of Run")
	}

	next, err := ca.Successor(time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	m.SetPeerCA(PeerCAState{CA: next})
	signedByNext := func() bool {
		block, _ := pem.Decode(m.creds.cert.Load().CertPEM)
		if block == nil {
			return false
		}
		leaf, err := x509.ParseCertificate(block.Bytes)
		return err == nil && next.Signed(leaf)
	}
	if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return signedByNext(), nil
	}); err != nil {
		t.Fatal("the member certificate was not re-issued from the new peer CA: SetPeerCA did not wake the maintainer")
	}

	m.Stop()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "certapi-0") {
			t.Fatalf("Run returned %v after etcd stopped under it; want an error naming the member", err)
		}
	case <-ctx.Done():
		t.Fatal("Run did not return after etcd stopped")
	}
}

// startOneMember starts a member named certapi-0 that bootstraps a cluster of its own on free local
// ports, with a new peer CA (returned), its Config changed by adjust; Stop is called at the end of the
// test.
func startOneMember(ctx context.Context, t *testing.T, adjust func(*Config)) (*Member, *PeerCA) {
	t.Helper()
	ports, err := framework.FreePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := NewPeerCA(time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	peerURL, clientURL := fmt.Sprintf("https://127.0.0.1:%d", ports[0]), fmt.Sprintf("https://127.0.0.1:%d", ports[1])
	cfg := Config{
		Name: "certapi-0", Dir: t.TempDir(), Designated: true, CA: ca,
		PeerURL: peerURL, ClientURL: clientURL, ListenPeerURL: peerURL, ListenClientURL: clientURL,
		Discover: func(context.Context) (Discovery, error) { return Discovery{}, nil },
	}
	adjust(&cfg)
	m, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Stop)
	return m, ca
}
