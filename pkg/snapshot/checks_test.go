package snapshot_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apiserver/pkg/storage/value"

	"github.com/certapi/certapi/pkg/signer"
	"github.com/certapi/certapi/pkg/snapshot"
	"github.com/certapi/certapi/test/testhelpers"
)

const (
	caObjectKey = "/registry/certapi.dev/certificateauthorities/default"
	caRecordKey = "/registry/certapi.dev/certificateauthoritykeys/default"
)

// newCA makes a CA as certapi's signer does.
func newCA(t *testing.T) *signer.CA {
	t.Helper()
	ca, err := signer.NewCA(signer.CAOptions{ClusterDomain: "cluster.local"})
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// distrustedOf is the entry certapi's leader records for ca.
func distrustedOf(ca *signer.CA, at time.Time) snapshot.DistrustedCA {
	sum := sha256.Sum256(ca.Certificate.Raw)
	return snapshot.DistrustedCA{SerialNumber: signer.FormatSerialNumber(ca.Certificate.SerialNumber), SubjectKeyID: ca.SubjectKeyID(),
		SHA256Fingerprint: hex.EncodeToString(sum[:]), Distrust: "leaked", DistrustedAt: at}
}

// encryptionTransformer loads a fresh aescbc EncryptionConfiguration of the CA keys, as certapi's flag does.
func encryptionTransformer(t *testing.T) (value.Transformer, string) {
	t.Helper()
	cfg, err := testhelpers.AESCBCEncryptionConfig(snapshot.CAKeysResource.String())
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "encryption.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	tr, stop, err := snapshot.LoadTransformer(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return tr, path
}

// putCAs stores a CertificateAuthority object whose status bundle holds bundle, and a CA record (encrypted
// with tr, as certapi stores it) whose authorities are record, in the layout certapi's store uses.
func putCAs(t *testing.T, c *clientv3.Client, tr value.Transformer, bundle, record []*signer.CA) {
	t.Helper()
	ctx := context.Background()
	var pem string
	for _, ca := range bundle {
		pem += string(ca.CertificatePEM())
	}
	obj, err := json.Marshal(map[string]any{"apiVersion": "certapi.dev/v1alpha1", "kind": "CertificateAuthority",
		"metadata": map[string]any{"name": "default"}, "status": map[string]any{"caBundle": pem}})
	if err != nil {
		t.Fatal(err)
	}
	var auth []map[string]string
	for _, ca := range record {
		key, err := ca.KeyPEM()
		if err != nil {
			t.Fatal(err)
		}
		auth = append(auth, map[string]string{"role": "Active", "certificatePEM": string(ca.CertificatePEM()), "keyPEM": string(key)})
	}
	rec, err := json.Marshal(map[string]any{"apiVersion": "certapi.dev/v1", "kind": "CARecord", "authorities": auth})
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := tr.TransformToStorage(ctx, rec, value.DefaultContext(caRecordKey))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, caObjectKey, string(obj)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, caRecordKey, string(sealed)); err != nil {
		t.Fatal(err)
	}
}

// TestRestoreChecks saves a sealed snapshot of a real etcd holding certapi's CA object and encrypted CA
// record, and restores it: refused while a record of distrusted CAs lists a CA it holds (in an earlier
// revision of the record only, here: the latest holds only the new CA) and restored with
// AllowDistrusted; refused when its integrity record is missing, and restored with AcceptUnverified. Each
// refusal, with Force and an existing etcd directory, leaves the data directory exactly as it was.
func TestRestoreChecks(t *testing.T) {
	ctx := context.Background()
	root := shortDir(t)
	e, c := startEtcd(t, filepath.Join(root, "src"))
	tr, _ := encryptionTransformer(t)
	old, cur := newCA(t), newCA(t)
	at := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	// The CA record held old; then the distrust made cur Active and dropped old from both.
	putCAs(t, c, tr, []*signer.CA{old}, []*signer.CA{old})
	putCAs(t, c, tr, []*signer.CA{cur}, []*signer.CA{cur})

	source, err := snapshot.EmbeddedSource(filepath.Join(root, "src"))
	if err != nil {
		t.Fatal(err)
	}
	backup := filepath.Join(root, "backup")
	mkdir(t, backup)
	file := filepath.Join(backup, "s.db")
	if _, err := snapshot.SaveSealed(ctx, source, file, snapshot.NewSealer(tr)); err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
	e.Stop()
	if _, err := os.Stat(file + snapshot.IntegritySuffix); err != nil {
		t.Fatalf("SaveSealed wrote no integrity record: %v", err)
	}

	// What the snapshot holds: with the key, both CAs (old only in the record's earlier revision); without
	// it, the object's bundles (old in an earlier revision) and the record unread.
	held, err := snapshot.ReadCAs(ctx, file, tr)
	if err != nil {
		t.Fatal(err)
	}
	for _, ca := range []*signer.CA{old, cur} {
		if !slices.ContainsFunc(held.CAs, func(h snapshot.SnapshotCA) bool { return h.Same(distrustedOf(ca, at)) }) {
			t.Errorf("ReadCAs with the key found %+v, not CA %s", held.CAs, signer.FormatSerialNumber(ca.Certificate.SerialNumber))
		}
	}
	if len(held.Unread) != 0 {
		t.Errorf("ReadCAs with the key left unread: %v", held.Unread)
	}
	plain, err := snapshot.ReadCAs(ctx, file, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(plain.CAs) != 2 || len(plain.Unread) != 2 || !strings.Contains(plain.Unread[0], "k8s:enc:aescbc:v1:key1") {
		t.Errorf("ReadCAs without the key: %+v; want both CAs from the object's revisions and the record's two revisions unread", plain)
	}

	record := filepath.Join(backup, snapshot.DistrustedFileName)
	if err := snapshot.WriteDistrusted(record, []snapshot.DistrustedCA{distrustedOf(old, at)}); err != nil {
		t.Fatal(err)
	}
	// A data dir with etcd data, restored over with Force: a refusal must not move it aside.
	dataDir := filepath.Join(root, "d")
	mkdir(t, filepath.Join(dataDir, "etcd"))
	writeFile(t, filepath.Join(dataDir, "etcd", "keep"))
	unchanged := func(t *testing.T) {
		t.Helper()
		entries, err := os.ReadDir(dataDir)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		if !slices.Equal(names, []string{"etcd"}) {
			t.Errorf("after a refused restore the data dir holds %v; want only etcd, as before", names)
		}
		if _, err := os.Stat(filepath.Join(dataDir, "etcd", "keep")); err != nil {
			t.Errorf("after a refused restore: %v", err)
		}
	}
	opts := func() snapshot.RestoreOptions {
		return snapshot.RestoreOptions{SnapshotPath: file, DataDir: dataDir, Force: true, Transformer: tr,
			Distrusted: snapshot.DistrustedSources{Dirs: []string{backup}}}
	}

	t.Run("a distrusted CA is refused, named with when", func(t *testing.T) {
		_, err := snapshot.Restore(ctx, opts())
		serial := signer.FormatSerialNumber(old.Certificate.SerialNumber)
		if err == nil || !strings.Contains(err.Error(), serial) || !strings.Contains(err.Error(), "2026-03-01T10:00:00Z") ||
			!strings.Contains(err.Error(), "--allow-distrusted-cas") {
			t.Fatalf("Restore = %v; want a refusal naming CA %s, when it was distrusted and the flag", err, serial)
		}
		unchanged(t)
		// The same from an operator's copy of the record, the snapshot elsewhere.
		o := opts()
		o.Distrusted = snapshot.DistrustedSources{Files: []string{record}}
		if _, err := snapshot.Restore(ctx, o); err == nil || !strings.Contains(err.Error(), serial) {
			t.Fatalf("Restore with --distrusted-cas = %v; want a refusal naming %s", err, serial)
		}
		unchanged(t)
	})
	t.Run("the integrity record missing is refused", func(t *testing.T) {
		o := opts()
		o.AllowDistrusted = true
		o.IntegrityRecord = file + ".elsewhere"
		if _, err := snapshot.Restore(ctx, o); err == nil || !strings.Contains(err.Error(), "no integrity record") {
			t.Fatalf("Restore = %v; want a refusal: no integrity record", err)
		}
		unchanged(t)
		// Checked with another key.
		o = opts()
		o.AllowDistrusted = true
		o.Transformer, _ = encryptionTransformer(t)
		if _, err := snapshot.Restore(ctx, o); err == nil || !strings.Contains(err.Error(), "another key") {
			t.Fatalf("Restore with another key = %v; want a refusal: made with another key", err)
		}
		unchanged(t)
	})
	t.Run("allowed and accepted, it restores", func(t *testing.T) {
		o := opts()
		o.AllowDistrusted = true
		o.IntegrityRecord = file + ".elsewhere"
		o.AcceptUnverified = true
		res, err := snapshot.Restore(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		if res.MovedAside == "" || !strings.Contains(strings.Join(res.Notes, "\n"), "WARNING") {
			t.Errorf("restore result %+v: want the old data moved aside and warnings", res)
		}
	})
	t.Run("verified and no distrusted CA: restores", func(t *testing.T) {
		o := opts()
		o.Distrusted = snapshot.DistrustedSources{}
		o.DataDir = filepath.Join(root, "d2")
		res, err := snapshot.Restore(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		if notes := strings.Join(res.Notes, "\n"); !strings.Contains(notes, "Integrity verified") {
			t.Errorf("notes %q: want the integrity verified", notes)
		}
	})
}
