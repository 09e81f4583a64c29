package docs

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/test/docs/markdown"
	"github.com/certapi/certapi/test/framework"
)

// The README's quick starts mark each command block with <!-- docs-check: NAME -->. What each name is
// held to:
//
//   - local-up: exactly `make local-up`, a Makefile target that runs hack/local-up.sh, which TestLocalUp
//     (test/e2e) runs end to end.
//   - cluster-image: `make release` writes the image archive that `kind load image-archive` is given.
//   - cluster-install: run here as far as it can be without a cluster: the block's encryption
//     configuration is written by its own shell lines, and its `helm install` line is run as `helm
//     template` with the same arguments; the chart must mount the Secret the block's kubectl line makes
//     from that file, and render no key of its own.
//   - cluster-image, cluster-install and cluster-use are also run as they are written, on a real node, by
//     test/node/etcdcluster (nodetest.RunReadmeBlocks, with kind and make standing in for what they do).
//   - cluster-use: its `kubectl create servingcertrequest` line uses the flags (--service, --secret,
//     --wait) that test/e2e's plugin test runs together, and its annotation is the one certapi's injector
//     acts on.
//   - operator: every line of the Go block is a line of artifacts/examples/webhook/main.go, in order, so
//     that the code shown is code that is built and run (by test/node's TestExampleWebhook and by
//     TestLocalUp).
var quickStarts = []string{"local-up", "cluster-image", "cluster-install", "cluster-use", "operator"}

func readmeBlocks(t *testing.T, root string) map[string]markdown.Block {
	t.Helper()
	p, err := markdown.Parse(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := map[string]markdown.Block{}
	for _, b := range p.Blocks {
		if b.Check == "" {
			t.Errorf("README.md:%d: a code block without a <!-- docs-check: NAME --> marker; every block of the README is a quick start a test holds", b.Line)
		}
		if b.Check != "" {
			if _, dup := blocks[b.Check]; dup {
				t.Errorf("README.md:%d: a second block marked docs-check: %s", b.Line, b.Check)
			}
			blocks[b.Check] = b
		}
	}
	for _, name := range quickStarts {
		if _, ok := blocks[name]; !ok {
			t.Errorf("README.md has no code block marked <!-- docs-check: %s -->", name)
		}
	}
	for name := range blocks {
		if !contains(quickStarts, name) {
			t.Errorf("README.md marks a block docs-check: %s, which no check knows", name)
		}
	}
	return blocks
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func readFile(t *testing.T, root, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestQuickStartLocalUp(t *testing.T) {
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b := readmeBlocks(t, root)["local-up"]
	if strings.TrimSpace(b.Body) != "make local-up" {
		t.Errorf("the local-up block is %q, want exactly `make local-up`", b.Body)
	}
	if !regexp.MustCompile(`(?m)^local-up:.*\n\t.*\./hack/local-up\.sh`).MatchString(readFile(t, root, "Makefile")) {
		t.Error("the Makefile's local-up target does not run ./hack/local-up.sh")
	}
	if !strings.Contains(readFile(t, root, "test/e2e/localup_test.go"), `filepath.Join(root, "hack", "local-up.sh")`) {
		t.Error("test/e2e's TestLocalUp no longer runs hack/local-up.sh")
	}
}

func TestQuickStartClusterImage(t *testing.T) {
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b := readmeBlocks(t, root)["cluster-image"]
	if !regexp.MustCompile(`(?m)^make release\b`).MatchString(b.Body) {
		t.Errorf("the cluster-image block does not build the release with make release:\n%s", b.Body)
	}
	if !strings.Contains(readFile(t, root, "hack/release/image.go"), `ImageArchive = "certapi-image.oci.tar"`) {
		t.Error("hack/release no longer writes the image index as certapi-image.oci.tar")
	}
	if !strings.Contains(b.Body, "kind load image-archive _output/release/certapi-image.oci.tar") {
		t.Errorf("the cluster-image block does not load _output/release/certapi-image.oci.tar into kind:\n%s", b.Body)
	}
	// The README's cluster-install is install.md's install-helm less helm test (TestInstallCopiesAreTheInstallThatRuns).
	if !strings.Contains(readFile(t, root, "test/node/etcdcluster/etcdcluster_test.go"), `shell.Run(t, "README.md", 10*time.Minute, "cluster-image")`) {
		t.Error("test/node/etcdcluster no longer runs the README's cluster-image block")
	}
}

func TestQuickStartClusterInstall(t *testing.T) {
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	blocks := readmeBlocks(t, root)
	body := blocks["cluster-install"].Body
	checkInstallBlock(t, root, "README.md", body)
	if !strings.Contains(body, "kubectl certapi check --wait") {
		t.Error("the cluster-install block does not end with kubectl certapi check --wait")
	}
	if !strings.Contains(readFile(t, root, "test/e2e/certapiplugin_test.go"), `certapi("check", "--wait"`) {
		t.Error("test/e2e no longer runs kubectl certapi check --wait")
	}
}

// TestOtherHelmInstallBlocks holds the first `helm install` block of the chart's README and of
// docs/high-availability.md to what the README's is held to: each writes the encryption configuration and
// makes the Secret the chart mounts before it installs, so that neither leaves the pods waiting for a
// Secret nobody made.
func TestOtherHelmInstallBlocks(t *testing.T) {
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range []string{"artifacts/charts/certapi/README.md", "docs/high-availability.md"} {
		t.Run(file, func(t *testing.T) {
			p, err := markdown.Parse(filepath.Join(root, file))
			if err != nil {
				t.Fatal(err)
			}
			for _, b := range p.Blocks {
				if strings.Contains(b.Body, "helm install ") {
					checkInstallBlock(t, root, fmt.Sprintf("%s:%d", file, b.Line), b.Body)
					return
				}
			}
			t.Fatalf("%s has no block with a helm install line", file)
		})
	}
}

// checkInstallBlock runs an install block (named where) as far as it can be run without a cluster: the
// block's encryption configuration is written by its own shell lines, and its `helm install` line is run
// as `helm template` with the same arguments; the chart must mount the Secret the block's kubectl line
// makes from that file, and render no key of its own.
func checkInstallBlock(t *testing.T, root, where, body string) {
	t.Helper()
	// The block's own lines write the encryption configuration.
	heredoc := regexp.MustCompile(`(?s)cat > (\S+) <<EOF\n.*?\nEOF\n`).FindStringSubmatch(body)
	if heredoc == nil {
		t.Fatalf("%s: the install block writes no encryption configuration with cat <<EOF:\n%s", where, body)
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sh := exec.CommandContext(ctx, "sh", "-e", "-c", heredoc[0])
	sh.Dir = dir
	if out, err := sh.CombinedOutput(); err != nil {
		t.Fatalf("%s: the block's encryption configuration lines: %v\n%s", where, err, out)
	}
	if _, err := os.Stat(filepath.Join(dir, heredoc[1])); err != nil {
		t.Fatalf("%s: the block's lines wrote no %s: %v", where, heredoc[1], err)
	}

	// Its helm install line, with its continuation lines, run as helm template.
	joined := strings.ReplaceAll(body, "\\\n", " ")
	var args []string
	for _, line := range strings.Split(joined, "\n") {
		if f := strings.Fields(line); len(f) > 2 && f[0] == "helm" && f[1] == "install" {
			args = f[2:]
		}
	}
	if args == nil {
		t.Fatalf("%s: the install block has no helm install line:\n%s", where, body)
	}
	for i, a := range args {
		switch {
		case strings.HasPrefix(a, "_output/release/"):
			// The release's chart when make test (or make release) built one; else the chart it packages.
			if m, _ := filepath.Glob(filepath.Join(root, a)); len(m) == 1 {
				args[i] = m[0]
			} else {
				t.Logf("no release chart matches %s (make release builds one): rendering artifacts/charts/certapi, which it packages", a)
				args[i] = filepath.Join(root, "artifacts", "charts", "certapi")
			}
		case strings.HasPrefix(a, "artifacts/"):
			args[i] = filepath.Join(root, a) // the block runs from the repository's root
		}
	}
	helm, err := framework.HelmBinary()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, helm, append([]string{"template"}, args...)...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: helm template %s: %v\n%s", where, strings.Join(args, " "), err, stderr.String())
	}
	rendered := string(out)
	// The key goes into a Secret that kubectl makes from the block's file, not into the Helm release: the
	// chart mounts that Secret, under the key it reads, and renders no key of its own.
	secret := regexp.MustCompile(`(?m)^kubectl -n (\S+) create secret generic (\S+) --from-file=config\.yaml=(\S+)$`).FindStringSubmatch(body)
	switch {
	case secret == nil:
		t.Errorf("%s: the install block makes no encryption Secret with kubectl create secret generic NAME --from-file=config.yaml=FILE:\n%s", where, body)
	case secret[3] != heredoc[1]:
		t.Errorf("%s: the block's Secret is made from %s, but its lines write %s", where, secret[3], heredoc[1])
	case !slices.Contains(args, secret[1]) || !regexp.MustCompile(`(?m)^\s+secretName: "?`+regexp.QuoteMeta(secret[2])+`"?$`).MatchString(rendered):
		t.Errorf("%s: the chart, installed as the block says, does not mount the Secret %s of namespace %s", where, secret[2], secret[1])
	}
	if strings.Contains(rendered, "secretbox") {
		t.Errorf("%s: the chart, installed as the block says, renders the encryption key: it would be stored in the Helm release", where)
	}
	if i, j := strings.Index(body, "create secret generic"), strings.Index(body, "helm install "); i > j {
		t.Errorf("%s: the block installs the chart before it makes the encryption Secret", where)
	}
}

func TestQuickStartClusterUse(t *testing.T) {
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	body := readmeBlocks(t, root)["cluster-use"].Body
	create := regexp.MustCompile(`(?m)^kubectl create servingcertrequest \S+ -n \S+ --service=\S+ --secret=\S+ --wait$`)
	if !create.MatchString(body) {
		t.Errorf("the cluster-use block has no `kubectl create servingcertrequest NAME -n NS --service=SVC --secret=SECRET --wait`:\n%s", body)
	}
	if !regexp.MustCompile(`kubectlCreate\([^)]*"--service=[^"]+", "--secret=[^"]+", "--wait"`).MatchString(readFile(t, root, "test/e2e/plugin_test.go")) {
		t.Error("test/e2e's plugin test no longer runs kubectl create servingcertrequest with --service, --secret and --wait")
	}
	// The namespace opts in to Secret delivery first, with the commands test/e2e/manifests runs against
	// the manifests' RBAC: the RoleBinding, then the label, in the namespace of the create.
	optIn := regexp.MustCompile(`(?m)^kubectl create rolebinding certapi-secret-delivery -n (\S+) --clusterrole=certapi:secret-delivery --serviceaccount=certapi-system:certapi\n` +
		`kubectl label namespace (\S+) ` + regexp.QuoteMeta(certapiv1alpha1.LabelSecretDelivery+"="+certapiv1alpha1.SecretDeliveryEnabled) + `\n` +
		`kubectl create servingcertrequest \S+ -n (\S+) `).FindStringSubmatch(body)
	if optIn == nil || optIn[1] != optIn[2] || optIn[2] != optIn[3] {
		t.Errorf("the cluster-use block does not opt the request's namespace in to Secret delivery (kubectl create rolebinding, then kubectl label namespace) before it creates the request:\n%s", body)
	}
	rbacTest := readFile(t, root, "test/e2e/manifests/rbac_test.go")
	if !strings.Contains(rbacTest, `ownKubectl("create", "rolebinding", "certapi-secret-delivery", "-n", ns, "--clusterrole=certapi:secret-delivery", "--serviceaccount=certapi-system:certapi")`) ||
		!strings.Contains(rbacTest, `ownKubectl("label", "namespace", ns, "certapi.dev/secret-delivery=enabled")`) {
		t.Error("test/e2e/manifests no longer opts a namespace in with the README's commands")
	}
	annotate := regexp.MustCompile(`(?m)^kubectl annotate validatingwebhookconfiguration \S+ (\S+)=true$`).FindStringSubmatch(body)
	if annotate == nil || annotate[1] != certapiv1alpha1.AnnotationInjectCABundle {
		t.Errorf("the cluster-use block does not annotate a webhook configuration %s=true:\n%s", certapiv1alpha1.AnnotationInjectCABundle, body)
	}
}

func TestQuickStartOperator(t *testing.T) {
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b := readmeBlocks(t, root)["operator"]
	if b.Lang != "go" {
		t.Errorf("the operator block is %q, want go", b.Lang)
	}
	src := strings.Split(readFile(t, root, "artifacts/examples/webhook/main.go"), "\n")
	next := 0
	for _, line := range strings.Split(b.Body, "\n") {
		want := normalise(line)
		if want == "" {
			continue
		}
		found := false
		for ; next < len(src); next++ {
			if normalise(src[next]) == want {
				found, next = true, next+1
				break
			}
		}
		if !found {
			t.Errorf("the operator block's line %q is not a line of artifacts/examples/webhook/main.go (in this order)", strings.TrimSpace(line))
			return
		}
	}
}

// normalise drops a line's comment and collapses its white space, so that gofmt's alignment and the
// README's comments do not matter.
func normalise(line string) string {
	if i := strings.Index(line, "//"); i >= 0 {
		line = line[:i]
	}
	return strings.Join(strings.Fields(line), " ")
}
