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
// CertificateAuthority's HistoryErased condition and an Event say so.
func TestDistrustErasesHistoryAndSnapshots(t *testing.T) {
	ctx := context.Background()
	// An hour between snapshots: the first is taken at once, the next one only by the erasure.
	own := framework.StartT(t, framework.Options{CertapiEmbeddedEtcd: true,
		CertapiArgs: []string{"--snapshot-interval=1h", "--distrust-deadline=20s"}})
	dataDir := filepath.Join(own.Dir, "certapi-data")
	dir := filepath.Join(dataDir, "snapshots")
	c, kube := testhelpers.Clients(t, own.AdminConfig)
	e2etest.ActiveSerial(t, own)

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
	for _, want := range []string{"Compacted etcd after a distrust", "Defragmented an etcd member after a distrust", "Removed a scheduled etcd snapshot taken before the erasure"} {
		if !strings.Contains(string(data), want) {
			t.Errorf("certapi's log has no line %q", want)
		}
	}
}
