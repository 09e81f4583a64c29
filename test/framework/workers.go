package framework

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"
)

// AddWorkers brings up count more worker nodes, numbered on from the last (certapi-node-<n>, in zone
// zone-<n>, or in zones[i] for the i-th when given: several nodes of one zone), as Options.WorkerNodes does
// at start once the first node is up, or later as new machines join a cluster (a node lost for good
// replaced): their networks one after another (each picks addresses no route of the machine uses yet), the
// machine's forwarding between the nodes, then their containerd, images (Options.NodeImages), kubelet and
// kube-proxy side by side. It returns once every one is Ready.
func (cp *ControlPlane) AddWorkers(ctx context.Context, count int, zones ...string) ([]*ClusterNode, error) {
	if count <= 0 {
		return nil, nil
	}
	if cp.ClusterNode == nil {
		return nil, errors.New("adding worker nodes: no first node (Options.Node)")
	}
	t0 := time.Now()
	images, err := imagesDir()
	if err != nil {
		return nil, err
	}
	pauseArchive := filepath.Join(images, "pause.tar")
	pauseNames, err := ArchiveImageNames(pauseArchive)
	if err != nil {
		return nil, fmt.Errorf("the pause image (run `make images`): %w", err)
	}
	archives := append([]string{pauseArchive}, cp.opts.NodeImages...)
	var workers []*ClusterNode
	cp.mu.Lock()
	first := len(cp.Workers) + 1
	cp.mu.Unlock()
	for i := first; i < first+count; i++ {
		zone := "zone-" + strconv.Itoa(i)
		if k := i - first; k < len(zones) && zones[k] != "" {
			zone = zones[k]
		}
		w := &ClusterNode{
			Name:   NodeName + "-" + strconv.Itoa(i),
			Zone:   zone,
			cp:     cp,
			procs:  map[string]*Process{},
			Images: map[string][]string{},
		}
		cp.mu.Lock()
		cp.Workers = append(cp.Workers, w)
		cp.mu.Unlock()
		if w.Dir, err = os.MkdirTemp("", nodeDirPrefix); err != nil {
			return nil, fmt.Errorf("creating the directory of node %s: %w", w.Name, err)
		}
		if err := os.Symlink(w.Dir, filepath.Join(cp.Dir, w.Name)); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, err
		}
		if w.network, err = newWorkerNetwork(w.Dir); err != nil {
			return nil, err
		}
		w.Bridge, w.PodCIDR, w.IP, w.Netns = w.network.bridge, w.network.podCIDR, w.network.nodeIP, w.network.netns
		w.cgroup = "/" + filepath.Base(w.Dir)
		if err := w.network.setUp(ctx); err != nil {
			return nil, fmt.Errorf("setting up the network of node %s: %w", w.Name, err)
		}
		workers = append(workers, w)
	}
	if err := cp.syncNodeForwarding(ctx); err != nil {
		return nil, err
	}
	errs := make([]error, len(workers))
	var wg sync.WaitGroup
	for i, w := range workers {
		wg.Go(func() { errs[i] = w.startComponents(ctx, pauseNames[0], archives) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	cp.progress("%d worker nodes up in %s", count, since(t0))
	return workers, nil
}

// Nodes returns the first node and the workers, in that order.
func (cp *ControlPlane) Nodes() []*ClusterNode {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if cp.ClusterNode == nil {
		return nil
	}
	return append([]*ClusterNode{cp.ClusterNode}, cp.Workers...)
}

// Node returns the node named name (the first node or a worker), or nil.
func (cp *ControlPlane) Node(name string) *ClusterNode {
	for _, n := range cp.Nodes() {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// stopWorkers stops every worker side by side (each as the first node stops, its faults undone first so
// that its processes can exit), then removes the machine's forwarding between nodes.
func (cp *ControlPlane) stopWorkers() {
	cp.mu.Lock()
	workers := append([]*ClusterNode(nil), cp.Workers...)
	cp.mu.Unlock()
	if len(workers) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The network faults first, so that every worker's kubelet reaches kube-apiserver to report its pods
	// gone.
	if err := cp.Heal(ctx); err != nil {
		cp.progress("node: healing the network before the workers stop: %v", err)
	}
	if cp.ClusterNode != nil {
		cp.ClusterNode.stopControllers()
	}
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Go(w.stop)
	}
	wg.Wait()
	cp.forwardMu.Lock()
	defer cp.forwardMu.Unlock()
	cp.forwardingRemoved = true
	if err := removeNodeForwarding(ctx); err != nil {
		cp.progress("node: removing %s: %v", nodesChain, err)
	}
}

// cgroupControllers are the cgroup v1 hierarchies a worker's processes join (its freezer, for Freeze);
// on cgroup v2 they join the one hierarchy.
var cgroupControllers = []string{"freezer"}

// nodeCgroupLeaf is the cgroup under the worker's cgroup (kubelet's cgroupRoot, where kubelet puts the
// pods under kubepods) that its containerd, kubelet and kube-proxy join.
const nodeCgroupLeaf = "node"

// joinCgroup moves process pid into the worker's cgroup in the hierarchies of cgroupControllers.
func (n *ClusterNode) joinCgroup(pid int) error {
	for _, d := range n.cgroupDirs(nodeCgroupLeaf) {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("creating cgroup %s: %w", d, err)
		}
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
			return fmt.Errorf("moving process %d into cgroup %s: %w", pid, d, err)
		}
	}
	return nil
}

// cgroupDirs returns the worker's cgroup directory (with leaf below it, when not empty) in each hierarchy
// of cgroupControllers, or in the one hierarchy of cgroup v2.
func (n *ClusterNode) cgroupDirs(leaf string) []string {
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		return []string{filepath.Join("/sys/fs/cgroup", n.cgroup, leaf)}
	}
	var out []string
	for _, c := range cgroupControllers {
		out = append(out, filepath.Join("/sys/fs/cgroup", c, n.cgroup, leaf))
	}
	return out
}
