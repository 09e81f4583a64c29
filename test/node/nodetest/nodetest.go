// Package nodetest holds what the tests on the node (test/node and below) share, as testing helpers over
// test/framework's installation functions (which `make local-up NODE=1` uses too): kubectl against the
// cluster, kustomizations of the repository's manifests with the node's images, waits, issuance load
// through kube-apiserver and the APIService's availability watched throughout a disruption.
package nodetest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/certapi/certapi/pkg/generated/clientset/versioned"
	"github.com/certapi/certapi/test/framework"
	"github.com/certapi/certapi/test/testhelpers"
)

// Kubectl runs kubectl against the cluster (ControlPlane.Kubectl) and returns its standard output; it fails
// the test when kubectl fails.
func Kubectl(t *testing.T, cp *framework.ControlPlane, args ...string) string {
	t.Helper()
	out, err := KubectlErr(cp, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// KubectlErr is Kubectl returning the error.
func KubectlErr(cp *framework.ControlPlane, args ...string) (string, error) {
	return cp.Kubectl(context.Background(), args...)
}

// PluginBinary checks that `make build` put the kubectl plugin name into _output/bin.
func PluginBinary(t *testing.T, name string) {
	t.Helper()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "_output", "bin", name)); err != nil {
		t.Fatalf("%v: run `make build` (make e2e does)", err)
	}
}

// Kustomization is framework.OverlayKustomization, removed when the test ends.
func Kustomization(t *testing.T, base string, setImages map[string]string, extra string) string {
	t.Helper()
	dir, err := framework.OverlayKustomization(base, setImages, extra)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// Clients returns admin clients of the cluster.
func Clients(t *testing.T, cp *framework.ControlPlane) (kubernetes.Interface, versioned.Interface) {
	t.Helper()
	certapi, kube := testhelpers.Clients(t, cp.AdminConfig)
	return kube, certapi
}

// WaitFor polls cond every 250 ms until it holds or timeout passes, and fails the test with cond's last
// word then.
func WaitFor(t *testing.T, timeout time.Duration, what string, cond func(ctx context.Context) (bool, string)) {
	t.Helper()
	testhelpers.WaitFor(t, 250*time.Millisecond, timeout, what, cond)
}

// RepoPath returns the absolute path of rel in the repository.
func RepoPath(t *testing.T, rel string) string {
	t.Helper()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, rel)
}

// PodsReady reports whether every pod matching selector in ns is Ready, and says how they stand.
func PodsReady(ctx context.Context, kube kubernetes.Interface, ns, selector string, want int) (bool, string) {
	pods, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return false, err.Error()
	}
	ready := 0
	var states []string
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		isReady := false
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				isReady = true
			}
		}
		if isReady {
			ready++
		}
		s := fmt.Sprintf("%s %s ready=%v", p.Name, p.Status.Phase, isReady)
		for _, cs := range p.Status.ContainerStatuses {
			if cs.State.Waiting != nil {
				s += fmt.Sprintf(" %s: %s %s", cs.Name, cs.State.Waiting.Reason, cs.State.Waiting.Message)
			}
			if cs.RestartCount > 0 {
				s += fmt.Sprintf(" %s restarts=%d", cs.Name, cs.RestartCount)
				if t := cs.LastTerminationState.Terminated; t != nil {
					s += fmt.Sprintf(" (last: %s, exit %d at %s)", t.Reason, t.ExitCode, t.FinishedAt.UTC().Format(time.TimeOnly))
				}
			}
		}
		states = append(states, s)
	}
	return ready == want && len(states) == want, strings.Join(states, "; ")
}

// Logged waits up to a minute until the log of pod in namespace ns holds every line fragment of want (what
// pkg/etcdcluster logs, say).
func Logged(t *testing.T, cp *framework.ControlPlane, ns, pod string, want ...string) {
	t.Helper()
	WaitFor(t, time.Minute, fmt.Sprintf("%s to log %q", pod, want), func(context.Context) (bool, string) {
		out, err := KubectlErr(cp, "-n", ns, "logs", pod)
		if err != nil {
			return false, err.Error()
		}
		for _, w := range want {
			if !strings.Contains(out, w) {
				return false, "missing " + w
			}
		}
		return true, ""
	})
}

// LogPodsOnFailure logs, when t has failed, the last 60 lines of the containers of the StatefulSet pods
// certapi-0 to certapi-<pods-1> in ns (the container before a restart too) and the namespace's events,
// which say why a container was restarted (a probe, an exit).
func LogPodsOnFailure(t *testing.T, cp *framework.ControlPlane, ns string, pods int) {
	t.Helper()
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		tail := func(out string) string {
			lines := strings.Split(strings.TrimSpace(out), "\n")
			lines = lines[max(0, len(lines)-60):]
			for i, l := range lines {
				if len(l) > 400 { // etcd's JSON errors carry whole stack traces
					lines[i] = l[:400] + "..."
				}
			}
			return strings.Join(lines, "\n")
		}
		for i := range pods {
			pod := fmt.Sprintf("certapi-%d", i)
			if out, err := KubectlErr(cp, "-n", ns, "logs", "--previous", pod); err == nil {
				t.Logf("%s's previous container, last lines:\n%s", pod, tail(out))
			}
			out, _ := KubectlErr(cp, "-n", ns, "logs", pod)
			t.Logf("%s, last lines:\n%s", pod, tail(out))
		}
		out, _ := KubectlErr(cp, "-n", ns, "get", "events", "--sort-by=.lastTimestamp")
		t.Logf("events:\n%s", out)
	})
}
