package apiserver

import (
	"context"
	"fmt"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/klog/v2"

	"github.com/certapi/certapi/pkg/etcdcluster"
)

// EtcdConfig is how certapi reaches its etcd and, when no --etcd-servers are given, how it runs the
// embedded one: values only, taken from the options (Options.EtcdConfig). startEtcd starts what it
// describes.
type EtcdConfig struct {
	// Transport is --etcd-servers and their TLS files; no servers: the embedded etcd.
	Transport storagebackend.TransportConfig
	// DataDir holds the embedded etcd's data (--data-dir).
	DataDir string
	// Cluster makes the embedded etcd this replica's member of the replicas' cluster when it is Enabled.
	Cluster EtcdClusterOptions
	// Namespace is certapi's own namespace (--service-namespace), where the peer CA Secret lives.
	Namespace string
	// EncryptionProviderConfig is --encryption-provider-config, which seals the peer CA's record too.
	EncryptionProviderConfig string
}

// EtcdConfig returns what starting certapi's etcd needs of the options.
func (o *Options) EtcdConfig() EtcdConfig {
	return EtcdConfig{
		Transport:                o.RecommendedOptions.Etcd.StorageConfig.Transport,
		DataDir:                  o.DataDir,
		Cluster:                  o.EtcdCluster,
		Namespace:                o.ServiceNamespace,
		EncryptionProviderConfig: o.RecommendedOptions.Etcd.EncryptionProviderConfigFilepath,
	}
}

// Etcd is the etcd certapi stores in, as a running server uses it: the embedded etcd this process runs
// when no --etcd-servers is given (a single member, or with --etcd-peer-service this replica's member of
// the replicas' cluster), and the issuer's own client. The run function starts it (startEtcd) before the
// server's Config and stops it once the server has stopped. Options hold none of it.
type Etcd struct {
	// transport is how the storage layer reaches etcd: --etcd-servers and their TLS files, or the
	// embedded etcd's endpoints and files.
	transport storagebackend.TransportConfig
	client    *clientv3.Client

	embedded *EmbeddedEtcd
	member   *etcdcluster.Member
	// stopped receives the member's error if it stops while the server runs (see Stopped).
	stopped chan error
	// stopMember ends the member's maintenance loop and its watch of the peer CA; done waits for them.
	stopMember context.CancelFunc
	done       sync.WaitGroup
}

// startEtcd starts the embedded etcd when no --etcd-servers were given (this replica's member of the
// replicas' cluster when c.Cluster is enabled, else a single member) and opens the issuer's client. kube
// reaches kube-apiserver for the member's peer CA Secret. Call Stop when the server has stopped.
func startEtcd(ctx context.Context, c EtcdConfig, kube *KubeClients) (_ *Etcd, err error) {
	e := &Etcd{transport: c.Transport, stopped: make(chan error, 1)}
	defer func() {
		if err != nil {
			e.Stop()
		}
	}()
	if len(e.transport.ServerList) == 0 {
		if c.Cluster.Enabled() {
			if err := e.startMember(ctx, c, kube); err != nil {
				return nil, err
			}
		} else {
			if e.embedded, err = StartEmbeddedEtcd(ctx, c.DataDir); err != nil {
				return nil, err
			}
			e.transport.ServerList = []string{e.embedded.Endpoint()}
		}
	}
	if tcpEndpoints(e.transport.ServerList) && e.transport.EgressLookup == nil {
		e.transport.EgressLookup = patientEgress // reconnect at once after an etcd outage
	}
	if e.client, err = newEtcdClient(e.transport); err != nil {
		return nil, err
	}
	return e, nil
}

// startMember starts this replica's member of the replicas' etcd cluster and its maintenance loop. The
// loop runs until Stop, not until ctx ends: the server still stores through the member while it shuts
// down after ctx ended.
func (e *Etcd) startMember(ctx context.Context, c EtcdConfig, kube *KubeClients) error {
	var sealing caKeysSealing
	if c.Cluster.PeerCACustody == PeerCACustodyEtcd {
		var err error
		if sealing, err = loadCAKeysSealing(ctx, c.EncryptionProviderConfig); err != nil {
			return err
		}
	}
	m, follow, err := startMember(ctx, c, kube, sealing)
	if err != nil {
		return err
	}
	e.member = m
	e.transport.ServerList = m.ClientURLs()
	e.transport.CertFile, e.transport.KeyFile, e.transport.TrustedCAFile = m.ClientTLSFiles()
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	e.stopMember = cancel
	e.done.Go(func() {
		if err := m.Run(runCtx); err != nil {
			// certapi's storage is this member: without it every call fails. The run function stops the
			// server and returns the error, so that the process exits, kubelet restarts the pod and the
			// member rejoins (DecideStart), rather than serve errors.
			e.stopped <- fmt.Errorf("the embedded etcd member %s stopped: %w", m.Name(), err)
		}
	})
	if follow != nil {
		// Every replica follows the peer CA's Secret: a rotation the etcd leader stored there reaches
		// this member, which re-issues its certificate from the new CA.
		e.done.Go(func() {
			if err := follow(runCtx); err != nil {
				klog.FromContext(runCtx).Error(err, "Following the etcd peer CA Secret failed; this member learns of a peer CA rotation only when it restarts")
			}
		})
	}
	return nil
}

// Stopped delivers the error of the embedded etcd member when it stops on its own (its etcd server
// stopped, or it was removed from the cluster); nothing otherwise. certapi cannot serve without it.
func (e *Etcd) Stopped() <-chan error { return e.stopped }

// Stop closes the client and stops what startEtcd started, after the server has stopped using it.
func (e *Etcd) Stop() {
	if e.client != nil {
		_ = e.client.Close()
	}
	if e.embedded != nil {
		e.embedded.Stop()
	}
	if e.stopMember != nil {
		e.stopMember()
		e.done.Wait()
	}
	if e.member != nil {
		e.member.Stop()
	}
}
