package manifests

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/restmapper"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"

	"github.com/certapi/certapi/test/e2e/e2etest"
	"github.com/certapi/certapi/test/framework"
	"github.com/certapi/certapi/test/testhelpers"
)

// The manifests under artifacts/ are checked against the real kube-apiserver (and certapi) of the shared
// control plane: every kustomization builds with the kubectl the tests use, applies with a server-side
// dry run, and says what the design says (flags certapi and etcd really have, files that are mounted,
// RBAC aggregation, Pod Security "restricted", the Argo CD settings).

// Paths relative to the repository root.
const (
	deployBase     = "artifacts/deploy/base"
	deployExternal = "artifacts/deploy/overlays/external-etcd"
	deploySingle   = "artifacts/deploy/overlays/single-replica"
	etcdComponent  = "artifacts/deploy/components/etcd"
	noEtcdCluster  = "artifacts/deploy/components/no-etcd-cluster"
	argoCDApp      = "artifacts/examples/argocd/application.yaml"
	// podCertificates is the example of pods that get their certificate from kubelet.
	podCertificates = "artifacts/examples/pod-certificates"
)

// kustomization is one directory with a kustomization file, and what `kubectl kustomize` made of it.
type kustomization struct {
	dir       string // relative to the repository root, slash-separated
	component bool   // kind: Component
	// patchesOnly: a component with no resources of its own (components/no-etcd-cluster), which only
	// changes those of the kustomization that uses it and builds only there.
	patchesOnly bool
	refs        []string
	objs        []*unstructured.Unstructured
}

// manifests is every kustomization under artifacts/, built.
type manifests struct {
	root string
	// ks is keyed by directory, relative to root and slash-separated.
	ks map[string]*kustomization
}

// TestManifests builds every kustomization once and then checks it, one subtest a concern.
func TestManifests(t *testing.T) {
	m := build(t)
	for _, tc := range []struct {
		name  string
		check func(*testing.T, *manifests)
	}{
		{"every component is used", checkComponentsUsed},
		{"server-side dry run", checkServerSideDryRun},
		{"pods meet Pod Security restricted", checkPodSecurity},
		{"certapi's flags exist", checkCertapiFlags},
		{"etcd's flags exist", checkEtcdFlags},
		{"certapi serves itself and registers its APIService for injection", checkSelfServing},
		{"the base is the chart's default: three replicas forming one etcd cluster", checkBaseCluster},
		{"three replicas on the dedicated etcd", checkExternalEtcd},
		{"single replica runs an embedded etcd", checkSingleReplica},
		{"default RBAC aggregates view, edit and admin", checkRBACAggregation},
		{"admission policies type-check", checkPolicies},
		{"the image's build context holds what certapi needs", checkImageBuildContext},
		{"Argo CD example", checkArgoCDExample},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.check(t, m) })
	}
}

// build finds every kustomization under artifacts/ and builds it with kubectl kustomize; it stops the
// test when one does not build, since every check reads the results.
func build(t *testing.T) *manifests {
	t.Helper()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	ks := findKustomizations(t, root)
	for _, want := range []string{deployBase, deployExternal, deploySingle, etcdComponent, noEtcdCluster, "artifacts/examples/argocd/widget-webhook", podCertificates} {
		if ks[want] == nil {
			t.Errorf("no kustomization in %s", want)
		}
	}
	for _, dir := range sortedKeys(ks) {
		k := ks[dir]
		if k.patchesOnly {
			continue
		}
		out, errOut, err := e2etest.Run(t, e2etest.KubectlPath(t), "kustomize", filepath.Join(root, dir))
		if err != nil {
			t.Errorf("kubectl kustomize %s: %v\n%s", dir, err, errOut)
			continue
		}
		if k.objs, err = framework.DecodeManifests(out); err != nil {
			t.Errorf("kubectl kustomize %s: output does not decode: %v", dir, err)
		}
		if len(k.objs) == 0 {
			t.Errorf("kubectl kustomize %s: no objects", dir)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	return &manifests{root: root, ks: ks}
}

// checkComponentsUsed checks that every component of artifacts/ is used by a kustomization.
func checkComponentsUsed(t *testing.T, m *manifests) {
	ks := m.ks
	used := map[string]bool{}
	for _, k := range ks {
		for _, r := range k.refs {
			used[r] = true
		}
	}
	for dir, k := range ks {
		if k.component && !used[dir] {
			t.Errorf("component %s is referenced by no kustomization under artifacts/", dir)
		}
	}
}

// checkServerSideDryRun checks that every kustomization applies with a server-side dry run, also as
// server-side apply, without warnings.
func checkServerSideDryRun(t *testing.T, m *manifests) {
	ks := m.ks
	_, kube := testhelpers.Clients(t, cp.AdminConfig)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(kube.Discovery()))
	for _, dir := range sortedKeys(ks) {
		k := ks[dir]
		if k.component {
			continue // applied through the overlays that use it
		}
		t.Run(dir, func(t *testing.T) {
			// A pod with a podCertificate volume (artifacts/examples/pod-certificates) needs Kubernetes
			// 1.37: an older kube-apiserver refuses the field, and serves no PodCertificateRequests.
			if usesPodCertificates(t, k.objs) {
				testhelpers.SkipUnlessServed(t, cp.AdminConfig, "certificates.k8s.io/v1", "podcertificaterequests")
			}
			// A server dry run does not create the Namespace of the same apply, so the namespaced
			// objects after it would fail with "namespaces not found". Create the namespaces that do
			// not exist yet for real first (certapi-system exists in this control plane already; it
			// is what the framework registers certapi in).
			// Created with the labels the manifests give it: a label the objects after it depend on (the
			// opt-in to Secret delivery, certapi.dev/secret-delivery) must be there for their dry run.
			labels := map[string]map[string]string{}
			for _, u := range ofKind(k.objs, "Namespace") {
				labels[u.GetName()] = u.GetLabels()
			}
			for _, ns := range namespacesOf(t, mapper, k.objs) {
				ensureNamespace(t, kube, ns, labels[ns])
			}
			// Objects this control plane already has (the framework registered certapi with its own
			// Namespace, ExternalName Service and APIService) would be merged with the framework's
			// fields by an apply, which says nothing about the manifests: the framework's Service port
			// and ours even collide. Validate those as a whole-object replacement instead, which is what
			// they are on a cluster where the manifests are the only source; apply the rest.
			existing, fresh := splitExisting(t, mapper, k.objs)
			for _, u := range existing {
				t.Logf("%s %s exists in the control plane already: validated with kubectl replace --dry-run=server", u.GetKind(), u.GetName())
			}
			if len(existing) > 0 {
				out, errOut, err := kubectlResult(t, "replace", "--dry-run=server", "-f", writeObjects(t, existing))
				if err != nil {
					t.Errorf("kubectl replace --dry-run=server of the objects %s has that exist already: %v\nstdout: %s\nstderr: %s", dir, err, out, errOut)
				}
			}
			file := writeObjects(t, fresh)
			out, errOut, err := kubectlResult(t, "apply", "--dry-run=server", "-f", file)
			if err != nil {
				t.Fatalf("kubectl apply --dry-run=server of %s: %v\nstdout: %s\nstderr: %s", dir, err, out, errOut)
			}
			if n := strings.Count(out, "(server dry run)"); n != len(fresh) {
				t.Errorf("kubectl apply --dry-run=server of %s reported %d objects, want %d:\n%s", dir, n, len(fresh), out)
			}
			if strings.Contains(errOut, "Warning") {
				t.Errorf("kubectl apply --dry-run=server of %s warned:\n%s", dir, errOut)
			}
			// Server-side apply, as Argo CD's ServerSideApply=true does it, is stricter about lists
			// (duplicate keys in env, ports, volumes are errors there).
			out, errOut, err = kubectlResult(t, "apply", "--server-side", "--field-manager=manifests-test", "--dry-run=server", "-f", file)
			if err != nil {
				t.Errorf("kubectl apply --server-side --dry-run=server of %s: %v\nstdout: %s\nstderr: %s", dir, err, out, errOut)
			}
		})
	}
}

// usesPodCertificates reports whether a pod template of objs mounts a podCertificate projected volume.
func usesPodCertificates(t *testing.T, objs []*unstructured.Unstructured) bool {
	t.Helper()
	for _, u := range objs {
		data, err := u.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(data), `"podCertificate":`) {
			return true
		}
	}
	return false
}

// checkPodSecurity checks that every pod template is admitted in a namespace that enforces Pod Security
// "restricted".
func checkPodSecurity(t *testing.T, m *manifests) {
	ks := m.ks
	// certapi-system enforces the restricted profile (base/namespace.yaml), so a pod template that
	// breaks it would never run. Create each pod template for real in a namespace that enforces it
	// too, with dryRun, so that the PodSecurity admission plugin rules on it.
	_, kube := testhelpers.Clients(t, cp.AdminConfig)
	ns := e2etest.Namespace(t, kube)
	nsObj, err := kube.CoreV1().Namespaces().Get(context.Background(), ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nsObj.Labels["pod-security.kubernetes.io/enforce"] = "restricted"
	nsObj.Labels["pod-security.kubernetes.io/enforce-version"] = "latest"
	if _, err := kube.CoreV1().Namespaces().Update(context.Background(), nsObj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// No ServiceAccount controller runs here: create the accounts the pods name.
	for _, sa := range []string{"default", "certapi", "web", "client"} {
		if _, err := kube.CoreV1().ServiceAccounts(ns).Create(context.Background(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, dir := range []string{deployBase, deployExternal, deploySingle, podCertificates} {
		for _, w := range workloadsOf(t, ks[dir].objs) {
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: w.name, Namespace: ns, Labels: w.template.Labels},
				Spec:       *w.template.Spec.DeepCopy(),
			}
			if _, err := kube.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
				t.Errorf("%s: the pod of %s %s is refused in a namespace that enforces restricted: %v", dir, w.kind, w.name, err)
			}
		}
	}
}

// checkCertapiFlags checks that every argument the workloads give certapi is a flag certapi has.
func checkCertapiFlags(t *testing.T, m *manifests) {
	ks := m.ks
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin, err := framework.CertapiBinary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	flags := helpFlags(t, bin)
	for _, dir := range []string{deployBase, deployExternal, deploySingle} {
		w := certapiWorkload(t, ks[dir].objs)
		c := containerOf(t, &w.template.Spec, "certapi")
		for _, arg := range c.Args {
			name := flagName(arg)
			if name == "" {
				t.Errorf("%s: certapi argument %q is not a --flag", dir, arg)
			} else if !flags[name] {
				t.Errorf("%s: certapi (%s) has no flag --%s (passed as %q)", dir, bin, name, arg)
			}
		}
	}
}

// checkEtcdFlags checks that every argument the external-etcd overlay gives etcd is a flag etcd has.
func checkEtcdFlags(t *testing.T, m *manifests) {
	ks := m.ks
	root := m.root
	bin := filepath.Join(root, "_output", "bin", "etcd")
	if p := os.Getenv(framework.EnvEtcdBin); p != "" {
		bin = p
	}
	flags := helpFlags(t, bin)
	sts := statefulSetOf(t, ks[deployExternal].objs, "certapi-system", "certapi-etcd")
	c := containerOf(t, &sts.Spec.Template.Spec, "etcd")
	if len(c.Command) != 1 || filepath.Base(c.Command[0]) != "etcd" {
		t.Errorf("etcd command %q; want the etcd binary alone, flags in args", c.Command)
	}
	for _, arg := range c.Args {
		if name := flagName(arg); !flags[name] {
			t.Errorf("etcd has no flag --%s (passed as %q)", name, arg)
		}
	}
}

// checkSelfServing checks that certapi serves itself behind its APIService, which opts in to injection,
// with its files mounted and its keys encrypted.
func checkSelfServing(t *testing.T, m *manifests) {
	ks := m.ks
	objs := ks[deployBase].objs
	var apiService apiregistrationv1.APIService
	convert(t, findObject(t, objs, "APIService", "", "v1alpha1.certapi.dev"), &apiService)
	if apiService.Annotations["certapi.dev/inject-ca-bundle"] != "true" {
		t.Errorf("APIService annotations %v; want certapi.dev/inject-ca-bundle: \"true\"", apiService.Annotations)
	}
	if len(apiService.Spec.CABundle) > 0 || apiService.Spec.InsecureSkipTLSVerify {
		t.Errorf("APIService has caBundle %q and insecureSkipTLSVerify %v; want neither: certapi injects the bundle", apiService.Spec.CABundle, apiService.Spec.InsecureSkipTLSVerify)
	}
	if u := findObject(t, objs, "APIService", "", "v1alpha1.certapi.dev"); hasField(u, "spec", "caBundle") {
		t.Error("the APIService manifest has a caBundle key; it must be absent, or every apply writes it over the injected one")
	}
	if s := apiService.Spec; s.Group != "certapi.dev" || s.Version != "v1alpha1" || s.GroupPriorityMinimum != 1000 || s.VersionPriority != 15 {
		t.Errorf("APIService spec %+v", s)
	}
	svcRef := apiService.Spec.Service
	if svcRef == nil || svcRef.Port == nil {
		t.Fatalf("APIService service %+v", svcRef)
	}
	var svc corev1.Service
	convert(t, findObject(t, objs, "Service", svcRef.Namespace, svcRef.Name), &svc)
	var target string
	for _, p := range svc.Spec.Ports {
		if p.Port == *svcRef.Port {
			target = p.TargetPort.String()
		}
	}
	for _, dir := range []string{deployBase, deployExternal, deploySingle} {
		w := certapiWorkload(t, ks[dir].objs)
		c := containerOf(t, &w.template.Spec, "certapi")
		args := containerArgs(c)
		// kube-apiserver checks certapi's certificate for <service>.<namespace>.svc of the APIService.
		if args["service-name"] != svcRef.Name || args["service-namespace"] != svcRef.Namespace {
			t.Errorf("%s: --service-name=%q --service-namespace=%q; the APIService's Service is %s/%s", dir, args["service-name"], args["service-namespace"], svcRef.Namespace, svcRef.Name)
		}
		for _, f := range []string{"tls-cert-file", "tls-private-key-file", "cert-dir"} {
			if _, ok := args[f]; ok {
				t.Errorf("%s: certapi is given --%s; it serves a certificate from its own CA", dir, f)
			}
		}
		var port string
		for _, p := range c.Ports {
			if p.Name == target || fmt.Sprint(p.ContainerPort) == target {
				port = fmt.Sprint(p.ContainerPort)
			}
		}
		if port == "" || args["secure-port"] != port {
			t.Errorf("%s: the Service sends port %d to %q (container port %q), certapi listens on --secure-port=%q", dir, *svcRef.Port, target, port, args["secure-port"])
		}
		if !selectorMatches(svc.Spec.Selector, w.template.Labels) {
			t.Errorf("%s: Service selector %v does not select the pods (labels %v)", dir, svc.Spec.Selector, w.template.Labels)
		}
		for _, probe := range []struct {
			name string
			p    *corev1.Probe
			path string
		}{{"readiness", c.ReadinessProbe, "/readyz"}, {"liveness", c.LivenessProbe, "/livez"}} {
			if probe.p == nil || probe.p.HTTPGet == nil || probe.p.HTTPGet.Path != probe.path || probe.p.HTTPGet.Scheme != corev1.URISchemeHTTPS {
				t.Errorf("%s: %s probe %+v; want HTTPS %s", dir, probe.name, probe.p, probe.path)
			}
		}
		if lim := c.Resources.Limits.Memory(); lim.IsZero() || lim.Cmp(*c.Resources.Requests.Memory()) < 0 {
			t.Errorf("%s: memory request %v, limit %v", dir, c.Resources.Requests.Memory(), lim)
		}
		checkEnvRefs(t, dir, c)
		// Every file certapi is given must be in a volume of the right Secret.
		for flag, secret := range map[string]string{
			"encryption-provider-config": "certapi-encryption-config",
			"etcd-cafile":                "certapi-etcd-client-tls",
			"etcd-certfile":              "certapi-etcd-client-tls",
			"etcd-keyfile":               "certapi-etcd-client-tls",
		} {
			path, ok := args[flag]
			if !ok {
				continue
			}
			if got := secretOf(&w.template.Spec, c, path); got != secret {
				t.Errorf("%s: --%s=%s is not in a volume of Secret %s (found %q)", dir, flag, path, secret, got)
			}
		}
		if _, ok := args["encryption-provider-config"]; !ok {
			t.Errorf("%s: no --encryption-provider-config: the CA keys would be stored unencrypted", dir)
		}
		if v, ok := args["require-encrypted-ca-keys"]; !ok || (v != "" && v != "true") {
			t.Errorf("%s: --require-encrypted-ca-keys is not on: a broken encryption configuration would store the CA keys unencrypted", dir)
		}
		if v, ok := args["profiling"]; ok && v != "false" {
			t.Errorf("%s: --profiling=%q; profiling stays off in production", dir, v)
		}
	}
}

// checkExternalEtcd checks that the external-etcd overlay runs three replicas on a three-member etcd over
// mutual TLS, with disruption budgets, and nothing left of the base's etcd cluster of replicas.
func checkExternalEtcd(t *testing.T, m *manifests) {
	ks := m.ks
	objs := ks[deployExternal].objs
	checkNoEtcdCluster(t, deployExternal, objs)
	d := deploymentOf(t, objs, "certapi-system", "certapi")
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 3 {
		t.Errorf("replicas %v; want 3", d.Spec.Replicas)
	}
	if a := d.Spec.Template.Spec.Affinity; a == nil || a.PodAntiAffinity == nil || len(a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) == 0 {
		t.Errorf("no preferred pod anti-affinity: %+v", a)
	}
	args := containerArgs(containerOf(t, &d.Spec.Template.Spec, "certapi"))
	if args["leader-identity"] != "$(POD_NAME)" {
		t.Errorf("--leader-identity=%q; want $(POD_NAME)", args["leader-identity"])
	}
	// --etcd-servers names exactly the members of the StatefulSet, by their stable DNS names.
	sts := statefulSetOf(t, objs, "certapi-system", "certapi-etcd")
	var want []string
	for i := 0; i < int(*sts.Spec.Replicas); i++ {
		want = append(want, fmt.Sprintf("https://%s-%d.%s.%s.svc:2379", sts.Name, i, sts.Spec.ServiceName, sts.Namespace))
	}
	if got := strings.Split(args["etcd-servers"], ","); !slices.Equal(got, want) {
		t.Errorf("--etcd-servers %q; want %q", got, want)
	}
	for _, u := range want {
		if _, err := url.Parse(u); err != nil {
			t.Error(err)
		}
	}
	headless := findObject(t, objs, "Service", sts.Namespace, sts.Spec.ServiceName)
	var hs corev1.Service
	convert(t, headless, &hs)
	if hs.Spec.ClusterIP != corev1.ClusterIPNone || !hs.Spec.PublishNotReadyAddresses {
		t.Errorf("etcd Service: clusterIP %q, publishNotReadyAddresses %v; want a headless Service that publishes members before they are Ready", hs.Spec.ClusterIP, hs.Spec.PublishNotReadyAddresses)
	}
	if sts.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		t.Errorf("etcd podManagementPolicy %q; want Parallel (members must start together)", sts.Spec.PodManagementPolicy)
	}
	ec := containerOf(t, &sts.Spec.Template.Spec, "etcd")
	eargs := containerArgs(ec)
	var members []string
	for i := 0; i < int(*sts.Spec.Replicas); i++ {
		members = append(members, fmt.Sprintf("%s-%d=https://%s-%d.%s.%s.svc:2380", sts.Name, i, sts.Name, i, sts.Spec.ServiceName, sts.Namespace))
	}
	if got := eargs["initial-cluster"]; got != strings.Join(members, ",") {
		t.Errorf("etcd --initial-cluster=%s; want %s", got, strings.Join(members, ","))
	}
	if eargs["client-cert-auth"] != "true" || eargs["peer-client-cert-auth"] != "true" {
		t.Errorf("etcd must require client certificates from clients and peers: %v", eargs)
	}
	checkEnvRefs(t, deployExternal+" etcd", ec)
	for flag, secret := range map[string]string{
		"trusted-ca-file": "certapi-etcd-server-tls", "cert-file": "certapi-etcd-server-tls", "key-file": "certapi-etcd-server-tls",
		"peer-trusted-ca-file": "certapi-etcd-peer-tls", "peer-cert-file": "certapi-etcd-peer-tls", "peer-key-file": "certapi-etcd-peer-tls",
	} {
		if got := secretOf(&sts.Spec.Template.Spec, ec, eargs[flag]); got != secret {
			t.Errorf("etcd --%s=%s is not in a volume of Secret %s (found %q)", flag, eargs[flag], secret, got)
		}
	}
	// One PodDisruptionBudget for each workload.
	for _, sel := range []map[string]string{d.Spec.Template.Labels, sts.Spec.Template.Labels} {
		found := false
		for _, u := range ofKind(objs, "PodDisruptionBudget") {
			m, _, _ := unstructured.NestedStringMap(u.Object, "spec", "selector", "matchLabels")
			if selectorMatches(m, sel) {
				found = true
			}
		}
		if !found {
			t.Errorf("no PodDisruptionBudget selects the pods labelled %v", sel)
		}
	}
}

// checkBaseCluster checks that the base is what the chart installs by default: three certapi replicas in a
// StatefulSet, each on its own claim, whose embedded etcd members find each other through a headless
// Service and a peer CA certapi creates, spread over nodes and zones but able to share one node, with a
// PodDisruptionBudget that lets a drain take one member at a time, and the rights and admission policy
// that peer CA Secret needs.
func checkBaseCluster(t *testing.T, m *manifests) {
	objs := m.ks[deployBase].objs
	sts := statefulSetOf(t, objs, "certapi-system", "certapi")
	if sts.Spec.Replicas == nil || *sts.Spec.Replicas != 3 {
		t.Errorf("replicas %v; want 3", sts.Spec.Replicas)
	}
	if n := len(ofKind(objs, "Deployment")); n != 0 {
		t.Errorf("%d Deployments in the base; want none beside the StatefulSet", n)
	}
	if sts.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		t.Errorf("podManagementPolicy %q; want Parallel (a member that lost its volume must see its peers)", sts.Spec.PodManagementPolicy)
	}
	// Preferred spreading only: one node must run all three.
	a := sts.Spec.Template.Spec.Affinity
	if a == nil || a.PodAntiAffinity == nil || len(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) != 0 {
		t.Fatalf("pod anti-affinity %+v; want preferred terms only", a)
	}
	keys := map[string]bool{}
	for _, term := range a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
		if term.PodAffinityTerm.LabelSelector == nil || !selectorMatches(term.PodAffinityTerm.LabelSelector.MatchLabels, sts.Spec.Template.Labels) {
			t.Errorf("anti-affinity term %+v does not select certapi's pods", term)
		}
		keys[term.PodAffinityTerm.TopologyKey] = true
	}
	if !keys["kubernetes.io/hostname"] || !keys["topology.kubernetes.io/zone"] {
		t.Errorf("preferred anti-affinity over %v; want kubernetes.io/hostname and topology.kubernetes.io/zone", keys)
	}
	c := containerOf(t, &sts.Spec.Template.Spec, "certapi")
	args := containerArgs(c)
	if _, ok := args["etcd-servers"]; ok {
		t.Errorf("--etcd-servers=%s: the base's replicas run their own members", args["etcd-servers"])
	}
	if args["etcd-member-name"] != "$(POD_NAME)" || args["leader-identity"] != "$(POD_NAME)" {
		t.Errorf("--etcd-member-name=%q --leader-identity=%q; want $(POD_NAME)", args["etcd-member-name"], args["leader-identity"])
	}
	// --etcd-peer-service is the StatefulSet's headless Service, which publishes members before they are
	// Ready (a member joins before it serves).
	var peers corev1.Service
	convert(t, findObject(t, objs, "Service", sts.Namespace, sts.Spec.ServiceName), &peers)
	if want := fmt.Sprintf("%s.%s.svc", peers.Name, peers.Namespace); args["etcd-peer-service"] != want {
		t.Errorf("--etcd-peer-service=%q; want %q", args["etcd-peer-service"], want)
	}
	if peers.Spec.ClusterIP != corev1.ClusterIPNone || !peers.Spec.PublishNotReadyAddresses || !selectorMatches(peers.Spec.Selector, sts.Spec.Template.Labels) {
		t.Errorf("Service %s: clusterIP %q, publishNotReadyAddresses %v, selector %v; want headless, publishing not-ready pods, selecting certapi's", peers.Name, peers.Spec.ClusterIP, peers.Spec.PublishNotReadyAddresses, peers.Spec.Selector)
	}
	// Each member's data on its own claim.
	w := certapiWorkload(t, objs)
	if v := volumeOf(&w.template.Spec, containerOf(t, &w.template.Spec, "certapi"), args["data-dir"]); v == nil || v.PersistentVolumeClaim == nil {
		t.Errorf("--data-dir=%q is not on a claim of the StatefulSet's volumeClaimTemplates", args["data-dir"])
	}
	// The PodDisruptionBudget takes one member at a time, at any replica count.
	found := false
	for _, u := range ofKind(objs, "PodDisruptionBudget") {
		sel, _, _ := unstructured.NestedStringMap(u.Object, "spec", "selector", "matchLabels")
		if !selectorMatches(sel, sts.Spec.Template.Labels) {
			continue
		}
		found = true
		if v, ok, _ := unstructured.NestedFieldNoCopy(u.Object, "spec", "maxUnavailable"); !ok || fmt.Sprint(v) != "1" {
			t.Errorf("PodDisruptionBudget %s: maxUnavailable %v; want 1", u.GetName(), v)
		}
	}
	if !found {
		t.Error("no PodDisruptionBudget selects certapi's pods")
	}
	// The etcd leader reads its StatefulSet; certapi writes its peer CA Secret under a policy of its own.
	peerCA := args["etcd-peer-ca-secret"]
	if peerCA == "" {
		t.Error("no --etcd-peer-ca-secret")
	}
	findObject(t, objs, "Role", sts.Namespace, "certapi:etcd-cluster")
	findObject(t, objs, "RoleBinding", sts.Namespace, "certapi:etcd-cluster")
	findObject(t, objs, "ValidatingAdmissionPolicy", "", peerCA)
	findObject(t, objs, "ValidatingAdmissionPolicyBinding", "", peerCA)
}

// checkNoEtcdCluster checks that an overlay on another etcd kept nothing of the base's etcd cluster of
// replicas (components/no-etcd-cluster): no StatefulSet certapi, no peers Service, no rights or policy
// for the peer CA Secret, no etcd ports open between certapi's pods.
func checkNoEtcdCluster(t *testing.T, dir string, objs []*unstructured.Unstructured) {
	t.Helper()
	for _, u := range objs {
		switch k, n := u.GetKind(), u.GetName(); {
		case k == "StatefulSet" && n == "certapi",
			k == "Service" && n == "certapi-peers",
			strings.Contains(n, "etcd-cluster"),
			strings.Contains(n, "etcd-peer-ca"):
			t.Errorf("%s: %s %s of the base's etcd cluster is left", dir, k, n)
		case k == "NetworkPolicy" && n == "certapi":
			data, err := u.MarshalJSON()
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(data), `"port":2380`) {
				t.Errorf("%s: NetworkPolicy certapi still opens the etcd peer port between certapi's pods", dir)
			}
		case k == "ValidatingAdmissionPolicy":
			data, err := u.MarshalJSON()
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(data), "etcd-peer-ca") {
				t.Errorf("%s: ValidatingAdmissionPolicy %s still names the etcd peer CA Secret", dir, n)
			}
		}
	}
}

// checkSingleReplica checks that the single-replica overlay runs one certapi with its embedded etcd on a
// volume.
func checkSingleReplica(t *testing.T, m *manifests) {
	ks := m.ks
	objs := ks[deploySingle].objs
	checkNoEtcdCluster(t, deploySingle, objs)
	d := deploymentOf(t, objs, "certapi-system", "certapi")
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 1 {
		t.Errorf("replicas %v; want 1", d.Spec.Replicas)
	}
	if d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("strategy %q; want Recreate (two pods must never run the embedded etcd on one volume)", d.Spec.Strategy.Type)
	}
	c := containerOf(t, &d.Spec.Template.Spec, "certapi")
	args := containerArgs(c)
	for f := range args {
		if strings.HasPrefix(f, "etcd-") {
			t.Errorf("single replica is given --%s", f)
		}
	}
	dataDir := args["data-dir"]
	if dataDir == "" {
		t.Fatal("no --data-dir")
	}
	if volumeOf(&d.Spec.Template.Spec, c, dataDir) == nil {
		t.Errorf("--data-dir=%s is not on a volume: the root filesystem is read-only, and the CA keys must survive a restart", dataDir)
	}
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Secret != nil && v.Secret.SecretName == "certapi-etcd-client-tls" {
			t.Error("single replica still mounts certapi-etcd-client-tls")
		}
	}
	for _, u := range objs {
		if u.GetKind() == "StatefulSet" {
			t.Errorf("single replica has a StatefulSet %s", u.GetName())
		}
	}
}

// checkRBACAggregation checks that the base aggregates read to view, write to edit and admin, and
// servingcerts to admin only.
func checkRBACAggregation(t *testing.T, m *manifests) {
	ks := m.ks
	agg := map[string][]rbacv1.PolicyRule{}
	for _, u := range ofKind(ks[deployBase].objs, "ClusterRole") {
		var r rbacv1.ClusterRole
		convert(t, u, &r)
		for _, to := range []string{"view", "edit", "admin"} {
			if r.Labels["rbac.authorization.k8s.io/aggregate-to-"+to] == "true" {
				agg[to] = append(agg[to], r.Rules...)
			}
		}
	}
	// The built-in edit and admin roles aggregate only roles labelled for them: a role labelled
	// aggregate-to-view alone does not reach edit or admin.
	read := []string{"get", "list", "watch"}
	write := []string{"create", "update", "patch", "delete"}
	for _, tc := range []struct {
		role, resource string
		verbs          []string
		want           bool
	}{
		{"view", "servingcertrequests", read, true},
		{"view", "certificateauthorities", read, true},
		{"view", "servingcertrequests", write, false},
		{"view", "servingcertrequests/servingcerts", []string{"create"}, false},
		{"edit", "servingcertrequests", append(read, write...), true},
		{"edit", "certificateauthorities", read, true},
		{"edit", "servingcertrequests/servingcerts", []string{"create"}, false},
		{"admin", "servingcertrequests", append(read, write...), true},
		{"admin", "certificateauthorities", read, true},
		{"admin", "servingcertrequests/servingcerts", []string{"create"}, true},
		{"edit", "certificateauthorities", []string{"update"}, false},
		{"admin", "certificateauthorities", []string{"update"}, false},
		{"admin", "servingcertrequests/status", []string{"update"}, false},
		// Importing a CA certificate decides what the whole cluster trusts: aggregated nowhere.
		{"view", "certificateauthorities/import", []string{"create"}, false},
		{"edit", "certificateauthorities/import", []string{"create"}, false},
		{"admin", "certificateauthorities/import", []string{"create"}, false},
	} {
		for _, verb := range tc.verbs {
			if got := allows(agg[tc.role], "certapi.dev", tc.resource, verb); got != tc.want {
				t.Errorf("aggregated into %s: %s %s is %v; want %v", tc.role, verb, tc.resource, got, tc.want)
			}
		}
	}
}

// checkImageBuildContext checks that the image's build context holds every package certapi needs, and the
// Dockerfile builds it as documented.
func checkImageBuildContext(t *testing.T, m *manifests) {
	root := m.root
	// No Docker engine runs the Dockerfile here, so check what it relies on: Dockerfile.dockerignore
	// and the COPY lines pass go.mod, go.sum, cmd/ and pkg/ (without tests), and `go build
	// ./cmd/certapi` must need nothing else of this module.
	cmd := exec.Command("go", "list", "-deps", "-f", "{{if .Module}}{{if .Module.Main}}{{.Dir}} {{join .EmbedFiles \",\"}}{{end}}{{end}}", "./cmd/certapi")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		dir, embeds, _ := strings.Cut(line, " ")
		rel, err := filepath.Rel(root, dir)
		if err != nil {
			t.Fatal(err)
		}
		rel = filepath.ToSlash(rel)
		if !strings.HasPrefix(rel, "cmd/") && !strings.HasPrefix(rel, "pkg/") {
			t.Errorf("certapi needs package %s, which the image's build context (artifacts/deploy/Dockerfile.dockerignore) leaves out", rel)
		}
		if embeds != "" {
			for _, e := range strings.Split(embeds, ",") {
				if strings.HasSuffix(e, "_test.go") || strings.Contains(e, "testdata/") {
					t.Errorf("package %s embeds %s, which the image's build context leaves out", rel, e)
				}
			}
		}
	}
	docker, err := os.ReadFile(filepath.Join(root, "artifacts", "deploy", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"CGO_ENABLED=0", "./cmd/certapi", "COPY cmd/ cmd/", "COPY pkg/ pkg/", "FROM gcr.io/distroless/static:nonroot", "USER 65532:65532"} {
		if !strings.Contains(string(docker), want) {
			t.Errorf("artifacts/deploy/Dockerfile lacks %q", want)
		}
	}
}

// checkArgoCDExample checks that the Argo CD Application ignores certapi's fields and syncs a
// kustomization that opts in without a caBundle.
func checkArgoCDExample(t *testing.T, m *manifests) {
	ks := m.ks
	root := m.root
	// The Application CRD is not installed here, so kubectl cannot even map the kind for a client
	// dry run: check the fields the README explains instead.
	data, err := os.ReadFile(filepath.Join(root, argoCDApp))
	if err != nil {
		t.Fatal(err)
	}
	objs, err := framework.DecodeManifests(data)
	if err != nil || len(objs) != 1 {
		t.Fatalf("%s: %d objects, %v", argoCDApp, len(objs), err)
	}
	app := objs[0]
	if app.GetAPIVersion() != "argoproj.io/v1alpha1" || app.GetKind() != "Application" {
		t.Fatalf("%s is a %s %s", argoCDApp, app.GetAPIVersion(), app.GetKind())
	}
	ignored := map[string]bool{}
	entries, _, _ := unstructured.NestedSlice(app.Object, "spec", "ignoreDifferences")
	for _, e := range entries {
		m, _ := e.(map[string]any)
		managers, _, _ := unstructured.NestedStringSlice(m, "managedFieldsManagers")
		if slices.Contains(managers, "certapi") {
			ignored[fmt.Sprintf("%v/%v", m["group"], m["kind"])] = true
		}
	}
	for _, gk := range []string{"admissionregistration.k8s.io/ValidatingWebhookConfiguration", "/Secret", "apiextensions.k8s.io/CustomResourceDefinition"} {
		if !ignored[gk] {
			t.Errorf("ignoreDifferences has no entry for %s with managedFieldsManagers [certapi]: %v", gk, entries)
		}
	}
	opts, _, _ := unstructured.NestedStringSlice(app.Object, "spec", "syncPolicy", "syncOptions")
	if !slices.Contains(opts, "RespectIgnoreDifferences=true") {
		t.Errorf("syncOptions %q lack RespectIgnoreDifferences=true", opts)
	}
	// The Application's source is the example kustomization in this repository.
	path, _, _ := unstructured.NestedString(app.Object, "spec", "source", "path")
	src := ks[path]
	if src == nil || src.component {
		t.Fatalf("spec.source.path %q is not a kustomization under artifacts/", path)
	}
	// What it syncs opts in to injection and carries no caBundle key anywhere.
	var injected []string
	for _, u := range src.objs {
		switch u.GetKind() {
		case "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration":
			hooks, _, _ := unstructured.NestedSlice(u.Object, "webhooks")
			for _, h := range hooks {
				if hasField(&unstructured.Unstructured{Object: h.(map[string]any)}, "clientConfig", "caBundle") {
					t.Errorf("%s %s ships a caBundle key", u.GetKind(), u.GetName())
				}
			}
		case "CustomResourceDefinition":
			if hasField(u, "spec", "conversion", "webhook", "clientConfig", "caBundle") {
				t.Errorf("CRD %s ships a conversion caBundle key", u.GetName())
			}
		case "APIService":
			if hasField(u, "spec", "caBundle") {
				t.Errorf("APIService %s ships a caBundle key", u.GetName())
			}
		default:
			continue
		}
		if u.GetAnnotations()["certapi.dev/inject-ca-bundle"] == "true" {
			injected = append(injected, u.GetKind())
		}
	}
	sort.Strings(injected)
	if want := []string{"CustomResourceDefinition", "ValidatingWebhookConfiguration"}; !slices.Equal(injected, want) {
		t.Errorf("objects that opt in to injection: %v; want %v", injected, want)
	}
}

// checkPolicies checks that the base's ValidatingAdmissionPolicies type-check against the schemas
// kube-apiserver serves.
func checkPolicies(t *testing.T, m *manifests) {
	typeCheckPolicies(t, m.ks[deployBase].objs)
}
