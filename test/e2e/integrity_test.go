package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/certapi/certapi/pkg/cmd/snapshotcmd"
	"github.com/certapi/certapi/test/framework"
	"github.com/certapi/certapi/test/testhelpers"
)

// checkSnapshotIntegrity runs `certapi snapshot save`, `restore` and `status` against the running certapi
// of own (embedded etcd in dataDir, CA keys encrypted with own's EncryptionConfiguration) and fresh, a
// scheduled snapshot of it with its integrity record: a snapshot with no record, one with the record of
// another snapshot (replaced), and one whose record was made with another key are each refused by a
// restore given the encryption configuration, leaving nothing behind, and restored with
// --accept-unverified-snapshot; without the configuration the restore goes on and says no check was
// possible; snapshot save with the configuration writes a record that verifies, and snapshot save - prints
// the stream's record, which restore - takes with --integrity-record-data (refusing the stream without it,
// and another snapshot with it). TestDistrustErasesHistoryAndSnapshots
// runs it on its control plane, to spare the suite another one.
func checkSnapshotIntegrity(t *testing.T, own *framework.ControlPlane, dataDir, fresh string) {
	enc := "--encryption-provider-config=" + own.EncryptionConfigFile
	work := t.TempDir()
	refused := func(t *testing.T, file, want string, extra ...string) {
		t.Helper()
		target := filepath.Join(t.TempDir(), "d")
		out, err := certapiCmdErr(t, append([]string{"snapshot", "restore", file, "--data-dir=" + target, enc}, extra...)...)
		if err == nil || !strings.Contains(out, want) || !strings.Contains(out, "--accept-unverified-snapshot") {
			t.Fatalf("restore of %s: %v\n%s\nwant a refusal saying %q", file, err, out, want)
		}
		if _, err := os.Stat(target); !os.IsNotExist(err) {
			t.Errorf("a refused restore left %s behind (%v)", target, err)
		}
		out = certapiCmd(t, append([]string{"snapshot", "restore", file, "--data-dir=" + target, enc, "--accept-unverified-snapshot"}, extra...)...)
		if !strings.Contains(out, "WARNING: restoring an unverified snapshot") || !strings.Contains(out, "Restored ") {
			t.Errorf("restore with --accept-unverified-snapshot:\n%s", out)
		}
	}

	// A snapshot of the same etcd, saved without the configuration: no record.
	bare := filepath.Join(work, "bare.db")
	if out := certapiCmd(t, "snapshot", "save", bare, "--data-dir="+dataDir); !strings.Contains(out, "integrity: none") {
		t.Errorf("snapshot save without --encryption-provider-config does not say it wrote no integrity record:\n%s", out)
	}
	t.Run("no integrity record", func(t *testing.T) {
		refused(t, bare, "no integrity record")
	})
	t.Run("a snapshot replaced under a genuine record", func(t *testing.T) {
		replaced := filepath.Join(work, "replaced.db")
		copyFile(t, bare, replaced)
		copyFile(t, fresh+".integrity", replaced+".integrity")
		refused(t, replaced, "does not match its integrity record")
		if out, err := certapiCmdErr(t, "snapshot", "status", replaced, enc); err == nil || !strings.Contains(out, "integrity: NOT VERIFIED") {
			t.Errorf("snapshot status of a replaced snapshot: %v\n%s", err, out)
		}
	})
	t.Run("a record made with another key", func(t *testing.T) {
		other, err := testhelpers.AESCBCEncryptionConfig("certificateauthoritykeys.certapi.dev")
		if err != nil {
			t.Fatal(err)
		}
		otherFile := filepath.Join(work, "other-encryption.yaml")
		if err := os.WriteFile(otherFile, []byte(other), 0o600); err != nil {
			t.Fatal(err)
		}
		forged := filepath.Join(work, "forged.db")
		if out := certapiCmd(t, "snapshot", "save", forged, "--data-dir="+dataDir, "--encryption-provider-config="+otherFile); !strings.Contains(out, "integrity: sealed in") {
			t.Fatalf("snapshot save with another key:\n%s", out)
		}
		refused(t, forged, "made with another key")
		// The same record read from elsewhere with --integrity-record.
		moved := filepath.Join(work, "moved.integrity")
		if err := os.Rename(forged+".integrity", moved); err != nil {
			t.Fatal(err)
		}
		refused(t, forged, "made with another key", "--integrity-record="+moved)
	})
	t.Run("save with the configuration writes a record that verifies", func(t *testing.T) {
		sealed := filepath.Join(work, "sealed.db")
		certapiCmd(t, "snapshot", "save", sealed, "--data-dir="+dataDir, enc)
		if out := certapiCmd(t, "snapshot", "status", sealed, enc); !strings.Contains(out, "integrity: verified") {
			t.Errorf("snapshot status of a snapshot saved with the configuration:\n%s", out)
		}
		out := certapiCmd(t, "snapshot", "restore", sealed, "--data-dir="+filepath.Join(t.TempDir(), "d"), enc)
		if !strings.Contains(out, "Integrity verified") {
			t.Errorf("restore of a snapshot saved with the configuration:\n%s", out)
		}
	})
	t.Run("a snapshot streamed to stdout carries its record on stderr, which restore from stdin checks", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		bin, err := framework.CertapiBinary(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var stream, stderr bytes.Buffer
		save := exec.CommandContext(ctx, bin, "snapshot", "save", "-", "--data-dir="+dataDir, enc)
		save.Stdout, save.Stderr = &stream, &stderr
		if err := save.Run(); err != nil {
			t.Fatalf("snapshot save - with the configuration: %v\n%s", err, stderr.String())
		}
		var record string
		for _, line := range strings.Split(stderr.String(), "\n") {
			if after, ok := strings.CutPrefix(line, snapshotcmd.IntegrityRecordPrefix); ok {
				record = after
			}
		}
		if record == "" {
			t.Fatalf("snapshot save - printed no integrity record:\n%s", stderr.String())
		}
		restore := func(snapshot []byte, extra ...string) (string, error) {
			cmd := exec.CommandContext(ctx, bin, append([]string{"snapshot", "restore", "-", "--data-dir=" + filepath.Join(t.TempDir(), "d"), enc}, extra...)...)
			cmd.Stdin = bytes.NewReader(snapshot)
			out, err := cmd.CombinedOutput()
			return string(out), err
		}
		if out, err := restore(stream.Bytes(), "--integrity-record-data="+record); err != nil || !strings.Contains(out, "Integrity verified") {
			t.Errorf("restore - of the stream with its record: %v\n%s", err, out)
		}
		if out, err := restore(stream.Bytes()); err == nil || !strings.Contains(out, "--integrity-record-data") {
			t.Errorf("restore - of the stream without its record: %v\n%s\nwant a refusal naming --integrity-record-data", err, out)
		}
		bareData, err := os.ReadFile(bare)
		if err != nil {
			t.Fatal(err)
		}
		if out, err := restore(bareData, "--integrity-record-data="+record); err == nil || !strings.Contains(out, "does not match its integrity record") {
			t.Errorf("restore - of another snapshot with the stream's record: %v\n%s\nwant a refusal", err, out)
		}
	})
	t.Run("without the configuration no check is possible, and the restore says so", func(t *testing.T) {
		out := certapiCmd(t, "snapshot", "restore", bare, "--data-dir="+filepath.Join(t.TempDir(), "d"))
		if !strings.Contains(out, "WARNING: no integrity check") || !strings.Contains(out, "Restored ") {
			t.Errorf("restore without --encryption-provider-config:\n%s", out)
		}
	})
}
