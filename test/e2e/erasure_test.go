package e2e

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/snapshot"
	"github.com/certapi/certapi/test/e2e/e2etest"
	"github.com/certapi/certapi/test/framework"
	"github.com/certapi/certapi/test/testhelpers"
)

// scheduledSnapshots lists the scheduled snapshots in dir, oldest first.
func scheduledSnapshots(t *testing.T, dir string) []string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "certapi-*.db"))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	return names
}

// TestDistrustErasesHistoryAndSnapshots: once a distrust completes, certapi's embedded etcd no longer
// answers a read of the CA record at a revision from before the distrust (compacted), the scheduled
// snapshot taken before is gone, a fresh one holds no earlier version of the record, and the
// CertificateAuthority's HistoryErased condition and an Event say so. The distrusted CA is recorded in the
// snapshot directory, and a copy of the snapshot taken before is refused by `certapi snapshot restore`
// (subtests in checkRestoreRefusesDistrusted).
func TestDistrustErasesHistoryAndSnapshots(t *testing.T) {
	ctx := context.Background()
	// An hour between snapshots: the first is taken at once, the next one only by the erasure. The CA keys
	// are encrypted, so every scheduled snapshot gets an integrity record.
	config, err := testhelpers.AESCBCEncryptionConfig("certificateauthoritykeys.certapi.dev")
	if err != nil {
		t.Fatal(err)
	}
	own := framework.StartT(t, framework.Options{CertapiEmbeddedEtcd: true, EncryptionConfig: config,
		CertapiArgs: []string{"--snapshot-interval=1h", "--distrust-deadline=20s"}})
	dataDir := filepath.Join(own.Dir, "certapi-data")
	dir := filepath.Join(dataDir, "snapshots")
	c, kube := testhelpers.Clients(t, own.AdminConfig)
	distrustedSerial := e2etest.ActiveSerial(t, own)

	etcd, err := clientv3.New(clientv3.Config{Endpoints: []string{"unix://" + filepath.Join(dataDir, "etcd.sock")}, DialTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()
	var before []string
	e2etest.Eventually(t, 30*time.Second, "the first scheduled snapshot", func(context.Context) (bool, error) {
		before = scheduledSnapshots(t, dir)
		return len(before) > 0, nil
	})
	resp, err := etcd.Get(ctx, e2etest.CAKey)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("the CA record: %v", err)
	}
	rev0, record0 := resp.Header.Revision, resp.Kvs[0].Value
	// The snapshot taken before holds the record as it is now (so the check of the fresh one below can fail).
	if data, err := os.ReadFile(before[len(before)-1]); err != nil || !bytes.Contains(data, record0) {
		t.Fatalf("the scheduled snapshot %s does not hold the CA record of revision %d (%v)", before[len(before)-1], rev0, err)
	}
	// A copy of it, with its integrity record, as an operator's off-cluster backup: the erasure deletes the
	// scheduled one.
	kept := filepath.Join(t.TempDir(), "before.db")
	copyFile(t, before[len(before)-1], kept)
	copyFile(t, before[len(before)-1]+".integrity", kept+".integrity")

	distrust(t, c, "leaked")
	var st certapiv1alpha1.CertificateAuthorityStatus
	e2etest.Eventually(t, 60*time.Second, "the distrust to complete", func(context.Context) (bool, error) {
		st = e2etest.CAObject(t, c).Status
		return st.Distrust != nil && st.Distrust.CompletedAt != nil, nil
	})
	e2etest.Eventually(t, 60*time.Second, "etcd to refuse a read of the CA record at a revision from before the distrust as compacted", func(ctx context.Context) (bool, error) {
		_, err := etcd.Get(ctx, e2etest.CAKey, clientv3.WithRev(rev0))
		return errors.Is(err, rpctypes.ErrCompacted), nil
	})
	e2etest.Eventually(t, 30*time.Second, "the HistoryErased condition", func(context.Context) (bool, error) {
		st = e2etest.CAObject(t, c).Status
		cond := meta.FindStatusCondition(st.Conditions, certapiv1alpha1.ConditionHistoryErased)
		return cond != nil && cond.Status == metav1.ConditionTrue, nil
	})
	cond := meta.FindStatusCondition(st.Conditions, certapiv1alpha1.ConditionHistoryErased)
	if cond.Reason != certapiv1alpha1.HistoryErasedReasonErased || cond.LastTransitionTime.Before(st.Distrust.CompletedAt) || !strings.Contains(cond.Message, `"leaked"`) {
		t.Errorf("HistoryErased condition %+v: want Erased, at or after the distrust completed (%s), naming it", cond, st.Distrust.CompletedAt)
	}

	after := scheduledSnapshots(t, dir)
	for _, b := range before {
		if slices.Contains(after, b) {
			t.Errorf("the scheduled snapshot %s, taken before the distrust, is still there", b)
		}
	}
	if len(after) == 0 {
		t.Fatalf("no scheduled snapshot in %s after the erasure", dir)
	}
	fresh := after[len(after)-1]
	taken, err := time.Parse("20060102T150405Z", strings.TrimSuffix(strings.TrimPrefix(filepath.Base(fresh), "certapi-"), ".db"))
	if err != nil || taken.Before(st.Distrust.CompletedAt.Time) {
		t.Errorf("the newest scheduled snapshot %s was not taken after the distrust completed at %s (%v)", fresh, st.Distrust.CompletedAt, err)
	}
	if data, err := os.ReadFile(fresh); err != nil || bytes.Contains(data, record0) {
		t.Errorf("the fresh snapshot %s holds the CA record of before the distrust (or cannot be read: %v)", fresh, err)
	}

	e2etest.Eventually(t, 30*time.Second, "a HistoryErased Event", func(ctx context.Context) (bool, error) {
		evs, err := kube.EventsV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, ev := range evs.Items {
			if ev.Regarding.Kind == "CertificateAuthority" && ev.ReportingController == "certapi.dev/erasure" && ev.Reason == "HistoryErased" {
				return true, nil
			}
		}
		return false, nil
	})
	data, err := os.ReadFile(own.Logs()[framework.ProcessCertapi])
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Compacted etcd after a distrust", "Defragmented an etcd member after a distrust", "Removed a scheduled etcd snapshot taken before the erasure",
		"Recorded the distrusted CAs where a restore checks for them"} {
		if !strings.Contains(string(data), want) {
			t.Errorf("certapi's log has no line %q", want)
		}
	}
	checkRestoreRefusesDistrusted(t, own, dir, kept, fresh, distrustedSerial, st.Distrust.StartedAt.Time)
	checkSnapshotIntegrity(t, own, dataDir, fresh)
}

// copyFile copies src to dst (mode 0600).
func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// checkRestoreRefusesDistrusted runs `certapi snapshot restore` and `status` on the snapshots of
// TestDistrustErasesHistoryAndSnapshots: the record of distrusted CAs in the snapshot directory lists the
// distrusted CA; a copy of a snapshot taken before the distrust (kept) is refused, naming that CA and when
// it was distrusted, from an operator's copy of the record (--distrusted-cas) and from the record beside
// it in the snapshot directory, and leaves nothing behind; --allow-distrusted-cas restores it; the fresh
// snapshot restores with its integrity verified.
func checkRestoreRefusesDistrusted(t *testing.T, own *framework.ControlPlane, dir, kept, fresh, serial string, distrustedAt time.Time) {
	record := filepath.Join(dir, snapshot.DistrustedFileName)
	cas, err := snapshot.ReadDistrusted(record)
	if err != nil {
		t.Fatalf("the record of distrusted CAs in the snapshot directory: %v", err)
	}
	i := slices.IndexFunc(cas, func(d snapshot.DistrustedCA) bool { return d.SerialNumber == serial })
	if i < 0 || cas[i].Distrust != "leaked" || cas[i].SHA256Fingerprint == "" || cas[i].CompletedAt == nil || !cas[i].DistrustedAt.Equal(distrustedAt) {
		t.Fatalf("the record of distrusted CAs %+v does not list CA %s, distrusted by \"leaked\" at %s, with its fingerprint and completion", cas, serial, distrustedAt)
	}
	// The operator's copy, off the cluster.
	copyRecord := filepath.Join(t.TempDir(), snapshot.DistrustedFileName)
	copyFile(t, record, copyRecord)
	enc := "--encryption-provider-config=" + own.EncryptionConfigFile
	when := distrustedAt.UTC().Format(time.RFC3339)

	t.Run("a snapshot taken before the distrust is refused", func(t *testing.T) {
		target := filepath.Join(t.TempDir(), "d")
		out, err := certapiCmdErr(t, "snapshot", "restore", kept, "--data-dir="+target, enc, "--distrusted-cas="+copyRecord)
		if err == nil || !strings.Contains(out, "serial "+serial) || !strings.Contains(out, when) || !strings.Contains(out, "--allow-distrusted-cas") {
			t.Fatalf("restore of a snapshot taken before the distrust: %v\n%s\nwant a refusal naming CA %s, distrusted at %s", err, out, serial, when)
		}
		if _, err := os.Stat(target); !os.IsNotExist(err) {
			t.Errorf("a refused restore left %s behind (%v)", target, err)
		}
		// Beside the record in the snapshot directory, no flag is needed.
		inDir := filepath.Join(dir, "operator-copy.db")
		copyFile(t, kept, inDir)
		copyFile(t, kept+".integrity", inDir+".integrity")
		defer os.Remove(inDir)
		defer os.Remove(inDir + ".integrity")
		if out, err := certapiCmdErr(t, "snapshot", "restore", inDir, "--data-dir="+target, enc); err == nil || !strings.Contains(out, "serial "+serial) {
			t.Errorf("restore of a snapshot taken before the distrust, from the snapshot directory: %v\n%s", err, out)
		}
		out = certapiCmd(t, "snapshot", "restore", kept, "--data-dir="+target, enc, "--distrusted-cas="+copyRecord, "--allow-distrusted-cas")
		if !strings.Contains(out, "WARNING: restoring anyway") || !strings.Contains(out, "Integrity verified") || !strings.Contains(out, "Restored ") {
			t.Errorf("restore with --allow-distrusted-cas:\n%s", out)
		}
		if out, _ := certapiCmdErr(t, "snapshot", "status", kept, enc, "--distrusted-cas="+copyRecord); !strings.Contains(out, "serial "+serial) ||
			!strings.Contains(out, "DISTRUSTED") || !strings.Contains(out, "integrity: verified") {
			t.Errorf("snapshot status of the snapshot taken before does not mark CA %s distrusted:\n%s", serial, out)
		}
	})
	t.Run("the fresh snapshot restores, verified", func(t *testing.T) {
		out := certapiCmd(t, "snapshot", "restore", fresh, "--data-dir="+filepath.Join(t.TempDir(), "d"), enc)
		for _, want := range []string{"Integrity verified", "holds none of the", "Restored "} {
			if !strings.Contains(out, want) {
				t.Errorf("restore of the fresh snapshot says no %q:\n%s", want, out)
			}
		}
		if out := certapiCmd(t, "snapshot", "status", fresh, enc); !strings.Contains(out, "integrity: verified") || strings.Contains(out, "serial "+serial) {
			t.Errorf("snapshot status of the fresh snapshot:\n%s", out)
		}
	})
}
