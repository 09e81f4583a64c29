// Package localup runs the node walkthrough of `make local-up NODE=3 HA=1` through the entry point make
// runs (hack/local-up.sh), from the images of `make images` (or $IMAGES_DIR) and $CERTAPI_BIN when set,
// to its ready line, then stops it with Ctrl-C as a user does. The walkthrough checks each of its own
// steps (the example webhook's pods Ready with certificates from certapi, kube-apiserver calling the
// webhook through its Service and enforcing its answer, a pod certificate, the admin plugin); this test
// checks that it gets through all of them, prints its ready line, has put one certapi replica on each
// worker node, and stops cleanly.
//
// The walkthrough starts its own control plane and node (it takes the machine-wide node lock itself), so
// this package starts none.
package localup

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/certapi/certapi/test/framework"
)

// readyMarker is hack/local-up's line once everything is up.
const readyMarker = "certapi local-up: ready"

// Deadlines: the tools and plugins built by hack/local-up.sh (current ones are skipped), a wait for the
// node lock, the control plane, the node, three certapi pods and the walkthrough's steps (about 4 minutes
// on a loaded 2-core machine, builds included); then the stop. Together within make e2e's go test
// -timeout (E2E_TIMEOUT, 40m), so that the test, not go test's panic, stops local-up and its node.
const (
	upTimeout   = 30 * time.Minute
	stopTimeout = 3 * time.Minute
)

// TestLocalUpNodeHA runs `make local-up NODE=3 HA=1`'s command, hack/local-up.sh --node --workers=3 --ha, to
// its ready line. It covers NODE=1 HA=1 (the same code on one node, no workers) and NODE=1 alone too but
// for the install: the walkthrough on a node (the
// example webhook as pods behind its Service, which a node's kube-apiserver with
// --enable-aggregator-routing=true can call, where the ExternalName Service of the loopback walkthrough
// is refused) is the same code for both; NODE=1 installs certapi from
// artifacts/deploy/overlays/single-replica with framework.InstallCertapiSingleReplica, which every run of
// test/node uses. One node start instead of two.
func TestLocalUpNodeHA(t *testing.T) {
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	// Short: the node's sockets live under it (a Unix socket path has at most 107 bytes).
	dir, err := os.MkdirTemp("", "certapi-localup-")
	if err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "local")
	ctx, cancel := context.WithTimeout(context.Background(), upTimeout+stopTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(root, "hack", "local-up.sh"), "--node", "--workers=3", "--ha", "--dir="+state)
	cmd.Dir = root
	// The plugins, the example webhook and local-up are built where they disturb no other test's.
	cmd.Env = append(os.Environ(), "LOCAL_UP_BIN_DIR="+filepath.Join(dir, "bin"))
	// Its own process group: a stop reaches local-up and what it runs, and nothing else.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string)
	var out lockedBuffer
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(io.TeeReader(stdout, &out))
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	exited := false
	defer func() {
		if !exited {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			_ = cmd.Wait()
		}
		if t.Failed() {
			t.Logf("local-up's output:\n%s\nits stderr:\n%s\nits state and logs are kept in %s", out.String(), stderr.String(), dir)
		} else {
			_ = os.RemoveAll(dir)
		}
	}()

	// Up to the ready line, or local-up's end, or the deadline.
	ready := false
	deadline := time.NewTimer(upTimeout)
	defer deadline.Stop()
	for !ready {
		select {
		case line, ok := <-lines:
			if !ok {
				exited = true
				t.Fatalf("local-up ended before its ready line (%v)", cmd.Wait())
			}
			ready = line == readyMarker
		case <-deadline.C:
			t.Fatalf("no ready line from local-up within %s", upTimeout)
		}
	}
	t.Logf("figure: hack/local-up.sh --node --workers=3 --ha to its ready line: %s (builds included)", time.Since(start).Round(time.Second))
	t.Logf("the walkthrough:\n%s", out.String())
	for _, want := range []string{
		"3. The example webhook", "both Ready",
		"4. kube-apiserver is told where the webhook is", "certapi injected its CA bundle",
		"5. kube-apiserver calls the webhook", "denied the request",
		"6. A pod certificate", "Issued",
		"7. certapi as an admin sees it",
		"worker certapi-node-3",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("local-up's walkthrough does not say %q", want)
		}
	}
	// One replica on each worker, as the local volumes put them; the first node runs none.
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(state, "kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pods, err := kube.CoreV1().Pods(framework.CertapiNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=certapi,app.kubernetes.io/component=apiserver"})
	if err != nil {
		t.Fatal(err)
	}
	onNode := map[string][]string{}
	for _, p := range pods.Items {
		onNode[p.Spec.NodeName] = append(onNode[p.Spec.NodeName], p.Name)
	}
	for _, n := range []string{framework.NodeName + "-1", framework.NodeName + "-2", framework.NodeName + "-3"} {
		if len(onNode[n]) != 1 {
			t.Errorf("worker %s runs certapi replicas %v, want one; the pods by node: %v", n, onNode[n], onNode)
		}
	}
	if len(pods.Items) != 3 || len(onNode[framework.NodeName]) > 0 {
		t.Errorf("certapi's pods by node: %v; want three, one on each worker, none on %s", onNode, framework.NodeName)
	}

	// Ctrl-C, as a user stops it: everything stops and the node leaves nothing on the machine.
	stopped := time.Now()
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		for range lines {
		}
		done <- cmd.Wait()
	}()
	select {
	case err := <-done:
		exited = true
		if err != nil {
			t.Fatalf("local-up after Ctrl-C: %v", err)
		}
	case <-time.After(stopTimeout):
		t.Fatalf("local-up did not stop within %s of Ctrl-C", stopTimeout)
	}
	if !strings.Contains(out.String(), "stopped in") {
		t.Errorf("local-up stopped without saying so")
	}
	t.Logf("figure: local-up stopped %s after Ctrl-C", time.Since(stopped).Round(time.Second))
}

// lockedBuffer is a bytes.Buffer that a process's output goroutine writes while the test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
