package pkcs11token

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/asn1"
	"errors"
	"strings"
	"testing"

	"github.com/certapi/certapi/pkg/keyplugin"
)

func TestCARef(t *testing.T) {
	id := []byte{0x00, 0x5a, 0xff, 0x10}
	ref := formatCARef(id)
	if want := "pkcs11:id=%00%5A%FF%10;type=private"; ref != want {
		t.Fatalf("formatCARef = %q, want %q", ref, want)
	}
	for _, tc := range []struct {
		ref    string
		id     []byte // nil: refused
		errHas string
	}{
		{ref, id, ""},
		{"pkcs11:id=%00%5a%ff%10;type=private", id, ""},
		{"pkcs11:id=;type=private", nil, "not a CA key reference"},
		{"pkcs11:id=%00%5A;type=secret-key", nil, "not a CA key reference"},
		{"pkcs11:object=x;id=%00;type=private", nil, "not a CA key reference"},
		{"pkcs11:id=%0G;type=private", nil, "bad percent-encoding"},
		{"pkcs11:id=A%00;type=private", nil, "not a CA key reference"},
		{"pkcs11:id=ABC%00;type=private", nil, "bad percent-encoding"},
		{"pkcs11:id=" + strings.Repeat("%00", maxCAKeyIDSize+1) + ";type=private", nil, "1 to 64 bytes"},
		{"id=005aff10", nil, "not a CA key reference"},
	} {
		got, err := parseCARef(tc.ref)
		if tc.id != nil {
			if err != nil || !bytes.Equal(got, tc.id) {
				t.Errorf("parseCARef(%q) = %x, %v; want %x", tc.ref, got, err, tc.id)
			}
			continue
		}
		if err == nil || !errors.Is(err, keyplugin.ErrInvalidRequest) || !strings.Contains(err.Error(), tc.errHas) {
			t.Errorf("parseCARef(%q): %v; want ErrInvalidRequest saying %q", tc.ref, err, tc.errHas)
		}
	}
}

func TestParseECPoint(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := key.PublicKey.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	wrapped, err := asn1.Marshal(raw)
	if err != nil {
		t.Fatal(err)
	}
	p384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	raw384, err := p384.PublicKey.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	wrapped384, err := asn1.Marshal(raw384)
	if err != nil {
		t.Fatal(err)
	}
	// 02 or 03 (Y even or odd), then X.
	compressed, err := asn1.Marshal(append([]byte{2 + raw[64]&1}, raw[1:33]...))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		value  []byte
		errHas string
	}{
		{"DER OCTET STRING", wrapped, ""},
		{"bare point", raw, ""},
		{"trailing data", append(append([]byte{}, wrapped...), 0), "neither a DER OCTET STRING"},
		{"P-384 point", wrapped384, "not an uncompressed P-256 point"},
		{"compressed point", compressed, "not an uncompressed P-256 point"},
		{"point off the curve", append([]byte{4}, make([]byte, 64)...), "not an uncompressed P-256 point"},
		{"empty", nil, "neither"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pub, err := parseECPoint(tc.value)
			if tc.errHas == "" {
				if err != nil || !pub.Equal(&key.PublicKey) {
					t.Fatalf("parseECPoint = %v, %v; want the key's public half", pub, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.errHas) {
				t.Fatalf("parseECPoint: %v; want %q", err, tc.errHas)
			}
		})
	}
}

func TestP256SignatureDER(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	digest := sha256.Sum256([]byte("x"))
	r, s, err := ecdsa.Sign(rand.Reader, key, digest[:])
	if err != nil {
		t.Fatal(err)
	}
	raw := make([]byte, 64)
	r.FillBytes(raw[:32])
	s.FillBytes(raw[32:])
	der, err := p256SignatureDER(raw)
	if err != nil {
		t.Fatal(err)
	}
	if !ecdsa.VerifyASN1(&key.PublicKey, digest[:], der) {
		t.Error("the DER signature does not verify")
	}
	for _, bad := range [][]byte{raw[:63], append(raw, 0), make([]byte, 64)} {
		if _, err := p256SignatureDER(bad); err == nil {
			t.Errorf("p256SignatureDER(%d bytes, zero %v) succeeded", len(bad), bytes.Equal(bad, make([]byte, 64)))
		}
	}
}
