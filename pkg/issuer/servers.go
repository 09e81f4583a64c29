package issuer

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/util/wait"
)

// Every replica records which CA signed the certificate it serves with, under a key bound to a lease it
// keeps alive: <prefix>/servers/<identity>. The leader reads them before it drops a distrusted CA, so
// certapi never removes from its own APIService's bundle the CA its replicas still serve with.

const serversTTL = 30 // seconds: a replica that died stops holding a distrust back after this long

type serverLease struct {
	mu sync.Mutex
	id clientv3.LeaseID
}

func (i *Issuer) serversPrefix() string { return i.cfg.Prefix + "/servers/" }

// PublishServing records that this replica serves with a certificate signed by the CA with serial. The
// record lives as long as ctx and the process do.
func (i *Issuer) PublishServing(ctx context.Context, serial string) error {
	i.servers.mu.Lock()
	defer i.servers.mu.Unlock()
	if i.servers.id == 0 {
		lease, err := i.cfg.Client.Grant(ctx, serversTTL)
		if err != nil {
			return fmt.Errorf("granting the serving record's lease: %w", err)
		}
		ch, err := i.cfg.Client.KeepAlive(ctx, lease.ID)
		if err != nil {
			return fmt.Errorf("keeping the serving record's lease alive: %w", err)
		}
		id := lease.ID
		go func() {
			for range ch {
			}
			// The lease is gone (ctx ended, or etcd lost it): take a new one next time.
			i.servers.mu.Lock()
			if i.servers.id == id {
				i.servers.id = 0
			}
			i.servers.mu.Unlock()
		}()
		i.servers.id = id
	}
	if _, err := i.cfg.Client.Put(ctx, i.serversPrefix()+i.cfg.Identity, serial, clientv3.WithLease(i.servers.id)); err != nil {
		return fmt.Errorf("recording the serving CA: %w", err)
	}
	return nil
}

// ServingNotFrom returns how many live replicas serve with a certificate not signed by the CA with
// serial.
func (i *Issuer) ServingNotFrom(ctx context.Context, serial string) (int, error) {
	resp, err := i.cfg.Client.Get(ctx, i.serversPrefix(), clientv3.WithPrefix())
	if err != nil {
		return 0, fmt.Errorf("reading the replicas' serving records: %w", err)
	}
	n := 0
	for _, kv := range resp.Kvs {
		if string(kv.Value) != serial {
			n++
		}
	}
	return n, nil
}

// WatchServing calls onChange whenever a replica's serving record changes, appears or expires, until
// ctx ends: the leader's pending distrust waits for those records, and learns of them by this watch
// instead of by reading them again and again. A watch that etcd ends (a compaction, a lost member) is
// opened again after a short backoff; onChange is then called once, since changes may have been missed.
func (i *Issuer) WatchServing(ctx context.Context, onChange func()) error {
	initial := wait.Backoff{Duration: 250 * time.Millisecond, Factor: 2, Cap: 5 * time.Second, Steps: math.MaxInt32}
	backoff := initial
	for first := true; ; first = false {
		if !first {
			onChange()
		}
		wch := i.cfg.Client.Watch(clientv3.WithRequireLeader(ctx), i.serversPrefix(), clientv3.WithPrefix())
		for resp := range wch {
			if resp.Err() != nil {
				break
			}
			if len(resp.Events) > 0 {
				onChange()
				backoff = initial // a working watch resets the backoff
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff.Step()):
		}
	}
}
