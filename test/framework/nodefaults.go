package framework

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// The faults a cluster's nodes meet, made to the worker nodes (Options.WorkerNodes): a node stopped hard
// (frozen, its link down), cut off from the other nodes or from the control plane, losing packets, or
// deleted with its volumes. Each is undone by its pair (Resume, Heal) or, for what remains at the end, by
// the control plane's Stop.

// errNotWorker is returned for a fault asked of the first node, which runs the control plane's
// components: its faults would be the control plane's.
var errNotWorker = errors.New("faults are made to worker nodes (Options.WorkerNodes), not to the first node")

// Freeze freezes every process of the worker (containerd, its shims, kubelet, kube-proxy and every
// container of its pods) with the cgroup freezer: nothing exits, nothing answers, as a machine that
// hangs. Thaw undoes it.
func (n *ClusterNode) Freeze(ctx context.Context) error {
	return n.setFrozen(ctx, true)
}

// Thaw thaws what Freeze froze.
func (n *ClusterNode) Thaw(ctx context.Context) error {
	return n.setFrozen(ctx, false)
}

func (n *ClusterNode) setFrozen(ctx context.Context, frozen bool) error {
	if !n.worker() {
		return errNotWorker
	}
	dir := n.cgroupDirs("")[0]
	file, value, want := filepath.Join(dir, "freezer.state"), "FROZEN", "FROZEN"
	if !frozen {
		value, want = "THAWED", "THAWED"
	}
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		file, value, want = filepath.Join(dir, "cgroup.freeze"), "1", "1"
		if !frozen {
			value, want = "0", "0"
		}
	}
	if frozen {
		// Marked before, so that Stop thaws a node whose freeze failed half-way.
		n.mu.Lock()
		n.frozen = true
		n.mu.Unlock()
	}
	if err := os.WriteFile(file, []byte(value), 0o644); err != nil {
		return fmt.Errorf("writing %s to %s: %w", value, file, err)
	}
	// The freezer takes a moment (FREEZING) while tasks stop.
	err := PollUntil(ctx, 20*time.Millisecond, 30*time.Second, "node "+n.Name+" "+strings.ToLower(want), nil, func(context.Context) (bool, string) {
		b, err := os.ReadFile(file)
		if err != nil {
			return false, err.Error()
		}
		got := strings.TrimSpace(string(b))
		if file == filepath.Join(dir, "cgroup.freeze") {
			// cgroup v2: cgroup.events says "frozen 1" once every task has stopped.
			if ev, err := os.ReadFile(filepath.Join(dir, "cgroup.events")); err == nil {
				return strings.Contains(string(ev), "frozen "+want), string(ev)
			}
		}
		return got == want, got
	})
	if err != nil {
		return err
	}
	n.mu.Lock()
	n.frozen = frozen
	n.mu.Unlock()
	return nil
}

// LinkDown takes the worker's link to the machine down: it reaches nothing, and nothing reaches it (its
// kubelet stops reporting, its pods stop answering). LinkUp brings it back.
func (n *ClusterNode) LinkDown(ctx context.Context) error {
	return n.setLink(ctx, false)
}

// LinkUp brings the worker's link back up, with its route.
func (n *ClusterNode) LinkUp(ctx context.Context) error {
	return n.setLink(ctx, true)
}

func (n *ClusterNode) setLink(ctx context.Context, up bool) error {
	if !n.worker() {
		return errNotWorker
	}
	state := "down"
	if up {
		state = "up"
	} else {
		// Marked before, so that Stop knows the node cannot report its pods gone.
		n.mu.Lock()
		n.linkDown = true
		n.mu.Unlock()
	}
	if _, err := command(ctx, "ip", "link", "set", n.network.hostLink, state); err != nil {
		return err
	}
	// The route through a link goes with the link. Down, the node's pods are unreachable, as a machine
	// that answers no ARP is (the sender is told so), rather than routed by the machine's default route.
	route := []string{"route", "replace", "unreachable", n.network.podCIDR.String()}
	if up {
		route = []string{"route", "replace", n.network.podCIDR.String(), "via", n.network.nodeIP.String(), "dev", n.network.hostLink}
	}
	if _, err := command(ctx, "ip", route...); err != nil {
		return err
	}
	n.mu.Lock()
	n.linkDown = !up
	n.mu.Unlock()
	return nil
}

// StopHard stops the worker as a machine that loses power: its link goes down, then every process of it
// is frozen. kube-apiserver sees the Node NotReady once kubelet's lease runs out; its pods stay as they
// are (Running, then Terminating when deleted) until the Node is deleted (Remove). Resume undoes it.
func (n *ClusterNode) StopHard(ctx context.Context) error {
	if err := n.LinkDown(ctx); err != nil {
		return err
	}
	return n.Freeze(ctx)
}

// Resume brings a worker stopped by StopHard back: its processes thawed, then its link up, as a machine
// that comes back with its disks.
func (n *ClusterNode) Resume(ctx context.Context) error {
	if err := n.Thaw(ctx); err != nil {
		return err
	}
	return n.LinkUp(ctx)
}

// Slow limits the worker's pods to cpus CPUs in all with the CFS bandwidth quota of the worker's cgroup
// (cpu.cfs_quota_us in cgroup v1's cpu hierarchy, where the pods' cgroups are under it and its kubelet and
// containerd are not; cpu.max on cgroup v2, which slows those too), as a member on an overloaded or
// throttled machine: it answers, late. Slow(ctx, 0) lifts the limit.
func (n *ClusterNode) Slow(_ context.Context, cpus float64) error {
	if !n.worker() {
		return errNotWorker
	}
	const period = 100000 // µs, the kernel's default
	quota := "-1"
	if cpus > 0 {
		quota = fmt.Sprint(max(1000, int(cpus*period)))
	}
	file, value := filepath.Join("/sys/fs/cgroup/cpu", n.cgroup, "cpu.cfs_quota_us"), quota
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		if quota == "-1" {
			quota = "max"
		}
		file, value = filepath.Join("/sys/fs/cgroup", n.cgroup, "cpu.max"), fmt.Sprintf("%s %d", quota, period)
	}
	if err := os.WriteFile(file, []byte(value), 0o644); err != nil {
		return fmt.Errorf("writing %s to %s: %w", value, file, err)
	}
	return nil
}

// Remove deletes the worker as a machine lost for good: it is stopped (its processes killed, its
// containers and mounts gone), its directory with every volume on it removed, and its Node object
// deleted, so that kube-controller-manager deletes its pods. It stays in Workers, stopped.
func (cp *ControlPlane) Remove(ctx context.Context, n *ClusterNode) error {
	if !n.worker() {
		return errNotWorker
	}
	// Cut off first: its processes must not run again with the network up while they are stopped.
	if err := n.LinkDown(ctx); err != nil {
		return err
	}
	n.stop()
	cs, err := kubernetes.NewForConfig(cp.AdminConfig)
	if err != nil {
		return err
	}
	if err := cs.CoreV1().Nodes().Delete(ctx, n.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting Node %s: %w", n.Name, err)
	}
	cp.mu.Lock()
	cp.netFaults = dropFaultsOf(cp.netFaults, n.Name)
	cp.mu.Unlock()
	return cp.syncNodeForwarding(ctx)
}

func dropFaultsOf(faults []netFault, node string) []netFault {
	var out []netFault
	for _, f := range faults {
		if f.from != node && f.to != node {
			out = append(out, f)
		}
	}
	return out
}

// Partition cuts the pods of a off from those of b, both ways, or only a's packets to b when oneWay
// (an asymmetric partition: b's packets still reach a). Both nodes keep reaching kube-apiserver and it
// them: only pod-to-pod traffic between the two is cut. Heal removes it.
func (cp *ControlPlane) Partition(ctx context.Context, a, b *ClusterNode, oneWay bool) error {
	if a == b {
		return fmt.Errorf("Partition: node %s from itself", a.Name)
	}
	return cp.addFault(ctx, netFault{kind: faultPartition, from: a.Name, to: b.Name, oneWay: oneWay})
}

// PartitionFromOthers cuts the pods of n off from those of every other node, both ways; n keeps reaching
// kube-apiserver and it n.
func (cp *ControlPlane) PartitionFromOthers(ctx context.Context, n *ClusterNode) error {
	for _, o := range cp.Nodes() {
		if o != n {
			if err := cp.Partition(ctx, n, o, false); err != nil {
				return err
			}
		}
	}
	return nil
}

// IsolateFromControlPlane cuts the worker off from the machine itself (kube-apiserver and the framework's
// proxies, among them the one pods and kubelets reach kube-apiserver through), both ways, while its pods
// still reach and are reached by every other node's pods: the reverse of PartitionFromOthers. Heal
// removes it.
func (cp *ControlPlane) IsolateFromControlPlane(ctx context.Context, n *ClusterNode) error {
	if !n.worker() {
		return errNotWorker
	}
	return cp.addFault(ctx, netFault{kind: faultIsolate, from: n.Name})
}

// DropPackets makes the machine drop each packet between n's pods and the other nodes' pods with the
// given probability (0 to 1), as a lossy link between nodes (not between n and kube-apiserver). Heal
// removes it.
func (cp *ControlPlane) DropPackets(ctx context.Context, n *ClusterNode, probability float64) error {
	if probability <= 0 || probability > 1 {
		return fmt.Errorf("DropPackets: probability %v is not in (0, 1]", probability)
	}
	return cp.addFault(ctx, netFault{kind: faultLoss, from: n.Name, probability: probability})
}

// Heal removes every network fault (Partition, PartitionFromOthers, IsolateFromControlPlane,
// DropPackets) at once.
func (cp *ControlPlane) Heal(ctx context.Context) error {
	cp.mu.Lock()
	cp.netFaults = nil
	cp.mu.Unlock()
	return cp.syncNodeForwarding(ctx)
}

func (cp *ControlPlane) addFault(ctx context.Context, f netFault) error {
	if len(cp.Nodes()) < 2 {
		return errors.New("network faults need worker nodes (Options.WorkerNodes)")
	}
	cp.mu.Lock()
	cp.netFaults = append(cp.netFaults, f)
	cp.mu.Unlock()
	return cp.syncNodeForwarding(ctx)
}
