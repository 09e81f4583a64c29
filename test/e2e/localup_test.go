package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/certapi/certapi/test/framework"
)

// localUpReady is the line hack/local-up prints once its walkthrough is done.
const localUpReady = "certapi local-up: ready"

// TestLocalUp runs `make local-up`'s script, hack/local-up.sh, as a person would (in a directory of its own,
// --dir, so that a developer's _output/local is left alone): it waits for the ready line, checks that the
// walkthrough showed kube-apiserver enforcing the example webhook's decisions and that the stack it left
// running still does, then sends SIGINT, as Ctrl-C does, and checks that local-up exits 0 having stopped
// every process it started.
func TestLocalUp(t *testing.T) {
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	lu := startLocalUp(t, root, dir)

	// The script first builds what it needs; with a warm build cache that takes seconds, cold a few minutes.
	if !lu.waitFor(localUpReady, 5*time.Minute) {
		t.Fatalf("no %q line from hack/local-up.sh (exited: %v)\nstdout:\n%s\nstderr:\n%s", localUpReady, lu.exited(), lu.transcript(), lu.stderr.String())
	}
	out := lu.transcript()
	t.Logf("hack/local-up.sh printed:\n%s", out)
	for _, want := range []string{
		"1. certapi is registered: APIService v1alpha1.certapi.dev Available, caBundle injected by certapi itself (CA serial ",
		"$ kubectl create servingcertrequest example-webhook -n example-webhook --service=example-webhook\n   servingcertrequest.certapi.dev/example-webhook created\n",
		"as ServiceAccount example-webhook/example-webhook",
		"created with no caBundle; certapi injected its CA bundle",
		"$ kubectl create configmap allowed -n demo --from-literal=greeting=hello\n   configmap/allowed created\n",
		`admission webhook "configmaps.example.certapi.dev" denied the request: ConfigMap "forbidden" is labelled example.certapi.dev/forbidden=true`,
		"$ kubectl create servingcertrequest web -n demo --service=web --service-account=web\n   servingcertrequest.certapi.dev/web created\n",
		"it verifies against ClusterTrustBundle certapi.dev:serving:ca",
		"kubectl get certificateauthority default -o yaml",
		"forceRotation",
		"7. certapi as an admin sees it, with the kubectl plugin",
		"$ kubectl certapi status\n   CERTIFICATE AUTHORITY   LEADER",
		"Injection: 3 targets: 3 up to date",
		"kubectl certapi rotate --wait",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the walkthrough lacks %q", want)
		}
	}
	if strings.Contains(out, "the example webhook exited") {
		t.Error("the example webhook exited while local-up ran")
	}

	// Every port it printed (etcd, kube-apiserver, certapi, the webhook and its readiness endpoint) is open now.
	ports := map[string]bool{}
	for _, m := range regexp.MustCompile(`127\.0\.0\.1:(\d+)`).FindAllStringSubmatch(out, -1) {
		ports[net.JoinHostPort("127.0.0.1", m[1])] = true
	}
	if len(ports) < 5 {
		t.Errorf("the walkthrough names %d ports on 127.0.0.1 (%v); want etcd's, kube-apiserver's, certapi's and the webhook's two", len(ports), ports)
	}
	for addr := range ports {
		conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Errorf("%s, printed by local-up, does not accept connections while it runs: %v", addr, err)
			continue
		}
		conn.Close()
	}

	// What it leaves running still enforces the webhook, through the kubeconfig it printed.
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(dir, "kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	forbidden := configMap("forbidden-too")
	forbidden.Labels = map[string]string{"example.certapi.dev/forbidden": "true"}
	_, err = kube.CoreV1().ConfigMaps("demo").Create(context.Background(), forbidden, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "the certapi example webhook refuses those") {
		t.Errorf("a labelled ConfigMap in namespace demo: %v; want the example webhook's denial", err)
	}
	if _, err := kube.CoreV1().ConfigMaps("demo").Get(context.Background(), "allowed", metav1.GetOptions{}); err != nil {
		t.Errorf("the ConfigMap the walkthrough created: %v", err)
	}
	webhookPID := regexp.MustCompile(`pid (\d+), log `).FindStringSubmatch(out)

	// Ctrl-C: SIGINT to local-up's process group, as a terminal sends it.
	begin := time.Now()
	if err := syscall.Kill(-lu.cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	code, ok := lu.wait(time.Minute)
	if !ok {
		t.Fatalf("local-up did not exit within a minute of SIGINT\nstdout:\n%s\nstderr:\n%s", lu.transcript(), lu.stderr.String())
	}
	t.Logf("local-up exited %d, %s after SIGINT", code, time.Since(begin).Round(time.Millisecond))
	if code != 0 {
		t.Errorf("local-up exited %d after SIGINT, want 0\nstderr:\n%s", code, lu.stderr.String())
	}
	if tail := strings.TrimPrefix(lu.transcript(), out); !strings.Contains(tail, "stopped in") {
		t.Errorf("after SIGINT local-up printed %q; want it to say it stopped everything", tail)
	}
	// Nothing it started is left: no port it printed accepts a connection, and the webhook's pid is gone.
	for addr := range ports {
		if conn, err := net.DialTimeout("tcp", addr, 5*time.Second); err == nil {
			conn.Close()
			t.Errorf("%s still accepts connections after local-up exited: a process it started is left", addr)
		}
	}
	if webhookPID == nil {
		t.Error("the walkthrough does not print the example webhook's pid")
	} else if cmdline, err := os.ReadFile("/proc/" + webhookPID[1] + "/cmdline"); err == nil && bytes.Contains(cmdline, []byte("example-webhook")) {
		t.Errorf("the example webhook (pid %s) is still running after local-up exited", webhookPID[1])
	}

	// The webhook stopped cleanly, was allowed its CA watch by the example's RBAC, and no log holds a key.
	webhookLog, err := os.ReadFile(filepath.Join(dir, "logs", "example-webhook.log"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(webhookLog, []byte("Not allowed to watch CertificateAuthority/default")) {
		t.Error("the example's RBAC (manifests/rbac.yaml) does not let the webhook watch CertificateAuthority/default")
	}
	if !bytes.Contains(webhookLog, []byte(`"Stopped"`)) {
		t.Errorf("the example webhook did not log a clean stop; its log ends:\n%s", lastLines(string(webhookLog), 10))
	}
	logs, _ := filepath.Glob(filepath.Join(dir, "logs", "*.log"))
	for _, l := range logs {
		data, err := os.ReadFile(l)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(data, []byte("PRIVATE KEY")) {
			t.Errorf("%s holds private key material", filepath.Base(l))
		}
	}
}

// localUp is a running hack/local-up.sh, in its own process group, with its stdout read line by line.
type localUp struct {
	cmd    *exec.Cmd
	stderr localUpBuffer

	lines chan string // stdout, closed at EOF
	mu    sync.Mutex
	out   strings.Builder
	done  chan struct{} // closed once the process is reaped
	code  int
}

func startLocalUp(t *testing.T, root, dir string) *localUp {
	t.Helper()
	lu := &localUp{lines: make(chan string, 1024), done: make(chan struct{})}
	lu.cmd = exec.Command(filepath.Join(root, "hack", "local-up.sh"), "--dir="+dir)
	lu.cmd.Dir = root
	// Its own process group, so that SIGINT reaches it as from a terminal and not the test; killed if the
	// test binary dies.
	lu.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	lu.cmd.Stderr = &lu.stderr
	stdout, err := lu.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := lu.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lu.mu.Lock()
			lu.out.WriteString(sc.Text() + "\n")
			lu.mu.Unlock()
			select {
			case lu.lines <- sc.Text():
			default: // nobody waits for lines any more; the transcript keeps them
			}
		}
		close(lu.lines)
		// All of stdout is read: reaping now cannot lose output.
		err := lu.cmd.Wait()
		var exit *exec.ExitError
		switch {
		case errors.As(err, &exit):
			lu.code = exit.ExitCode()
		case err != nil:
			lu.code = -1
		}
		close(lu.done)
	}()
	t.Cleanup(func() {
		if !lu.exited() {
			_ = syscall.Kill(-lu.cmd.Process.Pid, syscall.SIGKILL)
			<-lu.done
		}
	})
	return lu
}

// waitFor reads stdout until a line equal to line, EOF or the timeout; it reports whether the line came.
func (lu *localUp) waitFor(line string, timeout time.Duration) bool {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		select {
		case l, ok := <-lu.lines:
			if !ok {
				return false
			}
			if l == line {
				return true
			}
		case <-timer.C:
			return false
		}
	}
}

// wait waits up to timeout for the process to exit and returns its exit code.
func (lu *localUp) wait(timeout time.Duration) (int, bool) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-lu.done:
		return lu.code, true
	case <-timer.C:
		return 0, false
	}
}

func (lu *localUp) exited() bool {
	select {
	case <-lu.done:
		return true
	default:
		return false
	}
}

func (lu *localUp) transcript() string {
	lu.mu.Lock()
	defer lu.mu.Unlock()
	return lu.out.String()
}

// localUpBuffer is an io.Writer safe for concurrent use: exec copies stderr into it while the test reads it.
type localUpBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *localUpBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *localUpBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
