package docs

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/certapi/certapi/test/docs/markdown"
	"github.com/certapi/certapi/test/framework"
)

// commandBlock is one shell block of a user page, named by the <!-- docs-check: NAME --> marker above it,
// and what holds it to being true. Either heldBy, the test file that runs it as written (most often on
// the test node, with nodetest.DocShell) or holds each of its lines to code that runs, and which names
// it in quotes; or notRun, the words of the page, next to the block, that tell its reader why no test
// here runs it (another cloud's CLI, a push to a registry of one's own).
type commandBlock struct {
	page, name string
	heldBy     string
	notRun     string
}

// commandBlocks is every shell block a user of certapi types, page by page. A block that is not here
// fails TestEveryCommandBlockIsHeld: run it in a test, or say in the page why it cannot be run.
var commandBlocks = []commandBlock{
	{page: "README.md", name: "local-up", heldBy: "test/docs/quickstart_test.go"},
	{page: "README.md", name: "cluster-image", heldBy: "test/node/etcdcluster/etcdcluster_test.go"},
	{page: "README.md", name: "cluster-install", heldBy: "test/docs/install_test.go"},
	{page: "README.md", name: "cluster-use", heldBy: "test/node/etcdcluster/etcdcluster_test.go"},

	{page: "docs/ca-custody.md", name: "key-plugin", heldBy: "test/e2e/kms/page_test.go"},
	{page: "docs/ca-custody.md", name: "key-plugin-install", heldBy: "test/node/custody/hsm_test.go"},

	{page: "docs/backup-and-restore.md", name: "cluster-save", heldBy: "test/node/etcdcluster/restore_test.go"},
	{page: "docs/backup-and-restore.md", name: "cluster-restore-stop", heldBy: "test/node/etcdcluster/restore_test.go"},
	{page: "docs/backup-and-restore.md", name: "cluster-restore", heldBy: "test/node/etcdcluster/restore_test.go"},
	{page: "docs/backup-and-restore.md", name: "embedded-to-cluster-save", heldBy: "test/node/migrate/migrate_test.go"},
	{page: "docs/backup-and-restore.md", name: "embedded-to-cluster-restore", heldBy: "test/node/migrate/migrate_test.go"},
	{page: "docs/backup-and-restore.md", name: "stream-save", heldBy: "test/node/etcdcluster/restore_test.go"},
	{page: "docs/backup-and-restore.md", name: "in-pod-save", heldBy: "test/node/etcdcluster/restore_test.go"},
	{page: "docs/backup-and-restore.md", name: "in-pod-save-integrity", heldBy: "test/node/etcdcluster/restore_test.go"},
	{page: "docs/backup-and-restore.md", name: "external-etcd-save", notRun: "No test here runs this block as written: the address and the TLS files are those of your etcd."},
	{page: "docs/backup-and-restore.md", name: "single-restore", heldBy: "test/node/migrate/migrate_test.go"},
	{page: "docs/backup-and-restore.md", name: "offsite-save", heldBy: "test/node/etcdcluster/restore_test.go"},
	{page: "docs/backup-and-restore.md", name: "distrusted-copy", heldBy: "test/node/etcdcluster/restore_test.go"},
	{page: "docs/backup-and-restore.md", name: "offsite-upload", notRun: "no test here runs the upload, which needs a bucket of yours and its credentials"},

	{page: "docs/install.md", name: "install-helm", heldBy: "test/node/etcdcluster/etcdcluster_test.go"},
	{page: "docs/install.md", name: "host-network", heldBy: "test/node/migrate/migrate_test.go"},
	{page: "docs/install.md", name: "openshift-ids", heldBy: "test/node/migrate/migrate_test.go"},
	{page: "docs/install.md", name: "openshift-scc", notRun: "No test here runs `oc`: there is no OpenShift here."},
	{page: "docs/install.md", name: "image-kind", heldBy: "test/docs/release_test.go"},
	{page: "docs/install.md", name: "image-push", heldBy: "test/release/crane_test.go"},
	{page: "docs/install.md", name: "monitoring", heldBy: "test/monitoring/install_test.go"},
	{page: "docs/install.md", name: "gke-firewall", notRun: "No test here runs `gcloud`: there is no GKE here."},

	{page: "docs/release.md", name: "make-release", heldBy: "test/docs/release_test.go"},
	{page: "docs/release.md", name: "cut-release", heldBy: "test/docs/release_test.go"},
	{page: "docs/release.md", name: "verify-release", heldBy: "test/release/signatures_test.go"},
	{page: "docs/release.md", name: "install-chart", heldBy: "test/release/chart_test.go"},
	{page: "docs/release.md", name: "install-yaml", heldBy: "test/release/chart_test.go"},
	{page: "docs/release.md", name: "install-plugins", heldBy: "test/release/krew_test.go"},

	{page: "docs/development.md", name: "local-up", heldBy: "test/docs/development_test.go"},
	{page: "docs/development.md", name: "local-up-node", heldBy: "test/docs/development_test.go"},
	{page: "docs/development.md", name: "local-up-nodes-ha", heldBy: "test/docs/development_test.go"},
	{page: "docs/development.md", name: "make-test", heldBy: "test/docs/development_test.go"},
	{page: "docs/development.md", name: "test-matrix", heldBy: "test/docs/development_test.go"},
	{page: "docs/high-availability.md", name: "install", heldBy: "test/docs/install_test.go"},
	{page: "artifacts/charts/certapi/README.md", name: "install", heldBy: "test/docs/install_test.go"},
	{page: "docs/operating.md", name: "uninstall-kustomize", heldBy: "test/node/kustomizebase/base_test.go"},
	{page: "docs/ca-custody.md", name: "ca-request", heldBy: "test/e2e/intermediate_test.go"},
	{page: "docs/ca-custody.md", name: "ca-sign-openssl", heldBy: "test/e2e/intermediate_test.go"},
	{page: "docs/ca-custody.md", name: "ca-import", heldBy: "test/e2e/intermediate_test.go"},

	{page: "docs/usage.md", name: "namespace-opt-in", heldBy: "test/node/kustomizebase/base_test.go"},
	{page: "docs/usage.md", name: "create-examples", heldBy: "test/node/userpages_test.go"},
	{page: "docs/usage.md", name: "plugin-tour", heldBy: "test/node/userpages_test.go"},
	{page: "docs/usage.md", name: "renew-examples", heldBy: "test/node/userpages_test.go"},
	{page: "docs/usage.md", name: "completion", heldBy: "test/node/userpages_test.go"},
	{page: "docs/operating.md", name: "rotate-distrust", heldBy: "test/node/userpages_test.go"},
	{page: "docs/troubleshooting.md", name: "start-with", heldBy: "test/node/userpages_test.go"},
	{page: "docs/troubleshooting.md", name: "inspect-webhook", heldBy: "test/node/userpages_test.go"},
	{page: "docs/runbooks.md", name: "first-two", heldBy: "test/node/userpages_test.go"},
	{page: "docs/runbooks.md", name: "served-rejected", heldBy: "test/node/userpages_test.go"},
	{page: "docs/served-certificates.md", name: "events", heldBy: "test/node/userpages_test.go"},
	{page: "docs/served-certificates.md", name: "inspect-examples", heldBy: "test/node/userpages_test.go"},
	{page: "docs/served-certificates.md", name: "distrust-fields", heldBy: "test/node/userpages_test.go"},

	{page: "docs/security.md", name: "kms-pkcs11", heldBy: "test/e2e/kms/page_test.go"},
	{page: "docs/migration.md", name: "annotate-keep", heldBy: "test/node/userpages_test.go"},
	{page: "docs/migration.md", name: "keeping-foreign-ca", heldBy: "test/node/userpages_test.go"},
	{page: "docs/migration.md", name: "served-issuers", heldBy: "test/node/userpages_test.go"},
	{page: "docs/migration.md", name: "reproduce-cutover", heldBy: "test/docs/development_test.go"},
}

// userPages are the pages whose shell blocks a user types: the README, docs/ and the chart's README.
func userPages(t *testing.T, root string) []string {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range pages {
		pages[i], _ = filepath.Rel(root, p)
	}
	return append([]string{"README.md", "artifacts/charts/certapi/README.md"}, pages...)
}

func isShell(lang string) bool { return lang == "sh" || lang == "bash" || lang == "shell" }

// TestEveryCommandBlockIsHeld holds every shell block of the user pages to commandBlocks: each is
// marked, each marker is listed once, each listed test names the block, and each block no test runs has
// its reason on the page.
func TestEveryCommandBlockIsHeld(t *testing.T) {
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]commandBlock{}
	for _, c := range commandBlocks {
		key := c.page + " " + c.name
		if _, dup := listed[key]; dup {
			t.Errorf("commandBlocks lists %s twice", key)
		}
		if (c.heldBy == "") == (c.notRun == "") {
			t.Errorf("commandBlocks: %s needs either the test that runs it (heldBy) or why none does (notRun)", key)
		}
		listed[key] = c
	}
	pages := userPages(t, root)
	for _, c := range commandBlocks {
		if !slices.Contains(pages, c.page) {
			t.Errorf("commandBlocks: %s is not a user page (%v)", c.page, pages)
		}
	}
	found := map[string]bool{}
	for _, page := range pages {
		p, err := markdown.Parse(filepath.Join(root, page))
		if err != nil {
			t.Fatal(err)
		}
		text := strings.Join(strings.Fields(readFile(t, root, page)), " ")
		for _, b := range p.Blocks {
			if !isShell(b.Lang) {
				continue
			}
			if b.Check == "" {
				t.Errorf("%s:%d: a shell block without a <!-- docs-check: NAME --> marker: a user will type it, so a test runs it as written (list it in commandBlocks), or the page says why none can", page, b.Line)
				continue
			}
			key := page + " " + b.Check
			c, ok := listed[key]
			if !ok {
				t.Errorf("%s:%d: the block marked docs-check: %s is not in commandBlocks", page, b.Line, b.Check)
				continue
			}
			if found[key] {
				t.Errorf("%s:%d: a second block marked docs-check: %s", page, b.Line, b.Check)
			}
			found[key] = true
			switch {
			case c.heldBy != "" && !strings.Contains(readFile(t, root, c.heldBy), `"`+c.name+`"`):
				t.Errorf("%s:%d: %s does not run the block %s (it must name it in quotes)", page, b.Line, c.heldBy, c.name)
			case c.notRun != "" && !strings.Contains(text, strings.Join(strings.Fields(c.notRun), " ")):
				t.Errorf("%s:%d: the page does not say why no test runs the block %s; commandBlocks says: %q", page, b.Line, c.name, c.notRun)
			}
		}
	}
	for _, c := range commandBlocks {
		if !found[c.page+" "+c.name] {
			t.Errorf("%s has no shell block marked <!-- docs-check: %s -->", c.page, c.name)
		}
	}
}
