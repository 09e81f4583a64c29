package etcdcluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/certapi/certapi/pkg/snapshot"
	"github.com/certapi/certapi/test/node/nodetest"
)

// TestClusterRestore runs docs/backup-and-restore.md's "Several members" on the README's install, its
// blocks as they are written (cluster-save, cluster-restore-stop, cluster-restore), twice, the second time
// from the copy that the stream-save block streams out with kubectl exec, and between the two the Save
// section's other blocks (in-pod-save, in-pod-save-integrity, offsite-save), in
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
// bundle. Last, a distrust and the copy of the record of distrusted CAs (distrustedCopy).
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
	inPodSaves(t, shell)

	t.Log("every pod and every volume lost")
	streamSave(t, shell)
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
	distrustedCopy(t, shell)
}

// distrustedCopy distrusts the CA (kubectl certapi distrust --yes --wait), then runs
// docs/backup-and-restore.md's distrusted-copy block, which copies certapi-0's record of distrusted CAs off
// the pod through kubectl exec; the copy must name the CA that was Active and make `certapi snapshot
// status` mark it DISTRUSTED in the snapshot taken before (certapi.db, still in shell's directory), as the
// page says.
func distrustedCopy(t *testing.T, shell *nodetest.DocShell) {
	t.Helper()
	_, certapi := nodetest.Clients(t, cp)
	ca, err := certapi.CertapiV1alpha1().CertificateAuthorities().Get(context.Background(), "default", metav1.GetOptions{})
	if err != nil || ca.Status.Active == nil {
		t.Fatalf("the CertificateAuthority before the distrust: %v %+v", err, ca)
	}
	old := ca.Status.Active.SerialNumber
	start := time.Now()
	shell.Script(t, "kubectl certapi distrust", 10*time.Minute, "kubectl certapi distrust --yes --wait --timeout=8m")
	// certapi-0 writes its record as it sees the distrust; the copy is taken once it has.
	nodetest.WaitFor(t, 2*time.Minute, "certapi-0's record of distrusted CAs", func(context.Context) (bool, string) {
		out, err := nodetest.KubectlErr(cp, "-n", ns, "exec", "certapi-0", "--", "certapi", "snapshot", "distrusted-cas", "--data-dir=/var/lib/certapi/data")
		return err == nil, out
	})
	shell.Run(t, restoreDoc, time.Minute, "distrusted-copy")
	copied, err := snapshot.ReadDistrusted(filepath.Join(shell.Dir, snapshot.DistrustedFileName))
	if err != nil {
		t.Fatalf("the distrusted-copy block's copy: %v", err)
	}
	named := false
	for _, d := range copied {
		named = named || strings.EqualFold(d.SerialNumber, old)
	}
	if !named {
		t.Errorf("the distrusted-copy block's copy names %v; want the CA that was Active, serial %s", copied, old)
	}
	status := shell.Script(t, "certapi snapshot status with the copy", time.Minute, "certapi snapshot status certapi.db --distrusted-cas=distrusted-cas.json")
	if !strings.Contains(status, "DISTRUSTED by") {
		t.Errorf("certapi snapshot status of the snapshot taken before the distrust, with the copy, marks no CA DISTRUSTED:\n%s", status)
	}
	// The tests after this one start from a certapi whose APIService holds the new bundle and is served.
	shell.Script(t, "kubectl certapi check after the distrust", 3*time.Minute, "kubectl certapi check --wait --timeout=2m")
	t.Logf("figure: kubectl certapi distrust --wait, the distrusted-copy block and its checks: %s", time.Since(start).Round(time.Second))
}

// streamSave runs docs/backup-and-restore.md's stream-save block in shell: the snapshot streamed out of
// certapi-0 with kubectl exec, its integrity record taken from stderr and decoded into
// certapi.db.integrity, and checked; the second restore is fed from that copy and its record, so a record
// the block decodes wrongly fails the restore's integrity check.
func streamSave(t *testing.T, shell *nodetest.DocShell) {
	t.Helper()
	nodetest.KeepEarlierSnapshot(t, shell)
	_ = os.Remove(filepath.Join(shell.Dir, "certapi.db.log"))
	start := time.Now()
	out := shell.Run(t, restoreDoc, time.Minute, "stream-save")
	took := time.Since(start)
	info, err := snapshot.Verify(filepath.Join(shell.Dir, "certapi.db"))
	if err != nil {
		t.Fatalf("the snapshot the stream-save block streamed out: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(shell.Dir, "certapi.db"+snapshot.IntegritySuffix)); err != nil || fi.Size() == 0 {
		t.Fatalf("the stream-save block kept no integrity record beside the snapshot: %v", err)
	}
	if !strings.Contains(out, "integrity record: ") {
		t.Errorf("the stream-save block's cat of certapi.db.log shows no integrity record:\n%s", out)
	}
	t.Logf("figure: the stream-save block (kubectl exec ... snapshot save -, the record decoded, snapshot status): %d bytes, %d keys, in %s",
		info.Size, info.Keys, took.Round(time.Millisecond))
}

// inPodSaves runs docs/backup-and-restore.md's blocks that save into certapi-0's volume (in-pod-save,
// in-pod-save-integrity) and the offsite-save block (kubectl certapi snapshot save to a dated name), and
// checks what each saved: in the pod, with certapi snapshot status (the second with the encryption
// configuration, so its integrity record must verify), and on this machine with snapshot.Verify and the
// integrity record beside it.
func inPodSaves(t *testing.T, shell *nodetest.DocShell) {
	t.Helper()
	start := time.Now()
	var last time.Time
	for _, block := range []string{"in-pod-save", "in-pod-save-integrity"} {
		// Both blocks name the file by the UTC second and save refuses to overwrite: a user runs one of
		// them, this test runs both, so the second starts once the first one's second has passed.
		if wait := time.Until(last.Add(time.Second)); wait > 0 {
			time.Sleep(wait)
		}
		out := shell.Run(t, restoreDoc, time.Minute, block)
		m := regexp.MustCompile(`Saved (/var/lib/certapi/certapi-([0-9TZ]+)\.db) in`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("the %s block printed no \"Saved /var/lib/certapi/certapi-<UTC time>.db\":\n%s", block, out)
		}
		if named, err := time.Parse("20060102T150405Z", m[2]); err == nil {
			last = named
		}
		args := []string{"-n", ns, "exec", "certapi-0", "--", "certapi", "snapshot", "status", m[1]}
		want := "integrity: not checked"
		if block == "in-pod-save-integrity" {
			args, want = append(args, "--encryption-provider-config=/etc/certapi/encryption/config.yaml"), "integrity: verified"
		}
		if status := nodetest.Kubectl(t, cp, args...); !strings.Contains(status, want) {
			t.Errorf("certapi snapshot status of what the %s block saved: want %q:\n%s", block, want, status)
		}
	}
	out := shell.Run(t, restoreDoc, time.Minute, "offsite-save")
	files, err := filepath.Glob(filepath.Join(shell.Dir, "certapi-2???????T??????Z.db"))
	if err != nil || len(files) != 1 {
		t.Fatalf("the offsite-save block's dated snapshot in %s: %v %v\n%s", shell.Dir, files, err, out)
	}
	if _, err := snapshot.Verify(files[0]); err != nil {
		t.Errorf("the offsite-save block's snapshot: %v", err)
	}
	if _, err := os.Stat(files[0] + snapshot.IntegritySuffix); err != nil {
		t.Errorf("the offsite-save block kept no integrity record beside its snapshot: %v", err)
	}
	t.Logf("figure: the in-pod-save, in-pod-save-integrity and offsite-save blocks with their checks: %s", time.Since(start).Round(time.Second))
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
