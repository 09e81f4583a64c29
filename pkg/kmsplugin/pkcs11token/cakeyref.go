package pkcs11token

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"encoding/asn1"
	"errors"
	"fmt"
	"math/big"
	"strings"

	"github.com/certapi/certapi/pkg/keyplugin"
)

// CA key references are RFC 7512 PKCS#11 URIs naming the private key object by its CKA_ID alone, every
// byte percent-encoded: "pkcs11:id=%5A%01...;type=private". They name a key, they are not one, and carry
// no PIN; labels are left out because they need not be unique and the CKA_ID is.
const (
	caRefPrefix = "pkcs11:id="
	caRefSuffix = ";type=private"
	// maxCAKeyIDSize bounds the CKA_ID of a CA key reference; NewKey makes them idSize bytes long.
	maxCAKeyIDSize = 64
)

// p256Params is CKA_EC_PARAMS for P-256: the DER of its object identifier, 1.2.840.10045.3.1.7.
var p256Params = []byte{0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07}

// p256ScalarSize is the length of r and of s in a P-256 signature CKM_ECDSA returns (r || s).
const p256ScalarSize = 32

// formatCARef returns the reference of the CA key whose CKA_ID is id.
func formatCARef(id []byte) string {
	var b strings.Builder
	b.WriteString(caRefPrefix)
	for _, c := range id {
		fmt.Fprintf(&b, "%%%02X", c)
	}
	b.WriteString(caRefSuffix)
	return b.String()
}

// parseCARef is the inverse of formatCARef; it accepts either case of hex digits. A reference it could
// not have made is an error wrapping keyplugin.ErrInvalidRequest.
func parseCARef(ref string) ([]byte, error) {
	body, ok := strings.CutPrefix(ref, caRefPrefix)
	if ok {
		body, ok = strings.CutSuffix(body, caRefSuffix)
	}
	if !ok || body == "" || len(body)%3 != 0 || len(body)/3 > maxCAKeyIDSize {
		return nil, fmt.Errorf("%w: %q is not a CA key reference of this plugin (%s%%XX...%s, a CKA_ID of 1 to %d bytes)", keyplugin.ErrInvalidRequest, ref, caRefPrefix, caRefSuffix, maxCAKeyIDSize)
	}
	id := make([]byte, 0, len(body)/3)
	for i := 0; i < len(body); i += 3 {
		hi, okHi := unhex(body[i+1])
		lo, okLo := unhex(body[i+2])
		if body[i] != '%' || !okHi || !okLo {
			return nil, fmt.Errorf("%w: %q is not a CA key reference of this plugin: bad percent-encoding at byte %d", keyplugin.ErrInvalidRequest, ref, len(caRefPrefix)+i)
		}
		id = append(id, hi<<4|lo)
	}
	return id, nil
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// parseECPoint reads CKA_EC_POINT of a P-256 public key: the uncompressed point 04 || X || Y, wrapped in a
// DER OCTET STRING as PKCS#11 says, or bare as some tokens return it.
func parseECPoint(value []byte) (*ecdsa.PublicKey, error) {
	point := value
	if len(value) != 1+2*p256ScalarSize {
		var inner []byte
		rest, err := asn1.Unmarshal(value, &inner)
		if err != nil || len(rest) != 0 {
			return nil, fmt.Errorf("CKA_EC_POINT of %d bytes is neither a DER OCTET STRING nor an uncompressed P-256 point", len(value))
		}
		point = inner
	}
	pub, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), point)
	if err != nil {
		return nil, fmt.Errorf("CKA_EC_POINT is not an uncompressed P-256 point: %w", err)
	}
	return pub, nil
}

// ecdsaSignature is the ASN.1 form of an ECDSA signature (RFC 3279, Ecdsa-Sig-Value).
type ecdsaSignature struct {
	R, S *big.Int
}

// p256SignatureDER turns the r || s CKM_ECDSA returns for a P-256 key into ASN.1 DER.
func p256SignatureDER(raw []byte) ([]byte, error) {
	if len(raw) != 2*p256ScalarSize {
		return nil, fmt.Errorf("CKM_ECDSA returned %d bytes for a P-256 key, want %d (r || s)", len(raw), 2*p256ScalarSize)
	}
	r := new(big.Int).SetBytes(raw[:p256ScalarSize])
	s := new(big.Int).SetBytes(raw[p256ScalarSize:])
	if r.Sign() == 0 || s.Sign() == 0 {
		return nil, errors.New("CKM_ECDSA returned a signature with r or s zero")
	}
	return asn1.Marshal(ecdsaSignature{R: r, S: s})
}
