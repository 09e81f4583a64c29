package chart

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	"github.com/certapi/certapi/test/framework"
)

// hardenedPod and hardenedContainer are the security contexts certapi's pods had before they were values:
// the defaults of podSecurityContext and securityContext must stay exactly these.
var (
	hardenedPod = &corev1.PodSecurityContext{
		RunAsNonRoot:   ptr.To(true),
		RunAsUser:      ptr.To[int64](65532),
		RunAsGroup:     ptr.To[int64](65532),
		FSGroup:        ptr.To[int64](65532),
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	hardenedContainer = &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(true),
		RunAsNonRoot:             ptr.To(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
)

// certapiContainer returns the certapi container of a pod template.
func certapiContainer(t *testing.T, spec *corev1.PodSpec) *corev1.Container {
	t.Helper()
	for i := range spec.Containers {
		if spec.Containers[i].Name == "certapi" {
			return &spec.Containers[i]
		}
	}
	t.Fatal("no container certapi")
	return nil
}

// serviceAccountSubjects returns the ServiceAccounts the rendering's RoleBindings and ClusterRoleBindings
// bind, but for those of the helm test.
func serviceAccountSubjects(t *testing.T, objs []*unstructured.Unstructured) []string {
	t.Helper()
	var out []string
	for _, u := range objs {
		if (u.GetKind() != "ClusterRoleBinding" && u.GetKind() != "RoleBinding") || u.GetLabels()["app.kubernetes.io/component"] == "test" {
			continue
		}
		var b rbacv1.ClusterRoleBinding // a RoleBinding decodes the same
		convert(t, u, &b)
		for _, s := range b.Subjects {
			out = append(out, s.Namespace+"/"+s.Name)
		}
	}
	return out
}

// policyUsers returns the user each ValidatingAdmissionPolicy's first match condition names.
// quorumPolicy is the one admission policy that is not about certapi's ServiceAccount: in etcd.mode cluster
// it refuses anyone's scaling of certapi's StatefulSet from several members to one.
const quorumPolicy = release + "-keep-etcd-quorum"

func policyUsers(t *testing.T, objs []*unstructured.Unstructured) []string {
	t.Helper()
	var out []string
	for _, u := range ofKind(objs, "ValidatingAdmissionPolicy") {
		var p admissionregistrationv1.ValidatingAdmissionPolicy
		convert(t, u, &p)
		if p.Name == quorumPolicy {
			continue // it guards certapi's StatefulSet from everyone, not what certapi's ServiceAccount does
		}
		e := strings.ReplaceAll(p.Spec.MatchConditions[0].Expression, "' + '", "")
		out = append(out, strings.Trim(strings.TrimPrefix(e, "request.userInfo.username == "), "'"))
	}
	return out
}

// dryRun applies a rendering with a server-side dry run in a new namespace ns of the Pod Security level
// podSecurity (enforced and warned), and fails on any refusal or warning. The ServiceAccount of a bare Pod
// (the helm test's) is created first: kube-apiserver admits a Pod only with its ServiceAccount, which a
// dry run does not create.
func dryRun(t *testing.T, ns, podSecurity, out string, objs []*unstructured.Unstructured) {
	t.Helper()
	kube, err := kubernetes.NewForConfig(cp.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{
		"pod-security.kubernetes.io/enforce": podSecurity,
		"pod-security.kubernetes.io/warn":    podSecurity,
	}}}
	if _, err := kube.CoreV1().Namespaces().Create(context.Background(), nsObj, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, u := range ofKind(objs, "Pod") {
		sa, _, _ := unstructured.NestedString(u.Object, "spec", "serviceAccountName")
		if _, err := kube.CoreV1().ServiceAccounts(ns).Create(context.Background(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	file := filepath.Join(t.TempDir(), "rendered.yaml")
	if err := os.WriteFile(file, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	r := runKubectl(t, "apply", "--server-side", "--field-manager=chart-test", "--dry-run=server", "-f", file)
	stdout := r.must(t)
	if n := strings.Count(stdout, "serverside-applied (server dry run)"); n != len(objs) {
		t.Errorf("kubectl apply --server-side --dry-run=server applied %d objects; the chart rendered %d:\n%s", n, len(objs), stdout)
	}
	if strings.Contains(r.stderr, "Warning") {
		t.Errorf("kubectl apply --server-side --dry-run=server warned:\n%s", r.stderr)
	}
}

// TestValues renders the chart with each of the values platform teams set (ServiceAccount, security
// contexts, extra volumes, arguments and environment, pod metadata and scheduling, host network and port,
// an existing encryption Secret), checks the objects they must change and that the defaults render the
// pod as before, and applies each rendering with a server-side dry run.
func TestValues(t *testing.T) {
	dir := t.TempDir()
	openshift := filepath.Join(dir, "openshift.yaml")
	if err := os.WriteFile(openshift, []byte("podSecurityContext:\n  runAsUser: null\n  runAsGroup: null\n  fsGroup: null\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	kms := filepath.Join(dir, "kms.yaml")
	if err := os.WriteFile(kms, []byte(`extraVolumes:
- name: kms
  hostPath: {path: /var/run/kmsplugin, type: Directory}
extraVolumeMounts:
- name: kms
  mountPath: /var/run/kmsplugin
extraArgs: [--v=2]
extraEnv:
- name: GOMEMLIMIT
  value: 200MiB
podAnnotations: {example.com/owner: platform}
podLabels: {example.com/team: platform}
nodeSelector: {kubernetes.io/os: linux}
tolerations: [{key: dedicated, operator: Equal, value: infra, effect: NoSchedule}]
affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: kubernetes.io/arch, operator: In, values: [amd64, arm64]}]}]}}}
topologySpreadConstraints: [{maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: ScheduleAnyway, labelSelector: {matchLabels: {app.kubernetes.io/name: certapi}}}]
priorityClassName: ""
`), 0o644); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name string
		args []string
		// podSecurity is the namespace's Pod Security level for the dry run; default restricted.
		podSecurity string
		check       func(t *testing.T, ns string, objs []*unstructured.Unstructured, pod *corev1.PodSpec)
	}{{
		name: "defaults",
		check: func(t *testing.T, ns string, objs []*unstructured.Unstructured, pod *corev1.PodSpec) {
			c := certapiContainer(t, pod)
			if !reflect.DeepEqual(pod.SecurityContext, hardenedPod) || !reflect.DeepEqual(c.SecurityContext, hardenedContainer) {
				t.Errorf("security contexts: pod %+v, container %+v; want the hardened ones", pod.SecurityContext, c.SecurityContext)
			}
			if pod.HostNetwork || pod.DNSPolicy != "" || pod.ServiceAccountName != release {
				t.Errorf("hostNetwork %v, dnsPolicy %q, serviceAccountName %q; want false, unset, %s", pod.HostNetwork, pod.DNSPolicy, pod.ServiceAccountName, release)
			}
			var volumes, mounts []string
			for _, v := range pod.Volumes {
				volumes = append(volumes, v.Name)
				if v.Secret != nil && len(v.Secret.Items) > 0 {
					t.Errorf("volume %s maps the Secret's keys %v; want the whole Secret", v.Name, v.Secret.Items)
				}
			}
			for _, m := range c.VolumeMounts {
				mounts = append(mounts, m.Name+":"+m.MountPath)
			}
			// etcd.mode cluster, the default: the data volume is each pod's claim (volumeClaimTemplates); custody
			// etcd, the default: the projected token a member enrolls with.
			if !slices.Equal(volumes, []string{"encryption-config", "etcd-member-token"}) || !slices.Equal(mounts,
				[]string{"data:/var/lib/certapi", "encryption-config:/etc/certapi/encryption", "etcd-member-token:/var/run/secrets/certapi.dev/etcd-member"}) {
				t.Errorf("volumes %v, mounts %v; want the claim data, encryption-config and the member token only", volumes, mounts)
			}
			for _, v := range pod.Volumes {
				if p := v.Projected; v.Name == "etcd-member-token" && (p == nil || len(p.Sources) != 1 || p.Sources[0].ServiceAccountToken == nil ||
					p.Sources[0].ServiceAccountToken.Audience != "certapi.dev/etcd-member") {
					t.Errorf("volume etcd-member-token %+v; want a projected ServiceAccount token for audience certapi.dev/etcd-member only", v)
				}
			}
			var ports []string
			for _, p := range c.Ports {
				ports = append(ports, fmt.Sprintf("%s:%d", p.Name, p.ContainerPort))
			}
			if !slices.Equal(ports, []string{"https:8443", "etcd-client:2379", "etcd-peer:2380", "etcd-enroll:2381"}) || !slices.Contains(c.Args, "--secure-port=8443") ||
				!slices.Contains(c.Args, "--etcd-peer-ca-custody=etcd") {
				t.Errorf("ports %v, args %v; want 8443, the member's 2379, 2380 and 2381, and custody etcd", ports, c.Args)
			}
			if len(c.Env) != 1 || pod.Affinity == nil || pod.Affinity.PodAntiAffinity == nil || pod.NodeSelector != nil || pod.Tolerations != nil || pod.TopologySpreadConstraints != nil {
				t.Errorf("env %v, affinity %+v, nodeSelector %v, tolerations %v, spread %v; want POD_NAME, the soft anti-affinity and nothing else", c.Env, pod.Affinity, pod.NodeSelector, pod.Tolerations, pod.TopologySpreadConstraints)
			}
			sa := find(objs, "ServiceAccount", release)
			if sa == nil || len(sa.GetAnnotations()) != 0 {
				t.Errorf("ServiceAccount %s: %v; want it, without annotations", release, sa)
			}
		},
	}, {
		name: "existing ServiceAccount",
		args: []string{"--set", "serviceAccount.create=false", "--set", "serviceAccount.name=platform-certapi"},
		check: func(t *testing.T, ns string, objs []*unstructured.Unstructured, pod *corev1.PodSpec) {
			if sa := ofKind(objs, "ServiceAccount"); len(sa) != 1 || sa[0].GetName() != release+"-test" {
				t.Errorf("ServiceAccounts rendered: %d; want only the helm test's", len(sa))
			}
			checkServiceAccount(t, ns, objs, pod, "platform-certapi")
		},
	}, {
		name: "named ServiceAccount",
		args: []string{"--set", "serviceAccount.name=certapi-sa", "--set", "serviceAccount.annotations.eks\\.amazonaws\\.com/role-arn=arn:aws:iam::111122223333:role/certapi-kms"},
		check: func(t *testing.T, ns string, objs []*unstructured.Unstructured, pod *corev1.PodSpec) {
			sa := find(objs, "ServiceAccount", "certapi-sa")
			if sa == nil || sa.GetAnnotations()["eks.amazonaws.com/role-arn"] != "arn:aws:iam::111122223333:role/certapi-kms" {
				t.Errorf("ServiceAccount certapi-sa: %v; want it, with the role annotation", sa)
			}
			checkServiceAccount(t, ns, objs, pod, "certapi-sa")
		},
	}, {
		name: "UID from the platform",
		args: []string{"-f", openshift, "--set", "securityContext.runAsUser=1000680000"},
		check: func(t *testing.T, ns string, objs []*unstructured.Unstructured, pod *corev1.PodSpec) {
			want := hardenedPod.DeepCopy()
			want.RunAsUser, want.RunAsGroup, want.FSGroup = nil, nil, nil
			if !reflect.DeepEqual(pod.SecurityContext, want) {
				t.Errorf("pod security context %+v; want %+v", pod.SecurityContext, want)
			}
			wantC := hardenedContainer.DeepCopy()
			wantC.RunAsUser = ptr.To[int64](1000680000)
			if got := certapiContainer(t, pod).SecurityContext; !reflect.DeepEqual(got, wantC) {
				t.Errorf("container security context %+v; want %+v", got, wantC)
			}
		},
	}, {
		name: "KMS volume and the pod settings",
		args: []string{"-f", kms},
		// A hostPath volume: baseline and restricted refuse it.
		podSecurity: "privileged",
		check: func(t *testing.T, ns string, objs []*unstructured.Unstructured, pod *corev1.PodSpec) {
			c := certapiContainer(t, pod)
			if v := pod.Volumes[len(pod.Volumes)-1]; v.Name != "kms" || v.HostPath == nil || v.HostPath.Path != "/var/run/kmsplugin" || len(pod.Volumes) != 3 {
				t.Errorf("volumes %+v; want encryption-config, the member token and the KMS socket's directory (data is the claim template's)", pod.Volumes)
			}
			if m := c.VolumeMounts[len(c.VolumeMounts)-1]; m.Name != "kms" || m.MountPath != "/var/run/kmsplugin" || len(c.VolumeMounts) != 4 {
				t.Errorf("mounts %+v; want data, encryption-config, the member token and kms", c.VolumeMounts)
			}
			if c.Args[len(c.Args)-1] != "--v=2" || len(c.Env) != 2 || c.Env[1].Name != "GOMEMLIMIT" || c.Env[1].Value != "200MiB" {
				t.Errorf("args %v, env %+v; want --v=2 last and GOMEMLIMIT after POD_NAME", c.Args, c.Env)
			}
			d, _ := certapiArgs(t, objs)
			meta := d.Spec.Template.ObjectMeta
			if meta.Annotations["example.com/owner"] != "platform" || meta.Labels["example.com/team"] != "platform" || meta.Labels["app.kubernetes.io/name"] != "certapi" {
				t.Errorf("pod labels %v, annotations %v; want the selector's and the values'", meta.Labels, meta.Annotations)
			}
			if pod.NodeSelector["kubernetes.io/os"] != "linux" || len(pod.Tolerations) != 1 || pod.Tolerations[0].Value != "infra" ||
				pod.Affinity == nil || pod.Affinity.NodeAffinity == nil || pod.Affinity.PodAntiAffinity != nil ||
				len(pod.TopologySpreadConstraints) != 1 || pod.PriorityClassName != "" {
				t.Errorf("nodeSelector %v, tolerations %+v, affinity %+v, spread %+v, priority %q; want the values'", pod.NodeSelector, pod.Tolerations, pod.Affinity, pod.TopologySpreadConstraints, pod.PriorityClassName)
			}
		},
	}, {
		name: "CA keys in an HSM",
		args: []string{"--set", "caKeyPlugin.enabled=true", "--set", "caKeyPlugin.image=registry.example.com/kms:1", "--set", "caKeyPlugin.module=/usr/lib/hsm/libhsm.so",
			"--set", "caKeyPlugin.tokenLabel=HSM #1", "--set", "caKeyPlugin.pinSecret=hsm-pin", "--set", "caKeyPlugin.pinKey=user-pin", "--set", "caKeyPlugin.timeout=2s",
			"--set-json", `caKeyPlugin.env=[{"name":"HSM_CONF","value":"/etc/hsm/client.conf"}]`, "--set-json", `caKeyPlugin.volumeMounts=[{"name":"hsm-client","mountPath":"/etc/hsm"}]`,
			"--set-json", `extraVolumes=[{"name":"hsm-client","secret":{"secretName":"hsm-client"}}]`},
		// Restricted (the default of the dry run): the sidecar meets it too.
		check: func(t *testing.T, ns string, objs []*unstructured.Unstructured, pod *corev1.PodSpec) {
			c := certapiContainer(t, pod)
			_, args := certapiArgs(t, objs)
			if args["ca-key-plugin"] != "/var/run/certapi-keys/keys.sock" || args["ca-key-plugin-timeout"] != "2s" {
				t.Errorf("certapi's --ca-key-plugin=%q --ca-key-plugin-timeout=%q; want the sidecar's socket and 2s", args["ca-key-plugin"], args["ca-key-plugin-timeout"])
			}
			if len(pod.InitContainers) != 1 {
				t.Fatalf("init containers %+v; want the key plugin alone", pod.InitContainers)
			}
			p := pod.InitContainers[0]
			// A token label is free text: all of it reaches the plugin, "#" included.
			wantArgs := []string{"--module=/usr/lib/hsm/libhsm.so", "--token-label=HSM #1", "--pin-file=/etc/certapi-kms/pin", "--listen=", "--ca-key-socket=/var/run/certapi-keys/keys.sock"}
			if p.Name != "ca-key-plugin" || p.RestartPolicy == nil || *p.RestartPolicy != corev1.ContainerRestartPolicyAlways || p.Image != "registry.example.com/kms:1" ||
				!slices.Equal(p.Args, wantArgs) || len(p.Env) != 1 || p.Env[0].Name != "HSM_CONF" || !reflect.DeepEqual(p.SecurityContext, hardenedContainer) {
				t.Errorf("the key plugin %+v; want a sidecar (restartPolicy Always) of the image with args %v, the env and the hardened security context", p, wantArgs)
			}
			mounts := func(c corev1.Container) (out []string) {
				for _, m := range c.VolumeMounts {
					out = append(out, m.Name+":"+m.MountPath)
				}
				return out
			}
			if got := mounts(p); !slices.Equal(got, []string{"ca-key-socket:/var/run/certapi-keys", "ca-key-pin:/etc/certapi-kms", "hsm-client:/etc/hsm"}) {
				t.Errorf("the key plugin's mounts %v; want the socket, the PIN and the values' mount", got)
			}
			if got := mounts(*c); !slices.Contains(got, "ca-key-socket:/var/run/certapi-keys") || slices.Contains(got, "ca-key-pin:/etc/certapi-kms") {
				t.Errorf("certapi's mounts %v; want the socket's directory and never the PIN", got)
			}
			for _, v := range pod.Volumes {
				switch v.Name {
				case "ca-key-socket":
					if v.EmptyDir == nil || v.EmptyDir.Medium != corev1.StorageMediumMemory {
						t.Errorf("volume ca-key-socket %+v; want an in-memory emptyDir", v)
					}
				case "ca-key-pin":
					if v.Secret == nil || v.Secret.SecretName != "hsm-pin" || len(v.Secret.Items) != 1 || v.Secret.Items[0].Key != "user-pin" || v.Secret.Items[0].Path != "pin" {
						t.Errorf("volume ca-key-pin %+v; want the Secret hsm-pin's key user-pin as the file pin", v)
					}
				}
			}
		},
	}, {
		name:        "host network",
		args:        []string{"--set", "hostNetwork=true", "--set", "securePort=10443"},
		podSecurity: "privileged",
		check: func(t *testing.T, ns string, objs []*unstructured.Unstructured, pod *corev1.PodSpec) {
			c := certapiContainer(t, pod)
			_, args := certapiArgs(t, objs)
			if !pod.HostNetwork || pod.DNSPolicy != corev1.DNSClusterFirstWithHostNet || args["secure-port"] != "10443" ||
				len(c.Ports) == 0 || c.Ports[0].ContainerPort != 10443 || c.Ports[0].Name != "https" {
				t.Errorf("hostNetwork %v, dnsPolicy %q, --secure-port=%s, ports %+v; want true, ClusterFirstWithHostNet, 10443 named https",
					pod.HostNetwork, pod.DNSPolicy, args["secure-port"], c.Ports)
			}
			var svc corev1.Service
			convert(t, find(objs, "Service", release), &svc)
			if svc.Spec.Ports[0].Port != 443 || svc.Spec.Ports[0].TargetPort.String() != "https" {
				t.Errorf("Service ports %+v; want 443 to the port named https", svc.Spec.Ports)
			}
			var np networkingv1.NetworkPolicy
			convert(t, find(objs, "NetworkPolicy", release), &np)
			if p := np.Spec.Ingress[0].Ports[0].Port.IntValue(); p != 10443 {
				t.Errorf("NetworkPolicy admits port %d; want 10443", p)
			}
		},
	}, {
		name: "scheduled snapshots in the data volume",
		args: []string{"--set", "snapshots.interval=1h"},
		check: func(t *testing.T, ns string, objs []*unstructured.Unstructured, pod *corev1.PodSpec) {
			if _, args := certapiArgs(t, objs); args["snapshot-interval"] != "1h" || args["snapshot-retention"] != "5" || args["snapshot-dir"] != "" {
				t.Errorf("--snapshot-interval=%q --snapshot-retention=%q --snapshot-dir=%q; want 1h, 5 and certapi's default (<data-dir>/snapshots)",
					args["snapshot-interval"], args["snapshot-retention"], args["snapshot-dir"])
			}
		},
	}, {
		name: "scheduled snapshots on a claim of their own",
		args: []string{"--set", "snapshots.interval=30m", "--set", "snapshots.retention=48", "--set", "snapshots.existingClaim=certapi-backups"},
		check: func(t *testing.T, ns string, objs []*unstructured.Unstructured, pod *corev1.PodSpec) {
			if _, args := certapiArgs(t, objs); args["snapshot-interval"] != "30m" || args["snapshot-retention"] != "48" || args["snapshot-dir"] != "/var/lib/certapi-snapshots" {
				t.Errorf("--snapshot-interval=%q --snapshot-retention=%q --snapshot-dir=%q; want 30m, 48, /var/lib/certapi-snapshots",
					args["snapshot-interval"], args["snapshot-retention"], args["snapshot-dir"])
			}
			var claim string
			for _, v := range pod.Volumes {
				if v.Name == "snapshots" && v.PersistentVolumeClaim != nil {
					claim = v.PersistentVolumeClaim.ClaimName
				}
			}
			mounted := false
			for _, m := range certapiContainer(t, pod).VolumeMounts {
				mounted = mounted || (m.Name == "snapshots" && m.MountPath == "/var/lib/certapi-snapshots")
			}
			if claim != "certapi-backups" || !mounted {
				t.Errorf("snapshots volume claim %q, mounted at /var/lib/certapi-snapshots %v; want certapi-backups, true", claim, mounted)
			}
		},
	}, {
		name: "a registry mirror with pull Secrets and labels of the platform",
		args: []string{"--set", "global.imageRegistry=mirror.example.com:5000/hub", "--set", "global.imagePullSecrets[0]=mirror-pull",
			"--set", "imagePullSecrets[0].name=certapi-pull", "--set", "imagePullSecrets[1].name=mirror-pull", "--set", "commonLabels.example\\.com/team=platform"},
		check: func(t *testing.T, ns string, objs []*unstructured.Unstructured, pod *corev1.PodSpec) {
			// The mirror replaces ghcr.io, the repository's registry; a pull Secret named twice is given once.
			if got, want := certapiContainer(t, pod).Image, "mirror.example.com:5000/hub/certapi/certapi:"; !strings.HasPrefix(got, want) {
				t.Errorf("image %s; want it pulled from the mirror, %s<tag>", got, want)
			}
			var secrets []string
			for _, s := range pod.ImagePullSecrets {
				secrets = append(secrets, s.Name)
			}
			if !slices.Equal(secrets, []string{"mirror-pull", "certapi-pull"}) {
				t.Errorf("imagePullSecrets %v; want [mirror-pull certapi-pull]", secrets)
			}
			for _, u := range objs {
				if u.GetLabels()["example.com/team"] != "platform" {
					t.Errorf("%s %s has no label example.com/team=platform (commonLabels)", u.GetKind(), u.GetName())
				}
			}
		},
	}, {
		name: "an image registry of its own",
		args: []string{"--set", "image.registry=registry.example.com", "--set", "image.repository=platform/certapi", "--set", "image.digest=sha256:" + strings.Repeat("ab", 32)},
		check: func(t *testing.T, ns string, objs []*unstructured.Unstructured, pod *corev1.PodSpec) {
			// A repository with no registry of its own gets the registry in front.
			if got, want := certapiContainer(t, pod).Image, "registry.example.com/platform/certapi@sha256:"+strings.Repeat("ab", 32); got != want {
				t.Errorf("image %s; want %s", got, want)
			}
		},
	}, {
		name: "existing encryption Secret",
		args: []string{"--set", "encryption.secretName=platform-encryption", "--set", "encryption.secretKey=encryption-config.yaml"},
		check: func(t *testing.T, ns string, objs []*unstructured.Unstructured, pod *corev1.PodSpec) {
			if s := ofKind(objs, "Secret"); len(s) != 0 {
				t.Errorf("the chart renders Secret %s; want none (the key stays out of the release)", s[0].GetName())
			}
			var v *corev1.SecretVolumeSource
			for _, vol := range pod.Volumes {
				if vol.Name == "encryption-config" {
					v = vol.Secret
				}
			}
			if v == nil || v.SecretName != "platform-encryption" || !reflect.DeepEqual(v.Items, []corev1.KeyToPath{{Key: "encryption-config.yaml", Path: "config.yaml"}}) {
				t.Errorf("encryption volume %+v; want Secret platform-encryption, key encryption-config.yaml as config.yaml", v)
			}
			if _, args := certapiArgs(t, objs); args["encryption-provider-config"] != "/etc/certapi/encryption/config.yaml" {
				t.Errorf("--encryption-provider-config=%q", args["encryption-provider-config"])
			}
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			ns := "certapi-values-" + strings.ToLower(strings.ReplaceAll(strings.ReplaceAll(tc.name, ",", ""), " ", "-"))
			if len(ns) > 63 {
				ns = strings.TrimRight(ns[:63], "-")
			}
			objs, out := render(t, ns, tc.args...)
			d, _ := certapiArgs(t, objs)
			tc.check(t, ns, objs, &d.Spec.Template.Spec)
			checkHelmTest(t, ns, objs, &d.Spec.Template.Spec)
			level := tc.podSecurity
			if level == "" {
				level = "restricted"
			}
			dryRun(t, ns, level, out, objs)
		})
	}
}

// checkServiceAccount checks that certapi runs as the ServiceAccount name and that every binding and
// admission policy names that one.
func checkServiceAccount(t *testing.T, ns string, objs []*unstructured.Unstructured, pod *corev1.PodSpec, name string) {
	t.Helper()
	if pod.ServiceAccountName != name {
		t.Errorf("serviceAccountName %q; want %s", pod.ServiceAccountName, name)
	}
	subjects := serviceAccountSubjects(t, objs)
	if len(subjects) < 3 {
		t.Errorf("bindings bind %v; want the ClusterRole, auth-delegator and the authentication reader", subjects)
	}
	for _, s := range subjects {
		if s != ns+"/"+name {
			t.Errorf("a binding binds %s; want %s/%s", s, ns, name)
		}
	}
	users := policyUsers(t, objs)
	if len(users) == 0 {
		t.Error("no ValidatingAdmissionPolicy")
	}
	for _, u := range users {
		if u != "system:serviceaccount:"+ns+":"+name {
			t.Errorf("an admission policy matches %s; want system:serviceaccount:%s:%s", u, ns, name)
		}
	}
}

// checkHelmTest checks the helm test's objects: test hooks, a Pod that runs `certapi selftest` with
// certapi's image and security contexts, and RBAC for exactly its own ServingCertRequest.
func checkHelmTest(t *testing.T, ns string, objs []*unstructured.Unstructured, certapiPod *corev1.PodSpec) {
	t.Helper()
	name := release + "-test"
	var hooks []string
	for _, u := range objs {
		if u.GetAnnotations()["helm.sh/hook"] == "test" {
			hooks = append(hooks, u.GetKind())
		}
	}
	slices.Sort(hooks)
	if want := []string{"ClusterRole", "ClusterRoleBinding", "Pod", "Role", "RoleBinding", "ServiceAccount"}; !slices.Equal(hooks, want) {
		t.Errorf("helm test hooks %v; want %v", hooks, want)
	}
	u := find(objs, "Pod", name)
	if u == nil {
		t.Fatalf("no Pod %s", name)
	}
	if u.GetAnnotations()["helm.sh/hook-delete-policy"] != "before-hook-creation,hook-succeeded" {
		t.Errorf("Pod %s hook-delete-policy %q", name, u.GetAnnotations()["helm.sh/hook-delete-policy"])
	}
	var pod corev1.Pod
	convert(t, u, &pod)
	c := pod.Spec.Containers[0]
	cc := certapiContainer(t, certapiPod)
	wantArgs := []string{"selftest", "--namespace=" + ns, "--name=" + name, "--service=" + name, "--timeout=2m"}
	if len(pod.Spec.Containers) != 1 || c.Image != cc.Image || !slices.Equal(c.Args, wantArgs) || pod.Spec.ServiceAccountName != name || pod.Spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("helm test Pod: image %s, args %v, serviceAccountName %s, restartPolicy %s; want certapi's image %s, %v, %s, Never",
			c.Image, c.Args, pod.Spec.ServiceAccountName, pod.Spec.RestartPolicy, cc.Image, wantArgs, name)
	}
	if !reflect.DeepEqual(pod.Spec.SecurityContext, certapiPod.SecurityContext) || !reflect.DeepEqual(c.SecurityContext, cc.SecurityContext) {
		t.Errorf("helm test Pod security contexts %+v, %+v; want certapi's", pod.Spec.SecurityContext, c.SecurityContext)
	}
	var role rbacv1.Role
	convert(t, find(objs, "Role", name), &role)
	for _, r := range role.Rules {
		if !slices.Contains(r.Verbs, "create") || len(r.Resources) != 1 || r.Resources[0] != "servingcertrequests" {
			if !slices.Equal(r.ResourceNames, []string{name}) {
				t.Errorf("helm test Role rule %+v: want it limited to ServingCertRequest %s", r, name)
			}
		}
	}
}

// TestHelmTestPod runs what the helm test Pod runs, `certapi selftest` with the Pod's arguments, against a
// control plane with certapi, as the Pod's ServiceAccount with exactly the RBAC the chart gives it (no
// node runs the Pod here): it passes, and leaves no ServingCertRequest behind. Without that RBAC it fails
// saying what was forbidden.
func TestHelmTestPod(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	bin, err := framework.CertapiBinary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	withCertapi := framework.StartT(t, framework.Options{Dir: t.TempDir()})
	ns := framework.CertapiNamespace
	objs, _ := render(t, ns, "--show-only", "templates/tests/selftest.yaml")
	var pod corev1.Pod
	var rbac []*unstructured.Unstructured
	for _, u := range objs {
		if u.GetKind() == "Pod" {
			convert(t, u, &pod)
		} else {
			rbac = append(rbac, u)
		}
	}
	user := "system:serviceaccount:" + ns + ":" + pod.Spec.ServiceAccountName
	userConfig, err := withCertapi.UserConfig(user, "system:serviceaccounts", "system:serviceaccounts:"+ns, "system:authenticated")
	if err != nil {
		t.Fatal(err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["c"] = &clientcmdapi.Cluster{Server: userConfig.Host, CertificateAuthorityData: userConfig.CAData}
	cfg.AuthInfos["u"] = &clientcmdapi.AuthInfo{ClientCertificateData: userConfig.CertData, ClientKeyData: userConfig.KeyData}
	cfg.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	cfg.CurrentContext = "c"
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, kubeconfig); err != nil {
		t.Fatal(err)
	}
	args := append(slices.Clone(pod.Spec.Containers[0].Args), "--kubeconfig="+kubeconfig)
	selftest := func() (string, error) {
		cctx, ccancel := context.WithTimeout(ctx, time.Minute)
		defer ccancel()
		return command(cctx, bin, args...)
	}

	// Without the RBAC: refused, saying so.
	if out, err := selftest(); err == nil || !strings.Contains(out, "forbidden") {
		t.Errorf("certapi %v without RBAC: %v; want a failure saying forbidden:\n%s", args, err, out)
	}

	file := filepath.Join(t.TempDir(), "rbac.yaml")
	var docs []string
	for _, u := range rbac {
		b, err := u.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, string(b))
	}
	if err := os.WriteFile(file, []byte(strings.Join(docs, "\n---\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := command(ctx, kubectlBin, "--kubeconfig", withCertapi.Kubeconfig, "apply", "--server-side", "-f", file); err != nil {
		t.Fatalf("applying the helm test's RBAC: %v\n%s", err, out)
	}
	// RBAC takes effect once kube-apiserver's authorizer has it.
	asTest, err := kubernetes.NewForConfig(userConfig)
	if err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, attrs := range []authorizationv1.ResourceAttributes{
			{Group: "apiregistration.k8s.io", Resource: "apiservices", Name: "v1alpha1.certapi.dev", Verb: "get"},
			{Group: "certapi.dev", Resource: "servingcertrequests", Subresource: "servingcerts", Namespace: ns, Name: pod.Spec.ServiceAccountName, Verb: "create"},
		} {
			r, err := asTest.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
				Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &attrs}}, metav1.CreateOptions{})
			if err != nil || !r.Status.Allowed {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("the helm test's RBAC does not take effect: %v", err)
	}
	out, err := selftest()
	if err != nil {
		t.Fatalf("certapi %v: %v\n%s", args, err, out)
	}
	for _, want := range []string{"ok: APIService v1alpha1.certapi.dev is Available", "ok: created ServingCertRequest", "ok: servingcerts issued serial", "ok: deleted ServingCertRequest"} {
		if !strings.Contains(out, want) {
			t.Errorf("certapi selftest printed no %q:\n%s", want, out)
		}
	}
	t.Logf("certapi selftest:\n%s", out)
}
