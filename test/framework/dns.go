package framework

import (
	"context"
	"fmt"
	"net"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// Cluster DNS: CoreDNS (the image `make images` builds, coredns.tar) as a Deployment in kube-system behind
// the Service kube-dns at ClusterDNSIP, as kubeadm installs it: the kubernetes plugin answers for
// ClusterDomain from the API, read through the Service default/kubernetes with its ServiceAccount's token.
// It forwards nothing: names outside the cluster do not resolve (the machine has no network to send them
// to).
const (
	dnsName      = "coredns"
	dnsService   = "kube-dns"
	dnsNamespace = metav1.NamespaceSystem
)

// corefile is CoreDNS's configuration. CoreDNS runs as uid 65532 with no capabilities, so it listens on
// 1053, and the Service maps port 53 to it.
const corefile = `.:1053 {
    errors
    health
    ready
    kubernetes ` + ClusterDomain + ` in-addr.arpa ip6.arpa {
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 30
    }
    cache 30
    loop
    reload
    loadbalance
}
`

// startDNS creates CoreDNS's objects and waits until it answers at ClusterDNSIP.
func (n *ClusterNode) startDNS(ctx context.Context, image string) error {
	cs, err := kubernetes.NewForConfig(n.cp.AdminConfig)
	if err != nil {
		return err
	}
	labels := map[string]string{"k8s-app": dnsService}
	create := func(what string, err error) error {
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating %s: %w", what, err)
		}
		return nil
	}
	meta := metav1.ObjectMeta{Name: dnsName, Namespace: dnsNamespace}
	_, err = cs.CoreV1().ServiceAccounts(dnsNamespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: meta}, metav1.CreateOptions{})
	if err := create("CoreDNS's ServiceAccount", err); err != nil {
		return err
	}
	_, err = cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "system:coredns"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"endpoints", "services", "pods", "namespaces"}, Verbs: []string{"list", "watch"}},
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
		},
	}, metav1.CreateOptions{})
	if err := create("CoreDNS's ClusterRole", err); err != nil {
		return err
	}
	_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "system:coredns"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:coredns"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: dnsName, Namespace: dnsNamespace}},
	}, metav1.CreateOptions{})
	if err := create("CoreDNS's ClusterRoleBinding", err); err != nil {
		return err
	}
	_, err = cs.CoreV1().ConfigMaps(dnsNamespace).Create(ctx, &corev1.ConfigMap{ObjectMeta: meta, Data: map[string]string{"Corefile": corefile}}, metav1.CreateOptions{})
	if err := create("CoreDNS's ConfigMap", err); err != nil {
		return err
	}
	_, err = cs.AppsV1().Deployments(dnsNamespace).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: dnsName, Namespace: dnsNamespace, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					ServiceAccountName: dnsName,
					DNSPolicy:          corev1.DNSDefault,
					PriorityClassName:  "system-cluster-critical",
					// On the first node, the control plane's when there are workers, so that a worker's
					// faults never take the cluster's DNS along.
					NodeSelector: map[string]string{corev1.LabelHostname: NodeName},
					Tolerations:  []corev1.Toleration{{Key: ControlPlaneTaint, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
					Containers: []corev1.Container{{
						Name:            dnsName,
						Image:           image,
						ImagePullPolicy: corev1.PullNever,
						Args:            []string{"-conf", "/etc/coredns/Corefile"},
						Ports: []corev1.ContainerPort{
							{Name: "dns", ContainerPort: 1053, Protocol: corev1.ProtocolUDP},
							{Name: "dns-tcp", ContainerPort: 1053, Protocol: corev1.ProtocolTCP},
						},
						VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/etc/coredns", ReadOnly: true}},
						ReadinessProbe: &corev1.Probe{
							ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromInt32(8181)}},
							PeriodSeconds: 1,
						},
						LivenessProbe: &corev1.Probe{
							ProbeHandler:     corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/health", Port: intstr.FromInt32(8080)}},
							PeriodSeconds:    10,
							FailureThreshold: 5,
						},
						SecurityContext: &corev1.SecurityContext{
							AllowPrivilegeEscalation: ptr.To(false),
							ReadOnlyRootFilesystem:   ptr.To(true),
							Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
						},
					}},
					Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
						LocalObjectReference: corev1.LocalObjectReference{Name: dnsName},
					}}}},
				},
			},
		},
	}, metav1.CreateOptions{})
	if err := create("CoreDNS's Deployment", err); err != nil {
		return err
	}
	_, err = cs.CoreV1().Services(dnsNamespace).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: dnsService, Namespace: dnsNamespace, Labels: labels},
		Spec: corev1.ServiceSpec{
			ClusterIP: ClusterDNSIP,
			Selector:  labels,
			Ports: []corev1.ServicePort{
				{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt32(1053)},
				{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(1053)},
			},
		},
	}, metav1.CreateOptions{})
	if err := create("the Service kube-system/kube-dns", err); err != nil {
		return err
	}

	// The name of the Service default/kubernetes, asked at the cluster IP from this machine (kube-proxy's
	// rules apply to its own packets too): CoreDNS runs, reads the API, and is reached through its Service.
	resolver := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, net.JoinHostPort(ClusterDNSIP, "53"))
	}}
	want := "kubernetes.default.svc." + ClusterDomain
	n.mu.Lock()
	procs := []*Process{n.containerd, n.procs[ProcessKubelet], n.procs[ProcessKubeProxy]}
	n.mu.Unlock()
	return PollUntil(ctx, 250*time.Millisecond, nodeReadyTimeout, "cluster DNS at "+ClusterDNSIP+" answering for "+want, procs, func(ctx context.Context) (bool, string) {
		qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		addrs, err := resolver.LookupHost(qctx, want)
		if err != nil {
			return false, err.Error()
		}
		return len(addrs) > 0, strings.Join(addrs, ",")
	})
}
