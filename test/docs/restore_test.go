package docs

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/certapi/certapi/pkg/snapshot"
	"github.com/certapi/certapi/test/docs/markdown"
	"github.com/certapi/certapi/test/framework"
)

// TestRestoreBlocks holds docs/backup-and-restore.md's restore Pods (commandBlocks holds its blocks to the
// node tests that run them) to the form that keeps kubectl's stdinOnce: a strategic override (a JSON merge patch
// would replace the container kubectl makes, and with it stdinOnce, so the restore might never see the
// end of the snapshot) and the command's arguments after "--".
func TestRestoreBlocks(t *testing.T) {
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	page, err := markdown.Parse(filepath.Join(root, "docs", "backup-and-restore.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range page.Blocks {
		if !strings.Contains(b.Body, "kubectl") || !strings.Contains(b.Body, " run certapi-restore ") {
			continue
		}
		if !strings.Contains(b.Body, "--override-type=strategic") || !regexp.MustCompile(`\s--\s+snapshot restore -`).MatchString(b.Body) {
			t.Errorf("docs/backup-and-restore.md:%d: the restore Pod must be made with --override-type=strategic and `-- snapshot restore -`, which keep kubectl's stdinOnce:\n%s", b.Line, b.Body)
		}
	}
}

// restrictedPages are the pages whose Pods, Jobs and CronJobs run in certapi's namespace: each must pass Pod
// Security "restricted", which artifacts/deploy/base's namespace enforces.
var restrictedPages = []string{"docs/backup-and-restore.md", "docs/high-availability.md", "docs/operating.md"}

// dryRunShell runs a docs block with bash -e in which every command but `kubectl run` stands in: kubectl
// get answers a cluster epoch or an image, helm and every other kubectl command do nothing, and `kubectl
// run` runs for real against kube-apiserver as a server-side dry run (without -i and --rm, which a dry run
// refuses), so that admission, Pod Security included, judges the Pod the block makes exactly as written.
const dryRunShell = `
kubectl() {
  local sub="" a=() dashdash=""
  for x in "$@"; do
    if [ -z "$dashdash" ] && [ -z "$sub" ]; then
      case "$x" in -*|certapi-system) ;; *) sub="$x" ;; esac
    fi
    if [ "$sub" = run ] && [ -z "$dashdash" ]; then
      case "$x" in
        -i|--rm) continue ;;
        --) dashdash=1; a+=(--dry-run=server -o yaml --) ; continue ;;
      esac
    fi
    a+=("$x")
  done
  case "$sub" in
    run) command kubectl "${a[@]}" ;;
    get) case "$*" in *annotations*) echo 1 ;; *) echo certapi.dev/certapi:dev ;; esac ;;
    *) cat >/dev/null 2>&1 </dev/null || true ;;
  esac
}
helm() { :; }
`

// TestDocsPodsPassPodSecurityRestricted: every Pod a page of restrictedPages makes in certapi's namespace
// (the restore Pods of `kubectl run certapi-restore`, and the pod template of each Pod, Job and CronJob in
// a YAML block) is admitted, as a server-side dry run, by a real kube-apiserver into certapi-system made
// from artifacts/deploy/base/namespace.yaml, which enforces Pod Security "restricted". A restore Pod that
// only sets user IDs is refused there (allowPrivilegeEscalation, capabilities, seccompProfile), which a
// user would find in the middle of a disaster recovery. The node tests that run these blocks
// (test/node/etcdcluster, test/node/migrate) run them in a namespace labelled the same way.
func TestDocsPodsPassPodSecurityRestricted(t *testing.T) {
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	kubectl, err := framework.KubectlBinary()
	if err != nil {
		t.Fatal(err)
	}
	cp := framework.StartT(t, framework.Options{SkipCertapi: true})
	kube, err := kubernetes.NewForConfig(cp.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	nsObj := &corev1.Namespace{}
	if err := yaml.Unmarshal([]byte(readFile(t, root, "artifacts/deploy/base/namespace.yaml")), nsObj); err != nil {
		t.Fatal(err)
	}
	if nsObj.Labels["pod-security.kubernetes.io/enforce"] != "restricted" {
		t.Fatalf("artifacts/deploy/base/namespace.yaml does not enforce Pod Security restricted: %v", nsObj.Labels)
	}
	if _, err := kube.CoreV1().Namespaces().Create(ctx, nsObj, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// No kube-controller-manager makes it here: the Pods need it to be admitted.
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
	if _, err := kube.CoreV1().ServiceAccounts(nsObj.Name).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	// What the blocks read: a snapshot and its integrity record, as the save blocks leave them.
	for _, f := range []string{"certapi.db", "certapi.db.record", "certapi.db" + snapshot.IntegritySuffix} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	env := append(os.Environ(), "KUBECONFIG="+cp.Kubeconfig, "PATH="+filepath.Dir(kubectl)+":"+os.Getenv("PATH"))
	runs, templates := 0, 0
	for _, rel := range restrictedPages {
		page, err := markdown.Parse(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range page.Blocks {
			where := fmt.Sprintf("%s:%d", rel, b.Line)
			if regexp.MustCompile(`kubectl .*\brun\b`).MatchString(b.Body) {
				runs++
				cctx, cancel := context.WithTimeout(ctx, time.Minute)
				cmd := exec.CommandContext(cctx, "bash", "-e", "-o", "pipefail", "-c", dryRunShell+b.Body)
				cmd.Dir, cmd.Env = dir, env
				out, err := cmd.CombinedOutput()
				cancel()
				switch {
				case err != nil:
					t.Errorf("%s: the Pod of `kubectl run` is refused in certapi-system (Pod Security restricted): %v\n%s\n(the block:\n%s)", where, err, out, b.Body)
				case !strings.Contains(string(out), "kind: Pod"):
					t.Errorf("%s: `kubectl run` as a dry run printed no Pod:\n%s", where, out)
				}
			}
			for _, pod := range podTemplates(t, where, b.Body) {
				templates++
				pod.Namespace = nsObj.Name
				if _, err := kube.CoreV1().Pods(nsObj.Name).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
					t.Errorf("%s: the pod of %s is refused in certapi-system (Pod Security restricted): %v", where, pod.Name, err)
				}
			}
		}
	}
	if runs == 0 || templates == 0 {
		t.Errorf("found %d `kubectl run` blocks and %d Pod, Job or CronJob manifests in %v; want the restore Pods and the off-cluster copy's CronJob", runs, templates, restrictedPages)
	}
}

// podTemplates returns, for each Pod, Job and CronJob in a block's YAML (the block itself, or a heredoc in
// it), a Pod of its pod template named after it.
func podTemplates(t *testing.T, where, body string) []*corev1.Pod {
	t.Helper()
	if m := regexp.MustCompile(`(?s)<<'?EOF'?\n(.*?)\nEOF\n`).FindStringSubmatch(body); m != nil {
		body = m[1]
	}
	var pods []*corev1.Pod
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(body, -1) {
		var head struct {
			Kind     string            `json:"kind"`
			Metadata metav1.ObjectMeta `json:"metadata"`
		}
		if yaml.Unmarshal([]byte(doc), &head) != nil {
			continue
		}
		var spec *corev1.PodTemplateSpec
		switch head.Kind {
		case "Pod":
			pod := &corev1.Pod{}
			if err := yaml.UnmarshalStrict([]byte(doc), pod); err != nil {
				t.Errorf("%s: %v", where, err)
				continue
			}
			spec = &corev1.PodTemplateSpec{ObjectMeta: pod.ObjectMeta, Spec: pod.Spec}
		case "Job":
			job := &batchv1.Job{}
			if err := yaml.UnmarshalStrict([]byte(doc), job); err != nil {
				t.Errorf("%s: %v", where, err)
				continue
			}
			spec = &job.Spec.Template
		case "CronJob":
			cj := &batchv1.CronJob{}
			if err := yaml.UnmarshalStrict([]byte(doc), cj); err != nil {
				t.Errorf("%s: %v", where, err)
				continue
			}
			spec = &cj.Spec.JobTemplate.Spec.Template
		default:
			continue
		}
		pods = append(pods, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: strings.ToLower(head.Kind) + "-" + head.Metadata.Name, Labels: spec.Labels},
			Spec:       spec.Spec,
		})
	}
	return pods
}
