package etcdcluster

import (
	"context"
	"errors"
	"fmt"
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
	ports, err := framework.FreePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := NewPeerCA(time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	peerURL, clientURL := fmt.Sprintf("https://127.0.0.1:%d", ports[0]), fmt.Sprintf("https://127.0.0.1:%d", ports[1])
	m, err := Start(ctx, Config{
		Name: "certapi-0", Dir: t.TempDir(), Designated: true, CA: ca,
		PeerURL: peerURL, ClientURL: clientURL, ListenPeerURL: peerURL, ListenClientURL: clientURL,
		// The key's custody runs through the same client: it writes the record and the marker once.
		PeerCARecordKey: "/certapi.dev/etcd-peer-ca",
		Discover:        func(context.Context) (Discovery, error) { return Discovery{}, nil },
		// Health checks run on the leader only when members can be removed.
		DeadMemberTimeout: time.Minute,
		CheckInterval:     10 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Stop)
	before := m.clients.made.Load()

	runCtx, stopRun := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- m.Run(runCtx) }()
	const wantRounds = 20
	rounds, last := 0, time.Time{}
	err = wait.PollUntilContextTimeout(ctx, 2*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
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
