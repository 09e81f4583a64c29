package framework

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

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
	faulted := n.frozen || n.linkDown
	n.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	report := func(what string, err error) {
		if err != nil {
			n.cp.progress("node %s: %s: %v", n.Name, what, err)
		}
	}
	if n.worker() {
		// A frozen process takes no signal (a freeze may have failed half-way: always thaw); a node whose
		// link is down cannot report its pods gone.
		report("thawing", n.Thaw(ctx))
	}
	n.stopControllers()
	if kubelet := procs[ProcessKubelet]; kubelet != nil && n.cp.apiServerRunning() && !faulted {
		report("deleting the node's pods", n.deletePods(ctx, kubelet))
	}
	for _, name := range []string{ProcessKubelet, ProcessKubeProxy} {
		if p := procs[name]; p != nil {
			report("stopping "+name, p.stop(syscall.SIGTERM, nodeStopGrace))
		}
	}
	if !n.worker() {
		// A worker's rules go with its network namespace; the first node's are the machine's.
		if procs[ProcessKubeProxy] != nil {
			report("kube-proxy --cleanup", kubeProxyCleanup(ctx))
		}
		// kubelet's own chains (KUBE-FIREWALL, KUBE-KUBELET-CANARY, ...), which nothing else removes. The
		// node lock is held: every KUBE-* chain on the machine is this node's.
		report("removing KUBE-* chains", removeKubeChains(ctx))
	}
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

// stopControllers stops kube-controller-manager and kube-scheduler (the first node's): no controller may
// create pods, nor the scheduler bind them, while nodes stop and their pods go. A no-op on a worker.
func (n *ClusterNode) stopControllers() {
	n.mu.Lock()
	procs := []*Process{n.procs[ProcessKubeControllerManager], n.procs[ProcessKubeScheduler]}
	n.mu.Unlock()
	for _, p := range procs {
		if p != nil {
			if err := p.stop(syscall.SIGTERM, nodeStopGrace); err != nil {
				n.cp.progress("node: stopping %s: %v", p.name, err)
			}
		}
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
