package framework

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// StartAPIServer starts kube-apiserver with the flags and port of Start (stopping it gracefully
// first if it runs) and waits for its /readyz. With StopAPIServer it restarts kube-apiserver for
// fault tests; the aggregator finds certapi's APIService again by itself.
func (cp *ControlPlane) StartAPIServer(ctx context.Context) error {
	if err := cp.StopAPIServer(); err != nil {
		return err
	}
	pki := cp.PKI
	args := []string{
		"--etcd-servers=" + cp.etcdServers(),
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(cp.ports.APIServer),
		"--advertise-address=127.0.0.1",
		// The lease and master-count reconcilers refuse a loopback advertise address; with no
		// reconciler the default/kubernetes Service simply has no endpoints, which nothing here needs.
		"--endpoint-reconciler-type=none",
		"--cert-dir=" + filepath.Join(cp.Dir, "kube-apiserver"),
		"--tls-cert-file=" + pki.APIServerCert,
		"--tls-private-key-file=" + pki.APIServerKey,
		"--client-ca-file=" + pki.ClientCACert,
		// As a real cluster runs it: the Node authorizer and NodeRestriction are what stand between a
		// kubelet (system:node:<name>) and PodCertificateRequests for pods not on its node.
		// certificates.k8s.io/v1 PodCertificateRequests and ClusterTrustBundles are GA and served by
		// default in 1.37: no feature gate or runtime-config is needed.
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--service-account-key-file=" + pki.ServiceAccountPub,
		"--service-account-signing-key-file=" + pki.ServiceAccountKey,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-cluster-ip-range=" + ServiceCIDR,
		"--requestheader-client-ca-file=" + pki.FrontProxyCACert,
		"--requestheader-allowed-names=front-proxy-client",
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + pki.FrontProxyClientCert,
		"--proxy-client-key-file=" + pki.FrontProxyClientKey,
		// With a node, as OpenShift runs kube-apiserver: the aggregator sends each call to a Ready endpoint
		// of certapi's Service, dialled by pod IP. Through the ClusterIP (the flag's default), its pooled
		// HTTP/1.1 connections stay pinned to a replica that is shutting down, and one that replica closes
		// as idle races a call sent on it: a rare 503 of the aggregator's own that no client retries
		// (docs/high-availability.md, "Zero downtime"). Without a node there are no pods to route to.
		"--enable-aggregator-routing=" + strconv.FormatBool(cp.opts.Node),
		// For kubectl logs, exec and port-forward on the node (Options.Node), whose kubelet trusts the
		// client CA.
		"--kubelet-client-certificate=" + pki.KubeletClientCert,
		"--kubelet-client-key=" + pki.KubeletClientKey,
		// As kubeadm sets it: the node's name (certapi-node) resolves nowhere.
		"--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname",
		"--v=2",
	}
	p, err := cp.launch(ProcessKubeAPIServer, cp.apiserverBin, args, &cp.apiserver)
	if err != nil {
		return err
	}

	cfg := rest.CopyConfig(cp.AdminConfig)
	cfg.Timeout = healthRequestTimeout
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("creating admin client: %w", err)
	}
	return PollUntil(ctx, pollInterval, apiServerReadyTimeout, "kube-apiserver /readyz at "+cp.APIServerURL, []*Process{p}, func(ctx context.Context) (bool, string) {
		var code int
		body, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").Param("verbose", "true").Do(ctx).StatusCode(&code).Raw()
		if err != nil {
			if len(body) > 0 {
				return false, fmt.Sprintf("%v: %s", err, failingChecks(string(body)))
			}
			return false, err.Error()
		}
		return code == http.StatusOK, fmt.Sprintf("HTTP %d", code)
	})
}

// StopAPIServer stops kube-apiserver gracefully (SIGTERM; SIGKILL after a deadline) and waits for
// it to exit; a no-op when it is not running. With certapi's watches open, kube-apiserver 1.37
// often needs the SIGKILL: its graceful shutdown outlasts the 20 s deadline.
func (cp *ControlPlane) StopAPIServer() error {
	return cp.signalAPIServer(syscall.SIGTERM)
}

// KillAPIServer kills kube-apiserver with SIGKILL, as a crash would, and waits for it to exit; a
// no-op when it is not running. StartAPIServer starts it again.
func (cp *ControlPlane) KillAPIServer() error {
	return cp.signalAPIServer(syscall.SIGKILL)
}

// apiServerRunning reports whether kube-apiserver's process runs.
func (cp *ControlPlane) apiServerRunning() bool {
	cp.mu.Lock()
	p := cp.apiserver
	cp.mu.Unlock()
	if p == nil {
		return false
	}
	done, _ := p.Exited()
	return !done
}

func (cp *ControlPlane) signalAPIServer(sig syscall.Signal) error {
	cp.mu.Lock()
	p := cp.apiserver
	cp.mu.Unlock()
	if p == nil {
		return nil
	}
	if err := p.stop(sig, apiServerStopGrace); err != nil {
		return fmt.Errorf("stopping %s: %w", ProcessKubeAPIServer, err)
	}
	return nil
}

// failingChecks keeps the failing lines of a verbose /readyz answer.
func failingChecks(body string) string {
	var bad []string
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, "[-]") {
			bad = append(bad, l)
		}
	}
	if len(bad) == 0 {
		return body
	}
	return strings.Join(bad, "; ")
}
