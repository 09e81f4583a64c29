package apiserver

import (
	"context"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/klog/v2"

	"github.com/certapi/certapi/pkg/etcdcluster"
)

// Etcd is the etcd certapi stores in, as a running server uses it: the embedded etcd this process runs
// when no --etcd-servers is given (a single member, or with --etcd-peer-service this replica's member of
// the replicas' cluster), and the issuer's own client. StartEtcd makes it before the server's Config;
// its owner calls Stop once the server has stopped. Options hold none of it.
type Etcd struct {
	// transport is how the storage layer reaches etcd: --etcd-servers and their TLS files, or the
	// embedded etcd's endpoints and files.
	transport storagebackend.TransportConfig
	client    *clientv3.Client

	embedded *EmbeddedEtcd
	member   *etcdcluster.Member
	// stopMember ends the member's maintenance loop and its watch of the peer CA; done waits for them.
	stopMember context.CancelFunc
	done       sync.WaitGroup
}

// StartEtcd starts the embedded etcd when no --etcd-servers were given (this replica's member of the
// replicas' cluster with --etcd-peer-service, else a single member) and opens the issuer's client. Call
// Stop when the server has stopped.
func (o *Options) StartEtcd(ctx context.Context) (_ *Etcd, err error) {
	e := &Etcd{transport: o.RecommendedOptions.Etcd.StorageConfig.Transport}
	defer func() {
		if err != nil {
			e.Stop()
		}
	}()
	if len(e.transport.ServerList) == 0 {
		if o.EtcdCluster.Enabled() {
			if err := e.startMember(ctx, o); err != nil {
				return nil, err
			}
		} else {
			if e.embedded, err = StartEmbeddedEtcd(ctx, o.DataDir); err != nil {
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

// startMember starts this replica's member of the replicas' etcd cluster and its maintenance loop.
func (e *Etcd) startMember(ctx context.Context, o *Options) error {
	var sealing caKeysSealing
	if o.EtcdCluster.PeerCACustody == PeerCACustodyEtcd {
		var err error
		if sealing, err = loadCAKeysSealing(ctx, o.RecommendedOptions.Etcd.EncryptionProviderConfigFilepath); err != nil {
			return err
		}
	}
	m, follow, err := o.EtcdCluster.start(ctx, o.DataDir, o.ServiceNamespace, o.RecommendedOptions.CoreAPI.CoreAPIKubeconfigPath, sealing)
	if err != nil {
		return err
	}
	e.member = m
	e.transport.ServerList = m.ClientURLs()
	e.transport.CertFile, e.transport.KeyFile, e.transport.TrustedCAFile = m.ClientTLSFiles()
	runCtx, cancel := context.WithCancel(context.Background())
	e.stopMember = cancel
	e.done.Go(func() {
		if err := m.Run(runCtx); err != nil {
			// certapi's storage is this member: without it every call fails. Exit, so that kubelet
			// restarts the pod and the member rejoins (DecideStart), rather than serve errors.
			klog.ErrorS(err, "The embedded etcd member stopped; exiting so that the pod restarts and the member rejoins")
			klog.FlushAndExit(klog.ExitFlushTimeout, 1)
		}
	})
	if follow != nil {
		// Every replica follows the peer CA's Secret: a rotation the etcd leader stored there reaches
		// this member, which re-issues its certificate from the new CA.
		e.done.Go(func() {
			if err := follow(runCtx); err != nil {
				klog.ErrorS(err, "Following the etcd peer CA Secret failed; this member learns of a peer CA rotation only when it restarts")
			}
		})
	}
	return nil
}

// Stop closes the client and stops what StartEtcd started, after the server has stopped using it.
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
