package framework

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// findLeftovers lists what of this node is still on the machine.
func (n *ClusterNode) findLeftovers(ctx context.Context) []string {
	var left []string
	if n.worker() && n.network != nil {
		if _, err := os.Stat(netnsPath(n.network.netns)); err == nil {
			left = append(left, "network namespace "+n.network.netns)
		}
		if linkExists(n.network.hostLink) {
			left = append(left, "link "+n.network.hostLink)
		}
	}
	if n.Bridge != "" && linkExists(n.Bridge) {
		left = append(left, "bridge "+n.Bridge)
	}
	if n.Bridge != "" {
		if rules, err := forwardRules(ctx, n.Bridge); err == nil && len(rules) > 0 {
			left = append(left, fmt.Sprintf("%d FORWARD rules for %s", len(rules), n.Bridge))
		}
		left = append(left, networkPolicyLeftovers(ctx, n.Bridge)...)
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
	if !n.worker() {
		left = append(left, kubeChains(ctx)...)
		left = append(left, nodeForwardingLeft(ctx)...)
	}
	return left
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
		// A worker's processes left frozen take no signal: thaw them first.
		_ = os.WriteFile(filepath.Join("/sys/fs/cgroup/freezer", filepath.Base(d), "freezer.state"), []byte("THAWED"), 0o644)
		_ = unmountAll(d)
		_ = removeContainerLogLinks(d)
		_ = os.RemoveAll(d)
		_ = removeCgroup("/" + filepath.Base(d))
		done = append(done, "removed "+d)
	}
	done = append(done, staleWorkerNetworks(ctx)...)
	for _, b := range bridgesLeft() {
		if _, err := command(ctx, "ip", "link", "del", b); err == nil {
			done = append(done, "deleted bridge "+b)
		}
	}
	if rules, _ := forwardRules(ctx, ""); len(rules) > 0 {
		_ = removeForwardRules(ctx, "")
		done = append(done, fmt.Sprintf("deleted %d FORWARD rules", len(rules)))
	}
	if left := networkPolicyLeftovers(ctx, ""); len(left) > 0 {
		_ = removeNetworkPolicyRules(ctx, "")
		done = append(done, "removed "+strings.Join(left, ", "))
	}
	if chains := kubeChains(ctx); len(chains) > 0 {
		_ = kubeProxyCleanup(ctx)
		_ = removeKubeChains(ctx)
		done = append(done, fmt.Sprintf("removed %d KUBE-* chains", len(chains)))
	}
	return done
}
