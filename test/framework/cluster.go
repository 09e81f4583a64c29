package framework

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
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
	// Name is the Node's name: NodeName for the first node, NodeName-<i> for worker i (1, 2, ...).
	Name string
	// Zone is a worker's topology.kubernetes.io/zone label, zone-<i>; "" for the first node.
	Zone string
	// Dir holds containerd's root and state, kubelet's root, the CNI configuration and pod logs: a short
	// directory of its own under the machine's temporary directory (Unix sockets live in it), removed at Stop.
	Dir string
	// IP is the node's address, kubelet's --node-ip: the gateway address of the pods' bridge on the first
	// node, a worker's end of its link to the machine (netns.go).
	IP net.IP
	// PodCIDR is the /24 its pods get addresses from.
	PodCIDR *net.IPNet
	// Bridge is the name of the pods' Linux bridge (a worker's is in its network namespace).
	Bridge string
	// Netns is a worker's network namespace (ip netns), "" for the first node.
	Netns string
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
	// frozen and linkDown are a worker's faults in place (nodefaults.go).
	frozen, linkDown bool
}

// worker reports whether n is a worker node (Options.WorkerNodes) rather than the first node.
func (n *ClusterNode) worker() bool { return n.Zone != "" }

// logName is the name of one of the node's processes in Logs: the process's name on the first node,
// "<name>-<node>" on a worker.
func (n *ClusterNode) logName(process string) string {
	if n.Name == NodeName {
		return process
	}
	return process + "-" + n.Name
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

	if err := n.startComponents(ctx, pauseNames[0], append([]string{pauseArchive, dnsArchive}, cp.opts.NodeImages...),
		n.startControllerManager, n.startScheduler); err != nil {
		return err
	}
	t1 := time.Now()
	if err := n.startDNS(ctx, dnsNames[0]); err != nil {
		return err
	}
	cp.progress("node: cluster DNS (CoreDNS) answering at %s (%s)", ClusterDNSIP, since(t1))
	cp.progress("node up in %s", since(t0))
	return nil
}

// startComponents starts the node's containerd with the image archives imported, then its components
// (those of the control plane first, on the first node), and waits until the node is Ready.
func (n *ClusterNode) startComponents(ctx context.Context, sandboxImage string, archives []string, controlPlane ...func(context.Context) error) error {
	t1 := time.Now()
	if err := n.startContainerd(ctx, sandboxImage); err != nil {
		return err
	}
	for _, a := range archives {
		names, err := n.ImportImage(ctx, a)
		if err != nil {
			return err
		}
		n.mu.Lock()
		n.Images[filepath.Base(a)] = names
		n.mu.Unlock()
	}
	n.cp.progress("node %s: containerd ready, %d images imported (%s)", n.Name, len(archives), since(t1))
	var err error
	n.ports, err = FreePorts(6, n.cp.ports.all()...)
	if err != nil {
		return err
	}
	if err := n.makeCgroup(); err != nil {
		return err
	}
	for _, start := range append(controlPlane, n.startKubelet, n.startKubeProxy) {
		if err := start(ctx); err != nil {
			return err
		}
	}
	t1 = time.Now()
	if err := n.waitReady(ctx); err != nil {
		return err
	}
	n.cp.progress("node %s Ready at %s, pods in %s on bridge %s (%s)", n.Name, n.IP, n.PodCIDR, n.Bridge, since(t1))
	return nil
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
		_, code, err := HTTPGet(ctx, http.DefaultClient, fmt.Sprintf("http://%s/healthz", n.kubeProxyHealthz()))
		if err != nil {
			return false, err.Error()
		}
		return code == 200, fmt.Sprintf("HTTP %d", code)
	})
}
