package kmsplugin

import (
	"bytes"
	"strings"
	"testing"
)

func TestKeyIDRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		ref  KeyRef
		want string
	}{
		{"plain", KeyRef{Label: "certapi-kek-1", ID: []byte{0x01, 0xab}}, "pkcs11:object=certapi-kek-1;id=%01%AB;type=secret-key"},
		{"reserved characters in the label", KeyRef{Label: "a;b=c/d %e", ID: []byte("x")}, "pkcs11:object=a%3Bb%3Dc%2Fd%20%25e;id=x;type=secret-key"},
		{"unicode label", KeyRef{Label: "clé", ID: []byte{0}}, "pkcs11:object=cl%C3%A9;id=%00;type=secret-key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.ref.KeyID()
			if got != tc.want {
				t.Fatalf("KeyID() = %q, want %q", got, tc.want)
			}
			back, err := ParseKeyID(got)
			if err != nil {
				t.Fatal(err)
			}
			if back.Label != tc.ref.Label || !bytes.Equal(back.ID, tc.ref.ID) {
				t.Fatalf("ParseKeyID(%q) = %+v, want %+v", got, back, tc.ref)
			}
		})
	}
}

func TestParseKeyID(t *testing.T) {
	for _, tc := range []struct {
		name, keyID string
		want        *KeyRef // nil: an error is wanted
		errHas      string
	}{
		{"attributes in another order", "pkcs11:type=secret-key;id=%0a;object=k", &KeyRef{Label: "k", ID: []byte{0x0a}}, ""},
		{"unreserved bytes encoded", "pkcs11:object=%6B;id=%41;type=secret-key", &KeyRef{Label: "k", ID: []byte("A")}, ""},
		{"another scheme", "aws:arn:kms:key", nil, "does not start with"},
		{"empty", "", nil, "does not start with"},
		{"no type", "pkcs11:object=k;id=%01", nil, `"type" missing`},
		{"no id", "pkcs11:object=k;type=secret-key", nil, `"id" missing`},
		{"empty id", "pkcs11:object=k;id=;type=secret-key", nil, "empty label or id"},
		{"empty label", "pkcs11:object=;id=%01;type=secret-key", nil, "empty label or id"},
		{"another type", "pkcs11:object=k;id=%01;type=private", nil, "want secret-key"},
		{"repeated attribute", "pkcs11:object=k;object=l;id=%01;type=secret-key", nil, "repeated"},
		{"unknown attribute", "pkcs11:object=k;id=%01;type=secret-key;token=t", nil, "unknown attribute"},
		{"attribute without value", "pkcs11:object=k;id;type=secret-key", nil, "has no value"},
		{"truncated escape", "pkcs11:object=k%4;id=%01;type=secret-key", nil, "truncated"},
		{"bad escape", "pkcs11:object=k%zz;id=%01;type=secret-key", nil, "bad percent-encoding"},
		{"raw reserved byte", "pkcs11:object=a b;id=%01;type=secret-key", nil, "must be percent-encoded"},
		{"too long", "pkcs11:object=" + strings.Repeat("a", 1100) + ";id=%01;type=secret-key", nil, "at most 1024"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseKeyID(tc.keyID)
			if tc.want == nil {
				if err == nil || !strings.Contains(err.Error(), tc.errHas) {
					t.Fatalf("ParseKeyID(%q) = %+v, %v; want an error saying %q", tc.keyID, got, err, tc.errHas)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Label != tc.want.Label || !bytes.Equal(got.ID, tc.want.ID) {
				t.Fatalf("ParseKeyID(%q) = %+v, want %+v", tc.keyID, got, *tc.want)
			}
		})
	}
}

func TestKeyRefValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		ref    KeyRef
		errHas string // empty: valid
	}{
		{"valid", KeyRef{Label: "k", ID: []byte{1}}, ""},
		{"no label", KeyRef{ID: []byte{1}}, "empty label"},
		{"no CKA_ID", KeyRef{Label: "k"}, "no CKA_ID"},
		{"key ID too long", KeyRef{Label: strings.Repeat("é", 200), ID: []byte{1}}, "allows 1024"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.ref.Validate()
			if tc.errHas == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.errHas) {
				t.Fatalf("Validate() = %v, want an error saying %q", err, tc.errHas)
			}
		})
	}
}
