package framework

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"

	"github.com/certapi/certapi/test/testhelpers"
)

// ModulePath is the Go module path of the repository the framework belongs to.
const ModulePath = "github.com/certapi/certapi"

// Environment variables that override where the framework finds its binaries.
const (
	// EnvCertapiBin names a prebuilt certapi binary; when set the framework does not build one.
	EnvCertapiBin = "CERTAPI_BIN"
	// EnvEtcdBin names an etcd binary to use instead of <repo>/_output/bin/etcd.
	EnvEtcdBin = "ETCD_BIN"
	// EnvKubeAPIServerBin names a kube-apiserver binary to use instead of <repo>/_output/bin/kube-apiserver.
	EnvKubeAPIServerBin = "KUBE_APISERVER_BIN"
	// EnvPodCertNodeBin names a podcertnode binary to use instead of <repo>/_output/bin/podcertnode.
	EnvPodCertNodeBin = "PODCERTNODE_BIN"
	// EnvPromtoolBin names a promtool binary to use instead of <repo>/_output/bin/promtool.
	EnvPromtoolBin = "PROMTOOL_BIN"
	// EnvPrometheusBin names a prometheus binary to use instead of <repo>/_output/bin/prometheus.
	EnvPrometheusBin = "PROMETHEUS_BIN"
	// EnvKubectlBin names a kubectl binary to use instead of <repo>/_output/bin/kubectl.
	EnvKubectlBin = "KUBECTL_BIN"
	// EnvKubeMinor names the Kubernetes minor (e.g. "1.33") whose kube-apiserver and kubectl the tests run
	// instead of `make tools`' own: those `hack/build-tools.sh kube-1.33` builds into
	// <repo>/_output/kube/v1.33/bin from the module hack/tools/kube-1.33 (what `make test-matrix` runs).
	// KUBE_APISERVER_BIN and KUBECTL_BIN still win over it.
	EnvKubeMinor = testhelpers.EnvKubeMinor
)

// kubeMinorTools are the binaries EnvKubeMinor picks from <repo>/_output/kube/v<minor>/bin.
var kubeMinorTools = map[string]bool{"kube-apiserver": true, "kubectl": true}

// RepoRoot returns the root of the certapi repository: the nearest directory, walking up from the
// working directory and then from this source file, whose go.mod declares module ModulePath.
func RepoRoot() (string, error) {
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if _, file, _, ok := runtime.Caller(0); ok {
		starts = append(starts, filepath.Dir(file))
	}
	for _, start := range starts {
		for dir := start; ; dir = filepath.Dir(dir) {
			if isCertapiModule(filepath.Join(dir, "go.mod")) {
				return dir, nil
			}
			if parent := filepath.Dir(dir); parent == dir {
				break
			}
		}
	}
	return "", fmt.Errorf("cannot find the repository root (a go.mod with module %s) above %v", ModulePath, starts)
}

func isCertapiModule(goMod string) bool {
	f, err := os.Open(goMod)
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "module" {
			return strings.Trim(fields[1], `"`) == ModulePath
		}
	}
	return false
}

// toolBinary returns the path of a binary built by `make tools` (or named by envVar); with $KUBE_MINOR set,
// kube-apiserver and kubectl of that minor (EnvKubeMinor).
func toolBinary(name, envVar string) (string, error) {
	if p := os.Getenv(envVar); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s=%s: %w", envVar, p, err)
		}
		return p, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	p, build := filepath.Join(root, "_output", "bin", name), "make tools"
	if minor := os.Getenv(EnvKubeMinor); minor != "" && kubeMinorTools[name] {
		p, build = filepath.Join(root, "_output", "kube", "v"+minor, "bin", name), "hack/build-tools.sh kube-"+minor
	}
	if _, err := os.Stat(p); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("%s not found at %s: run `%s` (or set %s)", name, p, build, envVar)
		}
		return "", fmt.Errorf("checking %s: %w", p, err)
	}
	return p, nil
}

// EtcdBinary returns the etcd binary to run: $ETCD_BIN if set, otherwise <repo>/_output/bin/etcd,
// built by `make tools`. Tests that need only etcd start it themselves.
func EtcdBinary() (string, error) {
	return toolBinary("etcd", EnvEtcdBin)
}

// KubectlBinary returns the kubectl to run: $KUBECTL_BIN if set, otherwise kubectl of $KUBE_MINOR
// (EnvKubeMinor) or <repo>/_output/bin/kubectl, built by `make tools`: the version of kube-apiserver.
func KubectlBinary() (string, error) {
	return toolBinary("kubectl", EnvKubectlBin)
}

// PromtoolBinary returns Prometheus's promtool: $PROMTOOL_BIN if set, otherwise <repo>/_output/bin/promtool,
// built by `make tools`.
func PromtoolBinary() (string, error) {
	return toolBinary("promtool", EnvPromtoolBin)
}

// PrometheusBinary returns the Prometheus server: $PROMETHEUS_BIN if set, otherwise
// <repo>/_output/bin/prometheus, built by `make tools`.
func PrometheusBinary() (string, error) {
	return toolBinary("prometheus", EnvPrometheusBin)
}

// certapiBuild remembers a successful build for the life of the process. A failed build is not
// remembered, so a cancelled context does not poison later tests.
var certapiBuild struct {
	mu   sync.Mutex
	path string
}

// CertapiBinary returns the certapi binary to run: $CERTAPI_BIN if set, otherwise
// <repo>/_output/cache/certapi built with `go build ./cmd/certapi` once per process. Concurrent test
// binaries serialise the build with a file lock; the Go build cache makes a rebuild of unchanged
// sources a no-op.
func CertapiBinary(ctx context.Context) (string, error) {
	if p := os.Getenv(EnvCertapiBin); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s=%s: %w", EnvCertapiBin, p, err)
		}
		return p, nil
	}
	certapiBuild.mu.Lock()
	defer certapiBuild.mu.Unlock()
	if certapiBuild.path != "" {
		return certapiBuild.path, nil
	}
	p, err := buildCertapi(ctx)
	if err != nil {
		return "", err
	}
	certapiBuild.path = p
	return p, nil
}

func buildCertapi(ctx context.Context) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	cacheDir := filepath.Join(root, "_output", "cache")
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return "", fmt.Errorf("creating %s: %w", cacheDir, err)
	}
	lock, err := os.OpenFile(filepath.Join(cacheDir, "certapi.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", fmt.Errorf("opening build lock: %w", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("locking %s: %w", lock.Name(), err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) //nolint:errcheck // released on close anyway

	out := filepath.Join(cacheDir, "certapi")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./cmd/certapi")
	cmd.Dir = root
	var buf bytes.Buffer
	cmd.Stdout = &buf
	cmd.Stderr = &buf
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build ./cmd/certapi in %s: %w\n%s", root, err, buf.String())
	}
	return out, nil
}

func hostBinary(name, debianPackage string) (string, error) {
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%s not found on PATH: install Debian's %s (.ci/run does)", name, debianPackage)
	}
	return p, nil
}
