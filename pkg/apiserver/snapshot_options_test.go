package apiserver

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

func TestSnapshotFlags(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		invalid string
		dir     string // the schedule's directory; "" for no schedule
	}{
		{args: nil},
		{args: []string{"--snapshot-interval=1h"}, dir: "/data/snapshots"},
		{args: []string{"--snapshot-interval=1h", "--snapshot-dir=/backup", "--snapshot-retention=1"}, dir: "/backup"},
		{args: []string{"--snapshot-interval=-1h"}, invalid: "--snapshot-interval"},
		{args: []string{"--snapshot-interval=10ms"}, invalid: "--snapshot-interval"},
		{args: []string{"--snapshot-interval=1h", "--snapshot-retention=0"}, invalid: "--snapshot-retention"},
		{args: []string{"--snapshot-interval=1h", "--etcd-servers=https://etcd:2379"}, invalid: "needs --snapshot-dir"},
		{args: []string{"--snapshot-interval=1h", "--etcd-servers=https://etcd:2379", "--snapshot-dir=/backup"}, dir: "/backup"},
	} {
		o := NewOptions()
		o.DataDir = "/data"
		fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
		o.AddFlags(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		err := o.Validate()
		if tc.invalid != "" {
			if err == nil || !strings.Contains(err.Error(), tc.invalid) {
				t.Errorf("%v: Validate() = %v; want an error about %s", tc.args, err, tc.invalid)
			}
			continue
		}
		if err != nil && strings.Contains(err.Error(), "snapshot") {
			t.Errorf("%v: Validate() = %v", tc.args, err)
		}
		s := o.Snapshots.schedule(nil, o.DataDir, nil, false)
		if s != nil && s.Sealer != nil {
			t.Errorf("%v: a schedule that seals integrity records with no encryption", tc.args)
		}
		// The record of distrusted CAs lives in the snapshot directory, scheduled snapshots or not.
		if tc.dir != "" && o.Snapshots.recordDir(o.DataDir, true) != filepath.Clean(tc.dir) {
			t.Errorf("%v: distrusted CAs recorded in %q, want %s", tc.args, o.Snapshots.recordDir(o.DataDir, true), tc.dir)
		}
		switch {
		case tc.dir == "" && s != nil:
			t.Errorf("%v: a schedule without --snapshot-interval", tc.args)
		case tc.dir != "" && (s == nil || s.Dir != filepath.Clean(tc.dir) || s.Interval != time.Hour || s.Retention < 1):
			t.Errorf("%v: schedule %+v, want every hour into %s", tc.args, s, tc.dir)
		}
	}
}
