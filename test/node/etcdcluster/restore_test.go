package etcdcluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/certapi/certapi/pkg/snapshot"
	"github.com/certapi/certapi/test/node/nodetest"
)

// TestClusterRestore runs docs/backup-and-restore.md's "Several members" on the README's install, its
// blocks as they are written (cluster-save, cluster-restore-stop, cluster-restore), twice, in
// certapi-system labelled to enforce Pod Security "restricted" as artifacts/deploy/base makes it: a
// restore drill from a copy off the cluster (kubectl certapi snapshot save, the cluster-save block). First
// certapi-0's volume is lost and the other two keep the data of before: a request delivered into a Secret
// and a webhook configuration injected; the snapshot streamed out of certapi-0's pod; a request made after
// it; certapi scaled to zero; certapi-0's claim deleted and made anew; the restore Pod fed the snapshot on
// stdin, with the next epoch, 1; helm upgrade with it. certapi-1 and certapi-2 must move their data aside
// and join. Then every pod and every volume is lost: a new snapshot, a later request, scaled to zero, the
// three claims deleted and certapi-0's made anew, the same blocks (epoch 2); certapi-1 and certapi-2 start
// on new, empty claims and join. After each: the CA is the one before, the request made after the
// snapshot is gone, a new request is delivered, and the Secret and the webhook configuration of before
// are untouched (not re-issued, not re-injected), the certificate still verifying against the injected
// bundle.
func TestClusterRestore(t *testing.T) {
	kube, _, _ := installed3(t)
	nodetest.EnforceRestricted(t, cp, ns)
	kept := nodetest.KeepForRestore(t, cp)

	shell := nodetest.NewDocShell(t, cp)
	t.Log("certapi-0's volume lost, certapi-1 and certapi-2 keep the data of before")
	save(t, shell)
	kept.Deliver(t, "lost-1")
	start := time.Now()
	restoreCluster(t, kube, shell, "data-certapi-0")
	t.Logf("figure: a three-member cluster restored (scaled to zero, certapi-0's claim made anew, the restore Pod, helm upgrade) to three pods Ready and the APIService Available: %s",
		time.Since(start).Round(time.Second))
	nodetest.Logged(t, cp, ns, "certapi-0", `action="Restart"`, "Etcd member is ready")
	for _, pod := range []string{"certapi-1", "certapi-2"} {
		nodetest.Logged(t, cp, ns, pod, `action="DiscardStale"`, "Moved the data of an earlier cluster epoch aside", "Promoted this etcd learner to a voting member")
	}
	kept.Restored(t, []string{"kept"}, "lost-1", "after-1")

	t.Log("every pod and every volume lost")
	save(t, shell)
	kept.Deliver(t, "lost-2")
	start = time.Now()
	restoreCluster(t, kube, shell, "data-certapi-0", "data-certapi-1", "data-certapi-2")
	t.Logf("figure: a three-member cluster restored with every volume lost (scaled to zero, three claims deleted, certapi-0's made anew, the restore Pod, helm upgrade) to three pods Ready and the APIService Available: %s",
		time.Since(start).Round(time.Second))
	nodetest.Logged(t, cp, ns, "certapi-0", `action="Restart"`, "Etcd member is ready")
	for _, pod := range []string{"certapi-1", "certapi-2"} {
		nodetest.Logged(t, cp, ns, pod, `action="Join"`, "Added this member as an etcd learner", "Promoted this etcd learner to a voting member")
	}
	kept.Restored(t, []string{"kept", "after-1"}, "lost-2", "after-2")
	if ann := strings.TrimSpace(nodetest.Kubectl(t, cp, "-n", ns, "get", "statefulset", "certapi", "-o", `jsonpath={.metadata.annotations.certapi\.dev/etcd-cluster-epoch}`)); ann != "2" {
		t.Errorf("the StatefulSet's cluster epoch after two restores: %q; want 2", ann)
	}
}

// save runs docs/backup-and-restore.md's cluster-save block in shell: the snapshot copied off the cluster
// by `kubectl certapi snapshot save` from the leader's pod into certapi.db with its integrity record
// (certapi.db.integrity), and checked; the restore that follows is fed from that copy.
func save(t *testing.T, shell *nodetest.DocShell) {
	t.Helper()
	nodetest.KeepEarlierSnapshot(t, shell)
	start := time.Now()
	shell.Run(t, restoreDoc, time.Minute, "cluster-save")
	took := time.Since(start)
	info, err := snapshot.Verify(filepath.Join(shell.Dir, "certapi.db"))
	if err != nil {
		t.Fatalf("the snapshot the cluster-save block streamed out: %v", err)
	}
	if _, err := os.Stat(filepath.Join(shell.Dir, "certapi.db"+snapshot.IntegritySuffix)); err != nil {
		t.Fatalf("the cluster-save block kept no integrity record beside the snapshot: %v", err)
	}
	t.Logf("figure: the cluster-save block (kubectl certapi snapshot save, then snapshot status): %d bytes, %d keys, in %s",
		info.Size, info.Keys, took.Round(time.Millisecond))
}

// restoreDoc is the page whose blocks TestClusterRestore runs.
const restoreDoc = "docs/backup-and-restore.md"

// restoreCluster runs docs/backup-and-restore.md's "Several members" in shell: the cluster-restore-stop
// block, then the claims lost deleted (each gets a new volume, as kind's storage provisioner would make
// it) and certapi-0's made anew if it was one of them, as step 2 says, then the cluster-restore block; it
// returns once three pods are Ready and the APIService Available.
func restoreCluster(t *testing.T, kube kubernetes.Interface, shell *nodetest.DocShell, lost ...string) {
	t.Helper()
	ctx := context.Background()
	shell.Run(t, restoreDoc, 6*time.Minute, "cluster-restore-stop")
	for _, claim := range lost {
		nodetest.Kubectl(t, cp, "-n", ns, "delete", "pvc", claim, "--wait=true", "--timeout=2m")
		if err := cp.CreateHostPathPV(ctx, fmt.Sprintf("certapi-%s-%d", claim, time.Now().UnixNano()), "1Gi"); err != nil {
			t.Fatal(err)
		}
	}
	if slices.Contains(lost, "data-certapi-0") {
		claim := filepath.Join(t.TempDir(), "claim.yaml")
		if err := os.WriteFile(claim, []byte(restoreClaim), 0o644); err != nil {
			t.Fatal(err)
		}
		nodetest.Kubectl(t, cp, "-n", ns, "apply", "-f", claim)
	}
	out := shell.Run(t, restoreDoc, 10*time.Minute, "cluster-restore")
	if !strings.Contains(out, "--etcd-cluster-epoch=") {
		t.Errorf("the restore's output does not say which --etcd-cluster-epoch to start the members with:\n%s", out)
	}
	// The streamed snapshot checked against the record the cluster-save block kept.
	if !strings.Contains(out, "Integrity verified") {
		t.Errorf("the restore did not verify the snapshot's integrity record:\n%s", out)
	}
	nodetest.WaitFor(t, 10*time.Minute, "three certapi pods Ready", func(ctx context.Context) (bool, string) {
		return nodetest.PodsReady(ctx, kube, ns, selector, 3)
	})
	nodetest.Kubectl(t, cp, "wait", "--for=condition=Available", "apiservice/v1alpha1.certapi.dev", "--timeout=2m")
}

// restoreClaim is certapi-0's claim made anew, as the StatefulSet's volumeClaimTemplates would make it.
const restoreClaim = `apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: data-certapi-0
  labels:
    app.kubernetes.io/name: certapi
    app.kubernetes.io/component: apiserver
spec:
  accessModes: [ReadWriteOnce]
  resources:
    requests:
      storage: 1Gi
`
