package framework

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// A worker node's network (Options.WorkerNodes). Each worker lives in a network namespace of its own,
// joined to the machine by a veth pair: the machine's end (hostLink, hostIP) and the worker's eth0
// (nodeIP, its Node's address) share a /30 of 10.245.0.0/16. Inside, the worker's pods sit on a bridge of
// their own with a /24 of 10.244.0.0/16, as the first node's do, and the worker's default route goes to
// the machine, which routes every node's pod /24 to it (the first node's to its bridge, a worker's
// through its link). So every packet between two nodes' pods crosses the machine's FORWARD chain, where
// nodesChain lets pods reach the other nodes' pods and nothing else off the machine, and where the
// network faults of a test are rules (nodefaults.go). kube-apiserver, on the machine's loopback, reaches
// every pod and kubelet by those routes; pods reach it through the first node's proxy (the Service
// default/kubernetes), which the machine delivers locally.
const (
	// netnsDir is where `ip netns` keeps its named network namespaces.
	netnsDir = "/run/netns"
	// hostLinkPrefix starts the name of the machine's end of every worker's link.
	hostLinkPrefix = "cnl-"
	// nodesChain is the machine's filter chain for packets between nodes, jumped to first from FORWARD;
	// nodesHostChain, jumped to first from INPUT and OUTPUT, holds the faults between a worker and the
	// machine (kube-apiserver and the first node).
	nodesChain     = "CERTAPI-NODES"
	nodesHostChain = "CERTAPI-NODES-HOST"
	nodesComment   = "certapi test nodes"
)

func netnsPath(name string) string { return filepath.Join(netnsDir, name) }

// newWorkerNetwork picks a bridge name and a pod /24 as newNodeNetwork does, names the namespace and the
// link after the bridge, and picks a /30 of 10.245.0.0/16 for the link that no route of the machine uses.
func newWorkerNetwork(dir string) (*nodeNetwork, error) {
	nw, err := newNodeNetwork(dir)
	if err != nil {
		return nil, err
	}
	suffix := strings.TrimPrefix(nw.bridge, bridgePrefix)
	nw.netns = bridgePrefix + suffix
	nw.hostLink = hostLinkPrefix + suffix
	used, err := routedNets()
	if err != nil {
		return nil, err
	}
	var b [2]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, err
	}
	const slots = 1 << 14 // the /30s of a /16
	start := int(binary.BigEndian.Uint16(b[:])) % slots
	for i := range slots {
		base := ((start + i) % slots) * 4
		ip := net.IPv4(10, 245, byte(base>>8), byte(base)).To4()
		link := &net.IPNet{IP: ip, Mask: net.CIDRMask(30, 32)}
		if overlapsAny(link, used) {
			continue
		}
		nw.linkNet = link
		nw.hostIP = net.IPv4(10, 245, byte(base>>8), byte(base+1)).To4()
		nw.nodeIP = net.IPv4(10, 245, byte(base>>8), byte(base+2)).To4()
		return nw, nil
	}
	return nil, errors.New("no free /30 in 10.245.0.0/16 for a worker node's link")
}

// setUpNetns creates the worker's namespace, its link to the machine, its bridge, the machine's route to
// its pods, turns on forwarding and bridge netfilter inside (kube-proxy's rules must see packets between
// pods on the bridge), and writes the CNI configuration.
func (nw *nodeNetwork) setUpNetns(ctx context.Context) error {
	ones, _ := nw.podCIDR.Mask.Size()
	in := func(args ...string) []string { return append([]string{"ip", "-n", nw.netns}, args...) }
	steps := [][]string{
		{"ip", "netns", "add", nw.netns},
		{"ip", "link", "add", nw.hostLink, "type", "veth", "peer", "name", "eth0", "netns", nw.netns},
		{"ip", "addr", "add", nw.hostIP.String() + "/30", "dev", nw.hostLink},
		{"ip", "link", "set", nw.hostLink, "up"},
		in("link", "set", "lo", "up"),
		in("addr", "add", nw.nodeIP.String()+"/30", "dev", "eth0"),
		in("link", "set", "eth0", "up"),
		in("route", "add", "default", "via", nw.hostIP.String()),
		in("link", "add", nw.bridge, "type", "bridge"),
		in("addr", "add", fmt.Sprintf("%s/%d", nw.gateway, ones), "dev", nw.bridge),
		in("link", "set", nw.bridge, "up"),
		{"ip", "route", "replace", nw.podCIDR.String(), "via", nw.nodeIP.String(), "dev", nw.hostLink},
		{"nsenter", "--net=" + netnsPath(nw.netns), "sh", "-c",
			"echo 1 > /proc/sys/net/ipv4/ip_forward && echo 1 > /proc/sys/net/bridge/bridge-nf-call-iptables"},
	}
	for _, s := range steps {
		if _, err := command(ctx, s[0], s[1:]...); err != nil {
			return err
		}
	}
	return nw.writeCNIConfig()
}

// tearDownNetns deletes the worker's link (both ends, and the machine's route through it) and namespace,
// which takes its bridge along.
func (nw *nodeNetwork) tearDownNetns(ctx context.Context) error {
	var errs []error
	// The link first: a namespace goes once nothing holds it any more, which may be after this returns,
	// and its links with it.
	if linkExists(nw.hostLink) {
		if _, err := command(ctx, "ip", "link", "del", nw.hostLink); err != nil {
			errs = append(errs, err)
		}
	}
	if _, err := os.Stat(netnsPath(nw.netns)); err == nil {
		if _, err := command(ctx, "ip", "netns", "del", nw.netns); err != nil {
			errs = append(errs, err)
		}
	}
	// The unreachable route LinkDown leaves while the link is down.
	if out, err := command(ctx, "ip", "route", "show", nw.podCIDR.String()); err == nil && strings.TrimSpace(out) != "" {
		if _, err := command(ctx, "ip", "route", "del", nw.podCIDR.String()); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// inNetns wraps a command so that it runs in the worker's network namespace (and only there: nsenter
// enters no other namespace, so the mounts kubelet makes are the machine's, where containerd and runc see
// them), or returns it as it is for the first node.
func (nw *nodeNetwork) inNetns(bin string, args []string) (string, []string) {
	if nw.netns == "" {
		return bin, args
	}
	return "nsenter", append([]string{"--net=" + netnsPath(nw.netns), "--", bin}, args...)
}

// nodeRoute is what nodeForwardRules needs of a node: its name, its pods' /24 and, for a worker, the
// machine's end of its link.
type nodeRoute struct {
	name, podCIDR, hostLink string
}

// netFault is one network fault between nodes (nodefaults.go).
type netFault struct {
	kind netFaultKind
	// from and to name the nodes: a partition drops from's packets to to (and to's to from unless
	// oneWay); a loss drops the packets from and to from; an isolation cuts from off the machine.
	from, to    string
	oneWay      bool
	probability float64
}

type netFaultKind int

const (
	faultPartition netFaultKind = iota
	faultLoss
	faultIsolate
)

// nodeForwardRules returns the rules (iptables-restore lines, "-A CHAIN ...") of nodesChain and
// nodesHostChain: the faults first, then every node's pods may reach every other node's, and a worker's
// pods nothing else through the machine (the first node's bridge has its own rule after the jump).
func nodeForwardRules(nodes []nodeRoute, faults []netFault) (forward, host []string) {
	byName := map[string]nodeRoute{}
	for _, n := range nodes {
		byName[n.name] = n
	}
	comment := func(what string) string {
		return fmt.Sprintf("-m comment --comment %q", nodesComment+": "+what)
	}
	for _, f := range faults {
		from, to := byName[f.from], byName[f.to]
		switch f.kind {
		case faultPartition:
			if from.podCIDR == "" || to.podCIDR == "" {
				continue
			}
			forward = append(forward, fmt.Sprintf("-A %s -s %s -d %s %s -j DROP", nodesChain, from.podCIDR, to.podCIDR, comment("partition "+f.from+" -> "+f.to)))
			if !f.oneWay {
				forward = append(forward, fmt.Sprintf("-A %s -s %s -d %s %s -j DROP", nodesChain, to.podCIDR, from.podCIDR, comment("partition "+f.to+" -> "+f.from)))
			}
		case faultLoss:
			if from.podCIDR == "" {
				continue
			}
			for _, dir := range []string{"-s", "-d"} {
				forward = append(forward, fmt.Sprintf("-A %s %s %s -m statistic --mode random --probability %.4f %s -j DROP",
					nodesChain, dir, from.podCIDR, f.probability, comment("loss "+f.from)))
			}
		case faultIsolate:
			if from.hostLink == "" {
				continue
			}
			host = append(host,
				fmt.Sprintf("-A %s -i %s %s -j DROP", nodesHostChain, from.hostLink, comment("isolate "+f.from)),
				fmt.Sprintf("-A %s -o %s %s -j DROP", nodesHostChain, from.hostLink, comment("isolate "+f.from)))
		}
	}
	for _, a := range nodes {
		for _, b := range nodes {
			if a.name != b.name {
				forward = append(forward, fmt.Sprintf("-A %s -s %s -d %s %s -j ACCEPT", nodesChain, a.podCIDR, b.podCIDR, comment("pods")))
			}
		}
	}
	for _, n := range nodes {
		if n.hostLink != "" {
			forward = append(forward, fmt.Sprintf("-A %s -i %s %s -j REJECT", nodesChain, n.hostLink, comment("pods reach only the cluster's pods")))
		}
	}
	return forward, host
}

// syncNodeForwarding writes nodesChain and nodesHostChain from the nodes and the network faults in
// place, each replaced whole in one iptables-restore (a packet never meets a half-written chain), and
// makes FORWARD, INPUT and OUTPUT jump to them first.
func (cp *ControlPlane) syncNodeForwarding(ctx context.Context) error {
	// One sync at a time, each from the state it read, and none once Stop removed the chains.
	cp.forwardMu.Lock()
	defer cp.forwardMu.Unlock()
	if cp.forwardingRemoved {
		return nil
	}
	cp.mu.Lock()
	nodes := append([]*ClusterNode{cp.ClusterNode}, cp.Workers...)
	faults := append([]netFault(nil), cp.netFaults...)
	cp.mu.Unlock()
	var routes []nodeRoute
	for _, n := range nodes {
		if n == nil || n.network == nil || n.network.podCIDR == nil {
			continue
		}
		routes = append(routes, nodeRoute{name: n.Name, podCIDR: n.network.podCIDR.String(), hostLink: n.network.hostLink})
	}
	forward, host := nodeForwardRules(routes, faults)
	input := "*filter\n:" + nodesChain + " - [0:0]\n:" + nodesHostChain + " - [0:0]\n" +
		strings.Join(append(forward, host...), "\n") + "\nCOMMIT\n"
	cmd := exec.CommandContext(ctx, "iptables-restore", "-w", "--noflush")
	cmd.Stdin = strings.NewReader(input)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("iptables-restore of %s: %w: %s\n%s", nodesChain, err, strings.TrimSpace(string(out)), input)
	}
	for _, jump := range []struct{ chain, target string }{
		{"FORWARD", nodesChain}, {"INPUT", nodesHostChain}, {"OUTPUT", nodesHostChain},
	} {
		if _, err := command(ctx, "iptables", "-w", "-C", jump.chain, "-j", jump.target); err == nil {
			continue
		}
		if _, err := command(ctx, "iptables", "-w", "-I", jump.chain, "1", "-j", jump.target); err != nil {
			return err
		}
	}
	return nil
}

// removeNodeForwarding removes the jumps to nodesChain and nodesHostChain and the chains.
func removeNodeForwarding(ctx context.Context) error {
	var errs []error
	for _, jump := range []struct{ chain, target string }{
		{"FORWARD", nodesChain}, {"INPUT", nodesHostChain}, {"OUTPUT", nodesHostChain},
	} {
		for {
			if _, err := command(ctx, "iptables", "-w", "-C", jump.chain, "-j", jump.target); err != nil {
				break
			}
			if _, err := command(ctx, "iptables", "-w", "-D", jump.chain, "-j", jump.target); err != nil {
				errs = append(errs, err)
				break
			}
		}
	}
	for _, c := range []string{nodesChain, nodesHostChain} {
		if _, err := command(ctx, "iptables", "-w", "-n", "-L", c); err != nil {
			continue
		}
		if _, err := command(ctx, "iptables", "-w", "-F", c); err != nil {
			errs = append(errs, err)
		}
		if _, err := command(ctx, "iptables", "-w", "-X", c); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// nodeForwardingLeft reports the chains of nodesChain and nodesHostChain still on the machine.
func nodeForwardingLeft(ctx context.Context) []string {
	var left []string
	for _, c := range []string{nodesChain, nodesHostChain} {
		if _, err := command(ctx, "iptables", "-w", "-n", "-L", c); err == nil {
			left = append(left, "iptables chain "+c)
		}
	}
	return left
}

// staleWorkerNetworks deletes the network namespaces and links of workers a test that died left.
func staleWorkerNetworks(ctx context.Context) []string {
	var done []string
	entries, _ := os.ReadDir(netnsDir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), bridgePrefix) {
			if _, err := command(ctx, "ip", "netns", "del", e.Name()); err == nil {
				done = append(done, "deleted network namespace "+e.Name())
			}
		}
	}
	links, _ := os.ReadDir("/sys/class/net")
	for _, l := range links {
		if strings.HasPrefix(l.Name(), hostLinkPrefix) {
			if _, err := command(ctx, "ip", "link", "del", l.Name()); err == nil {
				done = append(done, "deleted link "+l.Name())
			}
		}
	}
	if left := nodeForwardingLeft(ctx); len(left) > 0 {
		_ = removeNodeForwarding(ctx)
		done = append(done, "removed "+strings.Join(left, ", "))
	}
	// The unreachable routes of workers whose link was down (LinkDown), in the pods' range.
	if out, err := command(ctx, "ip", "-4", "route", "show", "type", "unreachable"); err == nil {
		for _, line := range strings.Split(out, "\n") {
			f := strings.Fields(line)
			if len(f) >= 2 && f[0] == "unreachable" && strings.HasPrefix(f[1], "10.244.") {
				if _, err := command(ctx, "ip", "route", "del", "unreachable", f[1]); err == nil {
					done = append(done, "deleted route unreachable "+f[1])
				}
			}
		}
	}
	return done
}
