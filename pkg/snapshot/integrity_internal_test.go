package snapshot

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	kmsservice "k8s.io/kms/pkg/service"

	"github.com/certapi/certapi/test/testhelpers"
)

// transformerOf writes an EncryptionConfiguration to a file of t's and loads the CA keys' transformer from
// it, as `certapi snapshot` does.
func transformerOf(t *testing.T, config string) *Sealer {
	t.Helper()
	path := filepath.Join(t.TempDir(), "encryption.yaml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	tr, stop, err := LoadTransformer(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	s := NewSealer(tr)
	if err := s.Probe(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

// keyConfig is an EncryptionConfiguration of the CA keys with provider and a fresh key.
func keyConfig(t *testing.T, provider string) string {
	t.Helper()
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf(`apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
- resources: [certificateauthoritykeys.certapi.dev]
  providers:
  - %s:
      keys:
      - name: key1
        secret: %s
  - identity: {}
`, provider, base64.StdEncoding.EncodeToString(key))
}

// softKMS is a KMS v2 plugin's service over an AES-GCM key in memory: enough for k8s.io/apiserver's real
// KMS v2 envelope transformer, talking gRPC to it on a Unix socket.
type softKMS struct {
	aead  cipher.AEAD
	keyID string
}

func newSoftKMS(t *testing.T) *softKMS {
	t.Helper()
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	b, err := aes.NewCipher(key)
	if err != nil {
		t.Fatal(err)
	}
	aead, err := cipher.NewGCM(b)
	if err != nil {
		t.Fatal(err)
	}
	return &softKMS{aead: aead, keyID: "soft-1"}
}

func (k *softKMS) Encrypt(_ context.Context, _ string, data []byte) (*kmsservice.EncryptResponse, error) {
	nonce := make([]byte, k.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	return &kmsservice.EncryptResponse{Ciphertext: k.aead.Seal(nonce, nonce, data, nil), KeyID: k.keyID}, nil
}

func (k *softKMS) Decrypt(_ context.Context, _ string, req *kmsservice.DecryptRequest) ([]byte, error) {
	n := k.aead.NonceSize()
	if len(req.Ciphertext) < n {
		return nil, errors.New("short ciphertext")
	}
	return k.aead.Open(nil, req.Ciphertext[:n], req.Ciphertext[n:], nil)
}

func (k *softKMS) Status(context.Context) (*kmsservice.StatusResponse, error) {
	return &kmsservice.StatusResponse{Version: "v2", Healthz: "ok", KeyID: k.keyID}, nil
}

// kmsConfig serves a softKMS on a socket of t's and returns the EncryptionConfiguration that uses it.
func kmsConfig(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "kms-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	sock := filepath.Join(dir, "kms.sock")
	srv := kmsservice.NewGRPCService(sock, 5*time.Second, newSoftKMS(t))
	go func() { _ = srv.ListenAndServe() }()
	t.Cleanup(srv.Close)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the KMS plugin's socket did not appear")
		}
		time.Sleep(10 * time.Millisecond) // polling a condition (the socket exists), bounded by the deadline
	}
	cfg, err := testhelpers.KMSv2EncryptionConfig("soft", "unix://"+sock, 5*time.Second, CAKeysResource.String())
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// snapshotLike writes a file of n random bytes standing for a snapshot (the integrity record covers any
// file's bytes; Verify's etcd checks are separate).
func snapshotLike(t *testing.T, dir, name string, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestIntegrityRecord seals a snapshot's integrity record with each provider certapi can encrypt its CA
// keys with (aescbc, aesgcm, secretbox, and KMS v2 through a plugin on a socket) and checks it: the genuine
// record verifies; the snapshot changed by one byte, another key, a missing record, a record that is not
// one, and a record whose sealed value is the plaintext layout itself (which an identity provider would
// hand back as it is) are each refused.
func TestIntegrityRecord(t *testing.T) {
	ctx := context.Background()
	for _, provider := range []string{"aescbc", "aesgcm", "secretbox", "kms"} {
		t.Run(provider, func(t *testing.T) {
			var s, other *Sealer
			if provider == "kms" {
				s, other = transformerOf(t, kmsConfig(t)), transformerOf(t, kmsConfig(t))
			} else {
				s, other = transformerOf(t, keyConfig(t, provider)), transformerOf(t, keyConfig(t, provider))
			}
			dir := t.TempDir()
			snap := snapshotLike(t, dir, "s.db", 4096+32)
			record := snap + IntegritySuffix
			if err := s.Seal(ctx, snap, record); err != nil {
				t.Fatal(err)
			}
			if err := s.Seal(ctx, snap, record); err == nil {
				t.Error("Seal overwrote an existing record")
			}
			if fi, err := os.Stat(record); err != nil || fi.Mode().Perm() != 0o600 {
				t.Errorf("record: %v, mode %v; want 0600", err, fi.Mode())
			}
			if in := s.CheckIntegrity(ctx, snap, record); in.State != IntegrityVerified {
				t.Fatalf("the genuine record: %+v", in)
			}
			data, _ := os.ReadFile(record)
			if !bytes.HasPrefix(decodeSealed(t, data), []byte("k8s:enc:"+provider+":")) {
				t.Errorf("the record is not sealed by %s: %s", provider, data)
			}
			if in := other.CheckIntegrity(ctx, snap, record); in.State != IntegrityUnopened {
				t.Errorf("checked with another key: %+v, want IntegrityUnopened", in)
			}
			if in := (*Sealer)(nil).CheckIntegrity(ctx, snap, record); in.State != IntegrityNoKey {
				t.Errorf("checked with no key: %+v", in)
			}
			if in := s.CheckIntegrity(ctx, snap, record+".missing"); in.State != IntegrityMissing {
				t.Errorf("a missing record: %+v", in)
			}
			// A record made by another key for this very snapshot.
			forged := filepath.Join(dir, "forged"+IntegritySuffix)
			if err := other.Seal(ctx, snap, forged); err != nil {
				t.Fatal(err)
			}
			if in := s.CheckIntegrity(ctx, snap, forged); in.State != IntegrityUnopened {
				t.Errorf("a record made with another key: %+v", in)
			}
			// The plaintext layout as the "sealed" value: an identity provider later in the configuration
			// (aescbc's and the others' here) would return it as it is.
			d, err := DigestOf(snap)
			if err != nil {
				t.Fatal(err)
			}
			plainRec := writeRecord(t, dir, "plain", sealedPlaintext(d))
			if in := s.CheckIntegrity(ctx, snap, plainRec); in.State != IntegrityUnopened {
				t.Errorf("a record sealed in the clear: %+v", in)
			}
			if in := s.CheckIntegrity(ctx, snap, writeFile(t, dir, "junk", "{not json")); in.State != IntegrityMalformed {
				t.Errorf("a record that is not one: %+v", in)
			}
			// One byte of the snapshot changed.
			b, _ := os.ReadFile(snap)
			b[100] ^= 1
			if err := os.WriteFile(snap, b, 0o600); err != nil {
				t.Fatal(err)
			}
			if in := s.CheckIntegrity(ctx, snap, record); in.State != IntegrityMismatch || !strings.Contains(in.Detail, "changed or replaced") {
				t.Errorf("a changed snapshot: %+v, want IntegrityMismatch", in)
			}
		})
	}
}

// TestIntegrityRecordTampered changes every byte of a sealed record in turn, and each bit of the aescbc IV,
// and requires that none of those records verifies: aescbc is not authenticated, and the checked layout
// of the sealed plaintext (every block checked) is what refuses them. As a control, the untouched record
// verifies.
// TestIntegrityRecordOfAStream: the record of a snapshot streamed to stdout is made from a DigestWriter the
// stream went through, and checked as data (restore's --integrity-record-data): it verifies the bytes that
// came out, and nothing else.
func TestIntegrityRecordOfAStream(t *testing.T) {
	ctx := context.Background()
	s, other := transformerOf(t, keyConfig(t, "secretbox")), transformerOf(t, keyConfig(t, "secretbox"))
	dir := t.TempDir()
	snap := snapshotLike(t, dir, "s.db", 4096+32)
	content, err := os.ReadFile(snap)
	if err != nil {
		t.Fatal(err)
	}
	w := NewDigestWriter()
	for _, chunk := range [][]byte{content[:1000], content[1000:]} {
		if _, err := w.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := w.Digest(), mustDigest(t, snap); got != want {
		t.Fatalf("the stream's digest %+v differs from the file's %+v", got, want)
	}
	rec, err := s.Record(ctx, w.Digest())
	if err != nil {
		t.Fatal(err)
	}
	if in := s.CheckIntegrityData(ctx, snap, rec, "--integrity-record-data"); in.State != IntegrityVerified || in.Record != "--integrity-record-data" {
		t.Fatalf("the stream's record against what was streamed: %+v", in)
	}
	if in := other.CheckIntegrityData(ctx, snap, rec, "--integrity-record-data"); in.State != IntegrityUnopened {
		t.Errorf("checked with another key: %+v, want IntegrityUnopened", in)
	}
	changed := snapshotLike(t, dir, "changed.db", 4096+32)
	if in := s.CheckIntegrityData(ctx, changed, rec, "--integrity-record-data"); in.State != IntegrityMismatch {
		t.Errorf("another snapshot against the stream's record: %+v, want IntegrityMismatch", in)
	}
	if in := s.CheckIntegrityData(ctx, snap, []byte("not a record"), "--integrity-record-data"); in.State != IntegrityMalformed {
		t.Errorf("data that is no record: %+v, want IntegrityMalformed", in)
	}
}

func TestIntegrityRecordTampered(t *testing.T) {
	ctx := context.Background()
	for _, provider := range []string{"aescbc", "aesgcm", "secretbox"} {
		t.Run(provider, func(t *testing.T) {
			s := transformerOf(t, keyConfig(t, provider))
			dir := t.TempDir()
			snap := snapshotLike(t, dir, "s.db", 1024+32)
			rec, err := s.Record(ctx, mustDigest(t, snap))
			if err != nil {
				t.Fatal(err)
			}
			sealed := decodeSealed(t, rec)
			if in := s.CheckIntegrity(ctx, snap, writeRecord(t, dir, "control", sealed)); in.State != IntegrityVerified {
				t.Fatalf("control: the untouched record does not verify: %+v", in)
			}
			prefix := bytes.Index(sealed, []byte("key1:")) + len("key1:")
			for i := prefix; i < len(sealed); i++ {
				for _, flip := range []byte{0x01, 0x80, 0xff} {
					tampered := bytes.Clone(sealed)
					tampered[i] ^= flip
					if in := s.CheckIntegrity(ctx, snap, writeRecord(t, dir, "t", tampered)); in.State == IntegrityVerified {
						t.Fatalf("a record with byte %d of its ciphertext xored with %#x verifies", i-prefix, flip)
					}
				}
			}
			// Cut short by a block, and one block longer.
			for _, tampered := range [][]byte{sealed[:len(sealed)-16], append(bytes.Clone(sealed), sealed[len(sealed)-16:]...)} {
				if in := s.CheckIntegrity(ctx, snap, writeRecord(t, dir, "t", tampered)); in.State == IntegrityVerified {
					t.Fatalf("a record of %d bytes (genuine: %d) verifies", len(tampered), len(sealed))
				}
			}
		})
	}
}

// TestSealerRefusesAConfigurationThatDoesNotEncrypt: identity first stores in the clear; no record can be
// made or checked with it.
func TestSealerRefusesAConfigurationThatDoesNotEncrypt(t *testing.T) {
	path := writeFile(t, t.TempDir(), "enc.yaml", `apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
- resources: [certificateauthoritykeys.certapi.dev]
  providers:
  - identity: {}
`)
	tr, stop, err := LoadTransformer(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if err := NewSealer(tr).Probe(context.Background()); err == nil || !strings.Contains(err.Error(), "unencrypted") {
		t.Errorf("Probe of identity: %v", err)
	}
	other := writeFile(t, t.TempDir(), "enc.yaml", strings.Replace(keyConfig(t, "aescbc"), "certificateauthoritykeys.certapi.dev", "secrets", 1))
	if _, _, err := LoadTransformer(context.Background(), other); err == nil || !strings.Contains(err.Error(), "does not list certificateauthoritykeys.certapi.dev") {
		t.Errorf("LoadTransformer of a configuration without the CA keys: %v", err)
	}
}

func mustDigest(t *testing.T, path string) Digest {
	t.Helper()
	d, err := DigestOf(path)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func decodeSealed(t *testing.T, record []byte) []byte {
	t.Helper()
	var f integrityFile
	if err := json.Unmarshal(record, &f); err != nil {
		t.Fatal(err)
	}
	b, err := base64.StdEncoding.DecodeString(f.Sealed)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// writeRecord writes a record whose sealed value is sealed.
func writeRecord(t *testing.T, dir, name string, sealed []byte) string {
	t.Helper()
	b, err := json.Marshal(integrityFile{Kind: integrityKind, Sealed: base64.StdEncoding.EncodeToString(sealed)})
	if err != nil {
		t.Fatal(err)
	}
	return writeFile(t, dir, name+IntegritySuffix, string(b))
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
