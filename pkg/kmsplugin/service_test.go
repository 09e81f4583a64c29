package kmsplugin

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"errors"
	"fmt"
	"strings"
	"testing"

	kmsservice "k8s.io/kms/pkg/service"
)

// softToken is a Token in memory: AES-GCM in Go, keys by label and ID, one current label.
type softToken struct {
	keys    map[string][]byte // KeyRef.KeyID() -> key
	current KeyRef
	broken  error // every call fails with it when set
}

func newSoftToken(t *testing.T, refs ...KeyRef) *softToken {
	t.Helper()
	tok := &softToken{keys: map[string][]byte{}}
	for i, ref := range refs {
		tok.keys[ref.KeyID()] = bytes.Repeat([]byte{byte(i + 1)}, 32)
	}
	tok.current = refs[0]
	return tok
}

func (s *softToken) gcm(key KeyRef) (cipher.AEAD, error) {
	k, ok := s.keys[key.KeyID()]
	if !ok {
		return nil, fmt.Errorf("no key %s", key)
	}
	block, err := aes.NewCipher(k)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

func (s *softToken) CurrentKey(context.Context) (KeyRef, error) {
	if s.broken != nil {
		return KeyRef{}, s.broken
	}
	return s.current, nil
}

func (s *softToken) Encrypt(_ context.Context, key KeyRef, iv, plaintext, aad []byte) (Sealed, error) {
	if s.broken != nil {
		return Sealed{}, s.broken
	}
	g, err := s.gcm(key)
	if err != nil {
		return Sealed{}, err
	}
	return Sealed{IV: append([]byte(nil), iv...), Ciphertext: g.Seal(nil, iv, plaintext, aad)}, nil
}

func (s *softToken) Decrypt(_ context.Context, key KeyRef, sealed Sealed, aad []byte) ([]byte, error) {
	if s.broken != nil {
		return nil, s.broken
	}
	g, err := s.gcm(key)
	if err != nil {
		return nil, err
	}
	return g.Open(nil, sealed.IV, sealed.Ciphertext, aad)
}

func TestServiceRoundTrip(t *testing.T) {
	ctx := context.Background()
	k1 := KeyRef{Label: "kek-1", ID: []byte{1}}
	k2 := KeyRef{Label: "kek-2", ID: []byte{2}}
	seed := []byte("a DEK seed of thirty-two bytes!!")

	for _, tc := range []struct {
		name string
		// after runs between Encrypt and Decrypt; it may change the token and the request.
		after  func(tok *softToken, req *kmsservice.DecryptRequest)
		errHas string // empty: Decrypt returns the plaintext
	}{
		{"same key", func(*softToken, *kmsservice.DecryptRequest) {}, ""},
		{"after a rotation the old key still decrypts", func(tok *softToken, _ *kmsservice.DecryptRequest) { tok.current = k2 }, ""},
		{"the old key deleted", func(tok *softToken, _ *kmsservice.DecryptRequest) {
			tok.current = k2
			delete(tok.keys, k1.KeyID())
		}, "no key"},
		{"presented under another key's ID", func(_ *softToken, req *kmsservice.DecryptRequest) { req.KeyID = k2.KeyID() }, "authentication failed"},
		{"a key ID not made by the plugin", func(_ *softToken, req *kmsservice.DecryptRequest) { req.KeyID = "arn:aws:kms:key/1" }, "does not start with"},
		{"ciphertext flipped", func(_ *softToken, req *kmsservice.DecryptRequest) { req.Ciphertext[len(req.Ciphertext)-1] ^= 1 }, "authentication failed"},
		{"ciphertext truncated", func(_ *softToken, req *kmsservice.DecryptRequest) { req.Ciphertext = req.Ciphertext[:5] }, "too short"},
		{"token down", func(tok *softToken, _ *kmsservice.DecryptRequest) { tok.broken = errors.New("CKR_DEVICE_REMOVED") }, "CKR_DEVICE_REMOVED"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tok := newSoftToken(t, k1, k2)
			svc := NewService(tok)
			enc, err := svc.Encrypt(ctx, "uid", seed)
			if err != nil {
				t.Fatal(err)
			}
			if enc.KeyID != k1.KeyID() {
				t.Fatalf("Encrypt's key ID %q, want %q", enc.KeyID, k1.KeyID())
			}
			if bytes.Contains(enc.Ciphertext, seed) {
				t.Fatal("the ciphertext contains the plaintext")
			}
			req := &kmsservice.DecryptRequest{Ciphertext: enc.Ciphertext, KeyID: enc.KeyID}
			tc.after(tok, req)
			got, err := svc.Decrypt(ctx, "uid", req)
			if tc.errHas != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errHas) {
					t.Fatalf("Decrypt() = %q, %v; want an error saying %q", got, err, tc.errHas)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, seed) {
				t.Fatalf("Decrypt() = %q, want %q", got, seed)
			}
		})
	}
}

func TestServiceFreshIVs(t *testing.T) {
	svc := NewService(newSoftToken(t, KeyRef{Label: "k", ID: []byte{1}}))
	seen := map[string]bool{}
	for range 100 {
		enc, err := svc.Encrypt(context.Background(), "uid", []byte("same plaintext"))
		if err != nil {
			t.Fatal(err)
		}
		s, err := ParseSealed(enc.Ciphertext)
		if err != nil {
			t.Fatal(err)
		}
		if seen[string(s.IV)] {
			t.Fatalf("IV %x used twice", s.IV)
		}
		seen[string(s.IV)] = true
	}
}

func TestServiceStatus(t *testing.T) {
	k1 := KeyRef{Label: "kek-1", ID: []byte{1}}
	for _, tc := range []struct {
		name   string
		change func(tok *softToken)
		want   *kmsservice.StatusResponse // nil: an error is wanted
		errHas string
	}{
		{"healthy", func(*softToken) {}, &kmsservice.StatusResponse{Version: "v2", Healthz: "ok", KeyID: k1.KeyID()}, ""},
		{"rotated", func(tok *softToken) {
			k2 := KeyRef{Label: "kek-2", ID: []byte{2}}
			tok.keys[k2.KeyID()] = bytes.Repeat([]byte{9}, 32)
			tok.current = k2
		}, &kmsservice.StatusResponse{Version: "v2", Healthz: "ok", KeyID: KeyRef{Label: "kek-2", ID: []byte{2}}.KeyID()}, ""},
		{"token down", func(tok *softToken) { tok.broken = errors.New("CKR_TOKEN_NOT_PRESENT") }, nil, "CKR_TOKEN_NOT_PRESENT"},
		{"current key gone", func(tok *softToken) { delete(tok.keys, k1.KeyID()) }, nil, "no key"},
		{"current key without CKA_ID", func(tok *softToken) { tok.current = KeyRef{Label: "kek-1"} }, nil, "no CKA_ID"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tok := newSoftToken(t, k1)
			tc.change(tok)
			got, err := NewService(tok).Status(context.Background())
			if tc.want == nil {
				if err == nil || !strings.Contains(err.Error(), tc.errHas) {
					t.Fatalf("Status() = %+v, %v; want an error saying %q", got, err, tc.errHas)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if *got != *tc.want {
				t.Fatalf("Status() = %+v, want %+v", *got, *tc.want)
			}
		})
	}
}
