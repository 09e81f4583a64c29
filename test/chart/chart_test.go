package chart

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"

	"github.com/certapi/certapi/test/framework"
	"github.com/certapi/certapi/test/testhelpers"
)

// release is the release name every test installs or renders: the README's.
const release = "certapi"

// The example values files the README and artifacts/deploy name; TestExamples fails if one is missing and
// renders any other values-*.yaml beside them too.
var wantExamples = []string{"values-single.yaml", "values-ha.yaml", "values-external-etcd.yaml"}

func exampleFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(examples, "values-*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, filepath.Base(f))
	}
	for _, want := range wantExamples {
		if !slices.Contains(names, want) {
			t.Errorf("no %s in %s", want, examples)
		}
	}
	return files
}

func TestLint(t *testing.T) {
	for _, args := range append([][]string{nil}, func() [][]string {
		var out [][]string
		for _, f := range exampleFiles(t) {
			out = append(out, []string{"-f", f})
		}
		return out
	}()...) {
		r := runHelm(t, append([]string{"lint", "--strict", chartDir}, args...)...)
		out := r.must(t)
		if !strings.Contains(out, "1 chart(s) linted, 0 chart(s) failed") {
			t.Errorf("helm lint --strict %v: %s%s", args, out, r.stderr)
		}
	}
}

// render runs helm template for the release in namespace ns and decodes what it prints.
func render(t *testing.T, ns string, args ...string) ([]*unstructured.Unstructured, string) {
	t.Helper()
	out := runHelm(t, append([]string{"template", release, chartDir, "--namespace", ns}, args...)...).must(t)
	objs, err := framework.DecodeManifests([]byte(out))
	if err != nil {
		t.Fatalf("helm template %v: the output does not decode: %v", args, err)
	}
	if len(objs) == 0 {
		t.Fatalf("helm template %v rendered nothing", args)
	}
	return objs, out
}

func find(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, u := range objs {
		if u.GetKind() == kind && u.GetName() == name {
			return u
		}
	}
	return nil
}

func convert(t *testing.T, u *unstructured.Unstructured, into any) {
	t.Helper()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, into); err != nil {
		t.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
	}
}

// certapiArgs returns the flags of the certapi container of the rendering's Deployment, by name. With
// etcd.mode cluster certapi is a StatefulSet: its replicas and pod template are returned in a Deployment.
func certapiArgs(t *testing.T, objs []*unstructured.Unstructured) (*appsv1.Deployment, map[string]string) {
	t.Helper()
	var d appsv1.Deployment
	if u := find(objs, "Deployment", release); u != nil {
		convert(t, u, &d)
	} else if u := find(objs, "StatefulSet", release); u != nil {
		var sts appsv1.StatefulSet
		convert(t, u, &sts)
		d.Spec.Replicas, d.Spec.Template = sts.Spec.Replicas, sts.Spec.Template
	} else {
		t.Fatal("no Deployment or StatefulSet certapi")
	}
	args := map[string]string{}
	for _, c := range d.Spec.Template.Spec.Containers {
		if c.Name != "certapi" {
			continue
		}
		for _, a := range c.Args {
			name, value, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
			args[name] = value
		}
	}
	return &d, args
}

// secretVolumes returns the Secret of each volume of the pod template.
func secretVolumes(spec *corev1.PodSpec) []string {
	var out []string
	for _, v := range spec.Volumes {
		if v.Secret != nil {
			out = append(out, v.Secret.SecretName)
		}
	}
	return out
}

// TestExamples renders the chart with its defaults and with every example values file, checks what each
// says it does, and applies each rendering with a server-side dry run to kube-apiserver, in a namespace
// that warns on anything Pod Security "restricted" refuses.
func TestExamples(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin, err := framework.CertapiBinary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	flags := helpFlags(t, bin)
	kube, err := kubernetes.NewForConfig(cp.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(kube.Discovery()))
	rulesFile, err := os.ReadFile(filepath.Join(chartDir, "files", "prometheusrule-groups.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []any `json:"groups"`
	}
	if err := yaml.UnmarshalStrict(rulesFile, &rules); err != nil || len(rules.Groups) == 0 {
		t.Fatalf("files/prometheusrule-groups.yaml: %d groups, %v", len(rules.Groups), err)
	}

	cases := []struct {
		name  string
		args  []string
		check func(t *testing.T, ns string, objs []*unstructured.Unstructured)
	}{
		// The defaults are the highly available install: etcd.mode cluster, three replicas.
		{name: "defaults", check: func(t *testing.T, ns string, objs []*unstructured.Unstructured) {
			checkCluster(t, ns, objs, 3)
			checkHA(t, objs)
			checkSecurity(t, ns, objs, securityWant{refused: []string{"kube-system", "kube-public", "kube-node-lease", ns},
				networkPolicy: true, cluster: true, priorityClass: "system-cluster-critical"})
		}},
		// The single-replica switch: a one-member cluster, whose PodDisruptionBudget never blocks a drain.
		{name: "one-replica", args: []string{"--set", "replicas=1"}, check: func(t *testing.T, ns string, objs []*unstructured.Unstructured) {
			checkCluster(t, ns, objs, 1)
			checkHA(t, objs)
		}},
		// The values of the admission policies, NetworkPolicies and priority, set otherwise.
		{name: "security", args: []string{"--set", "etcd.mode=dedicated", "--set", "replicas=3",
			"--set-json", `networkPolicy.etcdMetricsFrom=[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"monitoring"}},"podSelector":{"matchLabels":{"app.kubernetes.io/name":"prometheus"}}}]`,
			"--set-json", `secretDelivery.refusedNamespaces=["kube-system","tenant-infra"]`},
			check: func(t *testing.T, ns string, objs []*unstructured.Unstructured) {
				checkSecurity(t, ns, objs, securityWant{refused: []string{"kube-system", "tenant-infra", ns},
					networkPolicy: true, etcdMetrics: true, priorityClass: "system-cluster-critical"})
			}},
		{name: "cluster", args: []string{"--set", "etcd.mode=cluster", "--set", "replicas=5"},
			check: func(t *testing.T, ns string, objs []*unstructured.Unstructured) {
				checkCluster(t, ns, objs, 5)
				checkSecurity(t, ns, objs, securityWant{refused: []string{"kube-system", "kube-public", "kube-node-lease", ns},
					networkPolicy: true, cluster: true, priorityClass: "system-cluster-critical"})
			}},
		// A token Secret of the user's own: the chart creates no ServiceAccount, token or binding for it.
		{name: "monitoring-own-token", args: []string{"--set", "monitoring.serviceMonitor.enabled=true",
			"--set", "monitoring.serviceMonitor.tokenSecret.name=prometheus-scraper", "--set", "monitoring.serviceMonitor.tokenSecret.key=bearer"},
			check: func(t *testing.T, ns string, objs []*unstructured.Unstructured) {
				for _, kind := range []string{"ServiceAccount", "Secret", "ClusterRoleBinding", "Role"} {
					for _, name := range []string{release + "-metrics", release + "-metrics-token", release + ":metrics", release + ":prometheus"} {
						if find(objs, kind, name) != nil {
							t.Errorf("%s %s rendered with a token Secret of the user's own", kind, name)
						}
					}
				}
				sm := find(objs, "ServiceMonitor", release)
				if sm == nil {
					t.Fatal("no ServiceMonitor")
				}
				eps, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
				for _, e := range eps {
					got, _, _ := unstructured.NestedStringMap(e.(map[string]any), "authorization", "credentials")
					if want := map[string]string{"name": "prometheus-scraper", "key": "bearer"}; !reflect.DeepEqual(got, want) {
						t.Errorf("endpoint %v: credentials %v; want %v", e.(map[string]any)["path"], got, want)
					}
				}
			}},
		{name: "security-off", args: []string{"--set", "networkPolicy.enabled=false", "--set", "secretDelivery.refuseReleaseNamespace=false",
			"--set", "priorityClassName="},
			check: func(t *testing.T, ns string, objs []*unstructured.Unstructured) {
				checkSecurity(t, ns, objs, securityWant{refused: []string{"kube-system", "kube-public", "kube-node-lease"}, cluster: true})
			}},
	}
	for _, f := range exampleFiles(t) {
		name := strings.TrimSuffix(filepath.Base(f), ".yaml")
		var check func(t *testing.T, ns string, objs []*unstructured.Unstructured)
		switch name {
		case "values-single":
			check = func(t *testing.T, ns string, objs []*unstructured.Unstructured) { checkEmbedded(t, objs) }
		case "values-ha":
			check = func(t *testing.T, ns string, objs []*unstructured.Unstructured) {
				checkDedicated(t, ns, objs)
				checkMonitoring(t, ns, objs, rules.Groups)
			}
		case "values-external-etcd":
			check = func(t *testing.T, ns string, objs []*unstructured.Unstructured) { checkExternal(t, f, objs) }
		}
		cases = append(cases, struct {
			name  string
			args  []string
			check func(t *testing.T, ns string, objs []*unstructured.Unstructured)
		}{name, []string{"-f", f}, check})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ns := "certapi-dryrun-" + strings.TrimPrefix(tc.name, "values-")
			objs, out := render(t, ns, tc.args...)
			if tc.check != nil {
				tc.check(t, ns, objs)
			}
			// Every object says it belongs to the release, and sits in the release's namespace unless it
			// must be elsewhere.
			for _, u := range objs {
				l := u.GetLabels()
				if l["app.kubernetes.io/part-of"] != "certapi" || l["app.kubernetes.io/instance"] != release || l["app.kubernetes.io/managed-by"] != "Helm" {
					t.Errorf("%s %s has labels %v; want part-of certapi, instance %s, managed-by Helm", u.GetKind(), u.GetName(), l, release)
				}
				gvk := u.GroupVersionKind()
				m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
				if err != nil {
					t.Errorf("%s %s: %v", gvk, u.GetName(), err)
					continue
				}
				want := ""
				if m.Scope.Name() == meta.RESTScopeNameNamespace {
					want = ns
					if u.GetKind() == "RoleBinding" && strings.HasSuffix(u.GetName(), ":extension-apiserver-authentication-reader") {
						want = "kube-system"
					}
				}
				if u.GetNamespace() != want {
					t.Errorf("%s %s is in namespace %q; want %q", u.GetKind(), u.GetName(), u.GetNamespace(), want)
				}
			}
			// Every flag given to certapi is one certapi has.
			d, args := certapiArgs(t, objs)
			for name := range args {
				if !flags[name] {
					t.Errorf("certapi has no flag --%s", name)
				}
			}
			if args["service-name"] != release || args["service-namespace"] != ns || args["leader-identity"] != "$(POD_NAME)" {
				t.Errorf("--service-name=%q --service-namespace=%q --leader-identity=%q; want %s, %s, $(POD_NAME)", args["service-name"], args["service-namespace"], args["leader-identity"], release, ns)
			}
			if _, ok := args["require-encrypted-ca-keys"]; !ok || !slices.Contains(secretVolumes(&d.Spec.Template.Spec), "certapi-encryption-config") {
				t.Errorf("certapi runs without --require-encrypted-ca-keys or without the Secret certapi-encryption-config: %v, volumes %v", args, secretVolumes(&d.Spec.Template.Spec))
			}

			// The server-side dry run, in a namespace that exists (a dry run creates none) and warns about
			// pod templates Pod Security "restricted" would refuse.
			dryRun(t, ns, "restricted", out, objs)
		})
	}
}

// securityWant is what checkSecurity expects of a rendering.
type securityWant struct {
	// refused: the namespaces the Secret policy refuses, in order.
	refused []string
	// networkPolicy: certapi's NetworkPolicy (and, with the dedicated etcd, the members') is rendered;
	// etcdMetrics: the members' admits scrapes of 2381; cluster: etcd.mode cluster (certapi's pods admit
	// each other on 2379 and 2380, and the peer CA Secret has a policy of its own).
	networkPolicy, etcdMetrics, cluster bool
	priorityClass                       string
}

// checkSecurity checks the admission policies, NetworkPolicies and priority of a rendering: every policy
// matches exactly the ServiceAccount the rendering creates (by its namespace and name), the Secret
// policy refuses the namespaces of the values, and the NetworkPolicies open what values.yaml says.
func checkSecurity(t *testing.T, ns string, objs []*unstructured.Unstructured, want securityWant) {
	t.Helper()
	sa := find(objs, "ServiceAccount", release)
	if sa == nil || sa.GetNamespace() != ns {
		t.Fatalf("no ServiceAccount %s in %s", release, ns)
	}
	user := "system:serviceaccount:" + sa.GetNamespace() + ":" + sa.GetName()
	policies, quorum := 0, false
	for _, u := range objs {
		if u.GetKind() != "ValidatingAdmissionPolicy" {
			continue
		}
		policies++
		var p admissionregistrationv1.ValidatingAdmissionPolicy
		convert(t, u, &p)
		if p.Name == quorumPolicy {
			quorum = true
			statefulSet := "request.namespace == '" + ns + "' && request.name == '" + release + "'"
			if len(p.Spec.MatchConditions) != 1 || p.Spec.MatchConditions[0].Expression != statefulSet {
				t.Errorf("ValidatingAdmissionPolicy %s matches %+v; want certapi's StatefulSet, %s", p.Name, p.Spec.MatchConditions, statefulSet)
			}
			continue
		}
		// The condition joins the namespace and the name parameters; joined, it names the account. In
		// etcd.mode cluster the Secret policies also tell the peer CA Secret apart (and nothing else).
		conditions := 1
		if want.cluster && (p.Name == release+"-secrets" || p.Name == release+"-etcd-peer-ca") {
			conditions = 2
			peerCA := "request.namespace == '" + ns + "' && request.name == '" + release + "-etcd-peer-ca'"
			if len(p.Spec.MatchConditions) != 2 || strings.Trim(strings.TrimPrefix(p.Spec.MatchConditions[1].Expression, "!"), "()") != peerCA {
				t.Errorf("ValidatingAdmissionPolicy %s matches %+v; want the peer CA Secret told apart by %s", p.Name, p.Spec.MatchConditions, peerCA)
			}
		}
		if len(p.Spec.MatchConditions) != conditions || strings.ReplaceAll(p.Spec.MatchConditions[0].Expression, "' + '", "") != "request.userInfo.username == '"+user+"'" {
			t.Errorf("ValidatingAdmissionPolicy %s matches %+v; want certapi's ServiceAccount %s", p.Name, p.Spec.MatchConditions, user)
		}
		if p.Name == release+"-secrets" {
			var quoted []string
			for _, n := range want.refused {
				quoted = append(quoted, "'"+n+"'")
			}
			wantExpr := "[" + strings.Join(quoted, ", ") + "]"
			found := false
			for _, v := range p.Spec.Variables {
				if v.Name == "refusedNamespaces" {
					found = true
					if v.Expression != wantExpr {
						t.Errorf("the Secret policy refuses %s; want %s", v.Expression, wantExpr)
					}
				}
			}
			if !found {
				t.Errorf("the Secret policy has no variable refusedNamespaces")
			}
		}
	}
	if quorum != want.cluster {
		t.Errorf("ValidatingAdmissionPolicy %s rendered: %v; want it only in etcd.mode cluster", quorumPolicy, quorum)
	}
	// webhooks, CRDs, APIServices, ConfigMaps, Secrets, ClusterTrustBundles, ResourceQuota status (and in
	// etcd.mode cluster the etcd peer CA Secret and the StatefulSet's quorum); one binding each.
	wantPolicies := 7
	if want.cluster {
		wantPolicies = 9
	}
	if policies != wantPolicies || len(ofKind(objs, "ValidatingAdmissionPolicyBinding")) != wantPolicies {
		t.Errorf("%d ValidatingAdmissionPolicies and %d bindings; want %d of each", policies, len(ofKind(objs, "ValidatingAdmissionPolicyBinding")), wantPolicies)
	}

	np := find(objs, "NetworkPolicy", release)
	if (np != nil) != want.networkPolicy {
		t.Errorf("NetworkPolicy %s rendered: %v; want %v", release, np != nil, want.networkPolicy)
	}
	if np != nil {
		var p networkingv1.NetworkPolicy
		convert(t, np, &p)
		rules := 1
		if want.cluster {
			rules = 2
		}
		if len(p.Spec.Ingress) != rules || len(p.Spec.Ingress[0].From) != 0 || len(p.Spec.Ingress[0].Ports) != 1 || p.Spec.Ingress[0].Ports[0].Port.IntValue() != 8443 {
			t.Errorf("NetworkPolicy %s admits %+v; want port 8443 from anywhere (and in etcd.mode cluster 2379, 2380 and 2381 from certapi's pods), nothing else", release, p.Spec.Ingress)
		}
		if want.cluster && len(p.Spec.Ingress) == 2 {
			r := p.Spec.Ingress[1]
			if len(r.From) != 1 || r.From[0].PodSelector == nil || r.From[0].NamespaceSelector != nil ||
				r.From[0].PodSelector.MatchLabels["app.kubernetes.io/component"] != "apiserver" ||
				len(r.Ports) != 3 || r.Ports[0].Port.IntValue() != 2379 || r.Ports[1].Port.IntValue() != 2380 || r.Ports[2].Port.IntValue() != 2381 {
				t.Errorf("NetworkPolicy %s admits %+v; want 2379, 2380 and (custody etcd, the default) the enrollment port 2381 from certapi's own pods only", release, r)
			}
		}
	}
	etcd := find(objs, "NetworkPolicy", release+"-etcd")
	dedicated := find(objs, "StatefulSet", release+"-etcd") != nil
	if (etcd != nil) != (want.networkPolicy && dedicated) {
		t.Errorf("NetworkPolicy %s-etcd rendered: %v; want %v", release, etcd != nil, want.networkPolicy && dedicated)
	}
	if etcd != nil {
		var p networkingv1.NetworkPolicy
		convert(t, etcd, &p)
		ports := map[int][]networkingv1.NetworkPolicyPeer{}
		for _, r := range p.Spec.Ingress {
			for _, port := range r.Ports {
				ports[port.Port.IntValue()] = append(ports[port.Port.IntValue()], r.From...)
			}
		}
		component := func(peers []networkingv1.NetworkPolicyPeer) []string {
			var out []string
			for _, peer := range peers {
				if peer.PodSelector != nil && peer.NamespaceSelector == nil {
					out = append(out, peer.PodSelector.MatchLabels["app.kubernetes.io/component"])
				}
			}
			sort.Strings(out)
			return out
		}
		if got := component(ports[2379]); !slices.Equal(got, []string{"apiserver", "etcd"}) || len(ports[2379]) != 2 {
			t.Errorf("etcd clients (2379) from %v; want certapi's pods and the members only", ports[2379])
		}
		if got := component(ports[2380]); !slices.Equal(got, []string{"etcd"}) || len(ports[2380]) != 1 {
			t.Errorf("etcd peers (2380) from %v; want the members only", ports[2380])
		}
		if n := len(ports[2381]); (n == 1) != want.etcdMetrics || n > 1 || (n == 1 && ports[2381][0].NamespaceSelector == nil) {
			t.Errorf("etcd metrics (2381) from %v; want networkPolicy.etcdMetricsFrom (metrics set: %v)", ports[2381], want.etcdMetrics)
		}
		if len(ports) != 2 && len(ports) != 3 {
			t.Errorf("etcd NetworkPolicy admits ports %v; want 2379, 2380 and (with etcdMetricsFrom) 2381", ports)
		}
	}

	d, _ := certapiArgs(t, objs)
	if got := d.Spec.Template.Spec.PriorityClassName; got != want.priorityClass {
		t.Errorf("priorityClassName %q; want %q", got, want.priorityClass)
	}
}

// ofKind returns the objects of a kind.
func ofKind(objs []*unstructured.Unstructured, kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, u := range objs {
		if u.GetKind() == kind {
			out = append(out, u)
		}
	}
	return out
}

func checkEmbedded(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	d, args := certapiArgs(t, objs)
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 1 || d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("replicas %v, strategy %q; want 1, Recreate (two pods must never open the embedded etcd's data)", d.Spec.Replicas, d.Spec.Strategy.Type)
	}
	for name := range args {
		if strings.HasPrefix(name, "etcd-") {
			t.Errorf("the embedded etcd with --%s", name)
		}
	}
	if args["data-dir"] != "/var/lib/certapi/data" {
		t.Errorf("--data-dir=%q; want a directory below the volume's root", args["data-dir"])
	}
	pvc := find(objs, "PersistentVolumeClaim", release+"-data")
	if pvc == nil {
		t.Fatal("no PersistentVolumeClaim certapi-data")
	}
	if pvc.GetAnnotations()["helm.sh/resource-policy"] != "keep" {
		t.Errorf("PersistentVolumeClaim certapi-data annotations %v; want helm.sh/resource-policy: keep (the README says helm uninstall keeps it)", pvc.GetAnnotations())
	}
	var claim string
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			claim = v.PersistentVolumeClaim.ClaimName
		}
	}
	if claim != pvc.GetName() {
		t.Errorf("the pod mounts claim %q; want %s", claim, pvc.GetName())
	}
	if find(objs, "StatefulSet", release+"-etcd") != nil {
		t.Error("the embedded etcd with a StatefulSet")
	}
}

// checkHA checks what keeps certapi up through drains and node losses: a PodDisruptionBudget that lets one
// pod go at a time (templates/pdb.yaml says why not minAvailable: 2), over certapi's pods, and spreading
// over nodes and zones that is preferred only, so that a one-node cluster runs every replica.
func checkHA(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	u := find(objs, "PodDisruptionBudget", release)
	if u == nil {
		t.Fatal("no PodDisruptionBudget certapi")
	}
	var pdb policyv1.PodDisruptionBudget
	convert(t, u, &pdb)
	d, _ := certapiArgs(t, objs)
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 || pdb.Spec.MinAvailable != nil ||
		pdb.Spec.Selector == nil || !reflect.DeepEqual(pdb.Spec.Selector.MatchLabels, d.Spec.Template.Labels) {
		t.Errorf("PodDisruptionBudget maxUnavailable %v, minAvailable %v, selector %v; want 1, none, the pods' labels %v",
			pdb.Spec.MaxUnavailable, pdb.Spec.MinAvailable, pdb.Spec.Selector, d.Spec.Template.Labels)
	}
	a := d.Spec.Template.Spec.Affinity
	if a == nil || a.PodAntiAffinity == nil || len(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) != 0 {
		t.Fatalf("affinity %+v; want a preferred pod anti-affinity only", a)
	}
	var keys []string
	for _, term := range a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
		keys = append(keys, term.PodAffinityTerm.TopologyKey)
		if !reflect.DeepEqual(term.PodAffinityTerm.LabelSelector.MatchLabels, pdb.Spec.Selector.MatchLabels) {
			t.Errorf("anti-affinity over %s selects %v; want certapi's pods %v", term.PodAffinityTerm.TopologyKey, term.PodAffinityTerm.LabelSelector.MatchLabels, pdb.Spec.Selector.MatchLabels)
		}
	}
	if !slices.Equal(keys, []string{"kubernetes.io/hostname", "topology.kubernetes.io/zone"}) {
		t.Errorf("preferred anti-affinity over %v; want nodes, then zones", keys)
	}
}

// checkCluster checks etcd.mode cluster: certapi is a StatefulSet of replicas pods whose pods each run one
// member of the replicas' etcd cluster on their own claim, behind a headless Service
// (docs/high-availability.md).
func checkCluster(t *testing.T, ns string, objs []*unstructured.Unstructured, replicas int32) {
	t.Helper()
	u := find(objs, "StatefulSet", release)
	if u == nil || find(objs, "Deployment", release) != nil {
		t.Fatal("etcd.mode cluster: want a StatefulSet certapi and no Deployment")
	}
	var sts appsv1.StatefulSet
	convert(t, u, &sts)
	if sts.Spec.Replicas == nil || *sts.Spec.Replicas != replicas || sts.Spec.ServiceName != release+"-peers" ||
		sts.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		t.Errorf("StatefulSet replicas %v, serviceName %q, podManagementPolicy %q; want %d, %s-peers, Parallel (a member that lost its volume must see its peers)",
			sts.Spec.Replicas, sts.Spec.ServiceName, sts.Spec.PodManagementPolicy, replicas, release)
	}
	if len(sts.Spec.VolumeClaimTemplates) != 1 || sts.Spec.VolumeClaimTemplates[0].Name != "data" {
		t.Errorf("volumeClaimTemplates %+v; want one, data", sts.Spec.VolumeClaimTemplates)
	}
	if r := sts.Spec.PersistentVolumeClaimRetentionPolicy; r == nil || r.WhenDeleted != appsv1.RetainPersistentVolumeClaimRetentionPolicyType {
		t.Errorf("persistentVolumeClaimRetentionPolicy %+v; want the claims (the CA keys) retained", r)
	}
	_, args := certapiArgs(t, objs)
	want := map[string]string{
		"data-dir":                 "/var/lib/certapi/data",
		"etcd-peer-service":        release + "-peers." + ns + ".svc",
		"etcd-member-name":         "$(POD_NAME)",
		"etcd-peer-ca-secret":      release + "-etcd-peer-ca",
		"etcd-dead-member-timeout": "10m",
	}
	for k, v := range want {
		if args[k] != v {
			t.Errorf("--%s=%q; want %q", k, args[k], v)
		}
	}
	if _, ok := args["etcd-servers"]; ok {
		t.Error("etcd.mode cluster with --etcd-servers")
	}
	svc := find(objs, "Service", release+"-peers")
	if svc == nil {
		t.Fatal("no headless Service certapi-peers")
	}
	var s corev1.Service
	convert(t, svc, &s)
	if s.Spec.ClusterIP != corev1.ClusterIPNone || !s.Spec.PublishNotReadyAddresses || len(s.Spec.Ports) != 2 {
		t.Errorf("Service %s-peers: clusterIP %q, publishNotReadyAddresses %v, ports %+v; want headless, true, 2379 and 2380", release, s.Spec.ClusterIP, s.Spec.PublishNotReadyAddresses, s.Spec.Ports)
	}
	role := find(objs, "Role", release+":etcd-cluster")
	if role == nil || find(objs, "RoleBinding", release+":etcd-cluster") == nil {
		t.Fatal("no Role and RoleBinding certapi:etcd-cluster (get on its StatefulSet, list and watch on EndpointSlices)")
	}
	var r rbacv1.Role
	convert(t, role, &r)
	if !slices.ContainsFunc(r.Rules, func(rule rbacv1.PolicyRule) bool {
		return slices.Equal(rule.APIGroups, []string{"discovery.k8s.io"}) && slices.Equal(rule.Resources, []string{"endpointslices"}) &&
			slices.Contains(rule.Verbs, "list") && slices.Contains(rule.Verbs, "watch")
	}) {
		t.Errorf("Role %s:etcd-cluster %+v: no list and watch on EndpointSlices (readiness without a quorum needs the other replicas')", release, r.Rules)
	}
	if find(objs, "PersistentVolumeClaim", release+"-data") != nil || find(objs, "StatefulSet", release+"-etcd") != nil {
		t.Error("etcd.mode cluster with the single-member claim or the dedicated etcd")
	}
}

func checkDedicated(t *testing.T, ns string, objs []*unstructured.Unstructured) {
	t.Helper()
	d, args := certapiArgs(t, objs)
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 3 {
		t.Errorf("replicas %v; want 3", d.Spec.Replicas)
	}
	u := find(objs, "StatefulSet", release+"-etcd")
	if u == nil {
		t.Fatal("no StatefulSet certapi-etcd")
	}
	var sts appsv1.StatefulSet
	convert(t, u, &sts)
	var want []string
	for i := 0; i < int(*sts.Spec.Replicas); i++ {
		want = append(want, fmt.Sprintf("https://%s-%d.%s.%s.svc:2379", sts.Name, i, sts.Spec.ServiceName, ns))
	}
	if got := args["etcd-servers"]; got != strings.Join(want, ",") || *sts.Spec.Replicas != 3 {
		t.Errorf("--etcd-servers=%s with %d members; want %s", got, *sts.Spec.Replicas, strings.Join(want, ","))
	}
	if p := sts.Spec.PersistentVolumeClaimRetentionPolicy; p == nil || p.WhenDeleted != appsv1.RetainPersistentVolumeClaimRetentionPolicyType {
		t.Errorf("the etcd claims' retention %+v; want Retain when the StatefulSet is deleted (the README says helm uninstall keeps them)", p)
	}
	if !slices.Contains(secretVolumes(&d.Spec.Template.Spec), "certapi-etcd-client-tls") || args["etcd-certfile"] == "" {
		t.Errorf("certapi has no etcd client certificate: volumes %v, args %v", secretVolumes(&d.Spec.Template.Spec), args)
	}
	u = find(objs, "PodDisruptionBudget", release+"-etcd")
	if u == nil {
		t.Fatal("no PodDisruptionBudget certapi-etcd")
	}
	var pdb policyv1.PodDisruptionBudget
	convert(t, u, &pdb)
	if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() != 2 {
		t.Errorf("etcd PodDisruptionBudget minAvailable %v; want 2 of 3 (a quorum)", pdb.Spec.MinAvailable)
	}
}

func checkExternal(t *testing.T, valuesFile string, objs []*unstructured.Unstructured) {
	t.Helper()
	data, err := os.ReadFile(valuesFile)
	if err != nil {
		t.Fatal(err)
	}
	var values struct {
		Etcd struct {
			External struct {
				Endpoints        []string `json:"endpoints"`
				ClientSecretName string   `json:"clientSecretName"`
				Prefix           string   `json:"prefix"`
			} `json:"external"`
		} `json:"etcd"`
	}
	if err := yaml.Unmarshal(data, &values); err != nil {
		t.Fatal(err)
	}
	ext := values.Etcd.External
	d, args := certapiArgs(t, objs)
	if args["etcd-servers"] != strings.Join(ext.Endpoints, ",") || args["etcd-prefix"] != ext.Prefix || ext.Prefix == "" {
		t.Errorf("--etcd-servers=%q --etcd-prefix=%q; want %q and %q", args["etcd-servers"], args["etcd-prefix"], strings.Join(ext.Endpoints, ","), ext.Prefix)
	}
	if !slices.Contains(secretVolumes(&d.Spec.Template.Spec), ext.ClientSecretName) || args["etcd-cafile"] == "" {
		t.Errorf("certapi's etcd client certificate is not from Secret %s: volumes %v, args %v", ext.ClientSecretName, secretVolumes(&d.Spec.Template.Spec), args)
	}
	if a := d.Spec.Template.Spec.Affinity; a == nil || a.PodAntiAffinity == nil || len(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) != 1 {
		t.Errorf("affinity %+v; want the required anti-affinity of podAntiAffinity: hard", a)
	}
	if find(objs, "StatefulSet", release+"-etcd") != nil || find(objs, "PersistentVolumeClaim", release+"-data") != nil {
		t.Error("an external etcd with a StatefulSet or a claim of certapi's")
	}
}

// checkMonitoring checks that the PrometheusRule holds exactly the chart's rules file, and that the
// ServiceMonitor scrapes certapi's Service with certapi's own name and the CA bundle it injects.
func checkMonitoring(t *testing.T, ns string, objs []*unstructured.Unstructured, groups []any) {
	t.Helper()
	rule := find(objs, "PrometheusRule", release)
	if rule == nil {
		t.Fatal("no PrometheusRule")
	}
	got, _, _ := unstructured.NestedSlice(rule.Object, "spec", "groups")
	if !reflect.DeepEqual(got, groups) {
		t.Errorf("the PrometheusRule's groups are not those of files/prometheusrule-groups.yaml")
	}
	sm := find(objs, "ServiceMonitor", release)
	cm := find(objs, "ConfigMap", release+"-ca")
	if sm == nil || cm == nil {
		t.Fatal("no ServiceMonitor or ConfigMap certapi-ca")
	}
	if cm.GetAnnotations()["certapi.dev/inject-ca-bundle"] != "true" {
		t.Errorf("ConfigMap certapi-ca does not opt in to injection: %v", cm.GetAnnotations())
	}
	svc := find(objs, "Service", release)
	sel, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
	if svc == nil || !reflect.DeepEqual(sel, map[string]string{"app.kubernetes.io/name": "certapi", "app.kubernetes.io/component": "apiserver"}) {
		t.Errorf("ServiceMonitor selects %v; want certapi's Service (labels %v)", sel, svc.GetLabels())
	}
	for k, v := range sel {
		if svc.GetLabels()[k] != v {
			t.Errorf("ServiceMonitor selects %s=%s; the Service has %v", k, v, svc.GetLabels())
		}
	}
	// The token: a Secret of the ServiceAccount <release>-metrics, which the ClusterRole
	// <release>:metrics-reader (and nothing else) is bound to.
	secret := find(objs, "Secret", release+"-metrics-token")
	if secret == nil || find(objs, "ServiceAccount", release+"-metrics") == nil {
		t.Fatal("no ServiceAccount certapi-metrics or its token Secret certapi-metrics-token")
	}
	if secret.Object["type"] != "kubernetes.io/service-account-token" || secret.GetAnnotations()["kubernetes.io/service-account.name"] != release+"-metrics" {
		t.Errorf("Secret %s is of type %v for %q; want a kubernetes.io/service-account-token of %s-metrics", secret.GetName(), secret.Object["type"], secret.GetAnnotations()["kubernetes.io/service-account.name"], release)
	}
	var binding rbacv1.ClusterRoleBinding
	if crb := find(objs, "ClusterRoleBinding", release+":metrics"); crb == nil {
		t.Errorf("no ClusterRoleBinding %s:metrics", release)
	} else {
		convert(t, crb, &binding)
		want := []rbacv1.Subject{{Kind: "ServiceAccount", Name: release + "-metrics", Namespace: ns}}
		if binding.RoleRef.Name != release+":metrics-reader" || !reflect.DeepEqual(binding.Subjects, want) {
			t.Errorf("ClusterRoleBinding %s binds %s to %v; want %s:metrics-reader to %v", binding.Name, binding.RoleRef.Name, binding.Subjects, release, want)
		}
	}
	eps, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	var paths []string
	for _, e := range eps {
		m := e.(map[string]any)
		paths = append(paths, fmt.Sprint(m["path"]))
		server, _, _ := unstructured.NestedString(m, "tlsConfig", "serverName")
		ca, _, _ := unstructured.NestedString(m, "tlsConfig", "ca", "configMap", "name")
		if server != release+"."+ns+".svc" || ca != cm.GetName() {
			t.Errorf("endpoint %v: serverName %q, CA ConfigMap %q; want %s.%s.svc and %s", m["path"], server, ca, release, ns, cm.GetName())
		}
		auth, _, _ := unstructured.NestedMap(m, "authorization")
		want := map[string]any{"type": "Bearer", "credentials": map[string]any{"name": secret.GetName(), "key": "token"}}
		if !reflect.DeepEqual(auth, want) {
			t.Errorf("endpoint %v: authorization %v; want %v", m["path"], auth, want)
		}
		if _, ok := m["bearerTokenFile"]; ok {
			t.Errorf("endpoint %v still has the deprecated bearerTokenFile", m["path"])
		}
	}
	if !reflect.DeepEqual(paths, []string{"/metrics", "/metrics/slis"}) {
		t.Errorf("ServiceMonitor scrapes %v; want /metrics and /metrics/slis", paths)
	}
	// Prometheus may discover the Service's endpoints and pods in the release's namespace.
	role, rb := find(objs, "Role", release+":prometheus"), find(objs, "RoleBinding", release+":prometheus")
	if role == nil || rb == nil {
		t.Fatalf("no Role or RoleBinding %s:prometheus", release)
	}
	var r rbacv1.Role
	var b rbacv1.RoleBinding
	convert(t, role, &r)
	convert(t, rb, &b)
	for _, res := range []struct{ group, resource string }{{"", "services"}, {"", "endpoints"}, {"", "pods"}, {"discovery.k8s.io", "endpointslices"}} {
		if !rbacAllows(r.Rules, res.group, res.resource, "list") || !rbacAllows(r.Rules, res.group, res.resource, "watch") {
			t.Errorf("Role %s does not let Prometheus list and watch %s", r.Name, res.resource)
		}
	}
	want := []rbacv1.Subject{{Kind: "ServiceAccount", Name: "prometheus-k8s", Namespace: "monitoring"}}
	if b.RoleRef.Name != r.Name || !reflect.DeepEqual(b.Subjects, want) {
		t.Errorf("RoleBinding %s binds %s to %v; want %s to %v", b.Name, b.RoleRef.Name, b.Subjects, r.Name, want)
	}
}

// rbacAllows reports whether one of rules grants verb on resource of group.
func rbacAllows(rules []rbacv1.PolicyRule, group, resource, verb string) bool {
	for _, r := range rules {
		if slices.Contains(r.APIGroups, group) && slices.Contains(r.Resources, resource) && slices.Contains(r.Verbs, verb) {
			return true
		}
	}
	return false
}

// helpFlags returns the long flags certapi --help lists.
func helpFlags(t *testing.T, bin string) map[string]bool {
	t.Helper()
	out, err := command(context.Background(), bin, "--help")
	if err != nil {
		t.Fatalf("certapi --help: %v\n%s", err, out)
	}
	flags := map[string]bool{}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		word := f[0]
		if strings.HasPrefix(word, "-") && !strings.HasPrefix(word, "--") && len(f) > 1 {
			word = f[1] // "-v, --v Level"
		}
		if strings.HasPrefix(word, "--") {
			flags[strings.TrimSuffix(strings.TrimPrefix(word, "--"), ",")] = true
		}
	}
	if !flags["etcd-servers"] || !flags["leader-identity"] {
		t.Fatalf("certapi --help lists no --etcd-servers or --leader-identity:\n%s", out)
	}
	return flags
}

// TestBadValuesAreRefused: values that cannot work fail the rendering (and so helm install) with a message
// that says why.
func TestBadValuesAreRefused(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		// The embedded etcd with the default three replicas.
		{[]string{"--set", "etcd.mode=embedded"}, "the embedded etcd is one member inside one pod; set replicas=1"},
		{[]string{"--set", "etcd.mode=external"}, "etcd.mode external needs etcd.external.endpoints"},
		{[]string{"--set", "encryption.enabled=false"}, "certapi would refuse to start"},
		{[]string{"--set", "encryption.config=apiVersion: v1"}, "does not list certificateauthoritykeys.certapi.dev"},
		// values.schema.json: a misspelt key is refused, not silently ignored; so are unknown choices.
		{[]string{"--set", "replica=3"}, "additional properties 'replica' not allowed"},
		{[]string{"--set", "etcd.external.endpoint=https://etcd:2379"}, "additional properties 'endpoint' not allowed"},
		{[]string{"--set", "etcd.mode=kube"}, "at '/etcd/mode': value must be one of 'embedded', 'dedicated', 'external', 'cluster'"},
		{[]string{"--set", "etcd.mode=dedicated", "--set", "etcd.dedicated.members=2"}, "at '/etcd/dedicated/members': value must be one of 1, 3, 5"},
		{[]string{"--set", "podAntiAffinity=strict"}, "at '/podAntiAffinity': value must be one of 'soft', 'hard', 'none'"},
		{[]string{"--set", "replicas=three"}, "at '/replicas': got string, want integer"},
		{[]string{"--set", "secretDelivery.refusedNamespaces[0]=Kube_System"}, "at '/secretDelivery/refusedNamespaces/0'"},
		{[]string{"--set", "networkPolicy.enable=false"}, "additional properties 'enable' not allowed"},
		// The values platform teams set.
		{[]string{"--set", "serviceAccount.create=false"}, "serviceAccount.create false needs serviceAccount.name"},
		{[]string{"--set", "serviceAccount.name=Certapi_SA"}, "at '/serviceAccount/name'"},
		{[]string{"--set", "securePort=0"}, "at '/securePort': minimum: got 0, want 1"},
		{[]string{"--set", "hostNetwork=yes"}, "at '/hostNetwork': got string, want boolean"},
		{[]string{"--set-json", `extraVolumes=[{"hostPath":{"path":"/var/run/kmsplugin"}}]`}, "at '/extraVolumes/0': missing property 'name'"},
		{[]string{"--set-json", `extraVolumeMounts=[{"name":"kms"}]`}, "at '/extraVolumeMounts/0': missing property 'mountPath'"},
		{[]string{"--set-json", `extraEnv=[{"value":"200MiB"}]`}, "at '/extraEnv/0': missing property 'name'"},
		{[]string{"--set", "podSecurityContext.runAsUsr=1000"}, "at '/podSecurityContext': additional properties 'runAsUsr' not allowed"},
		{[]string{"--set", "securityContext.privilegd=true"}, "at '/securityContext': additional properties 'privilegd' not allowed"},
		{[]string{"--set", "encryption.secretKey=keys/config.yaml"}, "at '/encryption/secretKey'"},
		{[]string{"--set", "test.timeout=soon"}, "at '/test/timeout'"},
		{[]string{"--set", "snapshots.interval=hourly"}, "at '/snapshots/interval'"},
		{[]string{"--set", "snapshots.retention=0"}, "at '/snapshots/retention': minimum: got 0, want 1"},
		// The CA key plugin: what it cannot run without, and its flags only through its values.
		{[]string{"--set", "caKeyPlugin.enabled=true"}, "caKeyPlugin.enabled needs caKeyPlugin.image"},
		{[]string{"--set", "caKeyPlugin.enabled=true", "--set", "caKeyPlugin.image=hsm:1", "--set", "caKeyPlugin.module=/hsm.so", "--set", "caKeyPlugin.tokenLabel=certapi"}, "caKeyPlugin.enabled needs caKeyPlugin.pinSecret"},
		{[]string{"--set-json", `extraArgs=["--ca-key-plugin=/var/run/keys.sock"]`}, "extraArgs has --ca-key-plugin=/var/run/keys.sock: set caKeyPlugin instead"},
		{[]string{"--set", "caKeyPlugin.modul=/hsm.so"}, "at '/caKeyPlugin': additional properties 'modul' not allowed"},
		{[]string{"--set", "caKeyPlugin.module=libhsm.so"}, "at '/caKeyPlugin/module'"},
		{[]string{"--set", "caKeyPlugin.timeout=5"}, "at '/caKeyPlugin/timeout'"},
		{[]string{"--set", "snapshots.interval=1h", "--set", "etcd.mode=external", "--set", "etcd.external.endpoints[0]=https://etcd:2379"}, "snapshots.interval with an external etcd needs snapshots.existingClaim"},
	} {
		r := runHelm(t, append([]string{"template", release, chartDir, "--namespace", "certapi"}, tc.args...)...)
		if r.err == nil || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("helm template %v: %v, stderr %q; want a failure saying %q", tc.args, r.err, r.stderr, tc.want)
		}
	}
	// And what those refusals guard is allowed where it works.
	for _, args := range [][]string{
		{"--set", "replicas=3", "--set", "etcd.mode=dedicated"},
		{"--set", "encryption.enabled=false", "--set", "encryption.required=false"},
	} {
		render(t, "certapi", args...)
	}
}

// objRef names an object found through discovery.
type objRef struct {
	resource  schema.GroupResource
	namespace string
	name      string
}

func (o objRef) String() string {
	if o.namespace == "" {
		return fmt.Sprintf("%s %s", o.resource, o.name)
	}
	return fmt.Sprintf("%s %s/%s", o.resource, o.namespace, o.name)
}

// certapiObjects lists every object of every resource kube-apiserver serves, in every namespace, and
// returns those that are certapi's by their labels, Helm's release annotation or their name, each with
// whether it is being deleted (no controller runs here to finish a deletion a finalizer holds). Discovery
// must be complete: with unavailable, the API groups in it may fail (the APIService of an installed chart
// has no certapi behind it here), no other.
func certapiObjects(t *testing.T, unavailable ...string) map[objRef]bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	disco, err := discovery.NewDiscoveryClientForConfig(cp.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	// kube-apiserver's aggregated discovery drops the group of a deleted APIService a moment after the
	// deletion (until then it reports it stale): wait for discovery to be complete.
	var lists []*metav1.APIResourceList
	var last error
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		lists, last = disco.ServerPreferredResources()
		if last == nil {
			return true, nil
		}
		var failed *discovery.ErrGroupDiscoveryFailed
		if !errors.As(last, &failed) {
			return false, nil
		}
		for gv := range failed.Groups {
			if !slices.Contains(unavailable, gv.Group) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("discovery is not complete (groups other than %v fail): %v", unavailable, last)
	}
	client, err := metadata.NewForConfig(cp.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	found := map[objRef]bool{}
	for _, list := range lists {
		gv, err := schema.ParseGroupVersion(list.GroupVersion)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range list.APIResources {
			if strings.Contains(r.Name, "/") || !slices.Contains(r.Verbs, "list") {
				continue
			}
			items, err := client.Resource(gv.WithResource(r.Name)).List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatalf("listing %s: %v", gv.WithResource(r.Name), err)
			}
			for _, item := range items.Items {
				if !isCertapis(&item) {
					continue
				}
				found[objRef{schema.GroupResource{Group: gv.Group, Resource: r.Name}, item.Namespace, item.Name}] = item.DeletionTimestamp != nil
			}
		}
	}
	return found
}

func isCertapis(m *metav1.PartialObjectMetadata) bool {
	return m.Labels["app.kubernetes.io/part-of"] == "certapi" ||
		m.Labels["app.kubernetes.io/instance"] == release ||
		m.Annotations["meta.helm.sh/release-name"] == release ||
		strings.Contains(m.Name, "certapi")
}

func has(set map[objRef]bool, r objRef) bool {
	_, ok := set[r]
	return ok
}

// leftBehind returns the objects of after that were not in before. An object being deleted is gone as
// far as helm is concerned (a cluster's controllers finish the deletion) unless it is one that must be
// kept: then the test fails. Events are records, not objects anyone made (kube-apiserver itself reports on
// a Service, for one), and expire after its --event-ttl: they are logged, not counted.
func leftBehind(t *testing.T, before, after, kept map[objRef]bool) map[objRef]bool {
	t.Helper()
	kube, err := kubernetes.NewForConfig(cp.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	left := map[objRef]bool{}
	for r, deleting := range after {
		switch {
		case has(before, r):
		case r.resource.Resource == "events":
			if r.resource.Group == "" {
				if e, err := kube.CoreV1().Events(r.namespace).Get(context.Background(), r.name, metav1.GetOptions{}); err == nil {
					t.Logf("Event %s/%s (not counted): %s %s/%s by %s: %s", r.namespace, r.name, e.Reason, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Source.Component, e.Message)
				}
			}
		case deleting && kept[r]:
			t.Errorf("%s, which helm uninstall must keep, is being deleted", r)
		case deleting:
			t.Logf("%s is being deleted (a finalizer holds it: no controller runs here)", r)
		default:
			left[r] = true
		}
	}
	return left
}

func sortedRefs(set map[objRef]bool) []string {
	var out []string
	for r := range set {
		out = append(out, r.String())
	}
	sort.Strings(out)
	return out
}

// TestInstallAndUninstall installs the chart with helm against kube-apiserver, checks that every object of
// the release is there, uninstalls it and lists, over every resource the API serves, what is left of
// certapi's: exactly what docs/operating.md's "Uninstall" says helm uninstall keeps. With the single
// embedded etcd, a new install of the same release then takes over what was kept. (No controller runs
// here: the StatefulSet of the defaults makes no claims, whose retention checkCluster checks.)
func TestInstallAndUninstall(t *testing.T) {
	encFile := testhelpers.CAKeysEncryptionConfigFile(t)
	kube, err := kubernetes.NewForConfig(cp.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	ref := func(resource, ns, name string) objRef {
		return objRef{schema.GroupResource{Resource: resource}, ns, name}
	}
	for _, tc := range []struct {
		name string
		ns   string
		args []string
		// kept is what helm uninstall leaves, the release's namespace included (helm never deletes a
		// namespace, not even one --create-namespace made).
		kept []objRef
		// takeOver: a second install takes over the kept claim certapi-data.
		takeOver bool
	}{{
		name: "defaults with the encryption Secret and monitoring",
		ns:   "certapi",
		args: []string{"--set-file", "encryption.config=" + encFile, "--set", "monitoring.serviceMonitor.enabled=true", "--set", "monitoring.prometheusRule.enabled=true"},
		kept: []objRef{ref("namespaces", "", "certapi"), ref("secrets", "certapi", "certapi-encryption-config")},
	}, {
		name:     "values-single with the encryption Secret",
		ns:       "certapi-single",
		args:     []string{"-f", filepath.Join(examples, "values-single.yaml"), "--set-file", "encryption.config=" + encFile},
		kept:     []objRef{ref("namespaces", "", "certapi-single"), ref("persistentvolumeclaims", "certapi-single", "certapi-data"), ref("secrets", "certapi-single", "certapi-encryption-config")},
		takeOver: true,
	}, {
		name: "values-ha",
		ns:   "certapi-ha",
		args: []string{"-f", filepath.Join(examples, "values-ha.yaml")},
		kept: []objRef{ref("namespaces", "", "certapi-ha")},
	}, {
		name: "values-external-etcd",
		ns:   "certapi-external",
		args: []string{"-f", filepath.Join(examples, "values-external-etcd.yaml")},
		kept: []objRef{ref("namespaces", "", "certapi-external")},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			before := certapiObjects(t)
			install := func() {
				t.Helper()
				runHelm(t, append([]string{"install", release, chartDir, "--namespace", tc.ns, "--create-namespace"}, tc.args...)...).must(t)
				manifest, err := framework.DecodeManifests([]byte(runHelm(t, "get", "manifest", release, "--namespace", tc.ns).must(t)))
				if err != nil || len(manifest) == 0 {
					t.Fatalf("helm get manifest: %d objects, %v", len(manifest), err)
				}
				// Every object of the release exists, and the listing finds it: so it would find any of
				// them left behind.
				during := certapiObjects(t, "certapi.dev")
				mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(kube.Discovery()))
				for _, u := range manifest {
					gvk := u.GroupVersionKind()
					m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
					if err != nil {
						t.Fatalf("%s %s: %v", gvk, u.GetName(), err)
					}
					if r := (objRef{m.Resource.GroupResource(), u.GetNamespace(), u.GetName()}); !has(during, r) {
						t.Errorf("%s of the release is not among certapi's objects in the cluster: %v", r, sortedRefs(during))
					}
				}
			}
			install()
			runHelm(t, "uninstall", release, "--namespace", tc.ns).must(t)
			want := map[objRef]bool{}
			for _, r := range tc.kept {
				want[r] = true
			}
			// No certapi.dev group is left to fail discovery: the APIService is gone.
			left := leftBehind(t, before, certapiObjects(t), want)
			if !reflect.DeepEqual(left, want) {
				t.Fatalf("helm uninstall left %v; want exactly %v", sortedRefs(left), sortedRefs(want))
			}
			if !tc.takeOver {
				return
			}
			// A new install of the release takes over the kept claim and Secret (the same objects, so the
			// same CA keys), and uninstalling it again leaves them again.
			ctx := context.Background()
			pvc, err := kube.CoreV1().PersistentVolumeClaims(tc.ns).Get(ctx, "certapi-data", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			install()
			again, err := kube.CoreV1().PersistentVolumeClaims(tc.ns).Get(ctx, "certapi-data", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if again.UID != pvc.UID {
				t.Errorf("the re-install replaced the claim certapi-data (UID %s, was %s); want the kept one", again.UID, pvc.UID)
			}
			runHelm(t, "uninstall", release, "--namespace", tc.ns).must(t)
			left = leftBehind(t, before, certapiObjects(t), want)
			if !reflect.DeepEqual(left, want) {
				t.Errorf("the second helm uninstall left %v; want exactly %v", sortedRefs(left), sortedRefs(want))
			}
		})
	}
}
