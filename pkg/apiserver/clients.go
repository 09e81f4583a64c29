package apiserver

import (
	"fmt"

	restclient "k8s.io/client-go/rest"

	"github.com/certapi/certapi/pkg/controller"
	"github.com/certapi/certapi/pkg/generated/clientset/versioned"
)

// newClients makes the clients the leader's loops share, once per process: certapi's own through the
// loopback, and kube-apiserver's from one config limited by --kube-api-qps and --kube-api-burst.
func newClients(loopback, kube *restclient.Config, o LeaderOptions) (controller.Clients, error) {
	cfg := restclient.CopyConfig(kube)
	cfg.QPS, cfg.Burst = o.KubeAPIQPS, o.KubeAPIBurst
	// No gzip: a streamed list (the informers' WatchList) is compressed anew at every flush, so each
	// watched Secret cost kube-apiserver a gzip writer's set-up, its compression and certapi the
	// decompression, for bytes that cross the cluster network (or loopback) once.
	cfg.DisableCompression = true
	if cfg.UserAgent == "" {
		cfg.UserAgent = restclient.DefaultKubernetesUserAgent() + " certapi"
	}
	c, err := controller.NewKubeClients(cfg)
	if err != nil {
		return c, err
	}
	loopbackConfig := restclient.CopyConfig(loopback)
	loopbackConfig.QPS, loopbackConfig.Burst = 2000, 4000 // this process talking to itself
	loopbackConfig.DisableCompression = true              // compressing for itself is work for nothing
	if c.Certapi, err = versioned.NewForConfig(loopbackConfig); err != nil {
		return c, fmt.Errorf("creating the loopback client: %w", err)
	}
	return c, nil
}
