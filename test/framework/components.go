package framework

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
)

// launch starts one of the node's processes, logging to <cp.Dir>/logs/<logName>.log; a worker's in its
// network namespace and in its cgroup (whose freezer ClusterNode.Freeze uses), which what it starts (the
// containerd shims, and so the containers) inherits.
func (n *ClusterNode) launch(_ context.Context, name, bin string, args []string) (*Process, error) {
	logName := n.logName(name)
	bin, args = n.network.inNetns(bin, args)
	p, err := StartProcess(logName, n.cp.logPath(logName), bin, args, nil)
	if err != nil {
		return nil, err
	}
	if n.worker() {
		if err := n.joinCgroup(p.Pid()); err != nil {
			go p.stop(syscall.SIGKILL, 0) //nolint:errcheck
			return nil, err
		}
	}
	n.cp.mu.Lock()
	n.cp.logs[logName] = p.logPath
	n.cp.mu.Unlock()
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.stopped {
		go p.stop(syscall.SIGKILL, 0) //nolint:errcheck
		return nil, fmt.Errorf("starting %s: the node is stopped", name)
	}
	if name == ProcessContainerd {
		n.containerd = p
	} else {
		n.procs[name] = p
	}
	return p, nil
}

// startAPIServerProxy listens on the node's IP in front of kube-apiserver (which listens on loopback only)
// and makes that address the one endpoint of the Service default/kubernetes, so that pods reach
// kube-apiserver at 10.0.0.1:443 with their ServiceAccount tokens, as in a cluster.
func (n *ClusterNode) startAPIServerProxy(ctx context.Context) error {
	logf, err := os.OpenFile(n.cp.logPath("apiserver-proxy"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	p, err := newRRProxy(net.JoinHostPort(n.IP.String(), "0"), []string{net.JoinHostPort("127.0.0.1", strconv.Itoa(n.cp.ports.APIServer))}, []string{ProcessKubeAPIServer}, logf)
	if err != nil {
		logf.Close()
		return err
	}
	n.apiProxy = p
	n.cp.mu.Lock()
	n.cp.logs["apiserver-proxy"] = logf.Name()
	n.cp.mu.Unlock()
	cs, err := kubernetes.NewForConfig(n.cp.AdminConfig)
	if err != nil {
		return err
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name:      "kubernetes",
			Namespace: metav1.NamespaceDefault,
			Labels: map[string]string{
				discoveryv1.LabelServiceName: "kubernetes",
				discoveryv1.LabelManagedBy:   "certapi-test-framework",
			},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{n.IP.String()}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To(int32(p.Port())), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	_, err = cs.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).Create(ctx, slice, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		var cur *discoveryv1.EndpointSlice
		if cur, err = cs.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).Get(ctx, slice.Name, metav1.GetOptions{}); err == nil {
			slice.ResourceVersion = cur.ResourceVersion
			_, err = cs.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).Update(ctx, slice, metav1.UpdateOptions{})
		}
	}
	if err != nil {
		return fmt.Errorf("pointing the Service default/kubernetes at %s: %w", n.APIServerProxyAddress(), err)
	}
	return nil
}

// writeUserKubeconfig writes a kubeconfig for user (and groups) with a fresh client certificate of the
// framework's client CA.
func (cp *ControlPlane) writeUserKubeconfig(path, user string, groups ...string) error {
	cfg, err := cp.UserConfig(user, groups...)
	if err != nil {
		return err
	}
	if err := WriteKubeconfig(path, cfg); err != nil {
		return fmt.Errorf("writing the kubeconfig of %s: %w", user, err)
	}
	return nil
}

// WriteKubeconfig writes a kubeconfig of cfg's server, CA and client certificate to path, for a process
// started with --kubeconfig.
func WriteKubeconfig(path string, cfg *rest.Config) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["local"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData, TLSServerName: cfg.ServerName}
	kc.AuthInfos["user"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData}
	kc.Contexts["user"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: "user"}
	kc.CurrentContext = "user"
	return clientcmd.WriteToFile(*kc, path)
}

func (n *ClusterNode) kubeconfig(component, user string, groups ...string) (string, error) {
	p := filepath.Join(n.Dir, "kubeconfigs", component+".kubeconfig")
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return "", err
	}
	if !n.worker() {
		return p, n.cp.writeUserKubeconfig(p, user, groups...)
	}
	cfg, err := n.cp.UserConfig(user, groups...)
	if err != nil {
		return "", err
	}
	// A worker's loopback is its namespace's: it reaches kube-apiserver through the first node's proxy
	// (where pods reach it too), by a name kube-apiserver's certificate holds.
	cfg.Host = "https://" + n.cp.ClusterNode.APIServerProxyAddress()
	cfg.ServerName = "kubernetes.default.svc"
	if err := WriteKubeconfig(p, cfg); err != nil {
		return "", fmt.Errorf("writing the kubeconfig of %s: %w", user, err)
	}
	return p, nil
}

func (n *ClusterNode) startControllerManager(ctx context.Context) error {
	bin, err := toolBinary("kube-controller-manager", EnvKubeControllerManagerBin)
	if err != nil {
		return err
	}
	kc, err := n.kubeconfig("kube-controller-manager", "system:kube-controller-manager")
	if err != nil {
		return err
	}
	pki := n.cp.PKI
	_, err = n.launch(ctx, ProcessKubeControllerManager, bin, []string{
		"--kubeconfig=" + kc,
		"--authentication-kubeconfig=" + kc,
		"--authorization-kubeconfig=" + kc,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(n.ports[0]),
		"--cert-dir=" + filepath.Join(n.Dir, "kube-controller-manager"),
		"--leader-elect=false",
		// Each controller acts as its own ServiceAccount in kube-system, as kubeadm runs it; the
		// bootstrap RBAC policy grants them what they need.
		"--use-service-account-credentials=true",
		"--service-account-private-key-file=" + pki.ServiceAccountKey,
		"--root-ca-file=" + pki.ServerCACert,
		"--service-cluster-ip-range=" + ServiceCIDR,
		"--controllers=*",
		"--v=2",
	})
	return err
}

func (n *ClusterNode) startScheduler(ctx context.Context) error {
	bin, err := toolBinary("kube-scheduler", EnvKubeSchedulerBin)
	if err != nil {
		return err
	}
	kc, err := n.kubeconfig("kube-scheduler", "system:kube-scheduler")
	if err != nil {
		return err
	}
	_, err = n.launch(ctx, ProcessKubeScheduler, bin, []string{
		"--kubeconfig=" + kc,
		"--authentication-kubeconfig=" + kc,
		"--authorization-kubeconfig=" + kc,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(n.ports[1]),
		"--leader-elect=false",
		"--v=2",
	})
	return err
}

// kubeletConfig is the node's KubeletConfiguration. cgroup v1 is allowed (failCgroupV1: false; kubelet
// 1.37 refuses it by default) with the cgroupfs driver (containerd 1.6 does not tell kubelet its driver);
// image garbage collection is off, for the images are imported, never pulled; eviction thresholds are
// low, for a test machine's disk; nothing is read from the machine's /etc/resolv.conf. A container's log is
// rotated at 256 MiB rather than 10: a test reads it whole (the checker's fencing check reads every
// signature certapi logged), and a replica without an etcd leader can log megabytes a minute (its watch
// cache's reflector retrying, upstream's).
const kubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %[1]s
port: %[2]d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %[3]d
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: %[4]q
authorization:
  mode: Webhook
cgroupDriver: cgroupfs
cgroupRoot: %[5]q
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://%[6]s
clusterDNS:
- %[7]s
clusterDomain: %[8]s
resolvConf: ""
podLogsDir: %[9]q
volumePluginDir: %[10]q
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%%
  nodefs.inodesFree: 1%%
  imagefs.available: 1%%
containerLogMaxSize: 256Mi
shutdownGracePeriod: 0s
shutdownGracePeriodCriticalPods: 0s
rotateCertificates: false
serverTLSBootstrap: false
`

func (n *ClusterNode) startKubelet(ctx context.Context) error {
	bin, err := toolBinary("kubelet", EnvKubeletBin)
	if err != nil {
		return err
	}
	kc, err := n.kubeconfig("kubelet", "system:node:"+n.Name, "system:nodes")
	if err != nil {
		return err
	}
	root := filepath.Join(n.Dir, "kubelet")
	cfg := fmt.Sprintf(kubeletConfig, n.IP, n.ports[2], n.ports[3], n.cp.PKI.ClientCACert, n.cgroup, n.containerdSocket,
		ClusterDNSIP, ClusterDomain, filepath.Join(n.Dir, "pod-logs"), filepath.Join(root, "volume-plugins"))
	cfgPath := filepath.Join(n.Dir, "kubelet-config.yaml")
	if err := writeFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return err
	}
	args := []string{
		"--config=" + cfgPath,
		"--kubeconfig=" + kc,
		"--root-dir=" + root,
		"--cert-dir=" + filepath.Join(root, "pki"),
		"--hostname-override=" + n.Name,
		"--node-ip=" + n.IP.String(),
		"--v=2",
	}
	switch {
	case n.Zone != "":
		args = append(args, "--node-labels="+corev1.LabelTopologyZone+"="+n.Zone)
	case n.cp.opts.WorkerNodes > 0:
		// The first node is the control plane's when there are workers: workloads go to the workers.
		args = append(args, "--register-with-taints="+ControlPlaneTaint+"=:NoSchedule")
	}
	_, err = n.launch(ctx, ProcessKubelet, bin, args)
	return err
}

// ControlPlaneTaint is the taint (effect NoSchedule) of the first node when there are worker nodes, as
// kubeadm taints its control-plane nodes.
const ControlPlaneTaint = "node-role.kubernetes.io/control-plane"

// kubeProxyHealthz is the address of kube-proxy's health endpoint: on loopback on the first node, on the
// node's IP on a worker, whose loopback is its namespace's.
func (n *ClusterNode) kubeProxyHealthz() string {
	host := "127.0.0.1"
	if n.worker() {
		host = n.IP.String()
	}
	return net.JoinHostPort(host, strconv.Itoa(n.ports[5]))
}

func (n *ClusterNode) startKubeProxy(ctx context.Context) error {
	bin, err := toolBinary("kube-proxy", EnvKubeProxyBin)
	if err != nil {
		return err
	}
	kc, err := n.kubeconfig("kube-proxy", "system:kube-proxy")
	if err != nil {
		return err
	}
	_, err = n.launch(ctx, ProcessKubeProxy, bin, []string{
		"--kubeconfig=" + kc,
		"--hostname-override=" + n.Name,
		"--proxy-mode=iptables",
		"--cluster-cidr=" + n.PodCIDR.String(),
		"--metrics-bind-address=127.0.0.1:" + strconv.Itoa(n.ports[4]),
		"--healthz-bind-address=" + n.kubeProxyHealthz(),
		// Leave the machine's conntrack table size alone.
		"--conntrack-max-per-core=0",
		"--v=2",
	})
	return err
}
