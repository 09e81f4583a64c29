// Package nodetest holds what the tests on the node (test/node and below) share: kubectl against the cluster,
// kustomizations of the repository's manifests with the node's images, and waits.
package nodetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/certapi/certapi/pkg/generated/clientset/versioned"
	"github.com/certapi/certapi/test/framework"
)

// Kubectl runs _output/bin/kubectl against the cluster, with _output/bin first on PATH (the kubectl plugins
// of `make build`), and returns its standard output; it fails the test when kubectl fails.
func Kubectl(t *testing.T, cp *framework.ControlPlane, args ...string) string {
	t.Helper()
	out, err := KubectlErr(cp, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// KubectlErr is Kubectl returning the error.
func KubectlErr(cp *framework.ControlPlane, args ...string) (string, error) {
	root, err := framework.RepoRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(root, "_output", "bin")
	cmd := exec.Command(filepath.Join(bin, "kubectl"), args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+cp.Kubeconfig, "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("kubectl %s: %w\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String(), nil
}

// PluginBinary checks that `make build` put the kubectl plugin name into _output/bin.
func PluginBinary(t *testing.T, name string) {
	t.Helper()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "_output", "bin", name)); err != nil {
		t.Fatalf("%v: run `make build` (make e2e does)", err)
	}
}

// Kustomization writes, in a directory of its own under _output (kustomize takes a base only by a relative
// path), a kustomization of the repository's directory base (e.g. "artifacts/deploy/overlays/single-replica")
// that sets the images the node has imported and imagePullPolicy Never, the way a user points a released
// overlay at their own registry, plus extra (more kustomization.yaml fields), and returns its directory.
func Kustomization(t *testing.T, base string, setImages map[string]string, extra string) string {
	t.Helper()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	parent := filepath.Join(root, "_output", "kustomize")
	if err := os.MkdirAll(parent, 0o755); err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp(parent, strings.ReplaceAll(t.Name(), "/", "_")+"-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	rel, err := filepath.Rel(dir, filepath.Join(root, base))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- %s\nimages:\n", rel)
	for from, to := range setImages {
		name, tag, _ := strings.Cut(to, ":")
		fmt.Fprintf(&b, "- name: %s\n  newName: %s\n  newTag: %q\n", from, name, tag)
	}
	b.WriteString("patches:\n")
	for _, kind := range []string{"Deployment", "StatefulSet"} {
		fmt.Fprintf(&b, `- target:
    kind: %s
  patch: |-
    - op: replace
      path: /spec/template/spec/containers/0/imagePullPolicy
      value: Never
`, kind)
	}
	b.WriteString(extra)
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// Clients returns admin clients of the cluster.
func Clients(t *testing.T, cp *framework.ControlPlane) (kubernetes.Interface, versioned.Interface) {
	t.Helper()
	kube, err := kubernetes.NewForConfig(cp.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	certapi, err := versioned.NewForConfig(cp.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	return kube, certapi
}

// WaitFor polls cond every 250 ms until it holds or timeout passes, and fails the test with cond's last
// word then.
func WaitFor(t *testing.T, timeout time.Duration, what string, cond func(ctx context.Context) (bool, string)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout+time.Minute)
	defer cancel()
	if err := framework.PollUntil(ctx, 250*time.Millisecond, timeout, what, nil, cond); err != nil {
		t.Fatal(err)
	}
}

// PodsReady reports whether every pod matching selector in ns is Ready, and says how they stand.
func PodsReady(ctx context.Context, kube kubernetes.Interface, ns, selector string, want int) (bool, string) {
	pods, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return false, err.Error()
	}
	ready := 0
	var states []string
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		isReady := false
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				isReady = true
			}
		}
		if isReady {
			ready++
		}
		s := fmt.Sprintf("%s %s ready=%v", p.Name, p.Status.Phase, isReady)
		for _, cs := range p.Status.ContainerStatuses {
			if cs.State.Waiting != nil {
				s += fmt.Sprintf(" %s: %s %s", cs.Name, cs.State.Waiting.Reason, cs.State.Waiting.Message)
			}
			if cs.RestartCount > 0 {
				s += fmt.Sprintf(" %s restarts=%d", cs.Name, cs.RestartCount)
			}
		}
		states = append(states, s)
	}
	return ready == want && len(states) == want, strings.Join(states, "; ")
}

// HostPathPV creates the PersistentVolume name of size (e.g. "4Gi") on a directory of the node owned by
// uid and gid 65532, the user of certapi's and etcd's pods: what a storage class would provision for a
// claim (a hostPath volume takes no fsGroup). The node's Stop removes the directory.
func HostPathPV(t *testing.T, cp *framework.ControlPlane, name, size string) {
	t.Helper()
	dir := filepath.Join(cp.ClusterNode.Dir, "volumes", name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, 65532, 65532); err != nil {
		t.Fatal(err)
	}
	kube, _ := Clients(t, cp)
	_, err := kube.CoreV1().PersistentVolumes().Create(context.Background(), &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

// EncryptionConfigSecret creates, in certapi-system (which must exist), the Secret
// certapi-encryption-config as step 3 of artifacts/deploy/README.md says: an EncryptionConfiguration with
// a fresh secretbox key for certificateauthoritykeys.certapi.dev, under the key config.yaml.
func EncryptionConfigSecret(t *testing.T, cp *framework.ControlPlane) {
	t.Helper()
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "encryption-config.yaml")
	enc := fmt.Sprintf(`apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
- resources:
  - certificateauthoritykeys.certapi.dev
  providers:
  - secretbox:
      keys:
      - name: key1
        secret: %s
`, base64.StdEncoding.EncodeToString(key))
	if err := os.WriteFile(file, []byte(enc), 0o600); err != nil {
		t.Fatal(err)
	}
	Kubectl(t, cp, "-n", "certapi-system", "create", "secret", "generic", "certapi-encryption-config", "--from-file=config.yaml="+file)
}

// RepoPath returns the absolute path of rel in the repository.
func RepoPath(t *testing.T, rel string) string {
	t.Helper()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, rel)
}
