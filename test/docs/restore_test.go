package docs

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/certapi/certapi/test/docs/markdown"
	"github.com/certapi/certapi/test/framework"
)

// restoreBlocks are docs/backup-and-restore.md's blocks and the node test file that runs each as it is
// written (nodetest.DocShell): test/node/etcdcluster's TestClusterRestore (twice) and test/node/migrate's
// TestEmbeddedToCluster. Each must be there, and its test must name it.
var restoreBlocks = map[string]string{
	"cluster-save":                "test/node/etcdcluster/restore_test.go",
	"cluster-restore-stop":        "test/node/etcdcluster/restore_test.go",
	"cluster-restore":             "test/node/etcdcluster/restore_test.go",
	"embedded-to-cluster-save":    "test/node/migrate/migrate_test.go",
	"embedded-to-cluster-restore": "test/node/migrate/migrate_test.go",
}

// TestRestoreBlocks holds docs/backup-and-restore.md's marked blocks to the node test that runs them, and
// the restore Pod to the form that keeps kubectl's stdinOnce: a strategic override (a JSON merge patch
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
	blocks := map[string]markdown.Block{}
	for _, b := range page.Blocks {
		if b.Check != "" {
			blocks[b.Check] = b
		}
	}
	for name, file := range restoreBlocks {
		if _, ok := blocks[name]; !ok {
			t.Errorf("docs/backup-and-restore.md has no block marked <!-- docs-check: %s -->", name)
		}
		if !strings.Contains(readFile(t, root, file), `"`+name+`"`) {
			t.Errorf("%s does not run the %s block", file, name)
		}
	}
	for name := range blocks {
		if _, ok := restoreBlocks[name]; !ok {
			t.Errorf("docs/backup-and-restore.md: a block marked docs-check: %s, which no test runs", name)
		}
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
