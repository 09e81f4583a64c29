package nodetest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/certapi/certapi/test/docs/markdown"
	"github.com/certapi/certapi/test/framework"
)

// kindShim stands in for kind on the test node: `kind load image-archive FILE` does on the node what kind
// does on each of its nodes (ctr images import into the CRI namespace, every platform, with digest names).
const kindShim = `#!/bin/sh
set -e
if [ "$1" != load ] || [ "$2" != image-archive ] || [ $# -ne 3 ]; then
  echo "this kind stands in for 'kind load image-archive FILE' only, not: kind $*" >&2
  exit 1
fi
exec ctr --address %q --namespace k8s.io images import --all-platforms --digests "$3"
`

// makeShim stands in for make: what a README block builds, make test built before the tests ran; the
// shim checks that it is there instead of building it again.
const makeShim = `#!/bin/sh
for a in "$@"; do
  case "$a" in
    *=*) ;;
    release) test -f _output/release/checksums.txt || { echo "make release: no release in _output/release (make test builds one)" >&2; exit 1; } ;;
    build) test -x _output/bin/kubectl-certapi || { echo "make build: no _output/bin/kubectl-certapi" >&2; exit 1; } ;;
    *) echo "make $a: not something make test built" >&2; exit 1 ;;
  esac
done
`

// RunReadmeBlocks runs the README's command blocks marked <!-- docs-check: NAME --> for each name, in
// order, in a DocShell of their own; it fails the test with the output of a block that fails and returns
// the output of all.
func RunReadmeBlocks(t *testing.T, cp *framework.ControlPlane, timeout time.Duration, names ...string) string {
	t.Helper()
	return NewDocShell(t, cp).Run(t, "README.md", timeout, names...)
}

// DocShell runs the command blocks of the README and docs/ as a user would on kind: with bash -e, in a
// directory of their own whose _output and artifacts are the repository's, with cp's kubeconfig, helm and kubectl from
// _output/bin, kind standing in for `kind load image-archive` on cp's node and make for the builds that
// make test has already run. Files a block writes stay in Dir for the next block, as in a user's shell.
type DocShell struct {
	// Dir is the shell's working directory.
	Dir string
	env []string
}

// NewDocShell makes a DocShell in a temporary directory of t's. cp may have no node (then there is no
// kind), or be nil for blocks that need no cluster (then KUBECONFIG names no file).
func NewDocShell(t *testing.T, cp *framework.ControlPlane) *DocShell {
	t.Helper()
	root := RepoPath(t, "")
	dir := t.TempDir()
	// _output and artifacts are the repository's: the release, the binaries, the chart and the manifests
	// that blocks name by their paths from the repository's root.
	for _, d := range []string{"_output", "artifacts"} {
		if err := os.Symlink(filepath.Join(root, d), filepath.Join(dir, d)); err != nil {
			t.Fatal(err)
		}
	}
	shims := filepath.Join(dir, ".shims")
	if err := os.Mkdir(shims, 0o755); err != nil {
		t.Fatal(err)
	}
	scripts := map[string]string{"make": makeShim}
	// Without a node (a control plane of kube-apiserver alone, or none for blocks that need no cluster),
	// there is nothing for kind to load into: no kind.
	if cp != nil && cp.ClusterNode != nil {
		scripts["kind"] = fmt.Sprintf(kindShim, cp.ClusterNode.ContainerdAddress())
	}
	for name, script := range scripts {
		if err := os.WriteFile(filepath.Join(shims, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	kubeconfig := filepath.Join(dir, ".kube", "no-cluster") // a block that needs a cluster fails plainly
	if cp != nil {
		kubeconfig = cp.Kubeconfig
	}
	return &DocShell{Dir: dir, env: append(os.Environ(),
		"PATH="+shims+":"+filepath.Join(root, "_output", "bin")+":"+os.Getenv("PATH"),
		"KUBECONFIG="+kubeconfig,
		"HELM_CACHE_HOME="+filepath.Join(dir, ".helm", "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(dir, ".helm", "config"),
		"HELM_DATA_HOME="+filepath.Join(dir, ".helm", "data"))}
}

// Setenv sets the environment variable name to value for what the shell runs from now on: HOME, for a
// block that writes under ~ (a krew install's ~/.krew/bin), so that it writes in a directory of the test's.
func (s *DocShell) Setenv(name, value string) { s.env = append(s.env, name+"="+value) }

// Run runs the blocks of page (a path from the repository's root) marked <!-- docs-check: NAME --> for
// each name, in order, each within timeout. It fails the test with the output of a block that fails and
// returns the output of all.
func (s *DocShell) Run(t *testing.T, page string, timeout time.Duration, names ...string) string {
	t.Helper()
	var all strings.Builder
	for _, name := range names {
		all.WriteString(s.Script(t, page+" block "+name, timeout, Block(t, page, name)))
	}
	return all.String()
}

// Block is the body of the block of page (a path from the repository's root) marked
// <!-- docs-check: NAME -->, for a test that runs it as the page says to change it.
func Block(t *testing.T, page, name string) string {
	t.Helper()
	body, err := markdown.BlockBody(RepoPath(t, page), name)
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// Script runs body, a test's own commands (what, in its messages), as Run runs a block: with bash -e in
// the shell's directory and environment, within timeout. It fails the test with the output when body
// fails and returns the output.
func (s *DocShell) Script(t *testing.T, what string, timeout time.Duration, body string) string {
	t.Helper()
	start := time.Now()
	out, err := s.ScriptErr(timeout, body)
	t.Logf("%s ran in %s:\n%s", what, time.Since(start).Round(time.Second), out)
	if err != nil {
		t.Fatalf("%s: %v\n%s\n(the commands:\n%s)", what, err, out, body)
	}
	return out
}

// ScriptErr runs body as Script does and returns its output and how it failed, for commands that must fail.
func (s *DocShell) ScriptErr(timeout time.Duration, body string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-e", "-o", "pipefail", "-c", body)
	cmd.Dir, cmd.Env = s.Dir, s.env
	out, err := cmd.CombinedOutput()
	return string(out), err
}
