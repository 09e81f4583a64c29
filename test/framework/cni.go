package framework

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// The node's network. Pods live on a Linux bridge of the node's own with a /24 from podCIDRBase, addresses
// from the CNI host-local IPAM; the bridge holds the gateway address, which is also the node's IP (kubelet's
// --node-ip) and where pods reach kube-apiserver (see ClusterNode.APIServerProxy). Service IPs are
// kube-apiserver's --service-cluster-ip-range, routed to the bridge so that they never leave the machine.
const (
	// bridgePrefix starts the name of every node's bridge; a bridge of that name found while no node runs
	// was left by a test that died, and is removed.
	bridgePrefix = "cnode-"
	// ServiceCIDR is kube-apiserver's --service-cluster-ip-range; kube-controller-manager gets the same.
	ServiceCIDR = "10.0.0.0/24"
	// ClusterDNSIP is the cluster IP of the DNS Service (kube-system/kube-dns), kubelet's clusterDNS.
	ClusterDNSIP = "10.0.0.10"
	// ClusterDomain is the cluster's DNS domain (kubelet's clusterDomain, CoreDNS's zone).
	ClusterDomain = "cluster.local"
	// forwardComment marks the iptables rule that keeps pods' packets on the bridge.
	forwardComment = "certapi test node: pods reach only their bridge"
	cniNetworkName = "certapi-node"
)

// nodeNetwork is the bridge, its route and iptables rule, and the CNI configuration containerd reads.
type nodeNetwork struct {
	bridge  string
	podCIDR *net.IPNet
	gateway net.IP
	confDir string // CNI configuration (containerd's conf_dir)
	ipamDir string // host-local's allocations

	// sysctls holds the values of the sysctls the network changed, to put back.
	sysctls map[string]string

	// A worker node's network (see netns.go); all empty for the first node, which lives in the machine's.
	//
	// netns is the worker's network namespace, where its bridge, kubelet, kube-proxy and containerd live.
	netns string
	// hostLink is the machine's end of the worker's link, a veth pair whose other end is eth0 in netns.
	hostLink string
	// hostIP and nodeIP are the two ends' addresses, in linkNet (a /30); nodeIP is the worker's IP.
	hostIP, nodeIP net.IP
	linkNet        *net.IPNet
}

// newNodeNetwork picks a bridge name and a pod /24 not in use on this machine.
func newNodeNetwork(dir string) (*nodeNetwork, error) {
	var b [3]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("choosing a bridge name: %w", err)
	}
	nw := &nodeNetwork{
		bridge:  bridgePrefix + hex.EncodeToString(b[:]),
		confDir: filepath.Join(dir, "cni", "net.d"),
		ipamDir: filepath.Join(dir, "cni", "ipam"),
		sysctls: map[string]string{},
	}
	used, err := routedNets()
	if err != nil {
		return nil, err
	}
	// 10.244.0.0/16 split in /24s, the first free one after a random start.
	start := int(b[0])
	for i := range 256 {
		n := (start + i) % 256
		_, cidr, _ := net.ParseCIDR(fmt.Sprintf("10.244.%d.0/24", n))
		if !overlapsAny(cidr, used) {
			nw.podCIDR = cidr
			nw.gateway = net.IPv4(10, 244, byte(n), 1).To4()
			return nw, nil
		}
	}
	return nil, errors.New("no free /24 in 10.244.0.0/16 for the node's pods")
}

// routedNets lists the destinations of the machine's IPv4 routes other than the default route.
func routedNets() ([]*net.IPNet, error) {
	out, err := command(context.Background(), "ip", "-4", "route", "show")
	if err != nil {
		return nil, err
	}
	var nets []*net.IPNet
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] == "default" {
			continue
		}
		dst := f[0]
		if !strings.Contains(dst, "/") {
			dst += "/32"
		}
		if _, n, err := net.ParseCIDR(dst); err == nil {
			nets = append(nets, n)
		}
	}
	return nets, nil
}

func overlapsAny(n *net.IPNet, others []*net.IPNet) bool {
	for _, o := range others {
		if o.Contains(n.IP) || n.Contains(o.IP) {
			return true
		}
	}
	return false
}

// setUp creates the bridge with the gateway address, routes the service range to it, keeps pods' packets
// from leaving through any other interface, turns on forwarding and bridge netfilter (kube-proxy's rules
// must see packets between pods on the bridge), and writes the CNI configuration.
func (nw *nodeNetwork) setUp(ctx context.Context) error {
	if nw.netns != "" {
		return nw.setUpNetns(ctx)
	}
	ones, _ := nw.podCIDR.Mask.Size()
	steps := [][]string{
		{"ip", "link", "add", nw.bridge, "type", "bridge"},
		{"ip", "addr", "add", fmt.Sprintf("%s/%d", nw.gateway, ones), "dev", nw.bridge},
		{"ip", "link", "set", nw.bridge, "up"},
		{"ip", "route", "replace", ServiceCIDR, "dev", nw.bridge, "src", nw.gateway.String()},
		{"iptables", "-w", "-I", "FORWARD", "-i", nw.bridge, "!", "-o", nw.bridge, "-m", "comment", "--comment", forwardComment, "-j", "REJECT"},
	}
	for _, s := range steps {
		if _, err := command(ctx, s[0], s[1:]...); err != nil {
			return err
		}
	}
	for _, s := range []struct{ key, value string }{
		{"net/ipv4/ip_forward", "1"},
		{"net/bridge/bridge-nf-call-iptables", "1"},
	} {
		if err := nw.setSysctl(s.key, s.value); err != nil {
			return err
		}
	}
	return nw.writeCNIConfig()
}

// writeCNIConfig writes the CNI configuration containerd reads: the bridge plugin on the node's bridge,
// addresses of the pod /24 from host-local.
func (nw *nodeNetwork) writeCNIConfig() error {
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       cniNetworkName,
		"plugins": []any{
			map[string]any{
				"type":        "bridge",
				"bridge":      nw.bridge,
				"isGateway":   true,
				"ipMasq":      false,
				"hairpinMode": true,
				"ipam": map[string]any{
					"type":    "host-local",
					"dataDir": nw.ipamDir,
					"ranges":  [][]map[string]string{{{"subnet": nw.podCIDR.String(), "gateway": nw.gateway.String()}}},
					"routes":  []map[string]string{{"dst": "0.0.0.0/0"}},
				},
			},
		},
	}
	data, err := json.MarshalIndent(conf, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(nw.confDir, 0o755); err != nil {
		return err
	}
	return writeFile(filepath.Join(nw.confDir, "10-certapi-node.conflist"), data, 0o644)
}

func (nw *nodeNetwork) setSysctl(key, value string) error {
	path := filepath.Join("/proc/sys", key)
	old, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("reading sysctl %s: %w", key, err)
	}
	if strings.TrimSpace(string(old)) == value {
		return nil
	}
	if err := os.WriteFile(path, []byte(value), 0o644); err != nil {
		return fmt.Errorf("setting sysctl %s=%s: %w", key, value, err)
	}
	nw.sysctls[key] = strings.TrimSpace(string(old))
	return nil
}

// tearDown removes what setUp added (the bridge takes its address and route with it) and puts the sysctls
// back. It goes on past errors and returns them all.
func (nw *nodeNetwork) tearDown(ctx context.Context) error {
	if nw.netns != "" {
		return nw.tearDownNetns(ctx)
	}
	var errs []error
	if linkExists(nw.bridge) {
		if _, err := command(ctx, "ip", "link", "del", nw.bridge); err != nil {
			errs = append(errs, err)
		}
	}
	if err := removeForwardRules(ctx, nw.bridge); err != nil {
		errs = append(errs, err)
	}
	if err := removeNetworkPolicyRules(ctx, nw.bridge); err != nil {
		errs = append(errs, err)
	}
	for key, value := range nw.sysctls {
		if err := os.WriteFile(filepath.Join("/proc/sys", key), []byte(value), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("restoring sysctl %s=%s: %w", key, value, err))
		}
	}
	return errors.Join(errs...)
}

func linkExists(name string) bool {
	_, err := os.Stat(filepath.Join("/sys/class/net", name))
	return err == nil
}

// bridgesLeft lists the network links whose names start with bridgePrefix.
func bridgesLeft() []string {
	entries, _ := os.ReadDir("/sys/class/net")
	var names []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), bridgePrefix) {
			names = append(names, e.Name())
		}
	}
	return names
}

// removeForwardRules deletes the FORWARD rules setUp added for bridge, or for any node's bridge when bridge
// is empty.
func removeForwardRules(ctx context.Context, bridge string) error {
	rules, err := forwardRules(ctx, bridge)
	if err != nil {
		return err
	}
	var errs []error
	for _, r := range rules {
		args := append([]string{"-w", "-D", "FORWARD"}, r...)
		if _, err := command(ctx, "iptables", args...); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// forwardRules returns the rule specifications (after "-A FORWARD") of the FORWARD rules setUp adds, for
// bridge or, when it is empty, for any node's bridge.
func forwardRules(ctx context.Context, bridge string) ([][]string, error) {
	out, err := command(ctx, "iptables", "-w", "-S", "FORWARD")
	if err != nil {
		return nil, err
	}
	var rules [][]string
	for _, line := range strings.Split(out, "\n") {
		if !strings.HasPrefix(line, "-A FORWARD ") || !strings.Contains(line, forwardComment) {
			continue
		}
		if bridge != "" && !strings.Contains(line, "-i "+bridge+" ") {
			continue
		}
		spec, err := splitIptablesRule(strings.TrimPrefix(line, "-A FORWARD "))
		if err != nil {
			return nil, err
		}
		rules = append(rules, spec)
	}
	return rules, nil
}

// splitIptablesRule splits a rule as `iptables -S` prints it, where only comments are quoted.
func splitIptablesRule(s string) ([]string, error) {
	var out []string
	for s = strings.TrimSpace(s); s != ""; s = strings.TrimSpace(s) {
		if s[0] == '"' {
			end := strings.IndexByte(s[1:], '"')
			if end < 0 {
				return nil, fmt.Errorf("unbalanced quote in iptables rule %q", s)
			}
			out = append(out, s[1:end+1])
			s = s[end+2:]
			continue
		}
		end := strings.IndexByte(s, ' ')
		if end < 0 {
			end = len(s)
		}
		out = append(out, s[:end])
		s = s[end:]
	}
	return out, nil
}

// command runs name with args and returns its combined output; the error carries the output.
func command(ctx context.Context, name string, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}
