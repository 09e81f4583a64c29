//go:build !cgo

package pkcs11token

import (
	"context"
	"crypto"
	"errors"

	"github.com/certapi/certapi/pkg/keyplugin"
	"github.com/certapi/certapi/pkg/kmsplugin"
)

// errNoCgo is what every call answers in a build without cgo, which cannot load a PKCS#11 module.
var errNoCgo = errors.New("certapi-kms-pkcs11 was built without cgo and cannot load a PKCS#11 module: build it with CGO_ENABLED=1 (make build does)")

// Token stands in for the PKCS#11 token in a build without cgo: Open fails, saying so.
type Token struct{}

var _ kmsplugin.Token = (*Token)(nil)

// Open fails: loading a PKCS#11 module needs cgo.
func Open(context.Context, Config) (*Token, error) { return nil, errNoCgo }

// Close does nothing.
func (*Token) Close() error { return nil }

// CurrentKey fails: see Open.
func (*Token) CurrentKey(context.Context) (kmsplugin.KeyRef, error) {
	return kmsplugin.KeyRef{}, errNoCgo
}

// Encrypt fails: see Open.
func (*Token) Encrypt(context.Context, kmsplugin.KeyRef, []byte, []byte, []byte) (kmsplugin.Sealed, error) {
	return kmsplugin.Sealed{}, errNoCgo
}

// Decrypt fails: see Open.
func (*Token) Decrypt(context.Context, kmsplugin.KeyRef, kmsplugin.Sealed, []byte) ([]byte, error) {
	return nil, errNoCgo
}

// CreateKey fails: see Open.
func (*Token) CreateKey(context.Context, string) (kmsplugin.KeyRef, error) {
	return kmsplugin.KeyRef{}, errNoCgo
}

// CAKeys stands in for the token as certapi's CA key store in a build without cgo: every call fails,
// saying so.
type CAKeys struct{}

var _ keyplugin.Backend = (*CAKeys)(nil)

// CAKeys returns the stand-in.
func (*Token) CAKeys() *CAKeys { return &CAKeys{} }

// NewKey fails: see Open.
func (*CAKeys) NewKey(context.Context, string) (string, crypto.PublicKey, error) {
	return "", nil, errNoCgo
}

// Sign fails: see Open.
func (*CAKeys) Sign(context.Context, string, []byte, crypto.Hash) ([]byte, error) {
	return nil, errNoCgo
}

// Destroy fails: see Open.
func (*CAKeys) Destroy(context.Context, string) error { return errNoCgo }

// List fails: see Open.
func (*CAKeys) List(context.Context, string) ([]keyplugin.KeyInfo, error) { return nil, errNoCgo }

// Check fails: see Open.
func (*CAKeys) Check(context.Context) error { return errNoCgo }
