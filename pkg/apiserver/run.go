package apiserver

import (
	"context"
	"sync"

	"k8s.io/klog/v2"

	"github.com/certapi/certapi/pkg/metrics"
)

// Run is certapi's run function. It completes the options, builds the clients of kube-apiserver once,
// starts certapi's etcd (the embedded one when no --etcd-servers is given), builds the server as
// sample-apiserver does (Config, Complete, New) and serves until ctx ends, or until the embedded etcd
// member stops; then the server shuts down and etcd stops after it. A member that stopped is returned as
// the error, once everything has stopped: certapi cannot serve without it, and the caller exits non-zero
// so that kubelet restarts the pod and the member rejoins.
func Run(ctx context.Context, o *Options) error {
	if err := o.Complete(); err != nil {
		return err
	}
	// The embedded member reports its metrics from its start on.
	metrics.Register()
	kube, err := NewKubeClients(o.RecommendedOptions.CoreAPI.CoreAPIKubeconfigPath)
	if err != nil {
		return err
	}
	etcd, err := startEtcd(ctx, o.EtcdConfig(), kube)
	if err != nil {
		return err
	}
	defer etcd.Stop()
	config, err := o.Config(etcd, kube)
	if err != nil {
		return err
	}
	server, err := config.Complete().New()
	if err != nil {
		return err
	}
	return serveUntilEtcdStops(ctx, etcd.Stopped(), server.Run)
}

// serveUntilEtcdStops runs serve until ctx ends or stopped delivers the embedded etcd member's error.
// Then serve's context ends, and once serve has returned (the server shut down as on SIGTERM), the
// member's error is returned, or serve's when the member did not stop.
func serveUntilEtcdStops(ctx context.Context, stopped <-chan error, serve func(context.Context) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var memberErr error
	var wg sync.WaitGroup
	wg.Go(func() {
		select {
		case err := <-stopped:
			klog.FromContext(ctx).Error(err, "The embedded etcd member stopped; stopping the server so that the process exits, the pod restarts and the member rejoins")
			memberErr = err
			cancel()
		case <-ctx.Done():
		}
	})
	err := serve(ctx)
	cancel()
	wg.Wait()
	if memberErr != nil {
		return memberErr
	}
	return err
}
