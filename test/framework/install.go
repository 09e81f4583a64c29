package framework

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/certapi/certapi/test/testhelpers"
)

// Installing certapi on the node the way artifacts/deploy/README.md tells users to: what the tests of
// test/node and `make local-up NODE=1` (HA=1: the base) apply.

// Kubectl runs kubectl (_output/bin/kubectl of `make tools`) against the control plane, with _output/bin
// first on PATH (the kubectl plugins of `make build`), and returns its standard output; the error carries
// both outputs.
func (cp *ControlPlane) Kubectl(ctx context.Context, args ...string) (string, error) {
	var stdout bytes.Buffer
	err := cp.KubectlIO(ctx, nil, &stdout, args...)
	if err != nil {
		return stdout.String(), fmt.Errorf("%w\nstdout: %s", err, stdout.String())
	}
	return stdout.String(), nil
}

// KubectlIO is Kubectl with the caller's standard input (nil: none) and output (a snapshot streamed in or
// out of a pod); the error carries kubectl's standard error.
func (cp *ControlPlane) KubectlIO(ctx context.Context, stdin io.Reader, stdout io.Writer, args ...string) error {
	bin, err := KubectlBinary()
	if err != nil {
		return err
	}
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "PATH=") || strings.HasPrefix(kv, "KUBECONFIG=") || strings.HasPrefix(kv, "KUBERC=")
	})
	cmd.Env = append(env, "KUBECONFIG="+cp.Kubeconfig, "KUBERC=off",
		"PATH="+filepath.Join(root, "_output", "bin")+string(os.PathListSeparator)+os.Getenv("PATH"))
	var stderr bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("kubectl %s: %w\nstderr: %s", strings.Join(args, " "), err, stderr.String())
	}
	return nil
}

// OverlayKustomization writes, in a new directory under <repo>/_output/kustomize (kustomize takes a base
// only by a relative path), a kustomization of the repository's directory base (e.g.
// "artifacts/deploy/overlays/single-replica") that renames the images as setImages says (name in the
// manifests -> name:tag imported on the node) and sets imagePullPolicy Never on the first container of
// every Deployment and StatefulSet, the way a user points a released overlay at their own registry, plus
// extra (further kustomization.yaml lines, e.g. more items of its patches list). It returns the directory;
// the caller removes it.
func OverlayKustomization(base string, setImages map[string]string, extra string) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	parent := filepath.Join(root, "_output", "kustomize")
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp(parent, filepath.Base(base)+"-")
	if err != nil {
		return "", err
	}
	rel, err := filepath.Rel(dir, filepath.Join(root, base))
	if err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- %s\n", rel)
	if len(setImages) > 0 {
		b.WriteString("images:\n")
		for _, from := range slices.Sorted(maps.Keys(setImages)) {
			name, tag, _ := strings.Cut(setImages[from], ":")
			fmt.Fprintf(&b, "- name: %s\n  newName: %s\n  newTag: %q\n", from, name, tag)
		}
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
	if err := writeFile(filepath.Join(dir, "kustomization.yaml"), []byte(b.String()), 0o644); err != nil {
		return "", err
	}
	return dir, nil
}

// CreateHostPathPV creates the PersistentVolume name of size (e.g. "4Gi") on a directory of the node owned
// by uid and gid 65532, the user of certapi's and etcd's pods: what a storage class would provision for a
// claim (a hostPath volume takes no fsGroup). The node's Stop removes the directory.
func (cp *ControlPlane) CreateHostPathPV(ctx context.Context, name, size string) error {
	if cp.ClusterNode == nil {
		return fmt.Errorf("PersistentVolume %s: no node (Options.Node)", name)
	}
	return cp.createNodePV(ctx, name, size, cp.ClusterNode, false)
}

// CreateLocalPV creates the PersistentVolume name of size as a local volume of node (a worker, or the
// first node), bound to it by its node affinity: a pod whose claim binds it runs on that node only, and
// the volume goes with the node (ControlPlane.Remove), as a disk of a machine does. Its directory is owned
// by uid and gid 65532, as CreateHostPathPV's.
func (cp *ControlPlane) CreateLocalPV(ctx context.Context, name, size string, node *ClusterNode) error {
	return cp.createNodePV(ctx, name, size, node, true)
}

func (cp *ControlPlane) createNodePV(ctx context.Context, name, size string, node *ClusterNode, local bool) error {
	dir := filepath.Join(node.Dir, "volumes", name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.Chown(dir, 65532, 65532); err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cp.AdminConfig)
	if err != nil {
		return err
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir}},
		},
	}
	if local {
		pv.Spec.PersistentVolumeSource = corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: dir}}
		pv.Spec.NodeAffinity = &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{node.Name}}},
		}}}}
	}
	if _, err := cs.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating PersistentVolume %s: %w", name, err)
	}
	return nil
}

// CreateEncryptionConfigSecret creates, in certapi's namespace (which must exist), the Secret
// certapi-encryption-config as step 3 of artifacts/deploy/README.md says: an EncryptionConfiguration with a
// fresh secretbox key for certificateauthoritykeys.certapi.dev under the key config.yaml, made with
// `kubectl create secret generic --from-file`.
func (cp *ControlPlane) CreateEncryptionConfigSecret(ctx context.Context) error {
	enc, err := testhelpers.SecretboxEncryptionConfig("certificateauthoritykeys.certapi.dev")
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "certapi-encryption-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, "encryption-config.yaml")
	if err := writeFile(file, []byte(enc), 0o600); err != nil {
		return err
	}
	_, err = cp.Kubectl(ctx, "-n", CertapiNamespace, "create", "secret", "generic", "certapi-encryption-config", "--from-file=config.yaml="+file)
	return err
}

// InstallCertapiSingleReplica installs certapi on the node from artifacts/deploy/overlays/single-replica as
// artifacts/deploy/README.md says: its namespace, the Secret certapi-encryption-config, the volume for its
// claim (CreateHostPathPV, as a storage class would provision it), then `kubectl apply -k` of the overlay
// with the image imported on the node (certapi.tar of `make images`, in Options.NodeImages) and
// imagePullPolicy Never, and certapi's extraArgs appended to its flags. It waits until the Deployment has
// rolled out and the APIService is Available.
func (cp *ControlPlane) InstallCertapiSingleReplica(ctx context.Context, extraArgs ...string) error {
	return cp.installCertapi(ctx, "artifacts/deploy/overlays/single-replica", "Deployment", []string{"certapi-data"}, "5m", extraArgs)
}

// InstallCertapiHA installs certapi on the node from artifacts/deploy/base, what the Helm chart installs by
// default, as InstallCertapiSingleReplica installs the single replica: three replicas in the StatefulSet
// certapi, whose embedded etcd members form one etcd cluster, all on the one node (the spreading is
// preferred) or, with Options.WorkerNodes, each on the worker of its claim's local volume, with a volume
// for each pod's claim. It waits until the StatefulSet has rolled out (a pod is
// Ready only once its member has joined and been promoted) and the APIService is Available.
func (cp *ControlPlane) InstallCertapiHA(ctx context.Context, extraArgs ...string) error {
	return cp.installCertapi(ctx, "artifacts/deploy/base", "StatefulSet", []string{"certapi-data-0", "certapi-data-1", "certapi-data-2"}, "10m", extraArgs)
}

// installCertapi installs the kustomization dir (relative to the repository) whose certapi workload is of
// kind, with a PersistentVolume of 1Gi for each of volumes, waiting up to rollout for the workload.
func (cp *ControlPlane) installCertapi(ctx context.Context, dir, kind string, volumes []string, rollout string, extraArgs []string) error {
	if cp.ClusterNode == nil {
		return fmt.Errorf("installing certapi as a pod: no node (Options.Node)")
	}
	names := cp.ClusterNode.Images["certapi.tar"]
	if len(names) == 0 {
		return fmt.Errorf("installing certapi as a pod: certapi.tar (make images) is not in Options.NodeImages")
	}
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	if _, err := cp.Kubectl(ctx, "apply", "-f", filepath.Join(root, "artifacts/deploy/base/namespace.yaml")); err != nil {
		return err
	}
	if err := cp.CreateEncryptionConfigSecret(ctx); err != nil {
		return err
	}
	for i, v := range volumes {
		// With workers, each volume is a local volume of a worker in turn, so that each pod runs on the
		// worker of its claim's volume.
		var err error
		if workers := cp.Workers; len(workers) > 0 {
			err = cp.CreateLocalPV(ctx, v, "1Gi", workers[i%len(workers)])
		} else {
			err = cp.CreateHostPathPV(ctx, v, "1Gi")
		}
		if err != nil {
			return err
		}
	}
	var extra strings.Builder
	if len(extraArgs) > 0 {
		fmt.Fprintf(&extra, "- target:\n    kind: %s\n    name: certapi\n  patch: |-\n", kind)
		for _, a := range extraArgs {
			fmt.Fprintf(&extra, "    - op: add\n      path: /spec/template/spec/containers/0/args/-\n      value: %q\n", a)
		}
	}
	k, err := OverlayKustomization(dir, map[string]string{"ghcr.io/certapi/certapi": names[0]}, extra.String())
	if err != nil {
		return err
	}
	defer os.RemoveAll(k)
	for _, args := range [][]string{
		{"apply", "-k", k},
		{"-n", CertapiNamespace, "rollout", "status", strings.ToLower(kind) + "/certapi", "--timeout=" + rollout},
		{"wait", "--for=condition=Available", "apiservice/" + CertapiAPIService, "--timeout=2m"},
	} {
		if _, err := cp.Kubectl(ctx, args...); err != nil {
			return err
		}
	}
	return nil
}
