package main

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	"github.com/ProtonMail/go-crypto/openpgp/clearsign"
	"github.com/ProtonMail/go-crypto/openpgp/packet"
	"github.com/secure-systems-lab/go-securesystemslib/dsse"
)

// Files of the release that let a user verify the rest (docs/release.md, "Verifying a release").
const (
	// CosignPublicKey is the PEM public key that `cosign verify --key` and `cosign verify-blob --key` take.
	CosignPublicKey = "cosign.pub"
	// PGPKeyring is the binary OpenPGP keyring (what `gpg --export` writes) that `helm verify --keyring`
	// takes for the chart's provenance file.
	PGPKeyring = "certapi-keyring.gpg"
	// ChecksumsFile and ChecksumsSignature: checksums.txt and its cosign signature (`cosign verify-blob`).
	ChecksumsFile      = "checksums.txt"
	ChecksumsSignature = "checksums.txt.sig"
)

// Environment variables naming the release's private keys, as --cosign-key and --pgp-key do.
const (
	EnvCosignKey = "CERTAPI_COSIGN_KEY"
	EnvPGPKey    = "CERTAPI_PGP_KEY"
)

// ephemeralKeyDir is where a release with no key writes the key pair it generated, under --work: beside the
// release, never in it, so that the private keys are not published with it.
const ephemeralKeyDir = "ephemeral-keys"

// keys are the release's private keys: an ECDSA P-256 key for cosign's signatures and attestations, and an
// OpenPGP key for Helm's provenance file (helm verifies PGP signatures only).
type keys struct {
	cosign *ecdsa.PrivateKey
	pgp    *openpgp.Entity
	// ephemeral says the keys were generated for this release alone: a development release.
	ephemeral bool
}

// loadKeys reads the keys from the files cosignPath and pgpPath, or, when both are empty, generates an
// ephemeral pair into work/ephemeral-keys and says so loudly. now is the creation time of a generated PGP key
// (the commit's time: a signature made before its key was created does not verify).
func loadKeys(cosignPath, pgpPath, work string, now time.Time) (*keys, error) {
	switch {
	case cosignPath == "" && pgpPath == "":
		return generateKeys(filepath.Join(work, ephemeralKeyDir), now)
	case cosignPath == "" || pgpPath == "":
		return nil, fmt.Errorf("give both signing keys (--cosign-key or $%s, and --pgp-key or $%s), or neither for a development release signed with an ephemeral key pair", EnvCosignKey, EnvPGPKey)
	}
	raw, err := os.ReadFile(cosignPath)
	if err != nil {
		return nil, fmt.Errorf("the cosign key: %w", err)
	}
	ck, err := parseCosignKey(raw)
	if err != nil {
		return nil, fmt.Errorf("the cosign key %s: %w", cosignPath, err)
	}
	raw, err = os.ReadFile(pgpPath)
	if err != nil {
		return nil, fmt.Errorf("the PGP key: %w", err)
	}
	pk, err := parsePGPKey(raw)
	if err != nil {
		return nil, fmt.Errorf("the PGP key %s: %w", pgpPath, err)
	}
	return &keys{cosign: ck, pgp: pk}, nil
}

// parseCosignKey parses an unencrypted PEM ECDSA P-256 private key, PKCS#8 ("PRIVATE KEY") or SEC 1 ("EC
// PRIVATE KEY"). P-256 is cosign's own key type; ECDSA signatures are made deterministic (RFC 6979), so that
// two builds of one commit with one key give the same bytes.
func parseCosignKey(raw []byte) (*ecdsa.PrivateKey, error) {
	const accepted = "want an unencrypted PEM ECDSA P-256 private key, PKCS#8 (BEGIN PRIVATE KEY) or SEC 1 (BEGIN EC PRIVATE KEY), e.g. from `openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256`"
	block, _ := pem.Decode(raw)
	if block == nil {
		return nil, fmt.Errorf("no PEM block: %s", accepted)
	}
	var key any
	var err error
	switch block.Type {
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	default:
		return nil, fmt.Errorf("a PEM block of type %q (an encrypted cosign.key is not read: `cosign` has no command to decrypt it, so keep the PEM you imported it from): %s", block.Type, accepted)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s", err, accepted)
	}
	ec, ok := key.(*ecdsa.PrivateKey)
	if !ok || ec.Curve != elliptic.P256() {
		return nil, fmt.Errorf("a %T key: %s", key, accepted)
	}
	return ec, nil
}

// parsePGPKey reads an unencrypted OpenPGP secret key (armored or binary, as `gpg --export-secret-keys`
// writes it) whose primary key is EdDSA or RSA: their signatures are deterministic, which keeps a release
// reproducible; an ECDSA key's are not.
func parsePGPKey(raw []byte) (*openpgp.Entity, error) {
	var el openpgp.EntityList
	var err error
	if bytes.HasPrefix(bytes.TrimSpace(raw), []byte("-----BEGIN")) {
		el, err = openpgp.ReadArmoredKeyRing(bytes.NewReader(raw))
	} else {
		el, err = openpgp.ReadKeyRing(bytes.NewReader(raw))
	}
	if err != nil {
		return nil, fmt.Errorf("not an OpenPGP key: %w", err)
	}
	if len(el) != 1 {
		return nil, fmt.Errorf("%d keys, want one secret key", len(el))
	}
	e := el[0]
	if e.PrivateKey == nil {
		return nil, errors.New("a public key: want the secret key (gpg --export-secret-keys)")
	}
	if e.PrivateKey.Encrypted {
		return nil, errors.New("the secret key is encrypted: want it unencrypted (gpg --export-secret-keys of a key with no passphrase, or `gpg --passwd` to remove it on a copy)")
	}
	switch e.PrimaryKey.PubKeyAlgo {
	case packet.PubKeyAlgoEdDSA, packet.PubKeyAlgoEd25519, packet.PubKeyAlgoRSA, packet.PubKeyAlgoRSASignOnly:
	default:
		return nil, fmt.Errorf("public key algorithm %d: want EdDSA (Ed25519) or RSA, whose signatures are deterministic", e.PrimaryKey.PubKeyAlgo)
	}
	return e, nil
}

// generateKeys makes an ephemeral key pair for a development release and writes its private halves into
// dir (cosign.key, PEM PKCS#8; pgp.key, armored), for a second build of the same commit to reuse.
func generateKeys(dir string, now time.Time) (*keys, error) {
	ck, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	cfg := &packet.Config{Algorithm: packet.PubKeyAlgoEdDSA, Curve: packet.Curve25519, Time: func() time.Time { return now }}
	pk, err := openpgp.NewEntity("certapi development release", "ephemeral key", "release@certapi.dev", cfg)
	if err != nil {
		return nil, fmt.Errorf("generating a PGP key: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(ck)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "cosign.key"), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	w, err := armor.Encode(&b, openpgp.PrivateKeyType, nil)
	if err != nil {
		return nil, err
	}
	if err := pk.SerializePrivate(w, cfg); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "pgp.key"), b.Bytes(), 0o600); err != nil {
		return nil, err
	}
	return &keys{cosign: ck, pgp: pk, ephemeral: true}, nil
}

// sign is the cosign signature of data: ECDSA over its SHA-256, ASN.1 DER, deterministic (RFC 6979: Go's
// ecdsa.PrivateKey.Sign with no random source).
func (k *keys) sign(data []byte) ([]byte, error) {
	sum := sha256.Sum256(data)
	return k.cosign.Sign(nil, sum[:], crypto.SHA256)
}

// Sign and KeyID make keys a dsse.Signer: a DSSE envelope's signature is over its pre-authentication
// encoding, with no key ID (as cosign writes them).
func (k *keys) Sign(_ context.Context, data []byte) ([]byte, error) { return k.sign(data) }

// KeyID is empty: cosign verifies with the key it is given, whatever the envelope names.
func (k *keys) KeyID() (string, error) { return "", nil }

// dsseEnvelope signs the in-toto statement as a DSSE envelope and returns it as JSON.
func (k *keys) dsseEnvelope(statement []byte) ([]byte, error) {
	es, err := dsse.NewEnvelopeSigner(k)
	if err != nil {
		return nil, err
	}
	env, err := es.SignPayload(context.Background(), inTotoPayloadType, statement)
	if err != nil {
		return nil, fmt.Errorf("signing the in-toto statement: %w", err)
	}
	return jsonMarshal(env)
}

// writePublicKeys writes cosign.pub and the PGP keyring into the release.
func (k *keys) writePublicKeys(dir string) error {
	der, err := x509.MarshalPKIXPublicKey(&k.cosign.PublicKey)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, CosignPublicKey), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o644); err != nil {
		return err
	}
	var b bytes.Buffer
	if err := k.pgp.Serialize(&b); err != nil {
		return fmt.Errorf("the PGP public key: %w", err)
	}
	return os.WriteFile(filepath.Join(dir, PGPKeyring), b.Bytes(), 0o644)
}

// signFile writes the cosign signature of dir/name, base64, as `cosign verify-blob --signature` reads it,
// into dir/sigName.
func (k *keys) signFile(dir, name, sigName string) error {
	data, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return err
	}
	sig, err := k.sign(data)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, sigName), []byte(base64.StdEncoding.EncodeToString(sig)+"\n"), 0o644)
}

// writeHelmProvenance writes chart.prov beside the chart archive: Helm's provenance file, the chart's
// Chart.yaml and the archive's SHA-256 clear-signed with the PGP key at the commit's time, as `helm package
// --sign` writes it (helm.sh/helm/v4 pkg/provenance: metadata, "...", then `files: {NAME: sha256:HEX}`), but
// over the normalised archive and with a fixed signature time, so that it is reproducible.
func (k *keys) writeHelmProvenance(tgz string, chartYAML []byte, when time.Time) error {
	data, err := os.ReadFile(tgz)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(data)
	var msg bytes.Buffer
	msg.Write(bytes.TrimRight(chartYAML, "\n"))
	msg.WriteString("\n\n...\n")
	fmt.Fprintf(&msg, "files:\n  %s: sha256:%x\n", filepath.Base(tgz), sum)
	var out bytes.Buffer
	// No random notation (go-crypto adds one to every signature by default, against fault attacks on a
	// signer that signs the same message many times): a release signs each message once, and its
	// provenance file must come out the same from the same commit and key.
	randomNotation := false
	cfg := &packet.Config{DefaultHash: crypto.SHA512, Time: func() time.Time { return when }, NonDeterministicSignaturesViaNotation: &randomNotation}
	w, err := clearsign.Encode(&out, k.pgp.PrivateKey, cfg)
	if err != nil {
		return err
	}
	if _, err := w.Write(msg.Bytes()); err != nil {
		return err
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("clear-signing the provenance: %w", err)
	}
	return os.WriteFile(tgz+".prov", out.Bytes(), 0o644)
}

// warnEphemeral is printed, first and last, when the release is signed with a key pair made for it alone.
func warnEphemeral(work string) string {
	line := strings.Repeat("!", 100)
	return fmt.Sprintf(`%s
!! This release is signed with an EPHEMERAL key pair generated for it (its private keys are in %s).
!! Its signatures prove only that its files are the ones this build wrote. A release to publish is signed
!! with the project's keys: --cosign-key FILE (or $%s) and --pgp-key FILE (or $%s); docs/release.md.
%s`, line, filepath.Join(work, ephemeralKeyDir), EnvCosignKey, EnvPGPKey, line)
}
