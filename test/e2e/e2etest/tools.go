package e2etest

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/certapi/certapi/test/framework"
)

// KubectlPath returns the kubectl to run: $KUBECTL, then framework.KubectlBinary ($KUBECTL_BIN, the one
// of $KUBE_MINOR, or the one `make tools` builds into _output/bin: the version of kube-apiserver), then
// the one on PATH when none of those is set or built.
func KubectlPath(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("KUBECTL"); p != "" {
		return p
	}
	built, err := framework.KubectlBinary()
	if err == nil {
		return built
	}
	if os.Getenv(framework.EnvKubeMinor) != "" || os.Getenv(framework.EnvKubectlBin) != "" {
		t.Fatal(err)
	}
	p, err := exec.LookPath("kubectl")
	if err != nil {
		t.Fatal("no kubectl: run `make tools`, which builds one into _output/bin")
	}
	return p
}

// Run runs bin with args and returns its stdout and stderr, and its error.
func Run(t testing.TB, bin string, args ...string) (stdout []byte, stderr string, err error) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	return out.Bytes(), errOut.String(), err
}

// Kubectl runs kubectl with args against the cluster of kubeconfig and returns its stdout and stderr,
// and its error.
func Kubectl(t testing.TB, kubeconfig string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	out, errOut, err := Run(t, KubectlPath(t), append([]string{"--kubeconfig", kubeconfig}, args...)...)
	return string(out), errOut, err
}

// FreePort returns a TCP port on 127.0.0.1 that nothing listened on a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// WriteKubeconfig writes a kubeconfig of cfg to path (framework.WriteKubeconfig), failing t when it
// cannot.
func WriteKubeconfig(t testing.TB, path string, cfg *rest.Config) {
	t.Helper()
	if err := framework.WriteKubeconfig(path, cfg); err != nil {
		t.Fatal(err)
	}
}

// Tail returns the last lines of s, for a log in a failure message.
func Tail(s string, lines int) string {
	all := strings.Split(s, "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}
