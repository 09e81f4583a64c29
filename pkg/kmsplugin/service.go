// Package kmsplugin is a KMS v2 plugin's service (k8s.io/kms/pkg/service.Service) over AES keys that
// never leave a token: it frames what the token encrypts, names keys by key IDs kube-apiserver stores and
// hands back, and finds the key that encrypted a value when it decrypts, so that data stays readable
// after the plugin moves to a new key. The token itself (PKCS#11, in pkcs11token) is behind Token; this
// package needs neither cgo nor a device, and its tests use a software Token.
package kmsplugin

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"

	"k8s.io/klog/v2"
	kmsservice "k8s.io/kms/pkg/service"
)

// APIVersion is the KMS API version Status reports.
const APIVersion = "v2"

// HealthzOK is the healthz Status reports when the token answered a round trip.
const HealthzOK = "ok"

// Token is what the service needs of the device that holds the keys: AES-GCM inside it, by key.
type Token interface {
	// CurrentKey returns the key new data is encrypted with. It reads the token each time, so that a
	// key replaced under its label is seen.
	CurrentKey(ctx context.Context) (KeyRef, error)
	// Encrypt encrypts plaintext with AES-GCM under key, inside the token, with the IV iv and the
	// additional authenticated data aad. It returns the IV the token used (some tokens pick their own)
	// and the ciphertext with its tag.
	Encrypt(ctx context.Context, key KeyRef, iv, plaintext, aad []byte) (Sealed, error)
	// Decrypt reverses Encrypt under the key named by key, which must still exist in the token.
	Decrypt(ctx context.Context, key KeyRef, sealed Sealed, aad []byte) ([]byte, error)
}

// Service implements k8s.io/kms/pkg/service.Service over a Token. Each encryption takes a fresh random
// 96-bit IV and binds the key ID as additional authenticated data, so a ciphertext presented under
// another key ID fails authentication instead of decrypting under the wrong key.
type Service struct {
	token Token
	rand  io.Reader
}

var _ kmsservice.Service = (*Service)(nil)

// NewService returns the service over token.
func NewService(token Token) *Service {
	return &Service{token: token, rand: rand.Reader}
}

// statusProbe is the plaintext of Status's round trip through the token.
var statusProbe = []byte("certapi-kms-pkcs11 status probe")

// Encrypt encrypts data under the current key.
func (s *Service) Encrypt(ctx context.Context, uid string, data []byte) (*kmsservice.EncryptResponse, error) {
	key, err := s.token.CurrentKey(ctx)
	if err != nil {
		return nil, fmt.Errorf("finding the current key: %w", err)
	}
	ciphertext, err := s.seal(ctx, key, data)
	if err != nil {
		return nil, err
	}
	klog.FromContext(ctx).V(4).Info("Encrypted", "uid", uid, "keyID", key.KeyID())
	return &kmsservice.EncryptResponse{Ciphertext: ciphertext, KeyID: key.KeyID()}, nil
}

// Decrypt decrypts req.Ciphertext under the key req.KeyID names, which is the key that encrypted it,
// whether or not it is still the current one.
func (s *Service) Decrypt(ctx context.Context, uid string, req *kmsservice.DecryptRequest) ([]byte, error) {
	key, err := ParseKeyID(req.KeyID)
	if err != nil {
		return nil, fmt.Errorf("decrypting: %w", err)
	}
	sealed, err := ParseSealed(req.Ciphertext)
	if err != nil {
		return nil, fmt.Errorf("decrypting under %s: %w", key, err)
	}
	plaintext, err := s.token.Decrypt(ctx, key, sealed, []byte(req.KeyID))
	if err != nil {
		return nil, fmt.Errorf("decrypting under %s: %w", key, err)
	}
	klog.FromContext(ctx).V(4).Info("Decrypted", "uid", uid, "keyID", req.KeyID)
	return plaintext, nil
}

// Status reports healthz "ok" and the current key's ID only when the token encrypts and decrypts a probe
// under the current key; otherwise it returns an error, which kube-apiserver counts as the plugin being
// unhealthy.
func (s *Service) Status(ctx context.Context) (*kmsservice.StatusResponse, error) {
	key, err := s.token.CurrentKey(ctx)
	if err != nil {
		return nil, fmt.Errorf("finding the current key: %w", err)
	}
	ciphertext, err := s.seal(ctx, key, statusProbe)
	if err != nil {
		return nil, fmt.Errorf("status probe: %w", err)
	}
	plaintext, err := s.Decrypt(ctx, "status", &kmsservice.DecryptRequest{Ciphertext: ciphertext, KeyID: key.KeyID()})
	if err != nil {
		return nil, fmt.Errorf("status probe: %w", err)
	}
	if !bytes.Equal(plaintext, statusProbe) {
		return nil, fmt.Errorf("status probe: the token decrypted under %s something other than it encrypted", key)
	}
	return &kmsservice.StatusResponse{Version: APIVersion, Healthz: HealthzOK, KeyID: key.KeyID()}, nil
}

// seal encrypts data under key with a fresh IV and frames the result.
func (s *Service) seal(ctx context.Context, key KeyRef, data []byte) ([]byte, error) {
	if err := key.Validate(); err != nil {
		return nil, err
	}
	iv := make([]byte, GCMIVSize)
	if _, err := io.ReadFull(s.rand, iv); err != nil {
		return nil, fmt.Errorf("making an IV: %w", err)
	}
	sealed, err := s.token.Encrypt(ctx, key, iv, data, []byte(key.KeyID()))
	if err != nil {
		return nil, fmt.Errorf("encrypting under %s: %w", key, err)
	}
	out, err := sealed.Marshal()
	if err != nil {
		return nil, fmt.Errorf("encrypting under %s: %w", key, err)
	}
	return out, nil
}
