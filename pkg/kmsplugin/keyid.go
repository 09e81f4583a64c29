package kmsplugin

import (
	"errors"
	"fmt"
	"strings"
)

// maxKeyIDLength is the longest key ID kube-apiserver and k8s.io/apiserver accept from a KMS v2 plugin
// (k8s.io/apiserver's envelope/kmsv2 ValidateKeyID: 1 kB).
const maxKeyIDLength = 1024

// keyIDScheme starts every key ID: a key ID is an RFC 7512 PKCS#11 URI naming the secret key object.
const keyIDScheme = "pkcs11:"

// KeyRef names one AES key object in a token: its CKA_LABEL and its CKA_ID, both public attributes. It
// never holds key material.
type KeyRef struct {
	// Label is the key object's CKA_LABEL.
	Label string
	// ID is the key object's CKA_ID, which tells apart two keys that carried the same label at different
	// times (a key deleted and created again under its label).
	ID []byte
}

// KeyID is the KMS v2 key ID of the key: the RFC 7512 URI
// "pkcs11:object=<label>;id=<id>;type=secret-key", every byte outside [A-Za-z0-9-._~] percent-encoded.
// kube-apiserver stores it beside each encrypted DEK and hands it back to Decrypt, which finds the key
// by it; a change of it (a new key) makes kube-apiserver wrap a new DEK.
func (k KeyRef) KeyID() string {
	var b strings.Builder
	b.WriteString(keyIDScheme)
	b.WriteString("object=")
	percentEncode(&b, []byte(k.Label))
	b.WriteString(";id=")
	percentEncode(&b, k.ID)
	b.WriteString(";type=secret-key")
	return b.String()
}

// String is the key ID, for logs and errors: it names the key, it is not the key.
func (k KeyRef) String() string { return k.KeyID() }

// Validate says whether the key can be named by a key ID kube-apiserver accepts.
func (k KeyRef) Validate() error {
	if k.Label == "" {
		return errors.New("the key has an empty label (CKA_LABEL)")
	}
	if len(k.ID) == 0 {
		return fmt.Errorf("the key labelled %q has no CKA_ID; give it one (certapi-kms-pkcs11 create-key does, pkcs11-tool --id does)", k.Label)
	}
	if n := len(k.KeyID()); n > maxKeyIDLength {
		return fmt.Errorf("the key labelled %q makes a key ID of %d bytes; KMS v2 allows %d: use a shorter label or CKA_ID", k.Label, n, maxKeyIDLength)
	}
	return nil
}

// ParseKeyID is the inverse of KeyRef.KeyID. It accepts the attributes in any order and refuses what
// KeyID would not write: another scheme, a missing, repeated or unknown attribute, a type other than
// secret-key, a bad percent-encoding, an empty label or ID, or more than 1 kB.
func ParseKeyID(keyID string) (KeyRef, error) {
	if len(keyID) > maxKeyIDLength {
		return KeyRef{}, fmt.Errorf("key ID of %d bytes: at most %d", len(keyID), maxKeyIDLength)
	}
	rest, ok := strings.CutPrefix(keyID, keyIDScheme)
	if !ok {
		return KeyRef{}, fmt.Errorf("key ID %q does not start with %q: it was not made by this plugin", keyID, keyIDScheme)
	}
	seen := map[string]bool{}
	var ref KeyRef
	for _, attr := range strings.Split(rest, ";") {
		name, value, ok := strings.Cut(attr, "=")
		if !ok {
			return KeyRef{}, fmt.Errorf("key ID %q: attribute %q has no value", keyID, attr)
		}
		if seen[name] {
			return KeyRef{}, fmt.Errorf("key ID %q: attribute %q repeated", keyID, name)
		}
		seen[name] = true
		decoded, err := percentDecode(value)
		if err != nil {
			return KeyRef{}, fmt.Errorf("key ID %q: attribute %q: %w", keyID, name, err)
		}
		switch name {
		case "object":
			ref.Label = string(decoded)
		case "id":
			ref.ID = decoded
		case "type":
			if string(decoded) != "secret-key" {
				return KeyRef{}, fmt.Errorf("key ID %q: type %q, want secret-key", keyID, decoded)
			}
		default:
			return KeyRef{}, fmt.Errorf("key ID %q: unknown attribute %q", keyID, name)
		}
	}
	for _, name := range []string{"object", "id", "type"} {
		if !seen[name] {
			return KeyRef{}, fmt.Errorf("key ID %q: attribute %q missing", keyID, name)
		}
	}
	if ref.Label == "" || len(ref.ID) == 0 {
		return KeyRef{}, fmt.Errorf("key ID %q: empty label or id", keyID)
	}
	return ref, nil
}

const upperHex = "0123456789ABCDEF"

// percentEncode writes data with every byte that is not unreserved (RFC 3986) as %XX.
func percentEncode(b *strings.Builder, data []byte) {
	for _, c := range data {
		if unreserved(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(upperHex[c>>4])
		b.WriteByte(upperHex[c&0x0f])
	}
}

func unreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~'
}

// percentDecode reverses percentEncode. It refuses a raw byte that percentEncode escapes (';' or '='
// would split an attribute).
func percentDecode(s string) ([]byte, error) {
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '%' {
			if !unreserved(c) {
				return nil, fmt.Errorf("byte %q must be percent-encoded", c)
			}
			out = append(out, c)
			continue
		}
		if i+2 >= len(s) {
			return nil, errors.New("truncated percent-encoding")
		}
		hi, lo := unhex(s[i+1]), unhex(s[i+2])
		if hi < 0 || lo < 0 {
			return nil, fmt.Errorf("bad percent-encoding %q", s[i:i+3])
		}
		out = append(out, byte(hi<<4|lo))
		i += 2
	}
	return out, nil
}

func unhex(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'a' <= c && c <= 'f':
		return int(c-'a') + 10
	case 'A' <= c && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}
