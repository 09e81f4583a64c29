package docs

import (
	"strings"
	"testing"

	"github.com/certapi/certapi/test/framework"
)

// runInstall is the install that test/node/etcdcluster runs as written: docs/install.md's block
// install-helm (the README's install with helm test added).
const (
	runInstallPage  = "docs/install.md"
	runInstallBlock = "install-helm"
	runInstallTest  = "test/node/etcdcluster/etcdcluster_test.go"
)

// heldInstalls are the other pages' copies of that install. Each is the run block less some of its lines,
// so each of its lines runs, in its order, when the run block runs; what each leaves out is said here.
var heldInstalls = []struct {
	page, name string
	// leftOut is the lines of the run block the copy does not have, and why that is safe.
	leftOut []string
	why     string
}{
	{page: "README.md", name: "cluster-install",
		leftOut: []string{"helm test certapi -n certapi-system"},
		why:     "the README's reader runs kubectl certapi check, which waits for what helm test checks, and then the README's use of certapi (test/node/etcdcluster runs it)"},
	{page: "docs/high-availability.md", name: "install",
		leftOut: []string{"make build && export PATH=$PWD/_output/bin:$PATH", "kubectl certapi check --wait --timeout=5m", "helm test certapi -n certapi-system"},
		why:     "the page shows what the chart renders; install.md, which it links, goes on to check and test it"},
	{page: "artifacts/charts/certapi/README.md", name: "install",
		leftOut: []string{"make build && export PATH=$PWD/_output/bin:$PATH", "kubectl certapi check --wait --timeout=5m"},
		why:     "the chart's reader may have no kubectl plugin; helm test's Pod waits for the APIService itself (test.timeout)"},
}

// shellLine is a command line as the shell reads it for comparison: its comment (a # at the start or
// after a blank) dropped and its blanks collapsed.
func shellLine(line string) string {
	if strings.HasPrefix(strings.TrimSpace(line), "#") {
		return ""
	}
	if i := strings.Index(line, " #"); i >= 0 {
		line = line[:i]
	}
	return strings.Join(strings.Fields(line), " ")
}

// shellLines is body's command lines (shellLine), blank ones left out.
func shellLines(body string) []string {
	var lines []string
	for _, l := range strings.Split(body, "\n") {
		if l = shellLine(l); l != "" {
			lines = append(lines, l)
		}
	}
	return lines
}

// TestInstallCopiesAreTheInstallThatRuns holds the README's cluster-install, high-availability.md's install
// and the chart README's install to docs/install.md's install-helm block, which test/node/etcdcluster runs
// as written: each copy's lines, in order, are exactly the run block's without the lines it is allowed to
// leave out. A copy that changes a command, adds one or reorders them fails here, before a user types it.
func TestInstallCopiesAreTheInstallThatRuns(t *testing.T) {
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(readFile(t, root, runInstallTest), `"`+runInstallBlock+`"`) {
		t.Fatalf("%s does not run %s's block %s", runInstallTest, runInstallPage, runInstallBlock)
	}
	run := shellLines(pageBlock(t, root, runInstallPage, runInstallBlock))
	for _, c := range heldInstalls {
		leftOut := map[string]bool{}
		for _, l := range c.leftOut {
			leftOut[shellLine(l)] = true
		}
		var want []string
		for _, l := range run {
			if !leftOut[l] {
				want = append(want, l)
			}
		}
		for l := range leftOut {
			if !strings.Contains(strings.Join(run, "\n"), l) {
				t.Errorf("%s's block %s may leave out %q, which %s's block %s does not have", c.page, c.name, l, runInstallPage, runInstallBlock)
			}
		}
		got := shellLines(pageBlock(t, root, c.page, c.name))
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("%s's block %s is not %s's block %s (which a node test runs) less %q (%s):\n got:\n%s\n want:\n%s",
				c.page, c.name, runInstallPage, runInstallBlock, c.leftOut, c.why, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
}

func TestShellLine(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"helm test certapi -n certapi-system     # a Pod", "helm test certapi -n certapi-system"},
		{"# a comment", ""},
		{"  - secretbox: {keys: [{name: key1, secret: $(head -c 32 /dev/urandom | base64)}]}", "- secretbox: {keys: [{name: key1, secret: $(head -c 32 /dev/urandom | base64)}]}"},
		{"kubectl  get x", "kubectl get x"},
	} {
		if got := shellLine(tc.in); got != tc.want {
			t.Errorf("shellLine(%q) = %q; want %q", tc.in, got, tc.want)
		}
	}
}
