package framework

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
)

// Process names of the node's components, as used in Logs and in <Dir>/logs/<name>.log.
const (
	ProcessContainerd            = "containerd"
	ProcessKubelet               = "kubelet"
	ProcessKubeProxy             = "kube-proxy"
	ProcessKubeControllerManager = "kube-controller-manager"
	ProcessKubeScheduler         = "kube-scheduler"
)

// Environment variables that override where the framework finds the node's binaries (by default
// <repo>/_output/bin/<name>, the symlinks to kubenode that `make tools` makes).
const (
	EnvKubeletBin               = "KUBELET_BIN"
	EnvKubeProxyBin             = "KUBE_PROXY_BIN"
	EnvKubeControllerManagerBin = "KUBE_CONTROLLER_MANAGER_BIN"
	EnvKubeSchedulerBin         = "KUBE_SCHEDULER_BIN"
	// EnvImagesDir names the directory of the image archives (default <repo>/_output/images, which
	// `make images` writes).
	EnvImagesDir = "IMAGES_DIR"
)

// NodeName is the name the node's kubelet registers its Node under.
const NodeName = "certapi-node"

const (
	// nodeLockPath is the machine-wide lock that one node at a time holds: kube-proxy's iptables chains
	// (KUBE-SERVICES, ...) have fixed names, so two nodes on one machine would overwrite each other's rules.
	nodeLockPath = "/run/certapi-node.lock"
	// NodeLockTimeout bounds the wait for another test's node to end. StartT adds it to StartTimeout when
	// Options.Node is set.
	NodeLockTimeout = 30 * time.Minute
	// nodeReadyTimeout bounds each wait of the node's start-up (containerd, the Node Ready, DNS).
	nodeReadyTimeout = 3 * time.Minute
	// podsGoneTimeout bounds the wait, at Stop, for kubelet to stop the pods it runs.
	podsGoneTimeout = 60 * time.Second
	nodeStopGrace   = 15 * time.Second
)

// ClusterNode is a real node of the control plane (Options.Node): containerd and runc from the machine's
// packages, a CNI bridge with host-local IPAM, kubelet, kube-proxy in iptables mode, and the cluster's
// kube-controller-manager and kube-scheduler, all v1.37.2 like kube-apiserver, plus CoreDNS as a pod. Its
// state lives under Dir; ControlPlane.Stop stops everything and removes what it added to the machine (pods,
// containers, mounts, network namespaces, the bridge, iptables rules, cgroups).
type ClusterNode struct {
	// Name is the Node's name (NodeName).
	Name string
	// Dir holds containerd's root and state, kubelet's root, the CNI configuration and pod logs: a short
	// directory of its own under the machine's temporary directory (Unix sockets live in it), removed at Stop.
	Dir string
	// IP is the node's address: the gateway address of the pods' bridge, kubelet's --node-ip.
	IP net.IP
	// PodCIDR is the /24 its pods get addresses from.
	PodCIDR *net.IPNet
	// Bridge is the name of the pods' Linux bridge.
	Bridge string
	// Images maps each image archive imported at start (by base name, e.g. "certapi.tar") to the names it
	// was imported under.
	Images map[string][]string

	cp               *ControlPlane
	network          *nodeNetwork
	containerdSocket string
	cgroup           string
	lock             *os.File
	apiProxy         *rrProxy
	ports            []int

	mu         sync.Mutex
	procs      map[string]*Process
	containerd *Process
	leftovers  []string
	stopped    bool
}

// APIServerProxyAddress is where pods reach kube-apiserver: the Service default/kubernetes
// (10.0.0.1:443) has this one endpoint, a TCP proxy of the framework on the node's IP in front of
// kube-apiserver's loopback port.
func (n *ClusterNode) APIServerProxyAddress() string {
	return n.apiProxy.ln.Addr().String()
}

// Leftovers returns what Stop found still on the machine after cleaning up (empty when all is gone).
func (n *ClusterNode) Leftovers() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.leftovers
}

// startNode brings the node up once kube-apiserver is ready: the machine-wide node lock, a sweep of what a
// test that died left, the network, containerd with the images, then the components, and waits until the
// Node is Ready, the "default" ServiceAccount exists and cluster DNS answers.
func (cp *ControlPlane) startNode(ctx context.Context) (retErr error) {
	if os.Geteuid() != 0 {
		return errors.New("framework.Options.Node needs root (containerd, bridges, iptables, mounts)")
	}
	n := &ClusterNode{Name: NodeName, cp: cp, procs: map[string]*Process{}, Images: map[string][]string{}}
	t0 := time.Now()
	lock, err := acquireNodeLock(ctx)
	if err != nil {
		return err
	}
	n.lock = lock
	if waited := time.Since(t0); waited > time.Second {
		cp.progress("node: waited %s for another test's node to end", waited.Round(time.Millisecond))
	}
	cp.mu.Lock()
	cp.ClusterNode = n
	cp.mu.Unlock()
	defer func() {
		if retErr != nil {
			n.stop()
		}
	}()
	if left := sweepStaleNodes(ctx); len(left) > 0 {
		cp.progress("node: removed what an earlier test left: %s", strings.Join(left, "; "))
	}

	images, err := imagesDir()
	if err != nil {
		return err
	}
	pauseArchive, dnsArchive := filepath.Join(images, "pause.tar"), filepath.Join(images, "coredns.tar")
	pauseNames, err := ArchiveImageNames(pauseArchive)
	if err != nil {
		return fmt.Errorf("the pause image (run `make images`): %w", err)
	}
	dnsNames, err := ArchiveImageNames(dnsArchive)
	if err != nil {
		return fmt.Errorf("the CoreDNS image (run `make images`): %w", err)
	}

	n.Dir, err = os.MkdirTemp("", nodeDirPrefix)
	if err != nil {
		return fmt.Errorf("creating the node's directory: %w", err)
	}
	if err := os.Symlink(n.Dir, filepath.Join(cp.Dir, "node")); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	n.network, err = newNodeNetwork(n.Dir)
	if err != nil {
		return err
	}
	n.Bridge, n.PodCIDR, n.IP = n.network.bridge, n.network.podCIDR, n.network.gateway
	n.cgroup = "/" + filepath.Base(n.Dir)
	if err := n.network.setUp(ctx); err != nil {
		return fmt.Errorf("setting up the node's network: %w", err)
	}
	if err := n.startAPIServerProxy(ctx); err != nil {
		return err
	}

	t1 := time.Now()
	if err := n.startContainerd(ctx, pauseNames[0]); err != nil {
		return err
	}
	archives := append([]string{pauseArchive, dnsArchive}, cp.opts.NodeImages...)
	for _, a := range archives {
		names, err := n.ImportImage(ctx, a)
		if err != nil {
			return err
		}
		n.Images[filepath.Base(a)] = names
	}
	cp.progress("node: containerd ready, %d images imported (%s)", len(archives), since(t1))

	n.ports, err = FreePorts(6, cp.ports.all()...)
	if err != nil {
		return err
	}
	if err := n.makeCgroup(); err != nil {
		return err
	}
	for _, start := range []func(context.Context) error{n.startControllerManager, n.startScheduler, n.startKubelet, n.startKubeProxy} {
		if err := start(ctx); err != nil {
			return err
		}
	}
	t1 = time.Now()
	if err := n.waitReady(ctx); err != nil {
		return err
	}
	cp.progress("node %s Ready at %s, pods in %s on bridge %s (%s)", n.Name, n.IP, n.PodCIDR, n.Bridge, since(t1))
	t1 = time.Now()
	if err := n.startDNS(ctx, dnsNames[0]); err != nil {
		return err
	}
	cp.progress("node: cluster DNS (CoreDNS) answering at %s (%s)", ClusterDNSIP, since(t1))
	cp.progress("node up in %s", since(t0))
	return nil
}

// nodeDirPrefix starts the base name of every node's directory under the machine's temporary directory.
const nodeDirPrefix = "cnode-"

// isNodeDir reports whether path is in a node's directory.
func isNodeDir(path string) bool {
	rel, err := filepath.Rel(os.TempDir(), path)
	return err == nil && strings.HasPrefix(rel, nodeDirPrefix) && !strings.HasPrefix(rel, "..")
}

func acquireNodeLock(ctx context.Context) (*os.File, error) {
	f, err := os.OpenFile(nodeLockPath, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening the node lock %s: %w", nodeLockPath, err)
	}
	ctx, cancel := context.WithTimeout(ctx, NodeLockTimeout)
	defer cancel()
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("locking %s: %w", nodeLockPath, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("waiting for another test's node to end (lock %s): %w", nodeLockPath, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func imagesDir() (string, error) {
	if d := os.Getenv(EnvImagesDir); d != "" {
		return d, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "_output", "images"), nil
}

// ImageArchive returns the path of the image archive name (e.g. "certapi.tar") that `make images`
// writes to <repo>/_output/images (or $IMAGES_DIR), with an error saying how to make it when missing.
func ImageArchive(name string) (string, error) {
	d, err := imagesDir()
	if err != nil {
		return "", err
	}
	p := filepath.Join(d, name)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("image archive %s: %w (run `make images`)", p, err)
	}
	return p, nil
}

func hostBinary(name, debianPackage string) (string, error) {
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%s not found on PATH: install Debian's %s (.ci/run does)", name, debianPackage)
	}
	return p, nil
}

// launch starts one of the node's processes, logging to <cp.Dir>/logs/<name>.log.
func (n *ClusterNode) launch(_ context.Context, name, bin string, args []string) (*Process, error) {
	p, err := StartProcess(name, n.cp.logPath(name), bin, args, nil)
	if err != nil {
		return nil, err
	}
	n.cp.mu.Lock()
	n.cp.logs[name] = p.logPath
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
	kc := clientcmdapi.NewConfig()
	kc.Clusters["local"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["user"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData}
	kc.Contexts["user"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: "user"}
	kc.CurrentContext = "user"
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return fmt.Errorf("writing the kubeconfig of %s: %w", user, err)
	}
	return nil
}

func (n *ClusterNode) kubeconfig(component, user string, groups ...string) (string, error) {
	p := filepath.Join(n.Dir, "kubeconfigs", component+".kubeconfig")
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return "", err
	}
	return p, n.cp.writeUserKubeconfig(p, user, groups...)
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
// low, for a test machine's disk; nothing is read from the machine's /etc/resolv.conf.
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
	_, err = n.launch(ctx, ProcessKubelet, bin, []string{
		"--config=" + cfgPath,
		"--kubeconfig=" + kc,
		"--root-dir=" + root,
		"--cert-dir=" + filepath.Join(root, "pki"),
		"--hostname-override=" + n.Name,
		"--node-ip=" + n.IP.String(),
		"--v=2",
	})
	return err
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
		"--healthz-bind-address=127.0.0.1:" + strconv.Itoa(n.ports[5]),
		// Leave the machine's conntrack table size alone.
		"--conntrack-max-per-core=0",
		"--v=2",
	})
	return err
}

// makeCgroup creates kubelet's cgroupRoot in every cgroup v1 hierarchy (kubelet requires it to exist),
// with the cpuset of the root so that tasks can join it.
func (n *ClusterNode) makeCgroup() error {
	for _, h := range cgroupHierarchies() {
		d := filepath.Join(h, n.cgroup)
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("creating cgroup %s: %w", d, err)
		}
		if filepath.Base(h) == "cpuset" {
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				v, err := os.ReadFile(filepath.Join(h, f))
				if err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(d, f), v, 0o644); err != nil {
					return fmt.Errorf("writing %s: %w", filepath.Join(d, f), err)
				}
			}
		}
	}
	return nil
}

// cgroupHierarchies lists the mounted cgroup hierarchies under /sys/fs/cgroup: one per controller on
// cgroup v1 (and the named and unified ones of a hybrid layout), /sys/fs/cgroup itself on cgroup v2.
func cgroupHierarchies() []string {
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		return []string{"/sys/fs/cgroup"}
	}
	entries, err := os.ReadDir("/sys/fs/cgroup")
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		p := filepath.Join("/sys/fs/cgroup", e.Name())
		if fi, err := os.Lstat(p); err == nil && fi.IsDir() {
			if _, err := os.Stat(filepath.Join(p, "cgroup.procs")); err == nil {
				out = append(out, p)
			}
		}
	}
	if len(out) == 0 {
		out = []string{"/sys/fs/cgroup"}
	}
	return out
}

// removeCgroup removes the cgroup tree name (e.g. "/cnode-123") from every hierarchy, leaves first.
func removeCgroup(name string) error {
	var errs []error
	for _, h := range cgroupHierarchies() {
		root := filepath.Join(h, name)
		var dirs []string
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := syscall.Rmdir(dirs[i]); err != nil && !errors.Is(err, syscall.ENOENT) {
				errs = append(errs, fmt.Errorf("removing cgroup %s: %w", dirs[i], err))
			}
		}
	}
	return errors.Join(errs...)
}

// waitReady waits until the Node is Ready, the "default" ServiceAccount of namespace default exists (pods
// need it to be admitted) and kube-proxy has programmed its rules.
func (n *ClusterNode) waitReady(ctx context.Context) error {
	cs, err := kubernetes.NewForConfig(n.cp.AdminConfig)
	if err != nil {
		return err
	}
	n.mu.Lock()
	procs := []*Process{n.containerd}
	for _, p := range n.procs {
		procs = append(procs, p)
	}
	n.mu.Unlock()
	if err := PollUntil(ctx, 250*time.Millisecond, nodeReadyTimeout, "Node "+n.Name+" Ready", procs, func(ctx context.Context) (bool, string) {
		node, err := cs.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.Status == corev1.ConditionTrue, fmt.Sprintf("Ready=%s: %s", c.Status, c.Message)
			}
		}
		return false, "no Ready condition yet"
	}); err != nil {
		return err
	}
	if err := PollUntil(ctx, 250*time.Millisecond, nodeReadyTimeout, "ServiceAccount default/default", procs, func(ctx context.Context) (bool, string) {
		_, err := cs.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return true, ""
	}); err != nil {
		return err
	}
	return PollUntil(ctx, 250*time.Millisecond, nodeReadyTimeout, "kube-proxy's first sync", procs, func(ctx context.Context) (bool, string) {
		_, code, err := HTTPGet(ctx, http.DefaultClient, fmt.Sprintf("http://127.0.0.1:%d/healthz", n.ports[5]))
		if err != nil {
			return false, err.Error()
		}
		return code == 200, fmt.Sprintf("HTTP %d", code)
	})
}

// stop stops the node and removes what it added to the machine, then releases the node lock. It waits for
// kubelet to stop the pods (their containers, then CNI DEL) after deleting them; what remains then is
// killed and removed by force. What is still there at the end is in Leftovers.
func (n *ClusterNode) stop() {
	n.mu.Lock()
	if n.stopped {
		n.mu.Unlock()
		return
	}
	n.stopped = true
	procs := n.procs
	n.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	report := func(what string, err error) {
		if err != nil {
			n.cp.progress("node: %s: %v", what, err)
		}
	}
	stopProc := func(name string) {
		if p := procs[name]; p != nil {
			report("stopping "+name, p.stop(syscall.SIGTERM, nodeStopGrace))
		}
	}
	// No controller may create pods, nor the scheduler bind them, while the pods go.
	stopProc(ProcessKubeControllerManager)
	stopProc(ProcessKubeScheduler)
	if kubelet := procs[ProcessKubelet]; kubelet != nil && n.cp.apiServerRunning() {
		report("deleting the node's pods", n.deletePods(ctx, kubelet))
	}
	stopProc(ProcessKubelet)
	stopProc(ProcessKubeProxy)
	if procs[ProcessKubeProxy] != nil {
		report("kube-proxy --cleanup", kubeProxyCleanup(ctx))
	}
	// kubelet's own chains (KUBE-FIREWALL, KUBE-KUBELET-CANARY, ...), which nothing else removes. The node
	// lock is held: every KUBE-* chain on the machine is this node's.
	report("removing KUBE-* chains", removeKubeChains(ctx))
	if n.containerdSocket != "" {
		report("stopping containerd", n.stopContainerd(ctx))
	}
	if n.Dir != "" {
		report("unmounting", unmountAll(n.Dir))
		n.keepPodLogs()
	}
	if n.cgroup != "" {
		report("removing cgroups", removeCgroup(n.cgroup))
	}
	if n.network != nil {
		report("removing the network", n.network.tearDown(ctx))
	}
	if n.apiProxy != nil {
		n.apiProxy.Close()
	}
	if n.Dir != "" {
		report("removing container log links", removeContainerLogLinks(n.Dir))
		report("removing "+n.Dir, os.RemoveAll(n.Dir))
	}
	left := n.findLeftovers(ctx)
	n.mu.Lock()
	n.leftovers = left
	n.mu.Unlock()
	if len(left) > 0 {
		n.cp.progress("node: left on the machine after cleanup: %s", strings.Join(left, "; "))
	}
	if n.lock != nil {
		n.lock.Close() // releases the flock
	}
}

// deletePods deletes every pod bound to the node at once (grace period 0, as `kubectl delete --force`)
// and waits until kubelet has stopped them all: no container runs in containerd.
func (n *ClusterNode) deletePods(ctx context.Context, kubelet *Process) error {
	cs, err := kubernetes.NewForConfig(n.cp.AdminConfig)
	if err != nil {
		return err
	}
	pods, err := cs.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + n.Name})
	if err != nil {
		return err
	}
	for _, p := range pods.Items {
		err := cs.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))})
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return PollUntil(ctx, 250*time.Millisecond, podsGoneTimeout, "kubelet to stop the node's pods", []*Process{kubelet}, func(ctx context.Context) (bool, string) {
		out, err := n.ctr(ctx, "tasks", "ls")
		if err != nil {
			return false, err.Error()
		}
		running := 0
		for _, line := range strings.Split(out, "\n")[1:] {
			if f := strings.Fields(line); len(f) >= 3 && f[2] == "RUNNING" {
				running++
			}
		}
		return running == 0, fmt.Sprintf("%d containers running", running)
	})
}

// kubeProxyCleanup removes every rule and chain kube-proxy adds (`kube-proxy --cleanup`).
func kubeProxyCleanup(ctx context.Context) error {
	bin, err := toolBinary("kube-proxy", EnvKubeProxyBin)
	if err != nil {
		return err
	}
	_, err = command(ctx, bin, "--cleanup")
	return err
}

// keepPodLogs copies the pods' logs into <cp.Dir>/logs/pods before the node's directory goes, and lists
// them in the control plane's Logs (StartT prints them when a test fails).
func (n *ClusterNode) keepPodLogs() {
	src := filepath.Join(n.Dir, "pod-logs")
	_ = filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".log") {
			return nil
		}
		rel, _ := filepath.Rel(src, p)
		// <namespace>_<pod>_<uid>/<container>/<restart>.log
		parts := strings.Split(rel, string(filepath.Separator))
		if len(parts) != 3 {
			return nil
		}
		nsPod := strings.Split(parts[0], "_")
		if len(nsPod) < 2 {
			return nil
		}
		name := fmt.Sprintf("pod-%s-%s-%s-%s", nsPod[0], nsPod[1], parts[1], strings.TrimSuffix(parts[2], ".log"))
		dst := filepath.Join(n.cp.Dir, "logs", "pods", name+".log")
		data, err := os.ReadFile(p)
		if err != nil {
			return nil
		}
		if os.MkdirAll(filepath.Dir(dst), 0o755) == nil && os.WriteFile(dst, data, 0o644) == nil {
			n.cp.mu.Lock()
			n.cp.logs[name] = dst
			n.cp.mu.Unlock()
		}
		return nil
	})
}

// containerLogsDir is where kubelet links every container's log (fixed in kubelet).
const containerLogsDir = "/var/log/containers"

// removeContainerLogLinks removes kubelet's links in /var/log/containers that point into dir (or into
// any node's directory when dir is "").
func removeContainerLogLinks(dir string) error {
	entries, err := os.ReadDir(containerLogsDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		p := filepath.Join(containerLogsDir, e.Name())
		target, err := os.Readlink(p)
		if err != nil {
			continue
		}
		if (dir != "" && strings.HasPrefix(target, dir+"/")) || (dir == "" && isNodeDir(target)) {
			if err := os.Remove(p); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// findLeftovers lists what of this node is still on the machine.
func (n *ClusterNode) findLeftovers(ctx context.Context) []string {
	var left []string
	if n.Bridge != "" && linkExists(n.Bridge) {
		left = append(left, "bridge "+n.Bridge)
	}
	if n.Bridge != "" {
		if rules, err := forwardRules(ctx, n.Bridge); err == nil && len(rules) > 0 {
			left = append(left, fmt.Sprintf("%d FORWARD rules for %s", len(rules), n.Bridge))
		}
	}
	if n.Dir != "" {
		if mps, err := mountsUnder(n.Dir); err == nil && len(mps) > 0 {
			left = append(left, "mounts "+strings.Join(mps, ", "))
		}
		if _, err := os.Stat(n.Dir); err == nil {
			left = append(left, "directory "+n.Dir)
		}
	}
	if n.containerdSocket != "" {
		if pids, err := shimPIDs(n.containerdSocket); err == nil && len(pids) > 0 {
			left = append(left, fmt.Sprintf("containerd shims %v", pids))
		}
	}
	if n.cgroup != "" {
		for _, h := range cgroupHierarchies() {
			if _, err := os.Stat(filepath.Join(h, n.cgroup)); err == nil {
				left = append(left, "cgroup "+filepath.Join(h, n.cgroup))
			}
		}
	}
	left = append(left, kubeChains(ctx)...)
	return left
}

// kubeChains lists the iptables chains named KUBE-* in the filter, nat and mangle tables (kube-proxy's).
func kubeChains(ctx context.Context) []string {
	var left []string
	for _, table := range []string{"filter", "nat", "mangle"} {
		out, err := command(ctx, "iptables", "-w", "-t", table, "-S")
		if err != nil {
			continue
		}
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, "-N KUBE-") {
				left = append(left, fmt.Sprintf("iptables chain %s/%s", table, strings.TrimPrefix(line, "-N ")))
			}
		}
	}
	return left
}

// removeKubeChains deletes every rule that jumps to a KUBE-* chain from the other chains of the filter, nat
// and mangle tables, then flushes and deletes the KUBE-* chains.
func removeKubeChains(ctx context.Context) error {
	var errs []error
	for _, table := range []string{"filter", "nat", "mangle"} {
		out, err := command(ctx, "iptables", "-w", "-t", table, "-S")
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var chains []string
		for _, line := range strings.Split(out, "\n") {
			if name, ok := strings.CutPrefix(line, "-N "); ok && strings.HasPrefix(name, "KUBE-") {
				chains = append(chains, name)
				continue
			}
			rule, ok := strings.CutPrefix(line, "-A ")
			if !ok || strings.HasPrefix(rule, "KUBE-") || !strings.Contains(rule, " -j KUBE-") {
				continue
			}
			spec, err := splitIptablesRule(rule)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if _, err := command(ctx, "iptables", append([]string{"-w", "-t", table, "-D"}, spec...)...); err != nil {
				errs = append(errs, err)
			}
		}
		for _, c := range chains {
			if _, err := command(ctx, "iptables", "-w", "-t", table, "-F", c); err != nil {
				errs = append(errs, err)
			}
		}
		for _, c := range chains {
			if _, err := command(ctx, "iptables", "-w", "-t", table, "-X", c); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// sweepStaleNodes removes what a test that died left of its node. It runs with the node lock held, so
// nothing it finds belongs to a live node.
func sweepStaleNodes(ctx context.Context) []string {
	var done []string
	if pids, _ := shimPIDs(""); len(pids) > 0 {
		_ = killShims("")
		done = append(done, fmt.Sprintf("killed containerd shims %v", pids))
	}
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), nodeDirPrefix+"*"))
	for _, d := range dirs {
		_ = unmountAll(d)
		_ = removeContainerLogLinks(d)
		_ = os.RemoveAll(d)
		_ = removeCgroup("/" + filepath.Base(d))
		done = append(done, "removed "+d)
	}
	for _, b := range bridgesLeft() {
		if _, err := command(ctx, "ip", "link", "del", b); err == nil {
			done = append(done, "deleted bridge "+b)
		}
	}
	if rules, _ := forwardRules(ctx, ""); len(rules) > 0 {
		_ = removeForwardRules(ctx, "")
		done = append(done, fmt.Sprintf("deleted %d FORWARD rules", len(rules)))
	}
	if chains := kubeChains(ctx); len(chains) > 0 {
		_ = kubeProxyCleanup(ctx)
		_ = removeKubeChains(ctx)
		done = append(done, fmt.Sprintf("removed %d KUBE-* chains", len(chains)))
	}
	return done
}
