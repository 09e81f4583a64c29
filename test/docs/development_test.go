package docs

import (
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/certapi/certapi/test/framework"
)

// TestDevelopmentMakeTargets holds docs/development.md's make blocks to the tests that run what they run.
// Each line is run as make -n of the same arguments (makeDryRun), and what make would run is checked
// against the command a test runs:
//
//   - local-up, `make local-up`: ./hack/local-up.sh with no flag, which test/e2e's TestLocalUp runs end
//     to end (TestQuickStartLocalUp holds the README's identical block the same way);
//   - local-up-nodes-ha, `make local-up NODE=3 HA=1`: ./hack/local-up.sh --node --workers=3 --ha, which
//     test/node/localup's TestLocalUpNodeHA runs to its ready line and stops;
//   - local-up-node, `make local-up NODE=1`: ./hack/local-up.sh --node alone; the walkthrough on the node
//     is the same code as with --ha (TestLocalUpNodeHA), and the install it makes (the single-replica
//     overlay) is the one every test/node package makes;
//   - make-test, `make test`: the target .ci/run runs, which builds the release and runs every package of
//     test/ (test/node one after another);
//   - test-matrix, each line one example: go run ./hack/matrix -minors with the line's MINORS or every
//     supported minor, the program `make test` runs for the oldest minor (e2e-oldest).
func TestDevelopmentMakeTargets(t *testing.T) {
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	const page = "docs/development.md"
	one := func(name, want string) string {
		t.Helper()
		lines := commands(pageBlock(t, root, page, name))
		if len(lines) != 1 || lines[0] != want {
			t.Fatalf("%s's %s block is %q, want `%s`", page, name, lines, want)
		}
		return lines[0]
	}
	localUp := regexp.MustCompile(`(?m)^.*\./hack/local-up\.sh(.*)$`)
	flags := func(line string) string {
		t.Helper()
		m := localUp.FindAllStringSubmatch(makeDryRun(t, root, line), -1)
		if len(m) != 1 {
			t.Fatalf("%s runs hack/local-up.sh %d times, want once", line, len(m))
		}
		return strings.TrimSpace(m[0][1])
	}
	if got := flags(one("local-up", "make local-up")); got != "" {
		t.Errorf("make local-up runs hack/local-up.sh %s, want no flag (what TestLocalUp runs)", got)
	}
	if !strings.Contains(readFile(t, root, "test/e2e/localup_test.go"), `filepath.Join(root, "hack", "local-up.sh")`) {
		t.Error("test/e2e's TestLocalUp no longer runs hack/local-up.sh")
	}
	if got := flags(one("local-up-node", "make local-up NODE=1")); got != "--node" {
		t.Errorf("make local-up NODE=1 runs hack/local-up.sh %s, want --node", got)
	}
	if got := flags(one("local-up-nodes-ha", "make local-up NODE=3 HA=1")); got != "--node --workers=3 --ha" {
		t.Errorf("make local-up NODE=3 HA=1 runs hack/local-up.sh %s, want --node --workers=3 --ha (what TestLocalUpNodeHA runs)", got)
	}
	if !strings.Contains(readFile(t, root, "test/node/localup/localup_test.go"), `filepath.Join(root, "hack", "local-up.sh"), "--node", "--workers=3", "--ha"`) {
		t.Error("test/node/localup no longer runs hack/local-up.sh --node --workers=3 --ha")
	}

	test := makeDryRun(t, root, one("make-test", "make test"))
	for _, want := range []string{"go run ./hack/release", "-count=1 -p 1 -timeout 40m ./test/node/custody/...", "$(go list ./test/node/...", "$(go list ./test/... | grep -v /test/node", "./test/release/..."} {
		if !strings.Contains(test, want) {
			t.Errorf("make test does not run %s:\n%s", want, test)
		}
	}
	if !regexp.MustCompile(`(?m)^if make test\b`).MatchString(readFile(t, root, ".ci/run")) {
		t.Error(".ci/run does not run make test")
	}

	matrix := regexp.MustCompile(`go run \./hack/matrix -minors "([^"]*)"`)
	oldest := matrix.FindStringSubmatch(test)
	if oldest == nil {
		t.Fatalf("make test runs no hack/matrix (e2e-oldest):\n%s", test)
	}
	lines := commands(pageBlock(t, root, page, "test-matrix"))
	if len(lines) == 0 {
		t.Fatalf("%s's test-matrix block has no command", page)
	}
	var every []string
	for _, line := range lines {
		m := matrix.FindStringSubmatch(makeDryRun(t, root, strings.TrimSpace(strings.Split(line, "#")[0])))
		if m == nil {
			t.Errorf("%s runs no hack/matrix -minors", line)
			continue
		}
		minors := strings.Fields(m[1])
		if every == nil {
			every = minors // the first line: every supported minor
			if !slices.Contains(every, oldest[1]) {
				t.Errorf("%s runs minors %v, not the oldest, %s, that make test runs", line, every, oldest[1])
			}
			continue
		}
		for _, minor := range minors {
			if !slices.Contains(every, minor) {
				t.Errorf("%s runs minor %s, which is not supported (%v)", line, minor, every)
			}
		}
	}
}

// TestMigrationReproduceBlock holds docs/migration.md's "reproduce-cutover" block, which runs a test of
// this repository (make test runs that test itself): its make line is a dry run of real targets, and its
// go test line names a test function that its package has.
func TestMigrationReproduceBlock(t *testing.T) {
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	lines := commands(pageBlock(t, root, "docs/migration.md", "reproduce-cutover"))
	if len(lines) != 2 {
		t.Fatalf("the reproduce-cutover block has %d commands, want a make line and a go test line: %q", len(lines), lines)
	}
	makeDryRun(t, root, lines[0])
	m := regexp.MustCompile(`go test .*-run (\w+) (\./\S+)$`).FindStringSubmatch(lines[1])
	if m == nil {
		t.Fatalf("%q is not `go test ... -run TestName ./package/`", lines[1])
	}
	files, err := filepath.Glob(filepath.Join(root, m[2], "*_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.Contains(readFile(t, root, strings.TrimPrefix(f, root+"/")), "func "+m[1]+"(t *testing.T)") {
			return
		}
	}
	t.Errorf("%s has no test %s, which docs/migration.md's reproduce-cutover block runs", m[2], m[1])
}
