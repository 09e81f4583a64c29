package snapshotcmd

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/certapi/certapi/pkg/snapshot"
)

// newSnapshotDistrustedCommand returns `snapshot distrusted-cas`: the record of distrusted CAs that a certapi
// keeps in its snapshot directory, printed to stdout. certapi's image has no shell and no cat, and the record
// must be copied off the cluster to be of use to a restore onto a new, empty claim, so `kubectl exec ...
// certapi snapshot distrusted-cas > distrusted-cas.json` is how it leaves the pod.
func newSnapshotDistrustedCommand() *cobra.Command {
	var dataDir, snapshotDir string
	cmd := &cobra.Command{
		Use:   "distrusted-cas",
		Short: "Print the record of distrusted CAs (" + snapshot.DistrustedFileName + ") that a certapi keeps, to copy it off the cluster",
		Long: `Print the record of the CAs that a distrust (spec.distrust) removed from trust, which certapi keeps in its
snapshot directory (--snapshot-dir, default <data-dir>/snapshots) as ` + snapshot.DistrustedFileName + `, exactly as it is
there, after checking that it is such a record. Keep the copy with your off-cluster backups and give it to
restore and status with --distrusted-cas: a restore onto a new, empty claim finds no record of its own, and
would otherwise bring a distrusted CA back. Run it in certapi's pod, whose image has no shell:

  kubectl -n certapi-system exec certapi-0 -- certapi snapshot distrusted-cas --data-dir=/var/lib/certapi/data > distrusted-cas.json

It fails, saying so, when there is no record: no distrust has taken effect on that member's volume.`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir := snapshotDir
			if dir == "" {
				dir = filepath.Join(dataDir, "snapshots")
			}
			return printDistrusted(cmd.OutOrStdout(), filepath.Join(dir, snapshot.DistrustedFileName))
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&dataDir, "data-dir", "/var/lib/certapi", "The --data-dir of the certapi whose record to print: the record is <data-dir>/snapshots/"+snapshot.DistrustedFileName+".")
	fs.StringVar(&snapshotDir, "snapshot-dir", "", "The --snapshot-dir of that certapi, when it runs with one (default: <data-dir>/snapshots).")
	return cmd
}

// printDistrusted writes the record of distrusted CAs at path to w as it is on disk, once it has been read
// as one (snapshot.ParseDistrusted), so that the copy is one that restore and status accept. The file is
// read once: certapi may replace it meanwhile, and what is printed must be what was checked.
func printDistrusted(w io.Writer, path string) error {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("no record of distrusted CAs at %s: no distrust has taken effect on this volume, or certapi runs with another --data-dir or --snapshot-dir (give the ones it runs with)", path)
	}
	if err != nil {
		return fmt.Errorf("reading the record of distrusted CAs: %w", err)
	}
	if _, err := snapshot.ParseDistrusted(path, data); err != nil {
		return err
	}
	if _, err := w.Write(data); err != nil {
		return fmt.Errorf("writing the record of distrusted CAs: %w", err)
	}
	return nil
}
