// Package clientmodule checks certapi's client modules from the outside: pkg/apis, pkg/generated,
// pkg/cawatch, pkg/signer and pkg/servingcert are Go modules of their own (docs/development.md, "Modules")
// that an operator requires without certapi's server dependencies. Two operators outside the main module,
// older/ and current/ (the example webhook of artifacts/examples/webhook, each with a go.mod of its own),
// require them with client-go and controller-runtime two minors older than certapi's and with certapi's
// own; the tests build both and run each against a real certapi and kube-apiserver, which calls its
// webhook. The module checks need only the go command; the operator test needs the binaries of
// `make tools` and certapi, as the rest of test/ does.
package clientmodule

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/certapi/certapi/test/framework"
)

const modulePrefix = "github.com/certapi/certapi/"

// clientModules are the client modules' directories, relative to the repository root (the Makefile's
// CLIENT_MODULES).
var clientModules = []string{"pkg/apis", "pkg/generated", "pkg/cawatch", "pkg/signer", "pkg/servingcert"}

// operators are the outside modules that require the client modules: older pins the oldest client-go and
// controller-runtime the client modules support, current certapi's own.
var operators = []string{"older", "current"}

// goTimeout bounds one go command: module downloads on a fresh machine, or a cold build of an operator.
const goTimeout = 15 * time.Minute

// goCmd runs the go command in dir, outside any workspace, and returns its standard output.
func goCmd(ctx context.Context, dir string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, goTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("go %s in %s: %w\n%s%s", strings.Join(args, " "), dir, err, stdout.String(), stderr.String())
	}
	return stdout.String(), nil
}

func mustGo(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := goCmd(context.Background(), dir, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// modFile is what `go mod edit -json` prints of a go.mod file.
type modFile struct {
	Go      string
	Require []struct {
		Path, Version string
		Indirect      bool
	}
}

func readModFile(t *testing.T, dir, file string) modFile {
	t.Helper()
	var m modFile
	if err := json.Unmarshal([]byte(mustGo(t, dir, "mod", "edit", "-json", file)), &m); err != nil {
		t.Fatalf("go mod edit -json %s: %v", file, err)
	}
	return m
}

// selected returns the version of each module that dir's module selects.
func selected(t *testing.T, dir string, paths ...string) map[string]string {
	t.Helper()
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(mustGo(t, dir, append([]string{"list", "-m", "-f", "{{.Path}} {{.Version}}"}, paths...)...)), "\n") {
		if path, version, ok := strings.Cut(line, " "); ok {
			got[path] = version
		}
	}
	return got
}

// minor is the minor version of a v0.MINOR.PATCH module version.
func minor(t *testing.T, version string) int {
	t.Helper()
	parts := strings.Split(strings.TrimPrefix(version, "v"), ".")
	if len(parts) < 3 || parts[0] != "0" {
		t.Fatalf("version %q is not v0.MINOR.PATCH", version)
	}
	n, err := strconv.Atoi(parts[1])
	if err != nil {
		t.Fatalf("version %q: %v", version, err)
	}
	return n
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// clientGoMinimum is the client-go the client modules require: the oldest they support.
func clientGoMinimum(t *testing.T, root string) string {
	t.Helper()
	return selected(t, filepath.Join(root, "pkg", "generated"), "k8s.io/client-go")["k8s.io/client-go"]
}

// TestClientModulesRequireNothingBeyondClientGo: every requirement of every client module's go.mod, direct
// or indirect, is a module that k8s.io/client-go at the client modules' minimum itself requires, at the
// version it requires, and no go directive is newer than client-go's. So requiring them cannot move an
// operator that has that client-go or a newer one: no module is added to its graph and none is raised.
func TestClientModulesRequireNothingBeyondClientGo(t *testing.T) {
	root := repoRoot(t)
	minimum := clientGoMinimum(t, root)

	// client-go's own module graph at that version, from a scratch module that requires only it.
	scratch := t.TempDir()
	if err := os.WriteFile(filepath.Join(scratch, "go.mod"), []byte("module scratch\n\ngo 1.25.0\n\nrequire k8s.io/client-go "+minimum+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	clientGoGraph := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(mustGo(t, scratch, "list", "-mod=mod", "-m", "-f", "{{.Path}} {{.Version}}", "all")), "\n") {
		if path, version, ok := strings.Cut(line, " "); ok {
			clientGoGraph[path] = version
		}
	}
	var clientGo struct{ GoMod string }
	if err := json.Unmarshal([]byte(mustGo(t, scratch, "mod", "download", "-json", "k8s.io/client-go@"+minimum)), &clientGo); err != nil {
		t.Fatal(err)
	}
	clientGoGo := readModFile(t, scratch, clientGo.GoMod).Go

	for _, dir := range clientModules {
		t.Run(dir, func(t *testing.T) {
			mod := readModFile(t, filepath.Join(root, dir), "go.mod")
			if mod.Go != clientGoGo {
				t.Errorf("go directive %s; want %s, client-go %s's, so that an operator's go line is not raised", mod.Go, clientGoGo, minimum)
			}
			for _, r := range mod.Require {
				if strings.HasPrefix(r.Path, modulePrefix) {
					continue
				}
				if want, ok := clientGoGraph[r.Path]; !ok {
					t.Errorf("requires %s %s, which k8s.io/client-go %s does not require", r.Path, r.Version, minimum)
				} else if r.Version != want {
					t.Errorf("requires %s %s; k8s.io/client-go %s requires %s", r.Path, r.Version, minimum, want)
				}
			}
		})
	}
}

// TestModulesTidy: `go mod tidy` would change nothing in the client modules nor in the operators. For the
// operators that is the point: requiring certapi's client modules leaves their client-go and
// controller-runtime where they pinned them.
func TestModulesTidy(t *testing.T) {
	root := repoRoot(t)
	dirs := append([]string{"hack/tools/codegen", "pkg/generated/openapi"}, clientModules...)
	for _, op := range operators {
		dirs = append(dirs, filepath.Join("test", "clientmodule", op))
	}
	for _, dir := range dirs {
		t.Run(dir, func(t *testing.T) {
			if out, err := goCmd(context.Background(), filepath.Join(root, dir), "mod", "tidy", "-diff"); err != nil {
				t.Errorf("go mod tidy would change %s:\n%s", dir, strings.TrimSpace(out))
			}
		})
	}
}

// TestOperatorsPinned: the older operator has client-go and controller-runtime two minors older than the
// main module's, and exactly the client-go the client modules require (so their minimum is what is
// tested); the current one has the main module's. The client code's generator is of the oldest minor too.
func TestOperatorsPinned(t *testing.T) {
	root := repoRoot(t)
	const clientGo, controllerRuntime = "k8s.io/client-go", "sigs.k8s.io/controller-runtime"
	mainMod := selected(t, root, clientGo, controllerRuntime)
	minimum := clientGoMinimum(t, root)
	older := selected(t, filepath.Join(root, "test", "clientmodule", "older"), clientGo, controllerRuntime)
	current := selected(t, filepath.Join(root, "test", "clientmodule", "current"), clientGo, controllerRuntime)
	t.Logf("main module: %v; client modules' client-go %s; older: %v; current: %v", mainMod, minimum, older, current)

	for _, path := range []string{clientGo, controllerRuntime} {
		if got, want := minor(t, older[path]), minor(t, mainMod[path])-2; got != want {
			t.Errorf("older operator: %s %s; want minor %d, two below the main module's %s", path, older[path], want, mainMod[path])
		}
		if current[path] != mainMod[path] {
			t.Errorf("current operator: %s %s; want the main module's %s", path, current[path], mainMod[path])
		}
	}
	if older[clientGo] != minimum {
		t.Errorf("older operator: client-go %s; want the client modules' minimum %s", older[clientGo], minimum)
	}
	codegen := selected(t, filepath.Join(root, "hack", "tools", "codegen"), "k8s.io/code-generator")["k8s.io/code-generator"]
	if minor(t, codegen) != minor(t, minimum) {
		t.Errorf("hack/tools/codegen: k8s.io/code-generator %s; want the client modules' minor, of client-go %s", codegen, minimum)
	}
}
