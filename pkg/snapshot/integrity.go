package snapshot

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/server/options/encryptionconfig"
	"k8s.io/apiserver/pkg/storage/value"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
)

// IntegritySuffix names a snapshot's integrity record: FILE.integrity beside FILE.
const IntegritySuffix = ".integrity"

// CAKeysResource is the resource whose transformer seals integrity records: the one that encrypts the CA
// keys (issuer.CAKeysResource in group certapi.dev), so whoever can make a valid record could read the CA
// keys anyway.
var CAKeysResource = schema.GroupResource{Group: certapiv1alpha1.GroupName, Resource: "certificateauthoritykeys"}

// integrityContext is the authenticated data every integrity record is sealed with: providers that
// authenticate it (aesgcm, KMS v2) refuse a CA record's ciphertext presented as an integrity record.
const integrityContext = "certapi.dev/snapshot-integrity"

// The sealed plaintext is 64 bytes, four AES blocks, each one checked:
//
//	[0:16)  sealedMagic
//	[16:24) the snapshot's size in bytes, big-endian
//	[24:32) sealedDigestName
//	[32:64) the snapshot's SHA-256
//
// aescbc is not authenticated: flipping bits of its IV changes block 0 at will, and changing any ciphertext
// block changes the plaintext block after it at will but turns its own into random bytes nobody without
// the key can predict. As every block is checked (a fixed header, the size, a fixed name, the digest), any
// change garbles at least one checked block, and a forged digest would have to match a block of random
// bytes: the check fails except with probability 2^-128. A record cut short fails its padding or the length.
const (
	sealedMagic      = "certapi-snapshot"
	sealedDigestName = "sha256\x00\x00"
	sealedLen        = 64
)

// integrityFile is the record's JSON. Size and SHA256 are there for people; only Sealed is trusted.
type integrityFile struct {
	Kind   string `json:"kind"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	Sealed string `json:"sealed"`
}

const integrityKind = "CertapiSnapshotIntegrity"

// Sealer makes and checks snapshot integrity records with the transformer that encrypts certapi's CA keys
// (TransformToStorage of the snapshot's size and SHA-256 under a fixed header), so that nobody without
// the encryption configuration's key (or the KMS plugin's) can make one that verifies.
type Sealer struct {
	t value.Transformer
}

// NewSealer returns a Sealer over t, which must encrypt (see Probe): a transformer that stores in the clear
// (identity first, or a configuration that does not list the CA keys' resource) cannot make a record only
// the key holder can make, and Record refuses what it writes.
func NewSealer(t value.Transformer) *Sealer { return &Sealer{t: t} }

// Probe seals a probe value and says whether t encrypts it: a clear error for a configuration that cannot
// make or check integrity records, or a KMS plugin that does not answer.
func (s *Sealer) Probe(ctx context.Context) error {
	if s.t == nil {
		return errors.New("no transformer: snapshot integrity records need an --encryption-provider-config that encrypts " + CAKeysResource.String())
	}
	probe, err := s.t.TransformToStorage(ctx, []byte("probe"), value.DefaultContext(integrityContext))
	if err != nil {
		return fmt.Errorf("sealing with the encryption configuration of %s failed (is its KMS plugin up?): %w", CAKeysResource, err)
	}
	if !bytes.HasPrefix(probe, encryptedPrefix) {
		return fmt.Errorf("the encryption configuration stores %s unencrypted (not listed, or identity first): it cannot seal or check a snapshot's integrity record", CAKeysResource)
	}
	return nil
}

// LoadTransformer loads an EncryptionConfiguration file (the one of certapi's --encryption-provider-config)
// and returns the transformer of the CA keys' resource, with a stop function that ends what loading
// started (a KMS v2 plugin's health checks). KMS v2 plugins must answer on their sockets.
func LoadTransformer(ctx context.Context, file string) (value.Transformer, func(), error) {
	ctx, cancel := context.WithCancel(ctx)
	cfg, err := encryptionconfig.LoadEncryptionConfig(ctx, file, false, "certapi-snapshot")
	if err != nil {
		cancel()
		return nil, nil, fmt.Errorf("loading --encryption-provider-config %s: %w", file, err)
	}
	t, ok := cfg.Transformers[CAKeysResource]
	if !ok {
		cancel()
		return nil, nil, fmt.Errorf("--encryption-provider-config %s does not list %s: it is not the configuration certapi encrypts its CA keys with", file, CAKeysResource)
	}
	return t, cancel, nil
}

// Digest is a file's size and SHA-256.
type Digest struct {
	Size   int64
	SHA256 [sha256.Size]byte
}

// DigestOf reads path and returns its Digest.
func DigestOf(path string) (Digest, error) {
	f, err := os.Open(path)
	if err != nil {
		return Digest{}, fmt.Errorf("opening %s: %w", path, err)
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return Digest{}, fmt.Errorf("reading %s: %w", path, err)
	}
	var d Digest
	d.Size = n
	copy(d.SHA256[:], h.Sum(nil))
	return d, nil
}

// sealedPlaintext lays d out as the sealed plaintext (see sealedLen).
func sealedPlaintext(d Digest) []byte {
	b := make([]byte, 0, sealedLen)
	b = append(b, sealedMagic...)
	b = binary.BigEndian.AppendUint64(b, uint64(d.Size))
	b = append(b, sealedDigestName...)
	return append(b, d.SHA256[:]...)
}

// parseSealedPlaintext checks every block of an opened record and returns the Digest it holds.
func parseSealedPlaintext(b []byte) (Digest, error) {
	if len(b) != sealedLen || string(b[:16]) != sealedMagic || string(b[24:32]) != sealedDigestName {
		return Digest{}, errors.New("it opens, but not to a snapshot integrity record: altered")
	}
	var d Digest
	d.Size = int64(binary.BigEndian.Uint64(b[16:24]))
	copy(d.SHA256[:], b[32:])
	return d, nil
}

// DigestWriter is an io.Writer that keeps the Digest of what is written through it: the integrity record
// of a snapshot streamed to stdout is made from it.
type DigestWriter struct {
	h    hash.Hash
	size int64
}

// NewDigestWriter returns an empty DigestWriter.
func NewDigestWriter() *DigestWriter { return &DigestWriter{h: sha256.New()} }

// Write hashes p.
func (w *DigestWriter) Write(p []byte) (int, error) {
	w.size += int64(len(p))
	return w.h.Write(p)
}

// Digest is the Digest of everything written so far.
func (w *DigestWriter) Digest() Digest {
	d := Digest{Size: w.size}
	copy(d.SHA256[:], w.h.Sum(nil))
	return d
}

// Record returns the integrity record of a snapshot with Digest d.
func (s *Sealer) Record(ctx context.Context, d Digest) ([]byte, error) {
	sealed, err := s.t.TransformToStorage(ctx, sealedPlaintext(d), value.DefaultContext(integrityContext))
	if err != nil {
		return nil, fmt.Errorf("sealing the snapshot's digest: %w", err)
	}
	if !bytes.HasPrefix(sealed, encryptedPrefix) {
		return nil, errors.New("the encryption configuration wrote the snapshot's digest unencrypted: it cannot seal an integrity record")
	}
	data, err := json.MarshalIndent(integrityFile{Kind: integrityKind, Size: d.Size, SHA256: hex.EncodeToString(d.SHA256[:]),
		Sealed: base64.StdEncoding.EncodeToString(sealed)}, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(data, '\n'), nil
}

// Seal writes the integrity record of the snapshot at snapshotPath to recordPath (mode 0600, through a
// temporary file renamed into place). It refuses to overwrite an existing record.
func (s *Sealer) Seal(ctx context.Context, snapshotPath, recordPath string) error {
	if _, err := os.Lstat(recordPath); err == nil {
		return fmt.Errorf("%s exists: an integrity record is never overwritten; move it aside", recordPath)
	}
	d, err := DigestOf(snapshotPath)
	if err != nil {
		return err
	}
	rec, err := s.Record(ctx, d)
	if err != nil {
		return err
	}
	return writeFileAtomic(recordPath, rec)
}

// IntegrityState is what checking a snapshot against its integrity record found.
type IntegrityState int

const (
	// IntegrityVerified: the record opens with the key and holds the snapshot's size and SHA-256.
	IntegrityVerified IntegrityState = iota
	// IntegrityNoKey: no encryption configuration was given, so no record can be checked.
	IntegrityNoKey
	// IntegrityMissing: the snapshot has no integrity record (plain etcdctl, a version before records,
	// a snapshot streamed to stdout, or a record removed).
	IntegrityMissing
	// IntegrityMalformed: the record is not one certapi writes.
	IntegrityMalformed
	// IntegrityUnopened: the record does not open with the key: made with another key, or altered.
	IntegrityUnopened
	// IntegrityMismatch: the record opens but names another snapshot: the snapshot was changed or replaced.
	IntegrityMismatch
)

// Integrity is the outcome of checking a snapshot's integrity record.
type Integrity struct {
	State IntegrityState
	// Record is the record's path.
	Record string
	// Detail says what was wrong; empty when verified.
	Detail string
}

// CheckIntegrity checks the snapshot at snapshotPath against the record at recordPath, with s (nil: no
// encryption configuration, IntegrityNoKey).
func (s *Sealer) CheckIntegrity(ctx context.Context, snapshotPath, recordPath string) Integrity {
	if s == nil {
		return Integrity{State: IntegrityNoKey, Record: recordPath}
	}
	data, err := os.ReadFile(recordPath)
	if err != nil {
		out := Integrity{State: IntegrityMissing, Record: recordPath, Detail: err.Error()}
		if !errors.Is(err, os.ErrNotExist) {
			out.State = IntegrityMalformed
		}
		return out
	}
	return s.CheckIntegrityData(ctx, snapshotPath, data, recordPath)
}

// CheckIntegrityData checks the snapshot at snapshotPath against data, the content of its integrity
// record (Record), which came from where says (a file's path, or a flag for a snapshot streamed through
// stdout and stdin, which has no file beside it).
func (s *Sealer) CheckIntegrityData(ctx context.Context, snapshotPath string, data []byte, where string) Integrity {
	out := Integrity{Record: where}
	if s == nil {
		out.State = IntegrityNoKey
		return out
	}
	var f integrityFile
	sealed, err := []byte(nil), json.Unmarshal(data, &f)
	if err == nil && f.Kind != integrityKind {
		err = fmt.Errorf("kind %q, want %q", f.Kind, integrityKind)
	}
	if err == nil {
		sealed, err = base64.StdEncoding.DecodeString(f.Sealed)
	}
	if err != nil {
		out.State, out.Detail = IntegrityMalformed, fmt.Sprintf("not a snapshot integrity record: %v", err)
		return out
	}
	// Only an encrypting provider's value: an EncryptionConfiguration with identity as a later provider
	// would hand back a value stored in the clear as it is, and anyone can write that.
	if !bytes.HasPrefix(sealed, encryptedPrefix) {
		out.State, out.Detail = IntegrityUnopened, "its sealed value is not encrypted (it does not start with k8s:enc:): not made by certapi"
		return out
	}
	plain, _, err := s.t.TransformFromStorage(ctx, sealed, value.DefaultContext(integrityContext))
	if err != nil {
		out.State, out.Detail = IntegrityUnopened, fmt.Sprintf("it does not open with this encryption configuration (%s): made with another key, or altered: %v", providerOf(sealed), err)
		return out
	}
	want, err := parseSealedPlaintext(plain)
	if err != nil {
		out.State, out.Detail = IntegrityUnopened, err.Error()
		return out
	}
	got, err := DigestOf(snapshotPath)
	if err != nil {
		out.State, out.Detail = IntegrityMismatch, err.Error()
		return out
	}
	if got != want {
		out.State = IntegrityMismatch
		out.Detail = fmt.Sprintf("the record was made for a snapshot of %d bytes with SHA-256 %x; this one has %d bytes and SHA-256 %x: changed or replaced",
			want.Size, want.SHA256, got.Size, got.SHA256)
		return out
	}
	out.State = IntegrityVerified
	return out
}
