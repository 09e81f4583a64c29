package framework

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// The pods of the decision tests: a webhook's two pods and a bystander in namespace "hook", certapi in
// "certapi-system", a pod of another namespace with certapi's labels, and a client in "team".
var (
	npHook1   = npPod{Namespace: "hook", Name: "hook-1", Labels: map[string]string{"app": "hook"}, IP: netip.MustParseAddr("10.244.1.11"), Ports: []corev1.ContainerPort{{Name: "https", ContainerPort: 8443}}}
	npHook2   = npPod{Namespace: "hook", Name: "hook-2", Labels: map[string]string{"app": "hook"}, IP: netip.MustParseAddr("10.244.1.12"), Ports: []corev1.ContainerPort{{Name: "https", ContainerPort: 9443}}}
	npOther   = npPod{Namespace: "hook", Name: "other", Labels: map[string]string{"app": "other"}, IP: netip.MustParseAddr("10.244.1.13")}
	npCertapi = npPod{Namespace: "certapi-system", Name: "certapi-0", Labels: map[string]string{"app.kubernetes.io/name": "certapi"}, IP: netip.MustParseAddr("10.244.1.20")}
	npFake    = npPod{Namespace: "team", Name: "fake-certapi", Labels: map[string]string{"app.kubernetes.io/name": "certapi"}, IP: netip.MustParseAddr("10.244.1.30")}
	npClient  = npPod{Namespace: "team", Name: "client", Labels: map[string]string{"app": "client"}, IP: netip.MustParseAddr("10.244.1.31")}
	npPods    = []npPod{npHook1, npHook2, npOther, npCertapi, npFake, npClient}
	npNS      = map[string]map[string]string{
		"hook":           {"kubernetes.io/metadata.name": "hook"},
		"certapi-system": {"kubernetes.io/metadata.name": "certapi-system", "tier": "platform"},
		"team":           {"kubernetes.io/metadata.name": "team"},
	}
	nodeIP = netip.MustParseAddr("10.244.1.1")
)

func npPolicy(name string, selector map[string]string, types []networkingv1.PolicyType, rules ...networkingv1.NetworkPolicyIngressRule) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "hook", Name: name},
		Spec:       networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: selector}, PolicyTypes: types, Ingress: rules},
	}
}

func tcpPort(p int32) networkingv1.NetworkPolicyPort {
	return networkingv1.NetworkPolicyPort{Port: ptr.To(intstr.FromInt32(p))}
}

var (
	ingressOnly   = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
	fromNode      = networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: "10.244.1.1/32"}}
	fromCertapi   = networkingv1.NetworkPolicyPeer{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "certapi-system"}}, PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/name": "certapi"}}}
	fromAllOfTeam = networkingv1.NetworkPolicyPeer{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "team"}}}
)

// reach is one question to the rules: may src open a connection to dst:port over protocol (TCP when "")?
type reach struct {
	src, dst netip.Addr
	protocol corev1.Protocol
	port     int32
	want     bool
}

func TestDecideIngress(t *testing.T) {
	hook1, hook2, other, certapi, fake, client := npHook1.IP, npHook2.IP, npOther.IP, npCertapi.IP, npFake.IP, npClient.IP
	cases := []struct {
		name     string
		policies []*networkingv1.NetworkPolicy
		isolated []netip.Addr
		checks   []reach
		warning  string
	}{{
		name:   "no policy: every pod accepts everything",
		checks: []reach{{src: client, dst: hook1, port: 8443, want: true}, {src: certapi, dst: other, protocol: corev1.ProtocolUDP, port: 53, want: true}},
	}, {
		name:     "a policy without ingress rules isolates the pods it selects, and only those",
		policies: []*networkingv1.NetworkPolicy{npPolicy("deny", map[string]string{"app": "hook"}, ingressOnly)},
		isolated: []netip.Addr{hook1, hook2},
		checks:   []reach{{src: client, dst: hook1, port: 8443}, {src: nodeIP, dst: hook2, port: 9443}, {src: client, dst: other, port: 80, want: true}},
	}, {
		name:     "an empty podSelector selects every pod of the policy's namespace",
		policies: []*networkingv1.NetworkPolicy{npPolicy("deny-all", nil, ingressOnly)},
		isolated: []netip.Addr{hook1, hook2, other},
		checks:   []reach{{src: client, dst: other, port: 80}, {src: hook1, dst: certapi, port: 8443, want: true}},
	}, {
		name:     "policyTypes Egress alone does not isolate for ingress; no policyTypes means Ingress",
		policies: []*networkingv1.NetworkPolicy{npPolicy("egress", map[string]string{"app": "hook"}, []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}), npPolicy("implied", map[string]string{"app": "other"}, nil)},
		isolated: []netip.Addr{other},
		checks:   []reach{{src: client, dst: hook1, port: 8443, want: true}, {src: client, dst: other, port: 80}},
	}, {
		name: "kube-apiserver by ipBlock only: certapi's pods are refused, the node is admitted on the port only",
		policies: []*networkingv1.NetworkPolicy{npPolicy("apiserver-only", map[string]string{"app": "hook"}, ingressOnly,
			networkingv1.NetworkPolicyIngressRule{From: []networkingv1.NetworkPolicyPeer{fromNode}, Ports: []networkingv1.NetworkPolicyPort{tcpPort(8443)}})},
		isolated: []netip.Addr{hook1, hook2},
		checks: []reach{{src: nodeIP, dst: hook1, port: 8443, want: true}, {src: certapi, dst: hook1, port: 8443},
			{src: nodeIP, dst: hook1, port: 8080}, {src: nodeIP, dst: hook1, protocol: corev1.ProtocolUDP, port: 8443}},
	}, {
		name: "namespaceSelector and podSelector in one peer: certapi's pods, not a pod with its labels elsewhere",
		policies: []*networkingv1.NetworkPolicy{npPolicy("apiserver-and-certapi", map[string]string{"app": "hook"}, ingressOnly,
			networkingv1.NetworkPolicyIngressRule{From: []networkingv1.NetworkPolicyPeer{fromNode, fromCertapi}, Ports: []networkingv1.NetworkPolicyPort{tcpPort(8443)}})},
		isolated: []netip.Addr{hook1, hook2},
		checks:   []reach{{src: certapi, dst: hook1, port: 8443, want: true}, {src: fake, dst: hook1, port: 8443}, {src: nodeIP, dst: hook2, port: 8443, want: true}},
	}, {
		name: "namespaceSelector alone: every pod of the namespaces it selects",
		policies: []*networkingv1.NetworkPolicy{npPolicy("team", map[string]string{"app": "hook"}, ingressOnly,
			networkingv1.NetworkPolicyIngressRule{From: []networkingv1.NetworkPolicyPeer{fromAllOfTeam}})},
		isolated: []netip.Addr{hook1, hook2},
		checks:   []reach{{src: client, dst: hook1, port: 1, want: true}, {src: fake, dst: hook2, protocol: corev1.ProtocolUDP, port: 53, want: true}, {src: certapi, dst: hook1, port: 8443}},
	}, {
		name: "podSelector alone: pods of the policy's own namespace only",
		policies: []*networkingv1.NetworkPolicy{npPolicy("siblings", map[string]string{"app": "hook"}, ingressOnly,
			networkingv1.NetworkPolicyIngressRule{From: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{}}}})},
		isolated: []netip.Addr{hook1, hook2},
		checks:   []reach{{src: other, dst: hook1, port: 8443, want: true}, {src: hook2, dst: hook1, port: 8443, want: true}, {src: client, dst: hook1, port: 8443}},
	}, {
		name: "ipBlock with except",
		policies: []*networkingv1.NetworkPolicy{npPolicy("block", map[string]string{"app": "hook"}, ingressOnly,
			networkingv1.NetworkPolicyIngressRule{From: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "10.244.1.0/24", Except: []string{"10.244.1.16/29", "10.244.1.30/32"}}}}})},
		isolated: []netip.Addr{hook1, hook2},
		checks: []reach{{src: other, dst: hook1, port: 8443, want: true}, {src: certapi, dst: hook1, port: 8443}, {src: fake, dst: hook1, port: 8443},
			{src: client, dst: hook1, port: 8443, want: true}, {src: netip.MustParseAddr("10.244.2.5"), dst: hook1, port: 8443}},
	}, {
		name: "a named port is each target's own; a port range covers its ends; a protocol only itself",
		policies: []*networkingv1.NetworkPolicy{npPolicy("ports", map[string]string{"app": "hook"}, ingressOnly,
			networkingv1.NetworkPolicyIngressRule{Ports: []networkingv1.NetworkPolicyPort{
				{Port: ptr.To(intstr.FromString("https"))},
				{Port: ptr.To(intstr.FromInt32(10000)), EndPort: ptr.To(int32(10010))},
				{Protocol: ptr.To(corev1.ProtocolUDP), Port: ptr.To(intstr.FromInt32(53))},
			}})},
		isolated: []netip.Addr{hook1, hook2},
		checks: []reach{{src: client, dst: hook1, port: 8443, want: true}, {src: client, dst: hook1, port: 9443},
			{src: client, dst: hook2, port: 9443, want: true}, {src: client, dst: hook2, port: 8443},
			{src: client, dst: hook1, port: 10000, want: true}, {src: client, dst: hook1, port: 10010, want: true}, {src: client, dst: hook1, port: 10011},
			{src: client, dst: hook1, protocol: corev1.ProtocolUDP, port: 53, want: true}, {src: client, dst: hook1, port: 53}},
	}, {
		name: "policies add up",
		policies: []*networkingv1.NetworkPolicy{
			npPolicy("apiserver-only", map[string]string{"app": "hook"}, ingressOnly, networkingv1.NetworkPolicyIngressRule{From: []networkingv1.NetworkPolicyPeer{fromNode}}),
			npPolicy("certapi", map[string]string{"app": "hook"}, ingressOnly, networkingv1.NetworkPolicyIngressRule{From: []networkingv1.NetworkPolicyPeer{fromCertapi}, Ports: []networkingv1.NetworkPolicyPort{tcpPort(8443)}}),
		},
		isolated: []netip.Addr{hook1, hook2},
		checks:   []reach{{src: nodeIP, dst: hook1, port: 8080, want: true}, {src: certapi, dst: hook1, port: 8443, want: true}, {src: certapi, dst: hook1, port: 8080}},
	}, {
		name: "an invalid selector admits nothing and says so",
		policies: []*networkingv1.NetworkPolicy{npPolicy("bad", map[string]string{"app": "hook"}, ingressOnly, networkingv1.NetworkPolicyIngressRule{From: []networkingv1.NetworkPolicyPeer{
			{PodSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: "Sometimes"}}}},
		}})},
		isolated: []netip.Addr{hook1, hook2},
		checks:   []reach{{src: other, dst: hook1, port: 8443}},
		warning:  "NetworkPolicy hook/bad: ingress[0].from[0].podSelector",
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rules, warnings := decideIngress(c.policies, npPods, npNS)
			var isolated []netip.Addr
			for ip := range rules {
				isolated = append(isolated, ip)
			}
			slices.SortFunc(isolated, netip.Addr.Compare)
			if !slices.Equal(isolated, c.isolated) {
				t.Errorf("isolated pods %v; want %v", isolated, c.isolated)
			}
			for _, r := range c.checks {
				protocol := r.protocol
				if protocol == "" {
					protocol = corev1.ProtocolTCP
				}
				if got := rules.allows(r.src, r.dst, protocol, r.port); got != r.want {
					t.Errorf("%s -> %s:%d/%s allowed=%v; want %v (rules %+v)", r.src, r.dst, r.port, protocol, got, r.want, rules[r.dst])
				}
			}
			if c.warning == "" && len(warnings) > 0 {
				t.Errorf("warnings %q; want none", warnings)
			}
			if c.warning != "" && (len(warnings) != 1 || !strings.HasPrefix(warnings[0], c.warning)) {
				t.Errorf("warnings %q; want one starting %q", warnings, c.warning)
			}
		})
	}
}

func TestSubtractPrefixes(t *testing.T) {
	cases := []struct {
		p      string
		except []string
		want   []string
	}{
		{"10.0.0.0/24", nil, []string{"10.0.0.0/24"}},
		{"10.0.0.0/24", []string{"10.0.1.0/24"}, []string{"10.0.0.0/24"}},
		{"10.0.0.0/24", []string{"10.0.0.0/16"}, nil},
		{"10.0.0.0/24", []string{"10.0.0.0/24"}, nil},
		{"10.0.0.0/24", []string{"10.0.0.128/25"}, []string{"10.0.0.0/25"}},
		{"10.0.0.0/24", []string{"10.0.0.1/32"}, []string{"10.0.0.0/32", "10.0.0.2/31", "10.0.0.4/30", "10.0.0.8/29", "10.0.0.16/28", "10.0.0.32/27", "10.0.0.64/26", "10.0.0.128/25"}},
		{"0.0.0.0/0", []string{"128.0.0.0/1", "0.0.0.0/2"}, []string{"64.0.0.0/2"}},
	}
	for _, c := range cases {
		var except []netip.Prefix
		for _, e := range c.except {
			except = append(except, netip.MustParsePrefix(e))
		}
		var got []string
		for _, p := range subtractPrefixes(netip.MustParsePrefix(c.p), except) {
			got = append(got, p.String())
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s except %v = %v; want %v", c.p, c.except, got, c.want)
		}
	}
}

func TestRenderIngressRules(t *testing.T) {
	rules := ingressRules{
		npHook2.IP: {},
		npHook1.IP: {
			{Source: netip.MustParsePrefix("10.244.1.1/32"), Protocol: corev1.ProtocolTCP, Port: 8443, EndPort: 8443},
			{Source: netip.MustParsePrefix("10.244.1.20/32"), Protocol: corev1.ProtocolUDP, Port: 10000, EndPort: 10010},
			{Source: netip.MustParsePrefix("10.244.1.0/24"), Protocol: corev1.ProtocolTCP},
			{Source: netip.MustParsePrefix("0.0.0.0/0")},
		},
	}
	got := renderIngressRules("CERTAPI-NP-abc", rules, map[netip.Addr]string{npHook1.IP: "hook/hook-1"})
	want := `*filter
:CERTAPI-NP-abc - [0:0]
-A CERTAPI-NP-abc -m conntrack --ctstate ESTABLISHED,RELATED -j RETURN
-A CERTAPI-NP-abc -d 10.244.1.11/32 -s 10.244.1.1/32 -p tcp -m tcp --dport 8443 -j RETURN
-A CERTAPI-NP-abc -d 10.244.1.11/32 -s 10.244.1.20/32 -p udp -m udp --dport 10000:10010 -j RETURN
-A CERTAPI-NP-abc -d 10.244.1.11/32 -s 10.244.1.0/24 -p tcp -j RETURN
-A CERTAPI-NP-abc -d 10.244.1.11/32 -s 0.0.0.0/0 -j RETURN
-A CERTAPI-NP-abc -d 10.244.1.11/32 -m comment --comment "hook/hook-1" -j DROP
-A CERTAPI-NP-abc -d 10.244.1.12/32 -m comment --comment "isolated pod" -j DROP
COMMIT
`
	if got != want {
		t.Errorf("rendered:\n%s\nwant:\n%s", got, want)
	}
}
