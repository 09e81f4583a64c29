package apiserver

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"k8s.io/klog/v2"

	"github.com/certapi/certapi/pkg/etcdcluster"
	"github.com/certapi/certapi/pkg/snapshot"
)

// EmbeddedEtcd is a single-member etcd that certapi runs in its own process when no --etcd-servers is
// given. It listens only on Unix sockets inside the data directory, so no other host, and no local user
// without access to that directory, can reach the CA keys stored in it.
type EmbeddedEtcd struct {
	etcd     *embed.Etcd
	endpoint string
}

// StartEmbeddedEtcd starts etcd with its data in dataDir/etcd and waits until it serves, or ctx ends.
func StartEmbeddedEtcd(ctx context.Context, dataDir string) (*EmbeddedEtcd, error) {
	dir, err := filepath.Abs(dataDir)
	if err != nil {
		return nil, fmt.Errorf("resolving --data-dir %q: %w", dataDir, err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating --data-dir %q: %w", dir, err)
	}
	// A data dir made by someone else may be wider; the CA keys live here.
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("restricting --data-dir %q to its owner: %w", dir, err)
	}
	clientSock := filepath.Join(dir, snapshot.ClientSocketName)
	peerSock := filepath.Join(dir, snapshot.PeerSocketName)
	if len(peerSock) > etcdcluster.MaxSocketPath {
		return nil, fmt.Errorf("--data-dir %q is too long: the embedded etcd's sockets live in it and a socket path may have at most %d characters; choose a shorter path", dir, etcdcluster.MaxSocketPath)
	}
	// Sockets left by a process that was killed would make the listen fail.
	for _, s := range []string{clientSock, peerSock} {
		if err := os.Remove(s); err != nil && !os.IsNotExist(err) {
			return nil, fmt.Errorf("removing stale socket %q: %w", s, err)
		}
	}

	clientURL := url.URL{Scheme: "unix", Path: clientSock}
	peerURL := url.URL{Scheme: "unix", Path: peerSock}
	cfg := etcdcluster.SingleMemberConfig(snapshot.DefaultMemberName, filepath.Join(dir, snapshot.EtcdDirName), clientURL, peerURL)
	// Keep the store compact: certapi's data is small and changes mostly by status writes.
	cfg.AutoCompactionMode = "periodic"
	cfg.AutoCompactionRetention = "1h"

	klog.FromContext(ctx).Info("Starting embedded etcd: no --etcd-servers given", "dataDir", cfg.Dir, "endpoint", clientURL.String())
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("starting embedded etcd in %q: %w", cfg.Dir, err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("embedded etcd failed while starting: %w", err)
	case <-time.After(60 * time.Second):
		e.Close()
		return nil, fmt.Errorf("embedded etcd in %q did not become ready within 60s", cfg.Dir)
	case <-ctx.Done():
		e.Close()
		return nil, ctx.Err()
	}
	klog.FromContext(ctx).Info("Embedded etcd is ready", "endpoint", clientURL.String())
	return &EmbeddedEtcd{etcd: e, endpoint: clientURL.String()}, nil
}

// Endpoint is the client URL to give the storage layer, as --etcd-servers would.
func (e *EmbeddedEtcd) Endpoint() string { return e.endpoint }

// Stop closes etcd after the API server has stopped using it.
func (e *EmbeddedEtcd) Stop() {
	e.etcd.Close()
}
