package framework

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

const (
	// networkPolicyChainPrefix starts the name of the filter chain that holds a node's NetworkPolicy rules
	// (the rest is its bridge's suffix); one found while no node runs was left by a test that died.
	networkPolicyChainPrefix = "CERTAPI-NP-"
	// networkPolicyComment marks the FORWARD rule that sends packets bound for the node's pods to that chain.
	networkPolicyComment = "certapi test node: NetworkPolicy"
)

// NetworkPolicyEnforcer makes the test node's bridge network enforce networking.k8s.io/v1 NetworkPolicy
// ingress rules, which its CNI plugin (a plain bridge) does not: it watches NetworkPolicies, Pods and
// Namespaces with an informer in the test process and, after each change, rewrites one iptables chain of
// the filter table that every packet forwarded to a pod on the bridge goes through (pod to pod on the
// bridge, with bridge-nf-call-iptables, whether to a pod IP or through a Service IP). A pod selected by a
// policy whose policyTypes include Ingress accepts new connections only from what its ingress rules
// admit (podSelector, namespaceSelector, both, ipBlock with except; ports by number, range or name, TCP,
// UDP and SCTP); anything else to it is dropped, not rejected, so the client's connection times out, as
// with Calico or Cilium. Replies of admitted connections pass (conntrack), as with a stateful plugin.
//
// What it does not do: egress rules (policyTypes Egress is ignored), IPv6, and traffic from the node
// itself (kubelet's probes, kube-apiserver, the test process), which reaches pods without passing the
// bridge's forwarding path; the Kubernetes documentation says pods cannot block access from their
// resident node with any plugin. Rules are applied within moments of a change, not before a new pod's first packet, as a
// real plugin does at pod start. It is a test tool: a failure to apply rules is logged (in the control
// plane's logs as "networkpolicy") and retried, and Err reports it.
type NetworkPolicyEnforcer struct {
	node  *ClusterNode
	chain string
	log   *os.File

	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	applied ingressRules
	input   string
	err     error
}

// EnforceNetworkPolicies starts enforcing NetworkPolicy ingress rules on the node's bridge (see
// NetworkPolicyEnforcer) until Stop, which removes its iptables rules; a node stopped or swept before
// then loses them too. It returns once the rules of the policies that exist now are in place.
func (n *ClusterNode) EnforceNetworkPolicies(ctx context.Context) (*NetworkPolicyEnforcer, error) {
	kube, err := kubernetes.NewForConfig(n.cp.AdminConfig)
	if err != nil {
		return nil, fmt.Errorf("NetworkPolicy enforcer: creating a client: %w", err)
	}
	name := "networkpolicy"
	logf, err := os.OpenFile(n.cp.logPath(name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	n.cp.mu.Lock()
	n.cp.logs[name] = logf.Name()
	n.cp.mu.Unlock()
	e := &NetworkPolicyEnforcer{node: n, chain: networkPolicyChain(n.Bridge), log: logf, done: make(chan struct{})}
	// The chain first (admitting everything), then the jump to it.
	if err := e.apply(ctx, ingressRules{}, nil); err != nil {
		logf.Close()
		return nil, err
	}
	if _, err := command(ctx, "iptables", "-w", "-I", "FORWARD", "1", "-o", n.Bridge, "-m", "comment", "--comment", networkPolicyComment, "-j", e.chain); err != nil {
		_ = removeNetworkPolicyRules(context.Background(), n.Bridge)
		logf.Close()
		return nil, fmt.Errorf("NetworkPolicy enforcer: %w", err)
	}

	factory := informers.NewSharedInformerFactory(kube, 0)
	pods := factory.Core().V1().Pods()
	namespaces := factory.Core().V1().Namespaces()
	policies := factory.Networking().V1().NetworkPolicies()
	queue := workqueue.NewTypedRateLimitingQueue(workqueue.NewTypedItemExponentialFailureRateLimiter[string](50*time.Millisecond, 5*time.Second))
	enqueue := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { queue.Add("sync") },
		UpdateFunc: func(any, any) { queue.Add("sync") },
		DeleteFunc: func(any) { queue.Add("sync") },
	}
	for _, inf := range []cache.SharedIndexInformer{pods.Informer(), namespaces.Informer(), policies.Informer()} {
		if _, err := inf.AddEventHandler(enqueue); err != nil {
			_ = e.cleanUp()
			return nil, fmt.Errorf("NetworkPolicy enforcer: %w", err)
		}
	}
	runCtx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	factory.Start(runCtx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			cancel()
			factory.Shutdown()
			_ = e.cleanUp()
			return nil, fmt.Errorf("NetworkPolicy enforcer: the %v informer did not sync: %w", typ, ctx.Err())
		}
	}
	resync := func(ctx context.Context) error {
		rules, names, warnings, err := e.decide(pods.Lister().List, namespaces.Lister().List, policies.Lister().List)
		if err != nil {
			return err
		}
		for _, w := range warnings {
			e.logf("warning: %s", w)
		}
		return e.apply(ctx, rules, names)
	}
	if err := resync(ctx); err != nil {
		cancel()
		factory.Shutdown()
		_ = e.cleanUp()
		return nil, err
	}
	go func() {
		defer close(e.done)
		defer factory.Shutdown()
		go func() {
			<-runCtx.Done()
			queue.ShutDown()
		}()
		for {
			key, shutdown := queue.Get()
			if shutdown {
				return
			}
			if err := resync(runCtx); err != nil && runCtx.Err() == nil {
				e.logf("applying the rules: %v (retrying)", err)
				queue.AddRateLimited(key)
			} else {
				queue.Forget(key)
			}
			queue.Done(key)
		}
	}()
	return e, nil
}

// decide reads the listers and returns the rules to apply, with the names of the isolated pods.
func (e *NetworkPolicyEnforcer) decide(listPods func(labels.Selector) ([]*corev1.Pod, error), listNamespaces func(labels.Selector) ([]*corev1.Namespace, error),
	listPolicies func(labels.Selector) ([]*networkingv1.NetworkPolicy, error)) (ingressRules, map[netip.Addr]string, []string, error) {
	podList, err := listPods(labels.Everything())
	if err != nil {
		return nil, nil, nil, err
	}
	nsList, err := listNamespaces(labels.Everything())
	if err != nil {
		return nil, nil, nil, err
	}
	policies, err := listPolicies(labels.Everything())
	if err != nil {
		return nil, nil, nil, err
	}
	var pods []npPod
	names := map[netip.Addr]string{}
	for _, p := range podList {
		ip, err := netip.ParseAddr(p.Status.PodIP)
		if err != nil || !ip.Is4() || p.Spec.HostNetwork || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		np := npPod{Namespace: p.Namespace, Name: p.Name, Labels: p.Labels, IP: ip}
		for _, c := range p.Spec.Containers {
			np.Ports = append(np.Ports, c.Ports...)
		}
		pods = append(pods, np)
		names[ip] = p.Namespace + "/" + p.Name
	}
	namespaces := map[string]map[string]string{}
	for _, ns := range nsList {
		namespaces[ns.Name] = ns.Labels
	}
	rules, warnings := decideIngress(policies, pods, namespaces)
	return rules, names, warnings, nil
}

// apply replaces the chain's rules with rules, atomically, unless they are what is there already.
func (e *NetworkPolicyEnforcer) apply(ctx context.Context, rules ingressRules, names map[netip.Addr]string) error {
	input := renderIngressRules(e.chain, rules, names)
	e.mu.Lock()
	same := input == e.input
	e.mu.Unlock()
	if same {
		return nil
	}
	cmd := exec.CommandContext(ctx, "iptables-restore", "-w", "--noflush")
	cmd.Stdin = strings.NewReader(input)
	out, err := cmd.CombinedOutput()
	e.mu.Lock()
	defer e.mu.Unlock()
	if err != nil {
		e.err = fmt.Errorf("NetworkPolicy enforcer: iptables-restore of chain %s: %w: %s", e.chain, err, strings.TrimSpace(string(out)))
		return e.err
	}
	e.applied, e.input, e.err = rules, input, nil
	e.logf("applied %d isolated pods:\n%s", len(rules), input)
	return nil
}

func (e *NetworkPolicyEnforcer) logf(format string, args ...any) {
	fmt.Fprintf(e.log, "%s %s\n", time.Now().UTC().Format(time.RFC3339Nano), fmt.Sprintf(format, args...))
}

// AllowsTCP reports whether the rules in place let src open a TCP connection to dst (pod IPs) on port.
func (e *NetworkPolicyEnforcer) AllowsTCP(src, dst string, port int32) (bool, error) {
	s, err := netip.ParseAddr(src)
	if err != nil {
		return false, fmt.Errorf("source address %q: %w", src, err)
	}
	d, err := netip.ParseAddr(dst)
	if err != nil {
		return false, fmt.Errorf("destination address %q: %w", dst, err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.applied.allows(s, d, corev1.ProtocolTCP, port), nil
}

// Err returns the error of the last attempt to apply rules (nil once one succeeded).
func (e *NetworkPolicyEnforcer) Err() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.err
}

// Stop stops watching and removes the enforcer's iptables rules: pods then accept everything again.
func (e *NetworkPolicyEnforcer) Stop() error {
	e.cancel()
	<-e.done
	return e.cleanUp()
}

func (e *NetworkPolicyEnforcer) cleanUp() error {
	err := removeNetworkPolicyRules(context.Background(), e.node.Bridge)
	e.log.Close()
	return err
}

// networkPolicyChain names the NetworkPolicy chain of the node whose bridge is bridge.
func networkPolicyChain(bridge string) string {
	return networkPolicyChainPrefix + strings.TrimPrefix(bridge, bridgePrefix)
}

// networkPolicyLeftovers lists the enforcer's FORWARD rules and chains left for bridge (any bridge when
// empty).
func networkPolicyLeftovers(ctx context.Context, bridge string) []string {
	jumps, chains, err := networkPolicyRules(ctx, bridge)
	if err != nil {
		return nil
	}
	var left []string
	if len(jumps) > 0 {
		left = append(left, fmt.Sprintf("%d FORWARD rules to NetworkPolicy chains", len(jumps)))
	}
	for _, c := range chains {
		left = append(left, "iptables chain filter/"+c)
	}
	return left
}

// removeNetworkPolicyRules deletes the enforcer's FORWARD rules, then flushes and deletes its chains, for
// bridge (any bridge when empty). It goes on past errors and returns them all.
func removeNetworkPolicyRules(ctx context.Context, bridge string) error {
	jumps, chains, err := networkPolicyRules(ctx, bridge)
	if err != nil {
		return err
	}
	var errs []error
	for _, r := range jumps {
		if _, err := command(ctx, "iptables", append([]string{"-w", "-D", "FORWARD"}, r...)...); err != nil {
			errs = append(errs, err)
		}
	}
	for _, c := range chains {
		if _, err := command(ctx, "iptables", "-w", "-F", c); err != nil {
			errs = append(errs, err)
		}
		if _, err := command(ctx, "iptables", "-w", "-X", c); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// networkPolicyRules returns the rule specifications of the enforcer's FORWARD rules and the names of its
// chains in the filter table, for bridge (any bridge when empty).
func networkPolicyRules(ctx context.Context, bridge string) (jumps [][]string, chains []string, err error) {
	out, err := command(ctx, "iptables", "-w", "-S")
	if err != nil {
		return nil, nil, err
	}
	want := networkPolicyChainPrefix
	if bridge != "" {
		want = networkPolicyChain(bridge)
	}
	for _, line := range strings.Split(out, "\n") {
		if name, ok := strings.CutPrefix(line, "-N "); ok && strings.HasPrefix(name, want) && (bridge == "" || name == want) {
			chains = append(chains, name)
			continue
		}
		rule, ok := strings.CutPrefix(line, "-A FORWARD ")
		if !ok || !strings.Contains(rule, networkPolicyComment) {
			continue
		}
		if bridge != "" && !strings.HasSuffix(rule, "-j "+want) {
			continue
		}
		spec, err := splitIptablesRule(rule)
		if err != nil {
			return nil, nil, err
		}
		jumps = append(jumps, spec)
	}
	return jumps, chains, nil
}
