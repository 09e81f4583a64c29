package snapshot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

// barrierKey is the key of the read that makes a member catch up before its snapshot; any key does, and
// this one is in every etcd that a Kubernetes-style API server has compacted.
const barrierKey = "compact_rev_key"

// barrierTimeout bounds the read on one member, so that a member that does not answer passes the snapshot
// to the next endpoint rather than holding it.
const barrierTimeout = 10 * time.Second

// memberSnapshot opens a snapshot stream from one member: the first of client's endpoints that answers a
// linearizable read. etcd sends a member's own database, which can trail what the cluster has committed (a
// follower with a slow disk, a member just promoted); a linearizable read on that member returns only once
// it has applied everything committed before the read, so the snapshot that follows on the same connection
// holds every write acknowledged before it was asked for. A learner refuses the read and is passed over.
// Closing the stream closes the connection.
func memberSnapshot(ctx context.Context, client *clientv3.Client) (io.ReadCloser, error) {
	var errs []error
	for _, ep := range client.Endpoints() {
		rc, err := snapshotOf(ctx, client, ep)
		if err == nil {
			return rc, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", ep, err))
		if ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("no etcd member could give a current snapshot: %w", errors.Join(errs...))
}

// snapshotOf is memberSnapshot for the member at ep.
func snapshotOf(ctx context.Context, client *clientv3.Client, ep string) (io.ReadCloser, error) {
	conn, err := client.Dial(ep)
	if err != nil {
		return nil, fmt.Errorf("connecting: %w", err)
	}
	// Without the client's call options the read fails at once on a member that cannot be reached, instead of
	// waiting for it to come up.
	kv := clientv3.NewKVFromKVClient(pb.NewKVClient(conn), nil)
	readCtx, cancel := context.WithTimeout(ctx, barrierTimeout)
	_, err = kv.Get(readCtx, barrierKey, clientv3.WithCountOnly())
	cancel()
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("a linearizable read, so that the snapshot holds every acknowledged write, failed "+
			"(a learner still catching up refuses it): %w", err)
	}
	rc, err := clientv3.NewMaintenanceFromMaintenanceClient(pb.NewMaintenanceClient(conn), client).Snapshot(ctx)
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("requesting a snapshot: %w", err)
	}
	return &connStream{ReadCloser: rc, conn: conn}, nil
}

// connStream is a snapshot stream that owns its connection.
type connStream struct {
	io.ReadCloser
	conn *grpc.ClientConn
}

func (s *connStream) Close() error {
	return errors.Join(s.ReadCloser.Close(), s.conn.Close())
}
