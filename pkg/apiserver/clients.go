package apiserver

import (
	"fmt"

	"k8s.io/client-go/kubernetes"
	restclient "k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/component-base/tracing"
	aggregatorclient "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"

	"github.com/certapi/certapi/pkg/controller"
	"github.com/certapi/certapi/pkg/generated/clientset/versioned"
)

// KubeClients are certapi's clients of kube-apiserver, built once per process here and handed to
// everything that calls it: the embedded etcd member (its peer CA Secret, the StatefulSet, certapi's
// APIService), the quorum readiness check (the Service's EndpointSlices) and, through leaderClients, the
// leader's loops. (The generic server's delegated authentication, authorization and admission build
// their own, as k8s.io/apiserver does.)
type KubeClients struct {
	// Config is --kubeconfig's, or the in-cluster config; what it reaches, these clients reach.
	Config *restclient.Config
	// Kube and Aggregator are plain clientsets of Config, at client-go's default rate limits: the few
	// calls before the server serves, and the watches of the member and the readiness check.
	Kube       kubernetes.Interface
	Aggregator aggregatorclient.Interface
}

// NewKubeClients builds the clients from the kubeconfig file at path (--kubeconfig), or from the pod's
// in-cluster config when path is empty, as k8s.io/apiserver's core API options do.
func NewKubeClients(path string) (*KubeClients, error) {
	var cfg *restclient.Config
	var err error
	if path != "" {
		loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(&clientcmd.ClientConfigLoadingRules{ExplicitPath: path}, &clientcmd.ConfigOverrides{})
		if cfg, err = loader.ClientConfig(); err != nil {
			return nil, fmt.Errorf("loading --kubeconfig %q: %w", path, err)
		}
	} else if cfg, err = restclient.InClusterConfig(); err != nil {
		return nil, fmt.Errorf("no kube-apiserver client: give --kubeconfig, or run in a cluster: %w", err)
	}
	c := &KubeClients{Config: cfg}
	if c.Kube, err = kubernetes.NewForConfig(cfg); err != nil {
		return nil, fmt.Errorf("creating the kube-apiserver client: %w", err)
	}
	if c.Aggregator, err = aggregatorclient.NewForConfig(cfg); err != nil {
		return nil, fmt.Errorf("creating the aggregator client: %w", err)
	}
	return c, nil
}

// leaderClients makes the clients the leader's loops share, once per process: certapi's own through the
// loopback, and kube-apiserver's from kube's config limited by --kube-api-qps and --kube-api-burst and
// traced as the generic server's clients are (tp).
func leaderClients(loopback *restclient.Config, kube *KubeClients, tp tracing.TracerProvider, o LeaderOptions) (controller.Clients, error) {
	cfg := restclient.CopyConfig(kube.Config)
	cfg.Wrap(tracing.WrapperFor(tp))
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
