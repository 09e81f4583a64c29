package snapshotcmd

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/certapi/certapi/pkg/snapshot"
)

// TestSnapshotDistrustedCAs runs `snapshot distrusted-cas` on a record certapi wrote, on none, and on a file
// that is not a record: the first is printed as it is on disk and reads back as the same CAs; the others
// fail with a message that says what was wrong.
func TestSnapshotDistrustedCAs(t *testing.T) {
	ca := snapshot.DistrustedCA{SerialNumber: "5f3c", SubjectKeyID: "9a1e", SHA256Fingerprint: "0e7f", Distrust: "leaked",
		DistrustedAt: time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)}
	for _, tc := range []struct {
		name    string
		setup   func(t *testing.T, data string)
		args    func(data string) []string
		wantErr string
	}{
		{name: "the record in <data-dir>/snapshots",
			setup: func(t *testing.T, data string) {
				if err := snapshot.WriteDistrusted(filepath.Join(data, "snapshots", snapshot.DistrustedFileName), []snapshot.DistrustedCA{ca}); err != nil {
					t.Fatal(err)
				}
			},
			args: func(data string) []string { return []string{"--data-dir=" + data} }},
		{name: "the record in --snapshot-dir",
			setup: func(t *testing.T, data string) {
				if err := snapshot.WriteDistrusted(filepath.Join(data, "elsewhere", snapshot.DistrustedFileName), []snapshot.DistrustedCA{ca}); err != nil {
					t.Fatal(err)
				}
			},
			args: func(data string) []string {
				return []string{"--data-dir=/nonexistent", "--snapshot-dir=" + filepath.Join(data, "elsewhere")}
			}},
		{name: "no distrust yet", setup: func(*testing.T, string) {},
			args:    func(data string) []string { return []string{"--data-dir=" + data} },
			wantErr: "no record of distrusted CAs at"},
		{name: "not a record",
			setup: func(t *testing.T, data string) {
				if err := os.MkdirAll(filepath.Join(data, "snapshots"), 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(data, "snapshots", snapshot.DistrustedFileName), []byte(`{"kind":"Other"}`), 0o600); err != nil {
					t.Fatal(err)
				}
			},
			args:    func(data string) []string { return []string{"--data-dir=" + data} },
			wantErr: "is not a record of distrusted CAs"},
		{name: "an argument", setup: func(*testing.T, string) {},
			args:    func(data string) []string { return []string{"--data-dir=" + data, "extra"} },
			wantErr: "unknown command"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := t.TempDir()
			tc.setup(t, data)
			cmd := NewCmd()
			var out, errOut bytes.Buffer
			cmd.SetOut(&out)
			cmd.SetErr(&errOut)
			cmd.SetArgs(append([]string{"distrusted-cas"}, tc.args(data)...))
			err := cmd.Execute()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v; want one that says %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			copied := filepath.Join(t.TempDir(), snapshot.DistrustedFileName)
			if err := os.WriteFile(copied, out.Bytes(), 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := snapshot.ReadDistrusted(copied)
			if err != nil || len(got) != 1 || !got[0].Same(ca) || got[0].Distrust != "leaked" {
				t.Fatalf("the printed record read back: %v %+v\n%s", err, got, out.String())
			}
		})
	}
}
