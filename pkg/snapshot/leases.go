package snapshot

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/certapi/certapi/pkg/etcdcluster"
)

// revokeLeases starts etcd on a restored data directory, on Unix sockets of its own that nothing else
// uses, revokes every lease in it, and stops it. The leases of a snapshot belong to processes of the
// cluster it was taken from, which will never renew them: the leader's election key, handoffs. Left in place,
// etcd would renew them for a full TTL on start, and the restored certapi would wait that long (about 15 s)
// for the old leader's key to expire before it leads, signs and serves. Revoking them deletes their keys.
// It returns the number of leases revoked.
func revokeLeases(ctx context.Context, etcdDir, memberName string) (int, error) {
	// Beside the restored data when the socket paths fit (a container's root file system may be read-only),
	// else in the temporary directory.
	parent := filepath.Dir(etcdDir)
	if len(filepath.Join(parent, ".sock-0123456789", "c.sock")) > etcdcluster.MaxSocketPath {
		parent = ""
	}
	sockDir, err := os.MkdirTemp(parent, ".sock-")
	if err != nil {
		return 0, fmt.Errorf("creating a directory for a temporary etcd's sockets: %w", err)
	}
	defer os.RemoveAll(sockDir)
	client := url.URL{Scheme: "unix", Path: filepath.Join(sockDir, "c.sock")}
	peer := url.URL{Scheme: "unix", Path: filepath.Join(sockDir, "p.sock")}
	cfg := etcdcluster.SingleMemberConfig(memberName, etcdDir, client, peer)
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return 0, fmt.Errorf("starting etcd on the restored data to revoke its leases: %w", err)
	}
	defer closeEtcd(e, closeTimeout)
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		return 0, fmt.Errorf("etcd on the restored data failed while starting: %w", err)
	case <-time.After(time.Minute):
		return 0, errors.New("etcd on the restored data did not become ready within 1m")
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{client.String()}, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return 0, fmt.Errorf("connecting to etcd on the restored data: %w", err)
	}
	defer c.Close()
	leases, err := c.Leases(ctx)
	if err != nil {
		return 0, fmt.Errorf("listing the restored leases: %w", err)
	}
	for _, l := range leases.Leases {
		if _, err := c.Revoke(ctx, l.ID); err != nil {
			return 0, fmt.Errorf("revoking restored lease %x: %w", l.ID, err)
		}
	}
	return len(leases.Leases), nil
}

// closeTimeout bounds how long revokeLeases waits for the temporary etcd's listeners to close.
const closeTimeout = 30 * time.Second

// closeEtcd stops the temporary etcd's server (raft, the WAL and the database, synced and closed) and then
// closes its listeners, waiting at most within for them. Closing can hang in the peer listener's shutdown
// (embed's http.Server.Shutdown waiting for a cmux listener's Serve that does not return; seen in every
// restore Pod with a read-only root file system, the restore then waiting forever in the middle of a
// recovery): the data is safe once the server has stopped, so the restore goes on and the goroutine ends
// with the process.
func closeEtcd(e *embed.Etcd, within time.Duration) {
	e.Server.Stop()
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.Close()
	}()
	select {
	case <-done:
	case <-time.After(within):
	}
}
