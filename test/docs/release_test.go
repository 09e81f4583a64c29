package docs

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/certapi/certapi/test/docs/markdown"
	"github.com/certapi/certapi/test/framework"
)

// pageBlock is the body of the block of page marked <!-- docs-check: name -->.
func pageBlock(t *testing.T, root, page, name string) string {
	t.Helper()
	body, err := markdown.BlockBody(filepath.Join(root, page), name)
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// commands are the lines of a shell block that are not blank or comments, as written (a comment at the
// end of a line stays: bash drops it).
func commands(body string) []string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return out
}

// makeDryRun is what make would run for a page's `make ...` line: the line itself with make's -n, run in
// the repository, so that the Makefile's variables and prerequisites are make's own.
func makeDryRun(t *testing.T, root, line string) string {
	t.Helper()
	rest, ok := strings.CutPrefix(line, "make ")
	if !ok {
		t.Fatalf("%q is not a make command", line)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-e", "-o", "pipefail", "-c", "make -n "+rest)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make -n %s: %v\n%s", rest, err, out)
	}
	return string(out)
}

// TestMakeRelease holds docs/release.md's block make-release to what make test runs: the line is `make
// release`, whose recipe (make -n) runs hack/release, and `make test` runs that same target before
// test/release checks what it wrote into _output/release (with the plugins' platforms of TEST_PLATFORMS,
// the one difference). The README's cluster-image block builds the release the same way.
func TestMakeRelease(t *testing.T) {
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	lines := commands(pageBlock(t, root, "docs/release.md", "make-release"))
	if len(lines) != 1 || lines[0] != "make release" {
		t.Fatalf("docs/release.md's make-release block is %q, want `make release`", lines)
	}
	hackRelease := regexp.MustCompile(`(?m)^VERSION= .*go run \./hack/release\b`)
	if out := makeDryRun(t, root, lines[0]); !hackRelease.MatchString(out) {
		t.Errorf("make release does not run hack/release:\n%s", out)
	}
	if out := makeDryRun(t, root, "make test"); !hackRelease.MatchString(out) || !strings.Contains(out, "./test/release/...") {
		t.Errorf("make test does not build the release with hack/release and then run test/ (test/release among it):\n%s", out)
	}
}

// TestCuttingARelease runs docs/release.md's block cut-release in a clone of the repository's HEAD whose
// origin is a bare repository of the test's (never the repository itself), each line as written, in
// order, as a maintainer would, but for one thing: `make release VERSION=v0.2.0`, which builds every
// artifact (minutes; make test builds a release with the same target, TestMakeRelease), is run before
// `make module-versions`, where it must refuse the tree as its comment says, and after the commit only
// until it has passed that check and written _output/release/tags.txt, its first output, when the test
// stops it. Then the tag and push line tags the commit with every tag of tags.txt and pushes them to the
// bare origin.
func TestCuttingARelease(t *testing.T) {
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	lines := commands(pageBlock(t, root, "docs/release.md", "cut-release"))
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "make module-versions ") || !strings.HasPrefix(lines[1], "git commit ") ||
		!strings.HasPrefix(lines[2], "make release ") || !strings.HasPrefix(lines[3], "xargs -n1 git tag ") {
		t.Fatalf("docs/release.md's cut-release block is not module-versions, commit, release, tag and push, which this test runs:\n%s", strings.Join(lines, "\n"))
	}
	version := regexp.MustCompile(`VERSION=(v\S+)`).FindStringSubmatch(lines[2])
	if version == nil || !strings.Contains(lines[0], "VERSION="+version[1]) {
		t.Fatalf("the block's make module-versions and make release do not name one VERSION: %q, %q", lines[0], lines[2])
	}

	tmp := t.TempDir()
	origin, clone := filepath.Join(tmp, "origin.git"), filepath.Join(tmp, "certapi")
	gitConfig := filepath.Join(tmp, "gitconfig")
	if err := os.WriteFile(gitConfig, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "GIT_CONFIG_GLOBAL="+gitConfig, "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=certapi release test", "GIT_AUTHOR_EMAIL=release@certapi.dev",
		"GIT_COMMITTER_NAME=certapi release test", "GIT_COMMITTER_EMAIL=release@certapi.dev")
	sh := func(t *testing.T, dir, script string, timeout time.Duration) (string, error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, "bash", "-e", "-o", "pipefail", "-c", script)
		cmd.Dir, cmd.Env = dir, env
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	mustSh := func(t *testing.T, dir, script string, timeout time.Duration) string {
		t.Helper()
		out, err := sh(t, dir, script, timeout)
		if err != nil {
			t.Fatalf("%s: %v\n%s", script, err, out)
		}
		return out
	}
	// The bare origin first, and the clone from it: the tags are pushed there and nowhere else.
	mustSh(t, tmp, "git clone -q --bare "+root+" "+origin+" && git clone -q "+origin+" "+clone, time.Minute)
	// The tools make release checks for (helm), from the repository's _output; the release into the clone's.
	if err := os.MkdirAll(filepath.Join(clone, "_output"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(root, "_output", "bin"), filepath.Join(clone, "_output", "bin")); err != nil {
		t.Fatal(err)
	}

	// make release on a tree whose go.mod files name another version: refused, before anything is built.
	out, err := sh(t, clone, lines[2], 3*time.Minute)
	if err == nil || !strings.Contains(out, "run `make module-versions VERSION="+version[1]+"`") {
		t.Fatalf("%s on a tree whose go.mod files require the client modules at another version: %v, want it refused naming make module-versions:\n%s", lines[2], err, out)
	}
	// make module-versions and the commit, as written.
	mustSh(t, clone, lines[0], 5*time.Minute)
	mustSh(t, clone, lines[1], time.Minute)
	if out := mustSh(t, clone, "git status --porcelain --untracked-files=no", time.Minute); strings.TrimSpace(out) != "" {
		t.Fatalf("make module-versions changed files the commit left out:\n%s", out)
	}
	commit := strings.TrimSpace(mustSh(t, clone, "git rev-parse HEAD", time.Minute))

	// make release on the commit, as written, until it has written tags.txt.
	tags := filepath.Join(clone, "_output", "release", "tags.txt")
	release := exec.Command("bash", "-e", "-c", lines[2])
	release.Dir, release.Env = clone, env
	release.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var releaseOut strings.Builder
	release.Stdout, release.Stderr = &releaseOut, &releaseOut
	if err := release.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- release.Wait() }()
	deadline := time.After(5 * time.Minute)
	for written := false; !written; {
		select {
		case err := <-exited:
			t.Fatalf("%s exited (%v) before writing tags.txt:\n%s", lines[2], err, releaseOut.String())
		case <-deadline:
			_ = syscall.Kill(-release.Process.Pid, syscall.SIGKILL)
			<-exited
			t.Fatalf("%s wrote no tags.txt within 5 minutes:\n%s", lines[2], releaseOut.String())
		case <-time.After(200 * time.Millisecond):
			_, err := os.Stat(tags)
			written = err == nil
		}
	}
	// Stopped: its process group, make and bash and go and what go runs, all started here.
	if err := syscall.Kill(-release.Process.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		t.Fatal(err)
	}
	<-exited
	data, err := os.ReadFile(tags)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Fields(string(data))
	if len(want) < 2 || want[0] != version[1] {
		t.Fatalf("tags.txt is %q, want %s first and a tag of each client module", want, version[1])
	}

	// The tags and the push, as written, into the bare origin.
	mustSh(t, clone, lines[3], time.Minute)
	pushed := mustSh(t, origin, "git for-each-ref --format='%(refname:strip=2) %(objectname)' refs/tags", time.Minute)
	for _, tag := range want {
		if !strings.Contains(pushed, tag+" "+commit+"\n") {
			t.Errorf("origin has no tag %s on the release commit %s:\n%s", tag, commit, pushed)
		}
	}
}

// withoutComment is a command line without its trailing comment (none of these lines quotes a #).
func withoutComment(line string) string {
	if i := strings.Index(line, " #"); i >= 0 {
		line = line[:i]
	}
	return strings.Join(strings.Fields(line), " ")
}

// TestInstallImageIsTheReadmes holds docs/install.md's block image-kind to the README's cluster-image
// block, which test/node/etcdcluster runs as written on a real node (with kind standing in for `kind load
// image-archive`): the same commands, in the same order, comments aside.
func TestInstallImageIsTheReadmes(t *testing.T) {
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	install := commands(pageBlock(t, root, "docs/install.md", "image-kind"))
	readme := commands(pageBlock(t, root, "README.md", "cluster-image"))
	for i := range install {
		install[i] = withoutComment(install[i])
	}
	for i := range readme {
		readme[i] = withoutComment(readme[i])
	}
	if strings.Join(install, "\n") != strings.Join(readme, "\n") {
		t.Errorf("docs/install.md's image-kind block is\n%s\nbut the README's cluster-image block, which test/node/etcdcluster runs, is\n%s",
			strings.Join(install, "\n"), strings.Join(readme, "\n"))
	}
	if !regexp.MustCompile(`\.Run\(t, "README.md", [^)]*"cluster-image"`).MatchString(readFile(t, root, "test/node/etcdcluster/etcdcluster_test.go")) {
		t.Error("test/node/etcdcluster no longer runs the README's cluster-image block")
	}
}
