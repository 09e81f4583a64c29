package framework

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The decision part of the node's NetworkPolicy enforcer (networkpolicy.go): which sources may open
// connections to which pod IP and port, as a pure function of the NetworkPolicies, pods and namespaces.

// npPod is what the decision reads of a pod.
type npPod struct {
	Namespace, Name string
	Labels          map[string]string
	// IP is the pod's IPv4 address; pods without one (not started, host network) are left out.
	IP netip.Addr
	// Ports are its containers' ports, for a policy port given by name.
	Ports []corev1.ContainerPort
}

// ingressAllow is one thing an isolated pod accepts: new connections from Source to a protocol and port
// range.
type ingressAllow struct {
	Source netip.Prefix
	// Protocol is "" for any protocol (a rule without ports).
	Protocol corev1.Protocol
	// Port and EndPort bound the destination ports, inclusive; Port 0 is any port of Protocol.
	Port, EndPort int32
}

// ingressRules maps each pod isolated for ingress (selected by a policy with policyTypes Ingress) to what
// it accepts; a pod that no policy selects is absent and accepts everything.
type ingressRules map[netip.Addr][]ingressAllow

// allows reports whether rules let src open a connection to dst on protocol and port.
func (r ingressRules) allows(src, dst netip.Addr, protocol corev1.Protocol, port int32) bool {
	allows, isolated := r[dst]
	if !isolated {
		return true
	}
	for _, a := range allows {
		if !a.Source.Contains(src) || (a.Protocol != "" && a.Protocol != protocol) {
			continue
		}
		if a.Port == 0 || (port >= a.Port && port <= a.EndPort) {
			return true
		}
	}
	return false
}

// decideIngress computes the ingress rules of networking.k8s.io/v1 NetworkPolicies for pods, given the
// labels of each namespace by name. A pod is isolated for ingress when a policy of its namespace whose
// policyTypes include Ingress (or are empty: Ingress is implied) selects it with its podSelector; it then
// accepts what any ingress rule of any such policy admits. A rule's peers (none: every source) are pods
// by podSelector in the policy's namespace, by namespaceSelector in any namespace, by both, or an IPv4
// ipBlock without its except ranges; its ports (none: every port of every protocol) are numbers, ranges
// (endPort) or names, which are looked up in the selected pod's container ports. IPv6 blocks are skipped
// (the node is IPv4 only). warnings say what could not be read (an invalid selector or CIDR): that policy
// part then admits nothing, as a real plugin would not let it open traffic.
func decideIngress(policies []*networkingv1.NetworkPolicy, pods []npPod, namespaces map[string]map[string]string) (ingressRules, []string) {
	var warnings []string
	warn := func(p *networkingv1.NetworkPolicy, format string, args ...any) {
		warnings = append(warnings, fmt.Sprintf("NetworkPolicy %s/%s: %s", p.Namespace, p.Name, fmt.Sprintf(format, args...)))
	}
	selector := func(p *networkingv1.NetworkPolicy, what string, s *metav1.LabelSelector) labels.Selector {
		sel, err := metav1.LabelSelectorAsSelector(s)
		if err != nil {
			warn(p, "%s: %v", what, err)
			return labels.Nothing()
		}
		return sel
	}
	rules := ingressRules{}
	for _, p := range policies {
		if !hasIngress(p) {
			continue
		}
		targetSel := selector(p, "podSelector", &p.Spec.PodSelector)
		var targets []npPod
		for _, pod := range pods {
			if pod.Namespace == p.Namespace && targetSel.Matches(labels.Set(pod.Labels)) {
				targets = append(targets, pod)
			}
		}
		if len(targets) == 0 {
			continue
		}
		for _, t := range targets {
			if _, ok := rules[t.IP]; !ok {
				rules[t.IP] = []ingressAllow{}
			}
		}
		for i, rule := range p.Spec.Ingress {
			sources := ruleSources(p, i, rule.From, pods, namespaces, selector, warn)
			for _, t := range targets {
				ports := rulePorts(rule.Ports, t)
				for _, src := range sources {
					for _, port := range ports {
						port.Source = src
						rules[t.IP] = append(rules[t.IP], port)
					}
				}
			}
		}
	}
	for ip, allows := range rules {
		rules[ip] = compactAllows(allows)
	}
	return rules, warnings
}

// hasIngress reports whether p isolates the pods it selects for ingress.
func hasIngress(p *networkingv1.NetworkPolicy) bool {
	return len(p.Spec.PolicyTypes) == 0 || slices.Contains(p.Spec.PolicyTypes, networkingv1.PolicyTypeIngress)
}

// ruleSources returns the source prefixes that the peers of p's ingress rule i admit: every address for
// no peers, a /32 per selected pod, an ipBlock's CIDR without its except ranges.
func ruleSources(p *networkingv1.NetworkPolicy, i int, from []networkingv1.NetworkPolicyPeer, pods []npPod, namespaces map[string]map[string]string,
	selector func(*networkingv1.NetworkPolicy, string, *metav1.LabelSelector) labels.Selector, warn func(*networkingv1.NetworkPolicy, string, ...any)) []netip.Prefix {
	if len(from) == 0 {
		return []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}
	}
	var out []netip.Prefix
	for j, peer := range from {
		what := fmt.Sprintf("ingress[%d].from[%d]", i, j)
		if peer.IPBlock != nil {
			cidr, err := netip.ParsePrefix(peer.IPBlock.CIDR)
			if err != nil {
				warn(p, "%s.ipBlock.cidr: %v", what, err)
				continue
			}
			if !cidr.Addr().Is4() {
				continue
			}
			var except []netip.Prefix
			bad := false
			for _, e := range peer.IPBlock.Except {
				ep, err := netip.ParsePrefix(e)
				if err != nil {
					warn(p, "%s.ipBlock.except: %v", what, err)
					bad = true
					continue
				}
				except = append(except, ep.Masked())
			}
			if !bad {
				out = append(out, subtractPrefixes(cidr.Masked(), except)...)
			}
			continue
		}
		if peer.PodSelector == nil && peer.NamespaceSelector == nil {
			warn(p, "%s: neither podSelector, namespaceSelector nor ipBlock", what)
			continue
		}
		podSel := labels.Everything()
		if peer.PodSelector != nil {
			podSel = selector(p, what+".podSelector", peer.PodSelector)
		}
		inNamespace := func(ns string) bool { return ns == p.Namespace }
		if peer.NamespaceSelector != nil {
			nsSel := selector(p, what+".namespaceSelector", peer.NamespaceSelector)
			inNamespace = func(ns string) bool {
				l, ok := namespaces[ns]
				return ok && nsSel.Matches(labels.Set(l))
			}
		}
		for _, pod := range pods {
			if inNamespace(pod.Namespace) && podSel.Matches(labels.Set(pod.Labels)) {
				out = append(out, netip.PrefixFrom(pod.IP, 32))
			}
		}
	}
	return out
}

// rulePorts returns what a rule's ports admit on target, Source unset: any port of any protocol for none;
// a named port that target does not have admits nothing there.
func rulePorts(ports []networkingv1.NetworkPolicyPort, target npPod) []ingressAllow {
	if len(ports) == 0 {
		return []ingressAllow{{}}
	}
	var out []ingressAllow
	for _, p := range ports {
		a := ingressAllow{Protocol: corev1.ProtocolTCP}
		if p.Protocol != nil {
			a.Protocol = *p.Protocol
		}
		switch {
		case p.Port == nil:
		case p.Port.Type == intstr.String:
			idx := slices.IndexFunc(target.Ports, func(c corev1.ContainerPort) bool {
				return c.Name == p.Port.StrVal && cmp.Or(c.Protocol, corev1.ProtocolTCP) == a.Protocol
			})
			if idx < 0 {
				continue
			}
			a.Port = target.Ports[idx].ContainerPort
			a.EndPort = a.Port
		default:
			a.Port = p.Port.IntVal
			a.EndPort = a.Port
			if p.EndPort != nil && *p.EndPort > a.Port {
				a.EndPort = *p.EndPort
			}
		}
		out = append(out, a)
	}
	return out
}

// compactAllows sorts allows and drops duplicates, so that the same rules always render the same.
func compactAllows(allows []ingressAllow) []ingressAllow {
	slices.SortFunc(allows, func(a, b ingressAllow) int {
		return cmp.Or(a.Source.Addr().Compare(b.Source.Addr()), cmp.Compare(a.Source.Bits(), b.Source.Bits()),
			strings.Compare(string(a.Protocol), string(b.Protocol)), cmp.Compare(a.Port, b.Port), cmp.Compare(a.EndPort, b.EndPort))
	})
	return slices.Compact(allows)
}

// subtractPrefixes returns the addresses of p outside every prefix of except, as the fewest prefixes that
// cover them exactly, in address order.
func subtractPrefixes(p netip.Prefix, except []netip.Prefix) []netip.Prefix {
	split := false
	for _, e := range except {
		if e.Bits() <= p.Bits() && e.Contains(p.Addr()) {
			return nil // p lies wholly inside e
		}
		if e.Bits() > p.Bits() && p.Contains(e.Addr()) {
			split = true // e lies inside p
		}
	}
	if !split {
		return []netip.Prefix{p}
	}
	// p's two halves: the lower starts where p does, the upper at p's address with bit p.Bits() set.
	lower := netip.PrefixFrom(p.Addr(), p.Bits()+1)
	b := p.Addr().As4()
	b[p.Bits()/8] |= 0x80 >> (p.Bits() % 8)
	upper := netip.PrefixFrom(netip.AddrFrom4(b), p.Bits()+1)
	return append(subtractPrefixes(lower, except), subtractPrefixes(upper, except)...)
}

// renderIngressRules returns the iptables-restore input (for `iptables-restore --noflush`) that makes
// chain, in the filter table, enforce rules on the packets jumped to it: established and related packets
// return at once (replies of admitted connections, as a stateful plugin keeps them), an admitted new
// connection returns to the calling chain, and anything else to an isolated pod is dropped, so that the
// sender's connection times out as with a real plugin. Pods are in address order, each named in a
// comment.
func renderIngressRules(chain string, rules ingressRules, names map[netip.Addr]string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "*filter\n:%s - [0:0]\n", chain)
	fmt.Fprintf(&b, "-A %s -m conntrack --ctstate ESTABLISHED,RELATED -j RETURN\n", chain)
	ips := make([]netip.Addr, 0, len(rules))
	for ip := range rules {
		ips = append(ips, ip)
	}
	slices.SortFunc(ips, netip.Addr.Compare)
	for _, ip := range ips {
		dst := netip.PrefixFrom(ip, 32).String()
		for _, a := range rules[ip] {
			fmt.Fprintf(&b, "-A %s -d %s -s %s", chain, dst, a.Source)
			if a.Protocol != "" {
				p := strings.ToLower(string(a.Protocol))
				fmt.Fprintf(&b, " -p %s", p)
				if a.Port != 0 {
					fmt.Fprintf(&b, " -m %s --dport %d", p, a.Port)
					if a.EndPort > a.Port {
						fmt.Fprintf(&b, ":%d", a.EndPort)
					}
				}
			}
			b.WriteString(" -j RETURN\n")
		}
		comment := "isolated pod"
		if n := names[ip]; n != "" {
			comment = n
		}
		fmt.Fprintf(&b, "-A %s -d %s -m comment --comment %q -j DROP\n", chain, dst, comment)
	}
	b.WriteString("COMMIT\n")
	return b.String()
}
