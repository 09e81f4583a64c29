// Package snapshotcmd is the command line of `certapi snapshot` (save, restore, status, distrusted-cas) over pkg/snapshot,
// built here so that cmd/certapi and the flag reference generator (hack/docgen) use the same command tree.
package snapshotcmd

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/apiserver/pkg/storage/value"

	"github.com/certapi/certapi/pkg/snapshot"
)

const snapshotLong = `Save and restore etcd snapshots of certapi's store.

A snapshot holds everything certapi keeps in its etcd: the CertificateAuthority with its CA certificates and
CA private keys, every ServingCertRequest, and certapi's bookkeeping (leader election, handoffs). It does not
hold what lives in kube-apiserver: delivered Secrets, injected caBundles, Events.

The CA private keys are in the snapshot exactly as etcd holds them: encrypted with the key of the
--encryption-provider-config certapi runs with, when it lists certificateauthoritykeys.certapi.dev, and in
the clear otherwise. That encryption configuration (its key) is NOT in the snapshot: back it up separately,
and keep it away from the snapshots. A snapshot restored without it cannot be read by certapi; a snapshot
of unencrypted keys is as secret as the CA itself.

See docs/backup-and-restore.md.`

// NewCmd returns the `snapshot` command with its subcommands save, restore, status and distrusted-cas, to be added to the
// certapi root command.
// IntegrityRecordPrefix starts the line of stderr on which `snapshot save -` prints the stream's integrity
// record, base64-encoded, for restore's --integrity-record-data.
const IntegrityRecordPrefix = "integrity record: "

func NewCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:          "snapshot",
		Short:        "Save and restore etcd snapshots of certapi's CA and objects",
		Long:         snapshotLong,
		SilenceUsage: true,
		Args:         cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cmd.Help()
		},
	}
	cmd.AddCommand(newSnapshotSaveCommand(), newSnapshotRestoreCommand(), newSnapshotStatusCommand(), newSnapshotDistrustedCommand())
	// The server's sectioned help lists the server's flags; these commands have their own.
	plain := &cobra.Command{}
	for _, c := range append([]*cobra.Command{cmd}, cmd.Commands()...) {
		c.SetUsageFunc(plain.UsageFunc())
		c.SetHelpFunc(plain.HelpFunc())
	}
	return cmd
}

func newSnapshotSaveCommand() *cobra.Command {
	var (
		dataDir                   string
		servers                   []string
		caFile, certFile, keyFile string
		timeout                   time.Duration
		encryptionConfig          string
	)
	cmd := &cobra.Command{
		Use:   "save FILE",
		Short: "Save a snapshot of certapi's etcd to FILE",
		Long: `Save a snapshot of certapi's etcd to FILE, while certapi runs.

certapi's embedded etcd is reached through its Unix socket, <data-dir>/etcd.sock: run this in certapi's pod
or on its host with the same --data-dir. An external etcd is reached with --etcd-servers (one member: a
snapshot is one member's state) and the TLS files certapi uses for it. The snapshot holds the whole etcd:
with an etcd shared with other users, theirs too.

The snapshot is written to a temporary file beside FILE, synced, verified (etcd's SHA-256 trailer and a
full database check) and then renamed to FILE, so FILE is either a complete snapshot or absent. FILE must not
exist. Its mode is 0600. Prints the size, revision, key count and hash.

FILE "-" writes the snapshot to stdout instead (from a container with a read-only root file system and no
shell: kubectl exec ... -- certapi snapshot save - > certapi.db), checking etcd's SHA-256 trailer as it
streams; check the copy with "certapi snapshot status".

With --encryption-provider-config (the EncryptionConfiguration certapi runs with, which encrypts
certificateauthoritykeys.certapi.dev), save also writes FILE.integrity: the snapshot's size and SHA-256
sealed with the key that encrypts the CA keys (any provider, KMS v2 included), so that nobody without that
key can make a snapshot that "certapi snapshot restore" with the same configuration accepts. The record is
written before FILE appears. A snapshot streamed to stdout gets its record on stderr instead, one line
that starts with "integrity record: ", base64-encoded: give it to "certapi snapshot restore -" with
--integrity-record-data (or decode it into a file for --integrity-record).

` + snapshotLong,
		Example: `  # In certapi's pod (embedded etcd):
  certapi snapshot save /var/lib/certapi/backup/certapi-$(date -u +%Y%m%dT%H%M%SZ).db --data-dir=/var/lib/certapi
  # An external etcd:
  certapi snapshot save certapi.db --etcd-servers=https://etcd-0:2379 --etcd-cafile=ca.crt --etcd-certfile=client.crt --etcd-keyfile=client.key`,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return fmt.Errorf("snapshot save takes one argument, the file to write; got %d", len(args))
			}
			var src snapshot.Source
			if len(servers) > 0 {
				if cmd.Flags().Changed("data-dir") {
					return errors.New("give --data-dir (the embedded etcd) or --etcd-servers (an external etcd), not both")
				}
				src = snapshot.Source{Endpoints: servers, CAFile: caFile, CertFile: certFile, KeyFile: keyFile}
			} else {
				if caFile != "" || certFile != "" || keyFile != "" {
					return errors.New("--etcd-cafile, --etcd-certfile and --etcd-keyfile go with --etcd-servers; the embedded etcd's socket needs none")
				}
				var err error
				if src, err = snapshot.EmbeddedSource(dataDir); err != nil {
					return err
				}
			}
			ctx := cmd.Context()
			if timeout > 0 {
				var cancel func()
				ctx, cancel = context.WithTimeout(ctx, timeout)
				defer cancel()
			}
			var sealer *snapshot.Sealer
			if encryptionConfig != "" {
				t, stop, err := snapshot.LoadTransformer(ctx, encryptionConfig)
				if err != nil {
					return err
				}
				defer stop()
				sealer = snapshot.NewSealer(t)
				if err := sealer.Probe(ctx); err != nil {
					return fmt.Errorf("--encryption-provider-config %s: %w", encryptionConfig, err)
				}
			}
			start := time.Now()
			if args[0] == "-" {
				client, err := snapshot.Connect(ctx, src)
				if err != nil {
					return err
				}
				defer client.Close()
				digest := snapshot.NewDigestWriter()
				n, err := snapshot.SaveToWriter(ctx, client, io.MultiWriter(cmd.OutOrStdout(), digest))
				if err != nil {
					return err
				}
				if _, err := fmt.Fprintf(cmd.ErrOrStderr(), "Wrote %d bytes to stdout in %s; etcd's SHA-256 trailer verified. Check the copy with: certapi snapshot status FILE\n",
					n, time.Since(start).Round(time.Millisecond)); err != nil {
					return err
				}
				if sealer == nil {
					_, err = fmt.Fprintln(cmd.ErrOrStderr(), "integrity: none (no --encryption-provider-config: a restore cannot tell this snapshot from a crafted one)")
					return err
				}
				// The record of a stream goes to stderr, one line, for restore's --integrity-record-data (or,
				// decoded, a file for --integrity-record): no file is written beside a stream.
				rec, err := sealer.Record(ctx, digest.Digest())
				if err != nil {
					return err
				}
				_, err = fmt.Fprintf(cmd.ErrOrStderr(), "%s%s\n", IntegrityRecordPrefix, base64.StdEncoding.EncodeToString(rec))
				return err
			}
			info, err := snapshot.SaveSealed(ctx, src, args[0], sealer)
			if err != nil {
				return err
			}
			integrity := "integrity: none (no --encryption-provider-config: a restore cannot tell this snapshot from a crafted one)\n"
			if sealer != nil {
				integrity = "integrity: sealed in " + info.Path + snapshot.IntegritySuffix + "\n"
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "Saved %s in %s\n%s%s", info.Path, time.Since(start).Round(time.Millisecond), describe(info), integrity)
			return err
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&dataDir, "data-dir", "/var/lib/certapi", "The --data-dir of the running certapi whose embedded etcd to snapshot (through <data-dir>/etcd.sock).")
	fs.StringSliceVar(&servers, "etcd-servers", nil, "Client URL of an external etcd to snapshot instead of the embedded one. Give one member.")
	fs.StringVar(&caFile, "etcd-cafile", "", "CA bundle that verifies the external etcd's serving certificate.")
	fs.StringVar(&certFile, "etcd-certfile", "", "Client certificate for the external etcd.")
	fs.StringVar(&keyFile, "etcd-keyfile", "", "Client key for the external etcd.")
	fs.DurationVar(&timeout, "timeout", 5*time.Minute, "Give up when the snapshot has not been saved within this time (0: no limit).")
	fs.StringVar(&encryptionConfig, "encryption-provider-config", "", "The EncryptionConfiguration certapi runs with: write FILE"+snapshot.IntegritySuffix+
		", the snapshot's digest sealed with the key that encrypts certificateauthoritykeys.certapi.dev.")
	return cmd
}

func newSnapshotRestoreCommand() *cobra.Command {
	var o snapshot.RestoreOptions
	var bump uint64
	var encryptionConfig, recordData string
	cmd := &cobra.Command{
		Use:   "restore FILE --data-dir DIR",
		Short: "Restore a snapshot into the data directory of certapi's embedded etcd",
		Long: `Restore the snapshot FILE into DIR/etcd, the etcd data directory of a certapi that runs with --data-dir=DIR
and no --etcd-servers. Stop certapi first; start it afterwards with the same --data-dir and the same
--encryption-provider-config as when the snapshot was taken.

FILE "-" reads the snapshot from stdin (into a file in DIR first).

DIR/etcd must not hold data: restore refuses, and says so, rather than overwrite it. Move it aside first
(mv DIR/etcd DIR/etcd.old), or give --force to have it renamed to DIR/etcd.before-restore-<time>; restore
never deletes data. The restored directory has mode 0700. The snapshot is verified before anything is
changed.

The restored etcd's revision is moved forward by --bump-revision and marked compacted, so a client that
holds a resourceVersion from before the restore gets 410 Gone and lists again instead of waiting for
revisions that already passed.

The snapshot's leases are revoked (unless --keep-leases), and the keys bound to them deleted: the old
leader's election key and handoffs belong to processes that will not renew them, and would keep the
restored certapi from leading, signing and serving for a lease TTL (about 15 s).

--member-name and --peer-url are for a member of a multi-member embedded cluster (chart etcd.mode=cluster);
the defaults are those of the single embedded member. Such a restore needs --cluster-epoch, one more than
the cluster's current --etcd-cluster-epoch (chart value etcd.cluster.epoch; 1 for a cluster never restored):
start every member with that epoch, and members whose data is of an earlier one move it aside and join the
restored member instead of restarting the old cluster between them.

Before anything is changed, two checks can refuse the snapshot:

Integrity. With --encryption-provider-config (the EncryptionConfiguration certapi runs with; its KMS v2
plugins must answer), the snapshot's integrity record (FILE.integrity, --integrity-record, or for FILE "-"
--integrity-record-data, the line "snapshot save -" printed) must open with that key and match the snapshot:
a snapshot changed or replaced, a record made with another key, or no record at all is refused, unless
--accept-unverified-snapshot (for a snapshot taken with etcdctl, or taken before certapi wrote records). Without --encryption-provider-config no check is possible: the
restore goes on and says so.

Distrusted CAs. The leader records every CA a distrust removes from trust in distrusted-cas.json in its
snapshot directory. Restore reads that record from FILE's directory, from DIR/snapshots, and from each
--distrusted-cas (a copy you keep with your off-cluster backups), and refuses a snapshot whose CertificateAuthority
or CA record (any revision it keeps) holds one of those CAs, naming each and when it was distrusted:
restored, it would bring back a distrusted CA's private key. --allow-distrusted-cas restores it anyway.

` + snapshotLong,
		Example: `  certapi snapshot restore /var/lib/certapi/data/snapshots/certapi-20260101T000000Z.db --data-dir=/var/lib/certapi/data \
    --encryption-provider-config=/etc/certapi/encryption/encryption-config.yaml --distrusted-cas=backups/distrusted-cas.json`,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return fmt.Errorf("snapshot restore takes one argument, the snapshot file; got %d", len(args))
			}
			if !cmd.Flags().Changed("data-dir") {
				return errors.New("--data-dir is required: the directory certapi runs its embedded etcd in (the data goes to DIR/etcd)")
			}
			o.SnapshotPath = args[0]
			if recordData != "" {
				if o.IntegrityRecord != "" {
					return errors.New("give the integrity record as a file (--integrity-record) or as data (--integrity-record-data), not both")
				}
				data, err := base64.StdEncoding.DecodeString(strings.TrimSpace(recordData))
				if err != nil {
					return fmt.Errorf("--integrity-record-data: not base64 (give what snapshot save - prints after %q): %w", strings.TrimSpace(IntegrityRecordPrefix), err)
				}
				o.IntegrityRecordData = data
			}
			if encryptionConfig != "" {
				t, stop, err := snapshot.LoadTransformer(cmd.Context(), encryptionConfig)
				if err != nil {
					return err
				}
				defer stop()
				o.Transformer = t
			}
			o.Distrusted.Dirs = []string{filepath.Join(o.DataDir, "snapshots")}
			if o.SnapshotPath != "-" {
				o.Distrusted.Dirs = append([]string{filepath.Dir(o.SnapshotPath)}, o.Distrusted.Dirs...)
			}
			if o.SnapshotPath == "-" {
				o.FromStdin = true
				path, err := snapshot.ReadToDir(cmd.InOrStdin(), o.DataDir)
				if err != nil {
					return err
				}
				defer os.Remove(path)
				o.SnapshotPath = path
			}
			o.RevisionBump = bump
			member := cmd.Flags().Changed("member-name") || cmd.Flags().Changed("peer-url")
			if member && !cmd.Flags().Changed("cluster-epoch") {
				return errors.New("restoring a member of a cluster (--member-name, --peer-url) needs --cluster-epoch: one more than the cluster's " +
					"etcd.cluster.epoch (--etcd-cluster-epoch), so 1 for a cluster never restored; start every member with it afterwards")
			}
			if member && o.ClusterEpoch < 1 {
				return fmt.Errorf("--cluster-epoch %d: a cluster restore begins an epoch of 1 or more (one more than the cluster's current one)", o.ClusterEpoch)
			}
			start := time.Now()
			res, err := snapshot.Restore(cmd.Context(), o)
			if err != nil {
				return err
			}
			var b strings.Builder
			for _, n := range res.Notes {
				fmt.Fprintln(&b, n)
			}
			if res.MovedAside != "" {
				fmt.Fprintf(&b, "Moved the existing etcd data aside to %s\n", res.MovedAside)
			}
			fmt.Fprintf(&b, "Revoked the snapshot's %d leases (the old leader's election key, handoffs)\n", res.RevokedLeases)
			fmt.Fprintf(&b, "Restored %s into %s in %s\n%s", res.Snapshot.Path, res.EtcdDir, time.Since(start).Round(time.Millisecond), describe(res.Snapshot))
			if o.ClusterEpoch > 0 {
				fmt.Fprintf(&b, "Recorded cluster epoch %d. Start every member with --etcd-cluster-epoch=%d (helm: --set etcd.cluster.epoch=%d), "+
					"this one with --data-dir=%s, and the --encryption-provider-config certapi ran with when the snapshot was taken.\n",
					o.ClusterEpoch, o.ClusterEpoch, o.ClusterEpoch, o.DataDir)
			} else {
				fmt.Fprintf(&b, "Start certapi with --data-dir=%s and the --encryption-provider-config it ran with when the snapshot was taken.\n", o.DataDir)
			}
			_, err = fmt.Fprint(cmd.OutOrStdout(), b.String())
			return err
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.DataDir, "data-dir", "", "certapi's --data-dir to restore into (required); etcd's data goes to DIR/etcd.")
	fs.BoolVar(&o.Force, "force", false, "Rename an existing DIR/etcd to DIR/etcd.before-restore-<time> instead of refusing.")
	fs.Uint64Var(&bump, "bump-revision", snapshot.DefaultRevisionBump, "Move etcd's revision forward by this much and mark it compacted (0: keep the snapshot's revision).")
	fs.BoolVar(&o.KeepLeases, "keep-leases", false, "Keep the snapshot's leases. By default they are revoked: they belong to processes that will not renew them, and the old leader's election key would hold off the restored certapi's leadership for a lease TTL.")
	fs.StringVar(&o.MemberName, "member-name", snapshot.DefaultMemberName, "The etcd member's name.")
	fs.StringVar(&o.PeerURL, "peer-url", "", "The etcd member's peer URL (default: unix://DIR/etcd-peer.sock, the embedded member's).")
	fs.IntVar(&o.ClusterEpoch, "cluster-epoch", 0, "With --member-name: the cluster epoch the restored data begins, one more than the cluster's --etcd-cluster-epoch (required then).")
	addCheckFlags(fs, &encryptionConfig, &o.IntegrityRecord, &o.Distrusted.Files)
	fs.StringVar(&recordData, "integrity-record-data", "", "The snapshot's integrity record itself, base64-encoded, as \"snapshot save -\" prints it on stderr after \""+
		strings.TrimSpace(IntegrityRecordPrefix)+"\" (for a snapshot on stdin, with no record beside it). Instead of --integrity-record.")
	fs.BoolVar(&o.AcceptUnverified, "accept-unverified-snapshot", false, "Restore a snapshot whose integrity record is missing, does not open with --encryption-provider-config's key, or does not match it "+
		"(a snapshot taken with etcdctl, streamed to stdout, or before certapi wrote records).")
	fs.BoolVar(&o.AllowDistrusted, "allow-distrusted-cas", false, "Restore a snapshot that holds a CA a distrust removed from trust (and so its private key). Distrust again at once after.")
	return cmd
}

// addCheckFlags adds the flags restore and status share to check a snapshot.
func addCheckFlags(fs *pflag.FlagSet, encryptionConfig, record *string, distrusted *[]string) {
	fs.StringVar(encryptionConfig, "encryption-provider-config", "", "The EncryptionConfiguration certapi runs with: checks the snapshot's integrity record with "+
		"the key that encrypts certificateauthoritykeys.certapi.dev, and opens encrypted CA values. Without it no integrity check is possible.")
	fs.StringVar(record, "integrity-record", "", "The snapshot's integrity record (default: FILE"+snapshot.IntegritySuffix+").")
	fs.StringArrayVar(distrusted, "distrusted-cas", nil, "A record of distrusted CAs ("+snapshot.DistrustedFileName+", your off-cluster copy), read besides the one in FILE's directory "+
		"(and, for restore, in <data-dir>/snapshots). Repeatable.")
}

func newSnapshotStatusCommand() *cobra.Command {
	var encryptionConfig, record string
	var distrusted []string
	cmd := &cobra.Command{
		Use:   "status FILE",
		Short: "Verify a snapshot file and print its size, revision, key count, hash, integrity and CAs",
		Long: `Verify a snapshot file, as save and restore do (etcd's SHA-256 trailer and a full database check),
and print its size, revision, key count and hash. It does not need certapi or etcd to run.

With --encryption-provider-config it also checks the snapshot's integrity record (FILE.integrity, or
--integrity-record) as restore does, and fails unless it verifies. It lists the CA certificates the
snapshot holds, and marks those listed in a record of distrusted CAs (FILE's directory's
distrusted-cas.json, or --distrusted-cas): restore refuses such a snapshot.`,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return fmt.Errorf("snapshot status takes one argument, the snapshot file; got %d", len(args))
			}
			ctx := cmd.Context()
			info, err := snapshot.Verify(args[0])
			if err != nil {
				return err
			}
			var sealer *snapshot.Sealer
			var t value.Transformer
			if encryptionConfig != "" {
				var stop func()
				if t, stop, err = snapshot.LoadTransformer(ctx, encryptionConfig); err != nil {
					return err
				}
				defer stop()
				sealer = snapshot.NewSealer(t)
				if err := sealer.Probe(ctx); err != nil {
					return fmt.Errorf("--encryption-provider-config %s: %w", encryptionConfig, err)
				}
			}
			if record == "" {
				record = args[0] + snapshot.IntegritySuffix
			}
			in := sealer.CheckIntegrity(ctx, args[0], record)
			var b strings.Builder
			b.WriteString(describe(info))
			switch in.State {
			case snapshot.IntegrityVerified:
				fmt.Fprintf(&b, "integrity: verified (%s)\n", in.Record)
			case snapshot.IntegrityNoKey:
				b.WriteString("integrity: not checked (no --encryption-provider-config: give the one certapi runs with)\n")
			default:
				fmt.Fprintf(&b, "integrity: NOT VERIFIED: %s %s\n", in.Record, in.Detail)
			}
			cas, err := snapshot.ReadCAs(ctx, args[0], t)
			if err != nil {
				return err
			}
			known, _, err := snapshot.DistrustedSources{Files: distrusted, Dirs: []string{filepath.Dir(args[0])}}.Load()
			if err != nil {
				return err
			}
			for _, ca := range cas.CAs {
				mark := ""
				for _, d := range known {
					if d.Same(ca.DistrustedCA) {
						mark = fmt.Sprintf(" DISTRUSTED by %q at %s", d.Distrust, d.DistrustedAt.UTC().Format(time.RFC3339))
						break
					}
				}
				fmt.Fprintf(&b, "ca: serial %s, subject key ID %s, SHA-256 %s (%s)%s\n", ca.SerialNumber, ca.SubjectKeyID, ca.SHA256Fingerprint, ca.In, mark)
			}
			for _, u := range cas.Unread {
				fmt.Fprintf(&b, "ca: unread: %s\n", u)
			}
			if _, err := fmt.Fprint(cmd.OutOrStdout(), b.String()); err != nil {
				return err
			}
			if in.State != snapshot.IntegrityVerified && in.State != snapshot.IntegrityNoKey {
				return fmt.Errorf("the snapshot's integrity record does not verify: %s", in.Detail)
			}
			return nil
		},
	}
	fs := cmd.Flags()
	addCheckFlags(fs, &encryptionConfig, &record, &distrusted)
	return cmd
}

func describe(i snapshot.Info) string {
	return fmt.Sprintf("size: %d bytes\nrevision: %d\nkeys: %d\nhash: %08x\n", i.Size, i.Revision, i.Keys, i.Hash)
}
