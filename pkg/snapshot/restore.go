package snapshot

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	etcdutl "go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"
	"k8s.io/apiserver/pkg/storage/value"

	"github.com/certapi/certapi/pkg/etcdcluster"
)

// RestoreOptions says what to restore where. Only SnapshotPath and DataDir are required: the defaults give
// the one-member embedded etcd of certapi's --data-dir. A member of a multi-member cluster is restored by
// giving its own MemberName and PeerURL (the others then join it as new members).
type RestoreOptions struct {
	// SnapshotPath is the snapshot file.
	SnapshotPath string
	// DataDir is certapi's --data-dir; etcd's data goes to DataDir/etcd.
	DataDir string
	// MemberName is the etcd member's name; default DefaultMemberName.
	MemberName string
	// PeerURL is the member's advertised peer URL; default the embedded etcd's peer socket in DataDir.
	PeerURL string
	// ClusterToken is the initial cluster token; default DefaultClusterToken.
	ClusterToken string
	// RevisionBump moves the revision forward and marks it compacted (0: not at all). See DefaultRevisionBump.
	RevisionBump uint64
	// ClusterEpoch, above 0, is recorded in the restored directory as the epoch its data begins
	// (etcdcluster.EpochFileName): the members of a cluster restored into one member start with it, and
	// those with older data move it aside instead of restarting the old cluster.
	ClusterEpoch int
	// Force moves an existing DataDir/etcd aside (renamed, never deleted) instead of refusing.
	Force bool
	// KeepLeases keeps the snapshot's leases (and so the keys bound to them: the old leader's election key,
	// handoffs) instead of revoking them; see revokeLeases.
	KeepLeases bool
	// Now gives the time in the moved-aside directory's name; default time.Now.
	Now func() time.Time

	// Transformer is the CA keys' transformer of the EncryptionConfiguration certapi runs with
	// (LoadTransformer); nil when none was given. With it the snapshot's integrity record is checked and
	// encrypted CA values are read; without it neither is possible, and the restore says so.
	Transformer value.Transformer
	// IntegrityRecord is the snapshot's integrity record; default SnapshotPath+IntegritySuffix.
	IntegrityRecord string
	// IntegrityRecordData is the integrity record's content, given on the command line for a snapshot that
	// came on stdin (what `snapshot save -` prints); it replaces IntegrityRecord.
	IntegrityRecordData []byte
	// FromStdin says the snapshot came on stdin (SnapshotPath is a copy): no record lies beside it.
	FromStdin bool
	// AcceptUnverified restores a snapshot whose integrity record is missing, malformed, made with another
	// key or does not match (decideIntegrity).
	AcceptUnverified bool
	// Distrusted are the records of distrusted CAs to check the snapshot's CAs against.
	Distrusted DistrustedSources
	// AllowDistrusted restores a snapshot that holds a distrusted CA (decideDistrusted).
	AllowDistrusted bool
}

// RestoreResult reports a restore.
type RestoreResult struct {
	// Snapshot describes the snapshot restored.
	Snapshot Info
	// EtcdDir is the new etcd data directory.
	EtcdDir string
	// MovedAside is where an existing etcd data directory was moved with Force; empty otherwise.
	MovedAside string
	// RevokedLeases is the number of the snapshot's leases revoked.
	RevokedLeases int
	// Notes are what the integrity and distrusted-CA checks found, for the operator (warnings among them).
	Notes []string
}

// Restore makes a new etcd data directory at DataDir/etcd from a snapshot, with mode 0700, through a
// temporary directory beside it renamed into place. It refuses while an etcd answers on the embedded socket
// in DataDir, or holds etcd's locks on the files of DataDir/etcd (lockedBy: certapi, or a member of its
// etcd cluster, still running, however it listens), Force or not, and refuses a non-empty DataDir/etcd
// unless Force. Before any of that, Check may refuse the snapshot (its integrity record, the distrusted CAs
// it holds), and then nothing is changed. Unless KeepLeases, it revokes the snapshot's leases before the
// directory is moved into place.
func Restore(ctx context.Context, o RestoreOptions) (RestoreResult, error) {
	if o.SnapshotPath == "" {
		return RestoreResult{}, errors.New("no snapshot file given: certapi snapshot restore FILE --data-dir DIR")
	}
	if o.ClusterEpoch < 0 {
		return RestoreResult{}, fmt.Errorf("--cluster-epoch %d: expected 1 or more (one more than the cluster's current epoch)", o.ClusterEpoch)
	}
	if o.DataDir == "" {
		return RestoreResult{}, errors.New("no --data-dir given: the directory certapi will run its embedded etcd in (its etcd data goes to DIR/etcd)")
	}
	info, err := Verify(o.SnapshotPath)
	if err != nil {
		return RestoreResult{}, err
	}
	// Before anything is changed: a refused snapshot leaves nothing behind.
	notes, err := Check(ctx, o)
	if err != nil {
		return RestoreResult{}, err
	}
	dir, err := filepath.Abs(o.DataDir)
	if err != nil {
		return RestoreResult{}, fmt.Errorf("resolving --data-dir %q: %w", o.DataDir, err)
	}
	if o.MemberName == "" {
		o.MemberName = DefaultMemberName
	}
	if o.PeerURL == "" {
		peerSock := filepath.Join(dir, PeerSocketName)
		if len(peerSock) > etcdcluster.MaxSocketPath {
			return RestoreResult{}, fmt.Errorf("--data-dir %q is too long: the embedded etcd's sockets live in it and a socket path may have at most %d characters; choose a shorter path", dir, etcdcluster.MaxSocketPath)
		}
		o.PeerURL = "unix://" + peerSock
	}
	if o.ClusterToken == "" {
		o.ClusterToken = DefaultClusterToken
	}
	if o.Now == nil {
		o.Now = time.Now
	}

	if fi, err := os.Stat(dir); err == nil && !fi.IsDir() {
		return RestoreResult{}, fmt.Errorf("--data-dir %s is not a directory", dir)
	}
	// The socket says at once that the single embedded member runs; the locks of etcd's own files say it of
	// any etcd on the data, however it listens (a member of certapi's cluster on TCP), and with or without
	// Force: moving aside the data of a running etcd would leave it writing to files nobody restores.
	if running(filepath.Join(dir, ClientSocketName)) {
		return RestoreResult{}, fmt.Errorf("an etcd answers on %s: stop the certapi that runs with --data-dir=%s before restoring into it",
			filepath.Join(dir, ClientSocketName), o.DataDir)
	}
	locked, err := lockedBy(filepath.Join(dir, EtcdDirName))
	if err != nil {
		return RestoreResult{}, fmt.Errorf("%w; restore refuses when it cannot tell that no etcd uses the data", err)
	}
	if locked != "" {
		var member string
		if lc, err := etcdcluster.FindLocalClient(dir); err == nil {
			member = lc.URL
		}
		return RestoreResult{}, inUseError(o.DataDir, locked, member)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return RestoreResult{}, fmt.Errorf("creating --data-dir %s: %w", dir, err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return RestoreResult{}, fmt.Errorf("restricting --data-dir %s to its owner: %w", dir, err)
	}

	target := filepath.Join(dir, EtcdDirName)
	res := RestoreResult{Snapshot: info, EtcdDir: target, Notes: notes}
	state, err := targetStateOf(target)
	if err != nil {
		return RestoreResult{}, err
	}
	switch decideTarget(state, o.Force) {
	case targetRefuse:
		return RestoreResult{}, fmt.Errorf("%s already holds etcd data: restore will not overwrite it. Stop certapi and move it aside "+
			"(mv %s %s.old), or give --force to have it renamed to %s.before-restore-<time>", target, target, target, target)
	case targetNotDir:
		return RestoreResult{}, fmt.Errorf("%s exists and is not a directory: move it away before restoring", target)
	case targetRemoveEmpty:
		if err := os.Remove(target); err != nil {
			return RestoreResult{}, fmt.Errorf("removing the empty %s: %w", target, err)
		}
	case targetMoveAside:
		aside := target + ".before-restore-" + o.Now().UTC().Format("20060102T150405Z")
		if err := os.Rename(target, aside); err != nil {
			return RestoreResult{}, fmt.Errorf("moving the existing %s aside to %s: %w", target, aside, err)
		}
		res.MovedAside = aside
	case targetCreate:
	}

	tmp, err := os.MkdirTemp(dir, ".etcd-restore-*")
	if err != nil {
		return RestoreResult{}, fmt.Errorf("creating a temporary directory in %s: %w", dir, err)
	}
	done := false
	defer func() {
		if !done {
			_ = os.RemoveAll(tmp)
		}
	}()
	err = etcdutl.NewV3(zap.NewNop()).Restore(etcdutl.RestoreConfig{
		SnapshotPath:        o.SnapshotPath,
		Name:                o.MemberName,
		OutputDataDir:       tmp,
		PeerURLs:            []string{o.PeerURL},
		InitialCluster:      o.MemberName + "=" + o.PeerURL,
		InitialClusterToken: o.ClusterToken,
		RevisionBump:        o.RevisionBump,
		MarkCompacted:       o.RevisionBump > 0,
	})
	if err != nil {
		return RestoreResult{}, fmt.Errorf("restoring %s: %w", o.SnapshotPath, err)
	}
	if !o.KeepLeases {
		if res.RevokedLeases, err = revokeLeases(ctx, tmp, o.MemberName); err != nil {
			return RestoreResult{}, err
		}
	}
	if o.ClusterEpoch > 0 {
		if err := etcdcluster.WriteEpoch(tmp, o.ClusterEpoch); err != nil {
			return RestoreResult{}, err
		}
	}
	if err := os.Chmod(tmp, 0o700); err != nil {
		return RestoreResult{}, fmt.Errorf("restricting %s to its owner: %w", tmp, err)
	}
	if err := os.Rename(tmp, target); err != nil {
		return RestoreResult{}, fmt.Errorf("moving the restored data into place at %s: %w", target, err)
	}
	done = true
	if err := syncDir(dir); err != nil {
		return RestoreResult{}, err
	}
	return res, nil
}

// Check runs a restore's checks of the snapshot o.SnapshotPath, which must have verified: its integrity
// record (decideIntegrity) and the CAs it holds against the records of distrusted CAs (decideDistrusted).
// It returns what they found for the operator, or an error that says why the restore is refused.
func Check(ctx context.Context, o RestoreOptions) ([]string, error) {
	var sealer *Sealer
	if o.Transformer != nil {
		sealer = NewSealer(o.Transformer)
		if err := sealer.Probe(ctx); err != nil {
			return nil, fmt.Errorf("--encryption-provider-config: %w", err)
		}
	}
	var in Integrity
	switch {
	case len(o.IntegrityRecordData) > 0:
		in = sealer.CheckIntegrityData(ctx, o.SnapshotPath, o.IntegrityRecordData, "--integrity-record-data")
	case sealer != nil && o.IntegrityRecord == "" && o.FromStdin:
		in = Integrity{State: IntegrityMissing, Record: "(none: the snapshot came on stdin; give --integrity-record-data, which snapshot save - prints, or --integrity-record=FILE)"}
	default:
		record := o.IntegrityRecord
		if record == "" {
			record = o.SnapshotPath + IntegritySuffix
		}
		in = sealer.CheckIntegrity(ctx, o.SnapshotPath, record)
	}
	iv := decideIntegrity(in, o.AcceptUnverified)
	if iv.Refuse {
		return nil, errors.New(iv.Message)
	}
	distrusted, sources, err := o.Distrusted.Load()
	if err != nil {
		return nil, err
	}
	var held SnapshotCAs
	if len(distrusted) > 0 {
		if held, err = ReadCAs(ctx, o.SnapshotPath, o.Transformer); err != nil {
			return nil, err
		}
	}
	dv := decideDistrusted(held, distrusted, sources, o.AllowDistrusted)
	if dv.Refuse {
		return nil, errors.New(dv.Message)
	}
	return []string{iv.Message, dv.Message}, nil
}

// running reports whether something accepts connections on the Unix socket sock.
func running(sock string) bool {
	c, err := net.DialTimeout("unix", sock, time.Second)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}

// targetState is what the restore target DataDir/etcd is now.
type targetState int

const (
	targetAbsent targetState = iota
	targetEmptyDir
	targetNonEmptyDir
	targetFile
)

func targetStateOf(path string) (targetState, error) {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return targetAbsent, nil
	}
	if err != nil {
		return 0, fmt.Errorf("reading %s: %w", path, err)
	}
	if !fi.IsDir() {
		return targetFile, nil
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return 0, fmt.Errorf("reading %s: %w", path, err)
	}
	if len(entries) == 0 {
		return targetEmptyDir, nil
	}
	return targetNonEmptyDir, nil
}

// targetAction is what Restore does with the target before restoring.
type targetAction int

const (
	targetCreate targetAction = iota
	targetRemoveEmpty
	targetMoveAside
	targetRefuse
	targetNotDir
)

// decideTarget: restore never deletes data. An empty directory is replaced; etcd data is moved aside only
// when forced; anything that is not a directory is left for a person to look at.
func decideTarget(s targetState, force bool) targetAction {
	switch s {
	case targetAbsent:
		return targetCreate
	case targetEmptyDir:
		return targetRemoveEmpty
	case targetNonEmptyDir:
		if force {
			return targetMoveAside
		}
		return targetRefuse
	default:
		return targetNotDir
	}
}
