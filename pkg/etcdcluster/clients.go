package etcdcluster

import (
	"context"
	"crypto/tls"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// etcdClients are a member's etcd clients, one long-lived client per purpose rather than one per call:
//
//   - local reaches this member over loopback: the maintenance loop (health checks, removals), the
//     quorum observer's reach check, the key's custody and the peer CA's rotation. It is made when first
//     needed and closed by Stop; its endpoint never changes. (Maintenance.Status, which asks another
//     member for its status, still dials that member for the call: clientv3 does so by design, and a
//     member that comes back is then seen at once, not after gRPC's reconnection backoff.)
//   - voters reaches the voting members while a learner promotes itself; its endpoints follow the
//     voting members as this member applies the member list (SetEndpoints), and it is closed once the
//     member is promoted.
//
// The calls of a start that must reach one given member (the member list of each member found in turn,
// adding this member through each candidate in turn) dial that member alone (dial), and close the client
// after the call: a balanced client picks any of its endpoints, and SetEndpoints takes effect
// asynchronously.
//
// TLS: every client clones the member's client TLS config, built once at start from its files
// (transport.TLSInfo.ClientConfig). The member certificate and key are read from the files again at
// every handshake (GetClientCertificate), so a renewed or re-issued certificate needs no new client; the
// trusted CAs are those of the start, as they were for the clients made per round before. A peer-CA
// rotation needs none either: a member certificate of the new CA carries the old CA's cross-signature
// (PeerCA.Chain), which the roots of the start verify, and a connection made before a renewal keeps
// working, since etcd checks a client's certificate at the handshake only. So no rotation rebuilds a
// client.
type etcdClients struct {
	// tls is the client side of the members' mutual TLS, cloned for each client.
	tls *tls.Config
	// localURL is this member's client URL over loopback.
	localURL string
	// made counts the clients made, dial's included: the maintenance loop must make none per round (a
	// test reads it).
	made atomic.Int64

	mu sync.Mutex
	// closed is true once Stop closed the clients: none is made any more.
	closed        bool
	local, voters *clientv3.Client
}

// errClientsClosed means the member was stopped: its clients are closed.
var errClientsClosed = errors.New("the etcd member is stopped: its clients are closed")

// localClient returns the client of this member over loopback, making it the first time.
func (c *etcdClients) localClient() (*clientv3.Client, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, errClientsClosed
	}
	if c.local == nil {
		cl, err := c.newClient(context.Background(), []string{c.localURL})
		if err != nil {
			return nil, err
		}
		c.local = cl
	}
	return c.local, nil
}

// votersClient returns the client of the voting members at endpoints, making it the first time and
// updating its endpoints when the voting members changed.
func (c *etcdClients) votersClient(endpoints []string) (*clientv3.Client, error) {
	if len(endpoints) == 0 {
		return nil, errors.New("no voting member has a client URL")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, errClientsClosed
	}
	if c.voters == nil {
		cl, err := c.newClient(context.Background(), endpoints)
		if err != nil {
			return nil, err
		}
		c.voters = cl
	} else if !slices.Equal(c.voters.Endpoints(), endpoints) {
		c.voters.SetEndpoints(endpoints...)
	}
	return c.voters, nil
}

// closeVoters closes the voters' client: the member is promoted, or gave up.
func (c *etcdClients) closeVoters() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.voters != nil {
		_ = c.voters.Close()
		c.voters = nil
	}
}

// dial makes a client of its own for a call that must reach the member at endpoint, ended with ctx; the
// caller closes it after the call.
func (c *etcdClients) dial(ctx context.Context, endpoint string) (*clientv3.Client, error) {
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return nil, errClientsClosed
	}
	return c.newClient(ctx, []string{endpoint})
}

// close closes every client; none is made afterwards. It is safe to call more than once.
func (c *etcdClients) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for _, cl := range []*clientv3.Client{c.local, c.voters} {
		if cl != nil {
			_ = cl.Close()
		}
	}
	c.local, c.voters = nil, nil
}

// newClient makes a client of endpoints. It does not wait for a connection: a call made through it
// waits, within its own deadline, for one.
func (c *etcdClients) newClient(ctx context.Context, endpoints []string) (*clientv3.Client, error) {
	if len(endpoints) == 0 || endpoints[0] == "" {
		return nil, errors.New("no endpoints")
	}
	c.made.Add(1)
	return clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		TLS:         c.tls.Clone(),
		DialTimeout: 3 * time.Second,
		Context:     ctx,
		Logger:      zap.NewNop(),
	})
}
