// Package snapshot saves and restores etcd snapshots of certapi's store: its objects and its CA keys, as etcd
// holds them. It reaches etcd through the embedded etcd's Unix socket or through --etcd-servers, and restores
// into the data directory layout of certapi's embedded etcd (<data-dir>/etcd), so that certapi starts from it.
//
// A snapshot holds the CA private keys exactly as they are stored: encrypted with the key of certapi's
// --encryption-provider-config when one is given, and in the clear otherwise. That key is not in the snapshot:
// keep it, and the snapshot, separately.
package snapshot

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	etcdutl "go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"

	"github.com/certapi/certapi/pkg/etcdcluster"
)

// Layout of certapi's embedded etcd inside --data-dir (see pkg/apiserver's StartEmbeddedEtcd).
const (
	// EtcdDirName is the etcd data directory inside --data-dir.
	EtcdDirName = "etcd"
	// ClientSocketName is the embedded etcd's client socket inside --data-dir.
	ClientSocketName = "etcd.sock"
	// PeerSocketName is the embedded etcd's peer socket inside --data-dir.
	PeerSocketName = "etcd-peer.sock"
	// DefaultMemberName is the embedded single member's name.
	DefaultMemberName = "certapi"
	// DefaultClusterToken is the initial cluster token the embedded etcd uses (etcd's default).
	DefaultClusterToken = "etcd-cluster"
	// DefaultRevisionBump is how far a restore moves etcd's revision forward (and marks it compacted), so
	// that no client holding a resourceVersion from before the restore mistakes newer data for older: its
	// watch gets 410 Gone and it lists again. Kubernetes' own etcd restore procedure uses the same figure.
	DefaultRevisionBump = 1_000_000_000
)

// Source says how to reach the etcd to snapshot.
type Source struct {
	// Endpoints are etcd client URLs; the snapshot is taken from the first one that answers. A snapshot is
	// one member's point-in-time state, so give one member where several run.
	Endpoints []string
	// CAFile, CertFile and KeyFile are the TLS files of --etcd-cafile, --etcd-certfile and --etcd-keyfile.
	CAFile, CertFile, KeyFile string
	// DialTimeout bounds connecting; 0 means 10 s.
	DialTimeout time.Duration
}

// EmbeddedSource returns the Source of the embedded etcd of a certapi running with dataDir: the single
// member's Unix socket, or, for a member of certapi's own cluster, the client URL it answers on its own
// host with its own TLS files (etcdcluster.FindLocalClient).
func EmbeddedSource(dataDir string) (Source, error) {
	dir, err := filepath.Abs(dataDir)
	if err != nil {
		return Source{}, fmt.Errorf("resolving --data-dir %q: %w", dataDir, err)
	}
	sock := filepath.Join(dir, ClientSocketName)
	fi, err := os.Stat(sock)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			lc, lerr := etcdcluster.FindLocalClient(dir)
			if lerr == nil {
				return Source{Endpoints: []string{lc.URL}, CertFile: lc.CertFile, KeyFile: lc.KeyFile, CAFile: lc.CAFile}, nil
			}
			if !errors.Is(lerr, os.ErrNotExist) {
				return Source{}, fmt.Errorf("--data-dir %s is a member of certapi's etcd cluster, but: %w", dataDir, lerr)
			}
			return Source{}, fmt.Errorf("no embedded etcd socket at %s, nor a member of certapi's etcd cluster: is certapi running with --data-dir=%s? "+
				"(for an external etcd give --etcd-servers instead)", sock, dataDir)
		}
		return Source{}, fmt.Errorf("reading the embedded etcd socket %s: %w", sock, err)
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return Source{}, fmt.Errorf("%s is not a socket: --data-dir must be the directory certapi runs its embedded etcd in", sock)
	}
	return Source{Endpoints: []string{"unix://" + sock}}, nil
}

// Info describes a snapshot file.
type Info struct {
	// Path is the snapshot file.
	Path string
	// Size is the file's size in bytes.
	Size int64
	// Revision is etcd's revision at the snapshot.
	Revision int64
	// Keys is the number of keys in the snapshot.
	Keys int
	// Hash is etcd's CRC-32C of the snapshot's buckets (as `etcdutl snapshot status` prints it).
	Hash uint32
	// Version is the storage version of the etcd that took it; empty for etcd before 3.6.
	Version string
}

// Save streams a snapshot from src into path; see SaveFrom.
func Save(ctx context.Context, src Source, path string) (Info, error) {
	return SaveSealed(ctx, src, path, nil)
}

// SaveSealed is Save, and with a sealer it writes the snapshot's integrity record to path+IntegritySuffix
// before the snapshot is moved into place; see SaveFromSealed.
func SaveSealed(ctx context.Context, src Source, path string, sealer *Sealer) (Info, error) {
	if err := checkTarget(path, sealer != nil); err != nil {
		return Info{}, err
	}
	client, err := Connect(ctx, src)
	if err != nil {
		return Info{}, err
	}
	defer client.Close()
	return SaveFromSealed(ctx, client, path, sealer)
}

// Connect returns a client of src's etcd once its first endpoint answers. The caller closes it.
func Connect(ctx context.Context, src Source) (*clientv3.Client, error) {
	if len(src.Endpoints) == 0 {
		return nil, errors.New("no etcd to snapshot: give --data-dir of a running certapi with the embedded etcd, or --etcd-servers")
	}
	cfg := clientv3.Config{Endpoints: src.Endpoints, DialTimeout: src.DialTimeout, Logger: zap.NewNop()}
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = 10 * time.Second
	}
	if src.CAFile != "" || src.CertFile != "" || src.KeyFile != "" {
		tlsInfo := transport.TLSInfo{CertFile: src.CertFile, KeyFile: src.KeyFile, TrustedCAFile: src.CAFile}
		tc, err := tlsInfo.ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("loading the etcd client TLS files (--etcd-cafile, --etcd-certfile, --etcd-keyfile): %w", err)
		}
		cfg.TLS = tc
	}
	client, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("connecting to etcd %v: %w", src.Endpoints, err)
	}
	// Fail fast and clearly when etcd does not answer, rather than inside the stream.
	statusCtx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
	_, err = client.Status(statusCtx, src.Endpoints[0])
	cancel()
	if err != nil {
		_ = client.Close()
		return nil, fmt.Errorf("etcd at %s does not answer: %w", src.Endpoints[0], err)
	}
	return client, nil
}

// checkTarget refuses a snapshot path whose directory is missing or that exists already, and with sealed an
// integrity record that exists already.
func checkTarget(path string, sealed bool) error {
	if path == "" {
		return errors.New("no snapshot file given: certapi snapshot save FILE")
	}
	dir := filepath.Dir(path)
	if fi, err := os.Stat(dir); err != nil {
		return fmt.Errorf("the snapshot's directory %s: %w", dir, err)
	} else if !fi.IsDir() {
		return fmt.Errorf("the snapshot's directory %s is not a directory", dir)
	}
	if _, err := os.Lstat(path); err == nil {
		return fmt.Errorf("%s exists: snapshot save does not overwrite; give a new file name or move the old one aside", path)
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("checking %s: %w", path, err)
	}
	if sealed {
		if _, err := os.Lstat(path + IntegritySuffix); err == nil {
			return fmt.Errorf("%s exists: snapshot save does not overwrite an integrity record; give a new file name or move the old one aside", path+IntegritySuffix)
		}
	}
	return nil
}

// SaveFrom streams a snapshot through client (etcd's Maintenance.Snapshot, from the first of the client's
// endpoints that shows it holds every acknowledged write; see memberSnapshot) into path: to a temporary file in path's directory first, synced and verified (etcd's SHA-256
// trailer and a full bbolt check), then renamed into place, so path is either a complete snapshot or
// absent. It refuses to overwrite an existing file. The file's mode is 0600.
func SaveFrom(ctx context.Context, client *clientv3.Client, path string) (Info, error) {
	return SaveFromSealed(ctx, client, path, nil)
}

// SaveFromSealed is SaveFrom, and with a sealer (certapi runs with an --encryption-provider-config that
// encrypts its CA keys) it writes the snapshot's integrity record to path+IntegritySuffix once the snapshot
// verifies and before it is moved into place: a snapshot saved this way never appears without its record.
func SaveFromSealed(ctx context.Context, client *clientv3.Client, path string, sealer *Sealer) (Info, error) {
	if err := checkTarget(path, sealer != nil); err != nil {
		return Info{}, err
	}
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".part-*")
	if err != nil {
		return Info{}, fmt.Errorf("creating a temporary file beside %s: %w", path, err)
	}
	tmpPath := tmp.Name()
	done := false
	defer func() {
		if !done {
			_ = tmp.Close()
			_ = os.Remove(tmpPath)
		}
	}()
	if err := tmp.Chmod(0o600); err != nil {
		return Info{}, fmt.Errorf("restricting %s to its owner: %w", tmpPath, err)
	}
	rc, err := memberSnapshot(ctx, client)
	if err != nil {
		return Info{}, err
	}
	_, err = io.Copy(tmp, rc)
	_ = rc.Close()
	if err != nil {
		return Info{}, fmt.Errorf("receiving the snapshot from etcd: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		return Info{}, fmt.Errorf("syncing %s: %w", tmpPath, err)
	}
	if err := tmp.Close(); err != nil {
		return Info{}, fmt.Errorf("closing %s: %w", tmpPath, err)
	}
	info, err := Verify(tmpPath)
	if err != nil {
		return Info{}, fmt.Errorf("the snapshot received from etcd does not verify: %w", err)
	}
	if sealer != nil {
		if err := sealer.Seal(ctx, tmpPath, path+IntegritySuffix); err != nil {
			return Info{}, fmt.Errorf("writing the snapshot's integrity record: %w", err)
		}
	}
	if err := os.Rename(tmpPath, path); err != nil {
		if sealer != nil {
			_ = os.Remove(path + IntegritySuffix)
		}
		return Info{}, fmt.Errorf("moving the snapshot into place at %s: %w", path, err)
	}
	done = true
	if err := syncDir(dir); err != nil {
		return Info{}, err
	}
	info.Path = path
	return info, nil
}

// Verify checks a snapshot file: etcd's SHA-256 trailer matches its content and bbolt finds the database
// consistent. It returns what `etcdutl snapshot status` reports.
func Verify(path string) (Info, error) {
	fi, err := os.Stat(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return Info{}, fmt.Errorf("snapshot file %s does not exist", path)
		}
		return Info{}, fmt.Errorf("reading snapshot file %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return Info{}, fmt.Errorf("%s is not a regular file: give the file `certapi snapshot save` wrote", path)
	}
	if err := checkTrailer(path, fi.Size()); err != nil {
		return Info{}, err
	}
	st, err := statusOf(path)
	if err != nil {
		return Info{}, fmt.Errorf("%s is not a valid etcd snapshot: %w", path, err)
	}
	return Info{Path: path, Size: fi.Size(), Revision: st.Revision, Keys: st.TotalKey, Hash: st.Hash, Version: st.Version}, nil
}

// statusOf runs etcdutl's snapshot status, which opens the file with bbolt; bbolt panics on some garbage
// rather than returning an error, so a panic is an error here.
func statusOf(path string) (st etcdutl.Status, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("the database does not open: %v", r)
		}
	}()
	return etcdutl.NewV3(zap.NewNop()).Status(path)
}

// checkTrailer verifies the SHA-256 that etcd appends to a snapshot it streams (a file's size is then
// 32 more than a multiple of 512): a truncated or altered file fails here.
func checkTrailer(path string, size int64) error {
	if size%512 != sha256.Size {
		return fmt.Errorf("%s is not a complete etcd snapshot: its size (%d bytes) does not end in etcd's SHA-256 trailer "+
			"(truncated, or not a file `certapi snapshot save` or `etcdctl snapshot save` wrote)", path, size)
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("opening snapshot file %s: %w", path, err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.CopyN(h, f, size-sha256.Size); err != nil {
		return fmt.Errorf("reading snapshot file %s: %w", path, err)
	}
	want := make([]byte, sha256.Size)
	if _, err := io.ReadFull(f, want); err != nil {
		return fmt.Errorf("reading snapshot file %s: %w", path, err)
	}
	if !bytes.Equal(h.Sum(nil), want) {
		return fmt.Errorf("%s is corrupt: its content does not match etcd's SHA-256 trailer", path)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("opening %s to sync it: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("syncing directory %s: %w", dir, err)
	}
	return nil
}
