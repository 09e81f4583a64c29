package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	aggregatorclient "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"

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
	mfDeployBase    = "artifacts/deploy/base"
	mfDeployHA      = "artifacts/deploy/overlays/ha"
	mfDeploySingle  = "artifacts/deploy/overlays/single-replica"
	mfEtcdComponent = "artifacts/deploy/components/etcd"
	mfArgoCDApp     = "artifacts/examples/argocd/application.yaml"
	// mfPodCertificates is the example of pods that get their certificate from kubelet.
	mfPodCertificates = "artifacts/examples/pod-certificates"
)

// mfKustomization is one directory with a kustomization file, and what `kubectl kustomize` made of it.
type mfKustomization struct {
	dir       string // relative to the repository root, slash-separated
	component bool   // kind: Component
	refs      []string
	objs      []*unstructured.Unstructured
}

func TestManifests(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	ks := mfFindKustomizations(t, root)
	for _, want := range []string{mfDeployBase, mfDeployHA, mfDeploySingle, mfEtcdComponent, "artifacts/examples/argocd/widget-webhook", mfPodCertificates} {
		if ks[want] == nil {
			t.Errorf("no kustomization in %s", want)
		}
	}
	// Build everything first: the subtests below read the results.
	for _, dir := range mfSortedKeys(ks) {
		k := ks[dir]
		out, errOut, err := mfRun(t, kubectlPath(t), "kustomize", filepath.Join(root, dir))
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

	t.Run("every component is used", func(t *testing.T) {
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
	})

	t.Run("server-side dry run", func(t *testing.T) {
		_, kube := testhelpers.Clients(t, cp.AdminConfig)
		mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(kube.Discovery()))
		for _, dir := range mfSortedKeys(ks) {
			k := ks[dir]
			if k.component {
				continue // applied through the overlays that use it
			}
			t.Run(dir, func(t *testing.T) {
				// A server dry run does not create the Namespace of the same apply, so the namespaced
				// objects after it would fail with "namespaces not found". Create the namespaces that do
				// not exist yet for real first (certapi-system exists in this control plane already; it
				// is what the framework registers certapi in).
				for _, ns := range mfNamespaces(t, mapper, k.objs) {
					mfEnsureNamespace(t, kube, ns)
				}
				// Objects this control plane already has (the framework registered certapi with its own
				// Namespace, ExternalName Service and APIService) would be merged with the framework's
				// fields by an apply, which says nothing about the manifests: the framework's Service port
				// and ours even collide. Validate those as a whole-object replacement instead, which is what
				// they are on a cluster where the manifests are the only source; apply the rest.
				existing, fresh := mfSplitExisting(t, mapper, k.objs)
				for _, u := range existing {
					t.Logf("%s %s exists in the control plane already: validated with kubectl replace --dry-run=server", u.GetKind(), u.GetName())
				}
				if len(existing) > 0 {
					out, errOut, err := kubectlResult(t, "replace", "--dry-run=server", "-f", mfWriteObjects(t, existing))
					if err != nil {
						t.Errorf("kubectl replace --dry-run=server of the objects %s has that exist already: %v\nstdout: %s\nstderr: %s", dir, err, out, errOut)
					}
				}
				file := mfWriteObjects(t, fresh)
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
	})

	t.Run("pods meet Pod Security restricted", func(t *testing.T) {
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
		for _, dir := range []string{mfDeployHA, mfDeploySingle, mfPodCertificates} {
			for _, w := range mfWorkloads(t, ks[dir].objs) {
				pod := &corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{Name: w.name, Namespace: ns, Labels: w.template.Labels},
					Spec:       *w.template.Spec.DeepCopy(),
				}
				if _, err := kube.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
					t.Errorf("%s: the pod of %s %s is refused in a namespace that enforces restricted: %v", dir, w.kind, w.name, err)
				}
			}
		}
	})

	t.Run("certapi's flags exist", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		bin, err := framework.CertapiBinary(ctx)
		if err != nil {
			t.Fatal(err)
		}
		flags := mfHelpFlags(t, bin)
		for _, dir := range []string{mfDeployBase, mfDeployHA, mfDeploySingle} {
			d := mfDeployment(t, ks[dir].objs, "certapi-system", "certapi")
			c := mfContainer(t, &d.Spec.Template.Spec, "certapi")
			for _, arg := range c.Args {
				name := mfFlagName(arg)
				if name == "" {
					t.Errorf("%s: certapi argument %q is not a --flag", dir, arg)
				} else if !flags[name] {
					t.Errorf("%s: certapi (%s) has no flag --%s (passed as %q)", dir, bin, name, arg)
				}
			}
		}
	})

	t.Run("etcd's flags exist", func(t *testing.T) {
		bin := filepath.Join(root, "_output", "bin", "etcd")
		if p := os.Getenv(framework.EnvEtcdBin); p != "" {
			bin = p
		}
		flags := mfHelpFlags(t, bin)
		sts := mfStatefulSet(t, ks[mfDeployHA].objs, "certapi-system", "certapi-etcd")
		c := mfContainer(t, &sts.Spec.Template.Spec, "etcd")
		if len(c.Command) != 1 || filepath.Base(c.Command[0]) != "etcd" {
			t.Errorf("etcd command %q; want the etcd binary alone, flags in args", c.Command)
		}
		for _, arg := range c.Args {
			if name := mfFlagName(arg); !flags[name] {
				t.Errorf("etcd has no flag --%s (passed as %q)", name, arg)
			}
		}
	})

	t.Run("certapi serves itself and registers its APIService for injection", func(t *testing.T) {
		objs := ks[mfDeployBase].objs
		var apiService apiregistrationv1.APIService
		mfConvert(t, mfFind(t, objs, "APIService", "", "v1alpha1.certapi.dev"), &apiService)
		if apiService.Annotations["certapi.dev/inject-ca-bundle"] != "true" {
			t.Errorf("APIService annotations %v; want certapi.dev/inject-ca-bundle: \"true\"", apiService.Annotations)
		}
		if len(apiService.Spec.CABundle) > 0 || apiService.Spec.InsecureSkipTLSVerify {
			t.Errorf("APIService has caBundle %q and insecureSkipTLSVerify %v; want neither: certapi injects the bundle", apiService.Spec.CABundle, apiService.Spec.InsecureSkipTLSVerify)
		}
		if u := mfFind(t, objs, "APIService", "", "v1alpha1.certapi.dev"); mfHasField(u, "spec", "caBundle") {
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
		mfConvert(t, mfFind(t, objs, "Service", svcRef.Namespace, svcRef.Name), &svc)
		var target string
		for _, p := range svc.Spec.Ports {
			if p.Port == *svcRef.Port {
				target = p.TargetPort.String()
			}
		}
		for _, dir := range []string{mfDeployBase, mfDeployHA, mfDeploySingle} {
			d := mfDeployment(t, ks[dir].objs, svcRef.Namespace, "certapi")
			c := mfContainer(t, &d.Spec.Template.Spec, "certapi")
			args := mfArgs(c)
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
			if !mfSelectorMatches(svc.Spec.Selector, d.Spec.Template.Labels) {
				t.Errorf("%s: Service selector %v does not select the pods (labels %v)", dir, svc.Spec.Selector, d.Spec.Template.Labels)
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
			mfCheckEnvRefs(t, dir, c)
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
				if got := mfSecretOf(&d.Spec.Template.Spec, c, path); got != secret {
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
	})

	t.Run("three replicas on the dedicated etcd", func(t *testing.T) {
		objs := ks[mfDeployHA].objs
		d := mfDeployment(t, objs, "certapi-system", "certapi")
		if d.Spec.Replicas == nil || *d.Spec.Replicas != 3 {
			t.Errorf("replicas %v; want 3", d.Spec.Replicas)
		}
		if a := d.Spec.Template.Spec.Affinity; a == nil || a.PodAntiAffinity == nil || len(a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) == 0 {
			t.Errorf("no preferred pod anti-affinity: %+v", a)
		}
		args := mfArgs(mfContainer(t, &d.Spec.Template.Spec, "certapi"))
		if args["leader-identity"] != "$(POD_NAME)" {
			t.Errorf("--leader-identity=%q; want $(POD_NAME)", args["leader-identity"])
		}
		// --etcd-servers names exactly the members of the StatefulSet, by their stable DNS names.
		sts := mfStatefulSet(t, objs, "certapi-system", "certapi-etcd")
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
		headless := mfFind(t, objs, "Service", sts.Namespace, sts.Spec.ServiceName)
		var hs corev1.Service
		mfConvert(t, headless, &hs)
		if hs.Spec.ClusterIP != corev1.ClusterIPNone || !hs.Spec.PublishNotReadyAddresses {
			t.Errorf("etcd Service: clusterIP %q, publishNotReadyAddresses %v; want a headless Service that publishes members before they are Ready", hs.Spec.ClusterIP, hs.Spec.PublishNotReadyAddresses)
		}
		if sts.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
			t.Errorf("etcd podManagementPolicy %q; want Parallel (members must start together)", sts.Spec.PodManagementPolicy)
		}
		ec := mfContainer(t, &sts.Spec.Template.Spec, "etcd")
		eargs := mfArgs(ec)
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
		mfCheckEnvRefs(t, mfDeployHA+" etcd", ec)
		for flag, secret := range map[string]string{
			"trusted-ca-file": "certapi-etcd-server-tls", "cert-file": "certapi-etcd-server-tls", "key-file": "certapi-etcd-server-tls",
			"peer-trusted-ca-file": "certapi-etcd-peer-tls", "peer-cert-file": "certapi-etcd-peer-tls", "peer-key-file": "certapi-etcd-peer-tls",
		} {
			if got := mfSecretOf(&sts.Spec.Template.Spec, ec, eargs[flag]); got != secret {
				t.Errorf("etcd --%s=%s is not in a volume of Secret %s (found %q)", flag, eargs[flag], secret, got)
			}
		}
		// One PodDisruptionBudget for each workload.
		for _, sel := range []map[string]string{d.Spec.Template.Labels, sts.Spec.Template.Labels} {
			found := false
			for _, u := range mfOfKind(objs, "PodDisruptionBudget") {
				m, _, _ := unstructured.NestedStringMap(u.Object, "spec", "selector", "matchLabels")
				if mfSelectorMatches(m, sel) {
					found = true
				}
			}
			if !found {
				t.Errorf("no PodDisruptionBudget selects the pods labelled %v", sel)
			}
		}
	})

	t.Run("single replica runs an embedded etcd", func(t *testing.T) {
		objs := ks[mfDeploySingle].objs
		d := mfDeployment(t, objs, "certapi-system", "certapi")
		if d.Spec.Replicas == nil || *d.Spec.Replicas != 1 {
			t.Errorf("replicas %v; want 1", d.Spec.Replicas)
		}
		if d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
			t.Errorf("strategy %q; want Recreate (two pods must never run the embedded etcd on one volume)", d.Spec.Strategy.Type)
		}
		c := mfContainer(t, &d.Spec.Template.Spec, "certapi")
		args := mfArgs(c)
		for f := range args {
			if strings.HasPrefix(f, "etcd-") {
				t.Errorf("single replica is given --%s", f)
			}
		}
		dataDir := args["data-dir"]
		if dataDir == "" {
			t.Fatal("no --data-dir")
		}
		if mfVolumeOf(&d.Spec.Template.Spec, c, dataDir) == nil {
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
	})

	t.Run("default RBAC aggregates view, edit and admin", func(t *testing.T) {
		agg := map[string][]rbacv1.PolicyRule{}
		for _, u := range mfOfKind(ks[mfDeployBase].objs, "ClusterRole") {
			var r rbacv1.ClusterRole
			mfConvert(t, u, &r)
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
		} {
			for _, verb := range tc.verbs {
				if got := mfAllows(agg[tc.role], "certapi.dev", tc.resource, verb); got != tc.want {
					t.Errorf("aggregated into %s: %s %s is %v; want %v", tc.role, verb, tc.resource, got, tc.want)
				}
			}
		}
	})

	t.Run("admission policies type-check", func(t *testing.T) {
		mfTypeCheckPolicies(t, ks[mfDeployBase].objs)
	})

	t.Run("the image's build context holds what certapi needs", func(t *testing.T) {
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
	})

	t.Run("Argo CD example", func(t *testing.T) {
		// The Application CRD is not installed here, so kubectl cannot even map the kind for a client
		// dry run: check the fields the README explains instead.
		data, err := os.ReadFile(filepath.Join(root, mfArgoCDApp))
		if err != nil {
			t.Fatal(err)
		}
		objs, err := framework.DecodeManifests(data)
		if err != nil || len(objs) != 1 {
			t.Fatalf("%s: %d objects, %v", mfArgoCDApp, len(objs), err)
		}
		app := objs[0]
		if app.GetAPIVersion() != "argoproj.io/v1alpha1" || app.GetKind() != "Application" {
			t.Fatalf("%s is a %s %s", mfArgoCDApp, app.GetAPIVersion(), app.GetKind())
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
					if mfHasField(&unstructured.Unstructured{Object: h.(map[string]any)}, "clientConfig", "caBundle") {
						t.Errorf("%s %s ships a caBundle key", u.GetKind(), u.GetName())
					}
				}
			case "CustomResourceDefinition":
				if mfHasField(u, "spec", "conversion", "webhook", "clientConfig", "caBundle") {
					t.Errorf("CRD %s ships a conversion caBundle key", u.GetName())
				}
			case "APIService":
				if mfHasField(u, "spec", "caBundle") {
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
	})
}

// mfFindKustomizations walks artifacts/ for kustomization files.
func mfFindKustomizations(t *testing.T, root string) map[string]*mfKustomization {
	t.Helper()
	ks := map[string]*mfKustomization{}
	err := filepath.WalkDir(filepath.Join(root, "artifacts"), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		switch d.Name() {
		case "kustomization.yaml", "kustomization.yml", "Kustomization":
		default:
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		var k struct {
			Kind       string   `json:"kind"`
			Resources  []string `json:"resources"`
			Components []string `json:"components"`
		}
		if err := utilyaml.Unmarshal(data, &k); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		dir, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		dir = filepath.ToSlash(dir)
		if ks[dir] != nil {
			return fmt.Errorf("%s has more than one kustomization file", dir)
		}
		mk := &mfKustomization{dir: dir, component: k.Kind == "Component"}
		for _, r := range append(k.Resources, k.Components...) {
			mk.refs = append(mk.refs, filepath.ToSlash(filepath.Join(dir, r)))
		}
		ks[dir] = mk
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(ks) == 0 {
		t.Fatal("no kustomization under artifacts/")
	}
	return ks
}

func mfRun(t *testing.T, bin string, args ...string) ([]byte, string, error) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.Bytes(), stderr.String(), err
}

// mfNamespaces returns the namespaces of the namespaced objects, and fails for a namespaced object that
// names none: it would land in whatever namespace the applier's context points at.
func mfNamespaces(t *testing.T, mapper meta.RESTMapper, objs []*unstructured.Unstructured) []string {
	t.Helper()
	seen := map[string]bool{}
	for _, u := range objs {
		gvk := u.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Errorf("%s %s: %v", gvk, u.GetName(), err)
			continue
		}
		if m.Scope.Name() != meta.RESTScopeNameNamespace {
			continue
		}
		if u.GetNamespace() == "" {
			t.Errorf("%s %s is namespaced and names no namespace", gvk.Kind, u.GetName())
			continue
		}
		seen[u.GetNamespace()] = true
	}
	return mfSortedKeys(seen)
}

// mfEnsureNamespace creates namespace ns unless it exists, and deletes it after the test if it created it.
func mfEnsureNamespace(t *testing.T, kube kubernetes.Interface, ns string) {
	t.Helper()
	ctx := context.Background()
	_, err := kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if err == nil {
		return
	}
	if !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating namespace %s: %v", ns, err)
	}
	// Without a controller manager a deleted namespace stays Terminating; nothing else uses its name.
	t.Cleanup(func() { _ = kube.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
}

// mfSplitExisting returns the objects that exist in the control plane, and the others.
func mfSplitExisting(t *testing.T, mapper meta.RESTMapper, objs []*unstructured.Unstructured) (existing, fresh []*unstructured.Unstructured) {
	t.Helper()
	dyn, err := dynamic.NewForConfig(cp.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range objs {
		gvk := u.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatalf("%s %s: %v", gvk, u.GetName(), err)
		}
		var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			ri = dyn.Resource(m.Resource).Namespace(u.GetNamespace())
		}
		_, err = ri.Get(context.Background(), u.GetName(), metav1.GetOptions{})
		switch {
		case err == nil:
			existing = append(existing, u)
		case apierrors.IsNotFound(err):
			fresh = append(fresh, u)
		default:
			t.Fatalf("getting %s %s: %v", gvk.Kind, u.GetName(), err)
		}
	}
	return existing, fresh
}

// mfWriteObjects writes objs to a file as a YAML stream (of JSON documents) and returns its path.
func mfWriteObjects(t *testing.T, objs []*unstructured.Unstructured) string {
	t.Helper()
	var b bytes.Buffer
	for _, u := range objs {
		data, err := u.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		b.Write(data)
		b.WriteString("\n---\n")
	}
	f, err := os.CreateTemp(t.TempDir(), "objects-*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(b.Bytes()); err != nil {
		t.Fatal(err)
	}
	return f.Name()
}

func mfSortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// mfHelpFlags runs `bin --help` and returns the long flags it lists.
func mfHelpFlags(t *testing.T, bin string) map[string]bool {
	t.Helper()
	out, errOut, _ := mfRun(t, bin, "--help") // some binaries exit non-zero after printing help
	flags := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s+(?:-[a-zA-Z], )?--([a-z0-9][a-z0-9-]*)`).FindAllStringSubmatch(string(out)+errOut, -1) {
		flags[m[1]] = true
	}
	if len(flags) < 10 {
		t.Fatalf("%s --help lists only %d flags:\n%s%s", bin, len(flags), out, errOut)
	}
	return flags
}

// mfFlagName returns the name of a --name=value or --name argument, "" for anything else.
func mfFlagName(arg string) string {
	if !strings.HasPrefix(arg, "--") {
		return ""
	}
	name, _, _ := strings.Cut(arg[2:], "=")
	return name
}

// mfArgs maps each --name=value argument of c to its value.
func mfArgs(c *corev1.Container) map[string]string {
	args := map[string]string{}
	for _, a := range c.Args {
		if name := mfFlagName(a); name != "" {
			_, v, _ := strings.Cut(a, "=")
			args[name] = v
		}
	}
	return args
}

// mfCheckEnvRefs fails for a $(VAR) in the arguments that no env entry of the container defines: the
// kubelet would pass it on literally.
func mfCheckEnvRefs(t *testing.T, where string, c *corev1.Container) {
	t.Helper()
	env := map[string]bool{}
	for _, e := range c.Env {
		env[e.Name] = true
	}
	for _, a := range append(slices.Clone(c.Command), c.Args...) {
		for _, m := range regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`).FindAllStringSubmatch(a, -1) {
			if !env[m[1]] {
				t.Errorf("%s: %q refers to $(%s), which container %s does not define", where, a, m[1], c.Name)
			}
		}
	}
}

// mfVolumeOf returns the volume mounted in c at a directory that contains path, nil if none.
func mfVolumeOf(spec *corev1.PodSpec, c *corev1.Container, path string) *corev1.Volume {
	var best *corev1.VolumeMount
	for i, m := range c.VolumeMounts {
		dir := strings.TrimSuffix(m.MountPath, "/") + "/"
		if (path == m.MountPath || strings.HasPrefix(path, dir)) && (best == nil || len(m.MountPath) > len(best.MountPath)) {
			best = &c.VolumeMounts[i]
		}
	}
	if best == nil {
		return nil
	}
	for i, v := range spec.Volumes {
		if v.Name == best.Name {
			return &spec.Volumes[i]
		}
	}
	return nil
}

// mfSecretOf returns the name of the Secret whose volume holds path in c, "" if none; with items, the
// file must be one of them.
func mfSecretOf(spec *corev1.PodSpec, c *corev1.Container, path string) string {
	v := mfVolumeOf(spec, c, path)
	if v == nil || v.Secret == nil {
		return ""
	}
	if len(v.Secret.Items) > 0 {
		for _, it := range v.Secret.Items {
			if strings.HasSuffix(path, "/"+it.Path) {
				return v.Secret.SecretName
			}
		}
		return ""
	}
	return v.Secret.SecretName
}

func mfOfKind(objs []*unstructured.Unstructured, kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, u := range objs {
		if u.GetKind() == kind {
			out = append(out, u)
		}
	}
	return out
}

func mfFind(t *testing.T, objs []*unstructured.Unstructured, kind, ns, name string) *unstructured.Unstructured {
	t.Helper()
	for _, u := range objs {
		if u.GetKind() == kind && u.GetNamespace() == ns && u.GetName() == name {
			return u
		}
	}
	t.Fatalf("no %s %s/%s in the build", kind, ns, name)
	return nil
}

func mfConvert(t *testing.T, u *unstructured.Unstructured, into runtime.Object) {
	t.Helper()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, into, true); err != nil {
		t.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
	}
}

func mfHasField(u *unstructured.Unstructured, fields ...string) bool {
	_, found, _ := unstructured.NestedFieldNoCopy(u.Object, fields...)
	return found
}

func mfDeployment(t *testing.T, objs []*unstructured.Unstructured, ns, name string) *appsv1.Deployment {
	t.Helper()
	var d appsv1.Deployment
	mfConvert(t, mfFind(t, objs, "Deployment", ns, name), &d)
	return &d
}

func mfStatefulSet(t *testing.T, objs []*unstructured.Unstructured, ns, name string) *appsv1.StatefulSet {
	t.Helper()
	var s appsv1.StatefulSet
	mfConvert(t, mfFind(t, objs, "StatefulSet", ns, name), &s)
	return &s
}

func mfContainer(t *testing.T, spec *corev1.PodSpec, name string) *corev1.Container {
	t.Helper()
	for i := range spec.Containers {
		if spec.Containers[i].Name == name {
			return &spec.Containers[i]
		}
	}
	t.Fatalf("no container %q", name)
	return nil
}

type mfWorkload struct {
	kind, name string
	template   corev1.PodTemplateSpec
}

func mfWorkloads(t *testing.T, objs []*unstructured.Unstructured) []mfWorkload {
	t.Helper()
	var ws []mfWorkload
	for _, u := range objs {
		switch u.GetKind() {
		case "Deployment":
			var d appsv1.Deployment
			mfConvert(t, u, &d)
			ws = append(ws, mfWorkload{"Deployment", d.Name, d.Spec.Template})
		case "StatefulSet":
			var s appsv1.StatefulSet
			mfConvert(t, u, &s)
			// The StatefulSet controller adds a volume for each claim template to the pods it makes.
			tmpl := *s.Spec.Template.DeepCopy()
			for _, c := range s.Spec.VolumeClaimTemplates {
				tmpl.Spec.Volumes = append(tmpl.Spec.Volumes, corev1.Volume{Name: c.Name, VolumeSource: corev1.VolumeSource{
					PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: c.Name + "-" + s.Name + "-0"},
				}})
			}
			ws = append(ws, mfWorkload{"StatefulSet", s.Name, tmpl})
		}
	}
	if len(ws) == 0 {
		t.Fatal("no workloads")
	}
	return ws
}

// mfAllows says whether rules grant verb on group/resource.
func mfAllows(rules []rbacv1.PolicyRule, group, resource, verb string) bool {
	for _, r := range rules {
		if (slices.Contains(r.APIGroups, group) || slices.Contains(r.APIGroups, "*")) &&
			(slices.Contains(r.Resources, resource) || slices.Contains(r.Resources, "*")) &&
			(slices.Contains(r.Verbs, verb) || slices.Contains(r.Verbs, "*")) {
			return true
		}
	}
	return false
}

func mfSelectorMatches(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// TestManifestsRBACRunsCertapi runs certapi with exactly the permissions the manifests give its
// ServiceAccount, and the arguments of the base Deployment, on a control plane of its own (the RBAC is
// applied for real there): certapi must come up, serve itself so that kube-apiserver trusts it (which
// needs its APIService injected), deliver a Secret and inject caBundles, and never be told "forbidden".
// The base's ValidatingAdmissionPolicies apply too: certapi's injection passes them, and every change but
// a caBundle made with certapi's identity is refused. It also proves the encryption resource name the
// README gives, with --require-encrypted-ca-keys on as the base has it.
func TestManifestsRBACRunsCertapi(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	out, errOut, err := mfRun(t, kubectlPath(t), "kustomize", filepath.Join(root, mfDeployBase))
	if err != nil {
		t.Fatalf("kubectl kustomize %s: %v\n%s", mfDeployBase, err, errOut)
	}
	objs, err := framework.DecodeManifests(out)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin, err := framework.CertapiBinary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	own := framework.StartT(t, framework.Options{SkipCertapi: true})
	port := mfFreePort(t)

	// Apply the base for real, except that certapi runs here as a process: its Service points at it
	// (ExternalName to localhost, as the framework does) and its APIService at that port.
	var apply []*unstructured.Unstructured
	for _, u := range objs {
		switch u.GetKind() {
		case "Service":
			u = &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "v1", "kind": "Service",
				"metadata": map[string]any{"name": u.GetName(), "namespace": u.GetNamespace()},
				"spec": map[string]any{"type": "ExternalName", "externalName": "localhost",
					"ports": []any{map[string]any{"name": "https", "port": int64(port), "protocol": "TCP"}}},
			}}
		case "APIService":
			u = u.DeepCopy()
			if err := unstructured.SetNestedField(u.Object, int64(port), "spec", "service", "port"); err != nil {
				t.Fatal(err)
			}
		}
		apply = append(apply, u)
	}
	ownKubectl := func(args ...string) string {
		t.Helper()
		out, errOut, err := mfRun(t, kubectlPath(t), append([]string{"--kubeconfig", own.Kubeconfig}, args...)...)
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s%s", strings.Join(args, " "), err, out, errOut)
		}
		return string(out)
	}
	ownKubectl("apply", "-f", mfWriteObjects(t, apply))

	// certapi's identity: its ServiceAccount, as the kubelet's token would present it.
	saConfig, err := own.UserConfig("system:serviceaccount:certapi-system:certapi", "system:serviceaccounts", "system:serviceaccounts:certapi-system")
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "mf-rbac-") // short: the embedded etcd's sockets live in it
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	kubeconfig := filepath.Join(dir, "certapi.kubeconfig")
	mfWriteKubeconfig(t, kubeconfig, saConfig)
	// The sample of artifacts/deploy/README.md: secretbox, one key, the resource name it documents.
	encFile := testhelpers.CAKeysEncryptionConfigFile(t)

	// The base Deployment's arguments, with what only a pod has replaced: the embedded etcd instead of
	// the etcd cluster, files and identity of this test, loopback instead of in-cluster config.
	d := mfDeployment(t, objs, "certapi-system", "certapi")
	var args []string
	for _, a := range mfContainer(t, &d.Spec.Template.Spec, "certapi").Args {
		switch name := mfFlagName(a); {
		case strings.HasPrefix(name, "etcd-"), name == "secure-port":
		case name == "encryption-provider-config":
			args = append(args, "--encryption-provider-config="+encFile)
		case name == "leader-identity":
			args = append(args, "--leader-identity=manifests-rbac")
		default:
			args = append(args, a)
		}
	}
	args = append(args,
		"--data-dir="+filepath.Join(dir, "data"),
		"--bind-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", port),
		"--kubeconfig="+kubeconfig,
		"--authentication-kubeconfig="+kubeconfig,
		"--authorization-kubeconfig="+kubeconfig,
		"-v=2",
	)
	logPath := filepath.Join(dir, "certapi.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	t.Cleanup(func() {
		if t.Failed() {
			data, _ := os.ReadFile(logPath)
			t.Logf("certapi log (%s):\n%s", logPath, mfTail(string(data), 150))
		}
	})
	waitFor := func(what string, timeout time.Duration, cond func(ctx context.Context) (bool, error)) {
		t.Helper()
		var last error
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
			select {
			case err := <-exited:
				exited <- err
				return false, fmt.Errorf("certapi exited: %w", err)
			default:
			}
			ok, err := cond(ctx)
			last = err
			return ok, nil
		})
		if err != nil {
			t.Fatalf("waiting for %s: %v (last: %v)", what, err, last)
		}
	}

	// 1. kube-apiserver trusts certapi: certapi injected its own CA into its APIService.
	c, kube := testhelpers.Clients(t, own.AdminConfig)
	agg := mfAggregator(t, own)
	waitFor("APIService v1alpha1.certapi.dev Available", 2*time.Minute, func(ctx context.Context) (bool, error) {
		s, err := agg.ApiregistrationV1().APIServices().Get(ctx, "v1alpha1.certapi.dev", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, cond := range s.Status.Conditions {
			if cond.Type == apiregistrationv1.Available {
				if cond.Status == apiregistrationv1.ConditionTrue {
					_, err := kube.Discovery().ServerResourcesForGroupVersion("certapi.dev/v1alpha1")
					return err == nil, err
				}
				return false, fmt.Errorf("%s: %s", cond.Reason, cond.Message)
			}
		}
		return false, errors.New("no Available condition")
	})

	// 2. A Secret is delivered into a namespace that asks.
	ns := e2etest.Namespace(t, kube)
	scr := e2etest.Request("rbac", "webhook")
	scr.Spec.SecretName = "webhook-tls"
	if _, err := c.CertapiV1alpha1().ServingCertRequests(ns).Create(ctx, scr, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("Secret webhook-tls", time.Minute, func(ctx context.Context) (bool, error) {
		s, err := kube.CoreV1().Secrets(ns).Get(ctx, "webhook-tls", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return len(s.Data["tls.crt"]) > 0, errors.New("no tls.crt yet")
	})

	// ... into a Secret a chart handed over (the admission policies let certapi adopt it, leaving the
	// chart's own label, annotation and key), and again, into the first, when the request's spec changes
	// (a patch of a Secret certapi manages).
	handed := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "chart-tls", Namespace: ns, Labels: map[string]string{"app": "web"},
			Annotations: map[string]string{"certapi.dev/servingcertrequest": "rbac-chart", "example.com/owner": "chart"}},
		Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{"tls.crt": nil, "tls.key": nil, "extra": []byte("chart")},
	}
	if _, err := kube.CoreV1().Secrets(ns).Create(ctx, handed, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	chartReq := e2etest.Request("rbac-chart", "web")
	chartReq.Spec.SecretName = "chart-tls"
	if _, err := c.CertapiV1alpha1().ServingCertRequests(ns).Create(ctx, chartReq, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("Secret chart-tls adopted", time.Minute, func(ctx context.Context) (bool, error) {
		s, err := kube.CoreV1().Secrets(ns).Get(ctx, "chart-tls", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if len(s.Data["tls.crt"]) == 0 {
			return false, errors.New("no tls.crt yet")
		}
		if s.Labels["app"] != "web" || s.Annotations["example.com/owner"] != "chart" || string(s.Data["extra"]) != "chart" || s.Labels["certapi.dev/managed"] != "true" {
			return false, fmt.Errorf("adopted Secret: labels %v, annotations %v, extra %q", s.Labels, s.Annotations, s.Data["extra"])
		}
		return true, nil
	})
	delivered, err := c.CertapiV1alpha1().ServingCertRequests(ns).Get(ctx, scr.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	delivered.Spec.DNSNames = []string{"webhook-alt." + ns + ".svc"}
	if delivered, err = c.CertapiV1alpha1().ServingCertRequests(ns).Update(ctx, delivered, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("Secret webhook-tls re-issued for the new spec", time.Minute, func(ctx context.Context) (bool, error) {
		s, err := kube.CoreV1().Secrets(ns).Get(ctx, "webhook-tls", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		gen := s.Annotations["certapi.dev/generation"]
		return gen == strconv.FormatInt(delivered.Generation, 10), fmt.Errorf("issued for generation %q, want %d", gen, delivered.Generation)
	})

	// 3. caBundles are injected into a webhook configuration and a CRD that opt in.
	ownKubectl("apply", "-f", mfWriteObjects(t, mfInjectionTargets(t, ns)))
	waitFor("caBundle in ValidatingWebhookConfiguration mf-rbac", time.Minute, func(ctx context.Context) (bool, error) {
		w, err := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "mf-rbac", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return len(w.Webhooks[0].ClientConfig.CABundle) > 0, errors.New("no caBundle yet")
	})
	waitFor("caBundle in MutatingWebhookConfiguration mf-rbac", time.Minute, func(ctx context.Context) (bool, error) {
		w, err := kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "mf-rbac", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return len(w.Webhooks[0].ClientConfig.CABundle) > 0, errors.New("no caBundle yet")
	})
	dyn, err := dynamic.NewForConfig(own.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	crds := dyn.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	waitFor("conversion caBundle in CRD mfwidgets.example.com", time.Minute, func(ctx context.Context) (bool, error) {
		u, err := crds.Get(ctx, "mfwidgets.example.com", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		b, _, _ := unstructured.NestedString(u.Object, "spec", "conversion", "webhook", "clientConfig", "caBundle")
		return b != "", errors.New("no caBundle yet")
	})
	// 4. The signer-linked ClusterTrustBundle (create, and "attest" on the signer) and an annotated
	// ConfigMap (read and patched in any namespace).
	waitFor("ClusterTrustBundle certapi.dev:serving:ca", time.Minute, func(ctx context.Context) (bool, error) {
		b, err := kube.CertificatesV1().ClusterTrustBundles().Get(ctx, "certapi.dev:serving:ca", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return b.Spec.TrustBundle != "", errors.New("no trustBundle yet")
	})
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "trust", Namespace: ns, Annotations: map[string]string{"certapi.dev/inject-ca-bundle": "true"}}}
	if _, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("ca.crt in ConfigMap trust", time.Minute, func(ctx context.Context) (bool, error) {
		cm, err := kube.CoreV1().ConfigMaps(ns).Get(ctx, "trust", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return cm.Data["ca.crt"] != "", errors.New("no ca.crt yet")
	})
	// Events go out asynchronously: wait until certapi's Event about the delivery is stored, so a refusal
	// of Event writes would be in the log by now.
	waitFor("certapi's Event on the delivered request", time.Minute, func(ctx context.Context) (bool, error) {
		evs, err := kube.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, e := range evs.Items {
			if e.Regarding.Kind == "ServingCertRequest" && e.Regarding.Name == scr.Name {
				return true, nil
			}
		}
		return false, errors.New("no Event yet")
	})

	// 5. The admission policies let certapi's ServiceAccount change caBundle fields and nothing else
	// (certapi's own writes above went through them), and leave other users alone.
	injected, err := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "mf-rbac", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Run("certapi's ServiceAccount may change only caBundle fields", func(t *testing.T) {
		mfCheckCABundleOnly(t, own, saConfig, ns)
	})
	// The caBundle the ServiceAccount changed there is drift to certapi: it puts its own back, through
	// the policies.
	waitFor("certapi to restore the caBundle of ValidatingWebhookConfiguration mf-rbac", time.Minute, func(ctx context.Context) (bool, error) {
		w, err := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "mf-rbac", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return bytes.Equal(w.Webhooks[0].ClientConfig.CABundle, injected.Webhooks[0].ClientConfig.CABundle), errors.New("not restored yet")
	})

	data, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.Contains(strings.ToLower(line), "forbidden") {
			t.Errorf("certapi was refused something with the manifests' RBAC: %.400s", line)
		}
	}
	if !strings.Contains(string(data), "CA private keys are encrypted at rest") {
		t.Errorf("with an EncryptionConfiguration that lists certificateauthoritykeys.certapi.dev (the name the README gives), certapi does not say the CA keys are encrypted")
	}

	// 6. A stolen token: after the log was read, because an opted-in kube-root-ca.crt among its targets is
	// one certapi's injector may itself try to write (and be refused).
	t.Run("a stolen token of certapi's ServiceAccount", func(t *testing.T) {
		mfCheckStolenToken(t, own, saConfig, ns)
	})
}

// mfInjectionTargets returns a validating and a mutating webhook configuration and a CRD that opt in to
// injection; their webhooks match nothing that exists, so they block nothing.
func mfInjectionTargets(t *testing.T, ns string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := framework.DecodeManifests([]byte(`
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: mf-rbac
  annotations:
    certapi.dev/inject-ca-bundle: "true"
webhooks:
- name: mf-rbac.example.com
  admissionReviewVersions: ["v1"]
  sideEffects: None
  failurePolicy: Ignore
  clientConfig:
    service: {name: webhook, namespace: ` + ns + `, path: /validate}
  rules:
  - apiGroups: ["example.com"]
    apiVersions: ["v1"]
    operations: ["CREATE"]
    resources: ["nothings"]
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: mf-rbac
  annotations:
    certapi.dev/inject-ca-bundle: "true"
webhooks:
- name: mf-rbac.example.com
  admissionReviewVersions: ["v1"]
  sideEffects: None
  failurePolicy: Ignore
  clientConfig:
    service: {name: webhook, namespace: ` + ns + `, path: /mutate}
  rules:
  - apiGroups: ["example.com"]
    apiVersions: ["v1"]
    operations: ["CREATE"]
    resources: ["nothings"]
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: mfwidgets.example.com
  annotations:
    certapi.dev/inject-ca-bundle: "true"
spec:
  group: example.com
  names: {kind: MfWidget, plural: mfwidgets, singular: mfwidget, listKind: MfWidgetList}
  scope: Namespaced
  conversion:
    strategy: Webhook
    webhook:
      conversionReviewVersions: ["v1"]
      clientConfig:
        service: {name: webhook, namespace: ` + ns + `, path: /convert}
  versions:
  - {name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object}}}
  - {name: v2, served: true, storage: false, schema: {openAPIV3Schema: {type: object}}}
`))
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func mfFreePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func mfWriteKubeconfig(t *testing.T, path string, cfg *rest.Config) {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData}
	kc.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	kc.CurrentContext = "c"
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
}

func mfAggregator(t *testing.T, own *framework.ControlPlane) aggregatorclient.Interface {
	t.Helper()
	a, err := aggregatorclient.NewForConfig(own.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func mfTail(s string, lines int) string {
	all := strings.Split(s, "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}
