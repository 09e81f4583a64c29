package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// TestSnapshotCommands runs the snapshot subcommands' argument checks and help through the real command
// tree: the root command keeps its own flags and the subcommands theirs.
func TestSnapshotCommands(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name    string
		args    []string
		wantOut string
		wantErr string
	}{
		{"snapshot help says what is not in a snapshot", []string{"snapshot", "--help"}, "NOT in the snapshot", ""},
		{"save help names its flags, not the server's", []string{"snapshot", "save", "--help"}, "--etcd-cafile", ""},
		{"restore help explains --force", []string{"snapshot", "restore", "--help"}, "before-restore-<time>", ""},
		{"save needs a file", []string{"snapshot", "save"}, "", "takes one argument"},
		{"save with both sources", []string{"snapshot", "save", "x.db", "--data-dir=" + dir, "--etcd-servers=http://127.0.0.1:1"}, "", "not both"},
		{"save of a data dir with no certapi", []string{"snapshot", "save", "x.db", "--data-dir=" + dir}, "", "no embedded etcd socket"},
		{"restore needs --data-dir", []string{"snapshot", "restore", "x.db"}, "", "--data-dir is required"},
		{"restore of a missing file", []string{"snapshot", "restore", filepath.Join(dir, "none.db"), "--data-dir=" + dir}, "", "does not exist"},
		{"status of a missing file", []string{"snapshot", "status", filepath.Join(dir, "none.db")}, "", "does not exist"},
		{"the server's flags are not the subcommands'", []string{"snapshot", "save", "x.db", "--secure-port=1"}, "", "unknown flag"},
		{"an unknown subcommand", []string{"backup"}, "", "unknown command"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := newCommand(context.Background())
			var out bytes.Buffer
			cmd.SetOut(&out)
			cmd.SetErr(&out)
			cmd.SetArgs(tc.args)
			err := cmd.Execute()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, want an error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out.String(), tc.wantOut) {
				t.Errorf("output does not contain %q:\n%s", tc.wantOut, out.String())
			}
		})
	}
}
