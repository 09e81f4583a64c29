package signer

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
)

// KeyAlgorithm names a managed key type, as in ServingCertRequest
// spec.keyAlgorithm. certapi generates keys of these types for requests whose
// key it manages (those delivered into a Secret).
type KeyAlgorithm string

// The managed key algorithms. ECDSAP256 is the API default.
const (
	ECDSAP256 KeyAlgorithm = "ECDSAP256"
	ECDSAP384 KeyAlgorithm = "ECDSAP384"
	RSA2048   KeyAlgorithm = "RSA2048"
	RSA3072   KeyAlgorithm = "RSA3072"
	RSA4096   KeyAlgorithm = "RSA4096"
)

// SupportedKeyAlgorithms returns every KeyAlgorithm that GenerateKey accepts,
// in a fixed order, so that validation and error messages elsewhere need not
// keep their own list.
func SupportedKeyAlgorithms() []KeyAlgorithm {
	return []KeyAlgorithm{ECDSAP256, ECDSAP384, RSA2048, RSA3072, RSA4096}
}

// AcceptedKeys describes the public keys that CheckPublicKey accepts. It is
// the "accepted:" part of every unsupported-key error, exported so that the
// API layer can use the same words in its documentation.
const AcceptedKeys = "RSA with 2048 to 8192 bits, ECDSA P-256 or P-384"

// RSA key sizes that CheckPublicKey accepts. Below the minimum is too weak;
// above the maximum only makes verification slow for everyone (and is a cheap
// way to make the signer spend CPU).
const (
	MinRSABits = 2048
	MaxRSABits = 8192
)

// ErrUnsupportedKey is wrapped by every error CheckPublicKey returns, so that
// callers can map it to a validation error (HTTP 422) with errors.Is.
var ErrUnsupportedKey = errors.New("unsupported key")

// ErrKeyUnavailable is wrapped by the errors of a CA key that cannot sign
// right now because what holds it (an HSM, through its key plugin) is down
// or unreachable: callers answer 503 with Retry-After and never fall back to
// another key.
var ErrKeyUnavailable = errors.New("the CA key is unavailable")

// ExternalKey is a CA key that certapi never holds: it is made and used
// inside an HSM (through a key plugin), signs through crypto.Signer, and is
// stored as KeyRef, the plugin's name for it, never as key material.
type ExternalKey interface {
	crypto.Signer
	// KeyRef names the key to what holds it; it is not secret.
	KeyRef() string
}

// GenerateKey makes a new private key of the given algorithm with
// crypto/rand. An unknown algorithm is an error that names the accepted ones.
func GenerateKey(alg KeyAlgorithm) (crypto.Signer, error) {
	var (
		key crypto.Signer
		err error
	)
	switch alg {
	case ECDSAP256:
		key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case ECDSAP384:
		key, err = ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	case RSA2048:
		key, err = rsa.GenerateKey(rand.Reader, 2048)
	case RSA3072:
		key, err = rsa.GenerateKey(rand.Reader, 3072)
	case RSA4096:
		key, err = rsa.GenerateKey(rand.Reader, 4096)
	default:
		names := make([]string, 0, 5)
		for _, a := range SupportedKeyAlgorithms() {
			names = append(names, string(a))
		}
		return nil, fmt.Errorf("unknown key algorithm %q; accepted: %s", truncate(string(alg)), strings.Join(names, ", "))
	}
	if err != nil {
		return nil, fmt.Errorf("generating %s key: %w", alg, err)
	}
	return key, nil
}

// EncodeKeyPEM encodes a private key as one PKCS#8 "PRIVATE KEY" PEM block,
// the one format every TLS stack reads for RSA and ECDSA alike.
func EncodeKeyPEM(key crypto.Signer) ([]byte, error) {
	if key == nil {
		return nil, errors.New("encoding private key: no key given")
	}
	if ext, ok := key.(ExternalKey); ok {
		return nil, fmt.Errorf("encoding private key: the key %s is held outside certapi and has no encoding", ext.KeyRef())
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encoding %s private key as PKCS#8: %w", keyDescription(key.Public()), err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// ParseKeyPEM parses a private key from PEM: exactly one block of type
// "PRIVATE KEY" (PKCS#8), "EC PRIVATE KEY" (SEC 1) or "RSA PRIVATE KEY"
// (PKCS#1). "EC PARAMETERS" blocks, as written by `openssl ecparam -genkey`,
// are skipped. The older forms are accepted so that a CA made with openssl
// can be loaded; EncodeKeyPEM always writes PKCS#8. Encrypted PEM is refused.
func ParseKeyPEM(pemBytes []byte) (crypto.Signer, error) {
	const expect = "expected one PEM block of type PRIVATE KEY, EC PRIVATE KEY or RSA PRIVATE KEY"
	var found *pem.Block
	rest := pemBytes
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		switch block.Type {
		case "EC PARAMETERS":
			continue
		case "PRIVATE KEY", "EC PRIVATE KEY", "RSA PRIVATE KEY":
		default:
			return nil, fmt.Errorf("parsing private key: unexpected PEM block type %q; %s", truncate(block.Type), expect)
		}
		if found != nil {
			return nil, fmt.Errorf("parsing private key: more than one key; %s", expect)
		}
		found = block
	}
	if found == nil {
		return nil, fmt.Errorf("parsing private key: no PEM block found; %s", expect)
	}
	if len(found.Headers) != 0 {
		return nil, errors.New("parsing private key: encrypted or annotated PEM is not supported; expected an unencrypted key")
	}
	var (
		key any
		err error
	)
	switch found.Type {
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(found.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(found.Bytes)
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(found.Bytes)
	}
	if err != nil {
		// The x509 parse errors describe structure, never key bytes.
		return nil, fmt.Errorf("parsing %s: %w", found.Type, err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("parsing private key: a %T cannot sign; expected an RSA or ECDSA key", key)
	}
	return signer, nil
}

// CheckPublicKey reports whether pub is a key certapi will certify: RSA with
// 2048 to 8192 bits (odd public exponent of at least 3), or ECDSA on P-256 or
// P-384. Those are what every TLS client in a cluster handles and what
// current guidance considers strong. The error says what was given and what
// is accepted, and wraps ErrUnsupportedKey.
func CheckPublicKey(pub crypto.PublicKey) error {
	switch k := pub.(type) {
	case *rsa.PublicKey:
		if k == nil || k.N == nil || k.N.Sign() <= 0 {
			return unsupportedKey("malformed RSA key")
		}
		bits := k.N.BitLen()
		if bits < MinRSABits || bits > MaxRSABits {
			return unsupportedKey(fmt.Sprintf("RSA %d bits", bits))
		}
		if k.N.Bit(0) == 0 {
			return unsupportedKey("RSA key with an even modulus")
		}
		if k.E < 3 || k.E%2 == 0 {
			return unsupportedKey(fmt.Sprintf("RSA key with public exponent %d", k.E))
		}
		return nil
	case *ecdsa.PublicKey:
		if k == nil || k.Curve == nil {
			return unsupportedKey("malformed ECDSA key")
		}
		switch k.Curve {
		case elliptic.P256(), elliptic.P384():
			return nil
		}
		return unsupportedKey(keyDescription(k))
	default:
		return unsupportedKey(keyDescription(pub))
	}
}

func unsupportedKey(given string) error {
	return fmt.Errorf("%w: %s; accepted: %s", ErrUnsupportedKey, given, AcceptedKeys)
}

// keyDescription names a public key's type and size for messages, e.g.
// "ECDSA P-521" or "RSA 1024 bits". It never includes key material.
func keyDescription(pub crypto.PublicKey) string {
	switch k := pub.(type) {
	case *rsa.PublicKey:
		if k == nil || k.N == nil {
			return "RSA"
		}
		return fmt.Sprintf("RSA %d bits", k.N.BitLen())
	case *ecdsa.PublicKey:
		if k == nil || k.Curve == nil || k.Curve.Params() == nil {
			return "ECDSA"
		}
		return "ECDSA " + k.Curve.Params().Name
	case ed25519.PublicKey:
		return "Ed25519"
	case nil:
		return "unknown key algorithm"
	default:
		return fmt.Sprintf("key of type %T", pub)
	}
}

// truncate shortens caller-supplied strings quoted in error messages.
func truncate(s string) string {
	const limit = 40
	if len(s) <= limit {
		return s
	}
	return s[:limit] + "..."
}
