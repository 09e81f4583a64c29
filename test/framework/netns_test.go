package framework

import (
	"strings"
	"testing"
)

func TestNodeForwardRules(t *testing.T) {
	nodes := []nodeRoute{
		{name: "certapi-node", podCIDR: "10.244.1.0/24"},
		{name: "certapi-node-1", podCIDR: "10.244.2.0/24", hostLink: "cnl-aaaaaa"},
		{name: "certapi-node-2", podCIDR: "10.244.3.0/24", hostLink: "cnl-bbbbbb"},
	}
	// Every node's pods reach every other node's, then a worker's pods reach nothing else.
	base := []string{
		"-s 10.244.1.0/24 -d 10.244.2.0/24 ACCEPT", "-s 10.244.1.0/24 -d 10.244.3.0/24 ACCEPT",
		"-s 10.244.2.0/24 -d 10.244.1.0/24 ACCEPT", "-s 10.244.2.0/24 -d 10.244.3.0/24 ACCEPT",
		"-s 10.244.3.0/24 -d 10.244.1.0/24 ACCEPT", "-s 10.244.3.0/24 -d 10.244.2.0/24 ACCEPT",
		"-i cnl-aaaaaa REJECT", "-i cnl-bbbbbb REJECT",
	}
	for _, tc := range []struct {
		name          string
		faults        []netFault
		forward, host []string
	}{
		{name: "no fault", forward: base},
		{
			name:    "partition both ways",
			faults:  []netFault{{kind: faultPartition, from: "certapi-node-1", to: "certapi-node-2"}},
			forward: append([]string{"-s 10.244.2.0/24 -d 10.244.3.0/24 DROP", "-s 10.244.3.0/24 -d 10.244.2.0/24 DROP"}, base...),
		},
		{
			name:    "one way",
			faults:  []netFault{{kind: faultPartition, from: "certapi-node-2", to: "certapi-node", oneWay: true}},
			forward: append([]string{"-s 10.244.3.0/24 -d 10.244.1.0/24 DROP"}, base...),
		},
		{
			name:    "loss",
			faults:  []netFault{{kind: faultLoss, from: "certapi-node-1", probability: 0.25}},
			forward: append([]string{"-s 10.244.2.0/24 0.2500 DROP", "-d 10.244.2.0/24 0.2500 DROP"}, base...),
		},
		{
			name:    "isolated from the machine",
			faults:  []netFault{{kind: faultIsolate, from: "certapi-node-2"}},
			forward: base,
			host:    []string{"-i cnl-bbbbbb DROP", "-o cnl-bbbbbb DROP"},
		},
		{
			name:    "a fault of a node gone is ignored",
			faults:  []netFault{{kind: faultPartition, from: "certapi-node-9", to: "certapi-node-1"}, {kind: faultIsolate, from: "certapi-node"}},
			forward: base,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			forward, host := nodeForwardRules(nodes, tc.faults)
			check := func(chain string, got, want []string) {
				t.Helper()
				if len(got) != len(want) {
					t.Fatalf("%s: %d rules, want %d:\n%s", chain, len(got), len(want), strings.Join(got, "\n"))
				}
				for i, w := range want {
					if !ruleHas(got[i], chain, w) {
						t.Errorf("%s rule %d = %q, want one with %q", chain, i, got[i], w)
					}
				}
			}
			check(nodesChain, forward, tc.forward)
			check(nodesHostChain, host, tc.host)
		})
	}
}

// ruleHas reports whether rule appends to chain and holds every word of want (a last word ACCEPT, DROP or
// REJECT as its target).
func ruleHas(rule, chain, want string) bool {
	if !strings.HasPrefix(rule, "-A "+chain+" ") {
		return false
	}
	for _, part := range strings.Fields(want) {
		if part == "ACCEPT" || part == "DROP" || part == "REJECT" {
			part = "-j " + part
		}
		if !strings.Contains(rule, part) {
			return false
		}
	}
	return true
}
