package manifests

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/certapi/certapi/test/e2e/e2etest"
)

// findKustomizations walks artifacts/ for kustomization files.
func findKustomizations(t *testing.T, root string) map[string]*kustomization {
	t.Helper()
	ks := map[string]*kustomization{}
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
		mk := &kustomization{dir: dir, component: k.Kind == "Component", patchesOnly: k.Kind == "Component" && len(k.Resources) == 0}
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

// namespacesOf returns the namespaces of the namespaced objects, and fails for a namespaced object that
// names none: it would land in whatever namespace the applier's context points at.
func namespacesOf(t *testing.T, mapper meta.RESTMapper, objs []*unstructured.Unstructured) []string {
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
	return sortedKeys(seen)
}

// ensureNamespace creates namespace ns with labels unless it exists, and deletes it after the test if it
// created it.
func ensureNamespace(t *testing.T, kube kubernetes.Interface, ns string, labels map[string]string) {
	t.Helper()
	ctx := context.Background()
	_, err := kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if err == nil {
		return
	}
	if !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: labels}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating namespace %s: %v", ns, err)
	}
	// Without a controller manager a deleted namespace stays Terminating; nothing else uses its name.
	t.Cleanup(func() { _ = kube.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
}

// splitExisting returns the objects that exist in the control plane, and the others.
func splitExisting(t *testing.T, mapper meta.RESTMapper, objs []*unstructured.Unstructured) (existing, fresh []*unstructured.Unstructured) {
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

// writeObjects writes objs to a file as a YAML stream (of JSON documents) and returns its path.
func writeObjects(t *testing.T, objs []*unstructured.Unstructured) string {
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

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// helpFlags runs `bin --help` and returns the long flags it lists.
func helpFlags(t *testing.T, bin string) map[string]bool {
	t.Helper()
	out, errOut, _ := e2etest.Run(t, bin, "--help") // some binaries exit non-zero after printing help
	flags := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s+(?:-[a-zA-Z], )?--([a-z0-9][a-z0-9-]*)`).FindAllStringSubmatch(string(out)+errOut, -1) {
		flags[m[1]] = true
	}
	if len(flags) < 10 {
		t.Fatalf("%s --help lists only %d flags:\n%s%s", bin, len(flags), out, errOut)
	}
	return flags
}

// flagName returns the name of a --name=value or --name argument, "" for anything else.
func flagName(arg string) string {
	if !strings.HasPrefix(arg, "--") {
		return ""
	}
	name, _, _ := strings.Cut(arg[2:], "=")
	return name
}

// containerArgs maps each --name=value argument of c to its value.
func containerArgs(c *corev1.Container) map[string]string {
	args := map[string]string{}
	for _, a := range c.Args {
		if name := flagName(a); name != "" {
			_, v, _ := strings.Cut(a, "=")
			args[name] = v
		}
	}
	return args
}

// checkEnvRefs fails for a $(VAR) in the arguments that no env entry of the container defines: the
// kubelet would pass it on literally.
func checkEnvRefs(t *testing.T, where string, c *corev1.Container) {
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

// volumeOf returns the volume mounted in c at a directory that contains path, nil if none.
func volumeOf(spec *corev1.PodSpec, c *corev1.Container, path string) *corev1.Volume {
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

// secretOf returns the name of the Secret whose volume holds path in c, "" if none; with items, the
// file must be one of them.
func secretOf(spec *corev1.PodSpec, c *corev1.Container, path string) string {
	v := volumeOf(spec, c, path)
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

func ofKind(objs []*unstructured.Unstructured, kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, u := range objs {
		if u.GetKind() == kind {
			out = append(out, u)
		}
	}
	return out
}

func findObject(t *testing.T, objs []*unstructured.Unstructured, kind, ns, name string) *unstructured.Unstructured {
	t.Helper()
	for _, u := range objs {
		if u.GetKind() == kind && u.GetNamespace() == ns && u.GetName() == name {
			return u
		}
	}
	t.Fatalf("no %s %s/%s in the build", kind, ns, name)
	return nil
}

func convert(t *testing.T, u *unstructured.Unstructured, into runtime.Object) {
	t.Helper()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, into, true); err != nil {
		t.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
	}
}

func hasField(u *unstructured.Unstructured, fields ...string) bool {
	_, found, _ := unstructured.NestedFieldNoCopy(u.Object, fields...)
	return found
}

func deploymentOf(t *testing.T, objs []*unstructured.Unstructured, ns, name string) *appsv1.Deployment {
	t.Helper()
	var d appsv1.Deployment
	convert(t, findObject(t, objs, "Deployment", ns, name), &d)
	return &d
}

func statefulSetOf(t *testing.T, objs []*unstructured.Unstructured, ns, name string) *appsv1.StatefulSet {
	t.Helper()
	var s appsv1.StatefulSet
	convert(t, findObject(t, objs, "StatefulSet", ns, name), &s)
	return &s
}

func containerOf(t *testing.T, spec *corev1.PodSpec, name string) *corev1.Container {
	t.Helper()
	for i := range spec.Containers {
		if spec.Containers[i].Name == name {
			return &spec.Containers[i]
		}
	}
	t.Fatalf("no container %q", name)
	return nil
}

type workload struct {
	kind, name string
	template   corev1.PodTemplateSpec
}

// certapiWorkload returns certapi's own workload of objs: the Deployment certapi of the overlays, or the
// StatefulSet certapi of the base (etcd.mode cluster), its claim volumes in its pod template.
func certapiWorkload(t *testing.T, objs []*unstructured.Unstructured) workload {
	t.Helper()
	var found []workload
	for _, w := range workloadsOf(t, objs) {
		if w.name == "certapi" {
			found = append(found, w)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d workloads named certapi (%v); want one Deployment or StatefulSet", len(found), found)
	}
	return found[0]
}

func workloadsOf(t *testing.T, objs []*unstructured.Unstructured) []workload {
	t.Helper()
	var ws []workload
	for _, u := range objs {
		switch u.GetKind() {
		case "Deployment":
			var d appsv1.Deployment
			convert(t, u, &d)
			ws = append(ws, workload{"Deployment", d.Name, d.Spec.Template})
		case "StatefulSet":
			var s appsv1.StatefulSet
			convert(t, u, &s)
			// The StatefulSet controller adds a volume for each claim template to the pods it makes.
			tmpl := *s.Spec.Template.DeepCopy()
			for _, c := range s.Spec.VolumeClaimTemplates {
				tmpl.Spec.Volumes = append(tmpl.Spec.Volumes, corev1.Volume{Name: c.Name, VolumeSource: corev1.VolumeSource{
					PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: c.Name + "-" + s.Name + "-0"},
				}})
			}
			ws = append(ws, workload{"StatefulSet", s.Name, tmpl})
		}
	}
	if len(ws) == 0 {
		t.Fatal("no workloads")
	}
	return ws
}

// allows says whether rules grant verb on group/resource.
func allows(rules []rbacv1.PolicyRule, group, resource, verb string) bool {
	for _, r := range rules {
		if (slices.Contains(r.APIGroups, group) || slices.Contains(r.APIGroups, "*")) &&
			(slices.Contains(r.Resources, resource) || slices.Contains(r.Resources, "*")) &&
			(slices.Contains(r.Verbs, verb) || slices.Contains(r.Verbs, "*")) {
			return true
		}
	}
	return false
}

func selectorMatches(selector, labels map[string]string) bool {
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
