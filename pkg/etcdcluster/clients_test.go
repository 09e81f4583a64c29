package etcdcluster

import (
	"crypto/tls"
	"errors"
	"slices"
	"testing"
)

// TestVotersClientFollowsTheVoters: the promotion's client is made once; when the voting members change
// it gets their endpoints, not a new client; closed, the next one is new; after close none is made.
// (clientv3.New does not connect, so no member needs to run.)
func TestVotersClientFollowsTheVoters(t *testing.T) {
	c := &etcdClients{tls: &tls.Config{MinVersion: tls.VersionTLS12}, localURL: "https://127.0.0.1:1"}
	t.Cleanup(c.close)
	one, three := []string{"https://127.0.0.1:2"}, []string{"https://127.0.0.1:2", "https://127.0.0.1:3", "https://127.0.0.1:4"}

	first, err := c.votersClient(one)
	if err != nil {
		t.Fatal(err)
	}
	again, err := c.votersClient(three)
	if err != nil {
		t.Fatal(err)
	}
	if again != first || c.made.Load() != 1 {
		t.Fatalf("a change of voters made a new client (%d made); want the same one", c.made.Load())
	}
	if got := first.Endpoints(); !slices.Equal(got, three) {
		t.Fatalf("endpoints %q after the voters changed; want %q", got, three)
	}
	if _, err := c.votersClient(nil); err == nil {
		t.Fatal("a client of no voting member: no error")
	}

	c.closeVoters()
	if first.Ctx().Err() == nil {
		t.Fatal("closeVoters left the client open")
	}
	next, err := c.votersClient(one)
	if err != nil {
		t.Fatal(err)
	}
	if next == first || c.made.Load() != 2 {
		t.Fatalf("after closeVoters: the same client, or %d made; want a new one, 2 made", c.made.Load())
	}

	local, err := c.localClient()
	if err != nil {
		t.Fatal(err)
	}
	if l2, _ := c.localClient(); l2 != local {
		t.Fatal("localClient made a second client")
	}
	c.close()
	c.close()
	if next.Ctx().Err() == nil || local.Ctx().Err() == nil {
		t.Fatal("close left a client open")
	}
	for name, get := range map[string]func() error{
		"local":  func() error { _, err := c.localClient(); return err },
		"voters": func() error { _, err := c.votersClient(one); return err },
	} {
		if err := get(); !errors.Is(err, errClientsClosed) {
			t.Errorf("%s client after close: %v; want errClientsClosed", name, err)
		}
	}
}
