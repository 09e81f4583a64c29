package e2e

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/certapi/certapi/test/e2e/e2etest"
	"github.com/certapi/certapi/test/framework"
	"github.com/certapi/certapi/test/testhelpers"
)

// procStatus reads a field of /proc/<pid>/status given in kB (VmRSS, RssAnon, ...), in bytes.
func procStatus(t *testing.T, pid int, field string) int64 {
	t.Helper()
	if pid == 0 {
		t.Fatal("certapi is not running")
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(status)) {
		if key, value, _ := strings.Cut(line, ":"); key == field {
			var kb int64
			if _, err := fmt.Sscanf(value, "%d", &kb); err != nil {
				t.Fatalf("%s %q: %v", field, value, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// bigSecrets creates n Secrets labelled certapi.dev/managed=true of size bytes each, named
// <prefix>-<i>; half claim to be certapi's (annotated for a request that does not exist) with the bytes
// in tls.crt, the other half hold them under another key.
func bigSecrets(t *testing.T, kube kubernetes.Interface, ns, prefix string, n, size int) {
	t.Helper()
	blob := make([]byte, size)
	for i := range n {
		if _, err := rand.Read(blob); err != nil {
			t.Fatal(err)
		}
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%03d", prefix, i), Labels: map[string]string{"certapi.dev/managed": "true"}},
			Data:       map[string][]byte{"blob": blob},
		}
		if i%2 == 0 {
			s.Annotations = map[string]string{"certapi.dev/servingcertrequest": fmt.Sprintf("nobody-%d", i)}
			s.Data = map[string][]byte{"tls.crt": blob}
		}
		if _, err := kube.CoreV1().Secrets(ns).Create(context.Background(), s, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating Secret %s: %v", s.Name, err)
		}
	}
}

// TestLabelledSecretsDoNotGrowTheLeader: anyone who may write Secrets may put certapi's label on them.
// 200 such Secrets of 1 MiB each must not grow the leader's memory by their size: its Secret cache keeps
// only what delivery needs of each (before, it kept all of their data: +308 MiB).
func TestLabelledSecretsDoNotGrowTheLeader(t *testing.T) {
	ctx := context.Background()
	own := framework.StartT(t, framework.Options{})
	c, kube := testhelpers.Clients(t, own.AdminConfig)
	ns := e2etest.Namespace(t, kube)
	// The marker's Secret, deleted and re-created by certapi, tells when the leader's Secret cache has
	// seen every Secret event before it (a watch delivers events in order).
	deliveredRequest(t, c, kube, ns, "marker")
	caughtUp := func() {
		t.Helper()
		old, err := kube.CoreV1().Secrets(ns).Get(ctx, "marker-tls", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := kube.CoreV1().Secrets(ns).Delete(ctx, "marker-tls", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		e2etest.Eventually(t, 60*time.Second, "certapi to re-create the marker Secret", func(ctx context.Context) (bool, error) {
			s, err := kube.CoreV1().Secrets(ns).Get(ctx, "marker-tls", metav1.GetOptions{})
			return err == nil && s.UID != old.UID && len(s.Data["tls.crt"]) > 0, nil
		})
	}
	// Warm-up: the first megabyte-sized watch events grow the watch decoder's buffer, and their garbage
	// fills the Go heap up to its GC goal (twice the live heap, about 16 MiB more here), which an idle
	// leader had not touched since start-up. That happens once, whatever the cache keeps; what is
	// measured below is what 200 more Secrets add.
	bigSecrets(t, kube, ns, "warm", 24, 1<<20)
	caughtUp()
	pid := own.ReplicaPID(0)
	before, anonBefore := procStatus(t, pid, "VmRSS"), procStatus(t, pid, "RssAnon")

	const n, size = 200, 1 << 20
	bigSecrets(t, kube, ns, "big", n, size)
	caughtUp()
	after, anonAfter := procStatus(t, pid, "VmRSS"), procStatus(t, pid, "RssAnon")
	grew := after - before
	t.Logf("leader VmRSS %d MiB before, %d MiB after %d labelled Secrets of %d MiB (%+d MiB; anonymous %d -> %d MiB)",
		before>>20, after>>20, n, size>>20, grew>>20, anonBefore>>20, anonAfter>>20)
	if grew >= 20<<20 {
		t.Fatalf("the leader's RSS grew by %d MiB for %d labelled Secrets of 1 MiB; want less than 20 MiB", grew>>20, n)
	}
}
