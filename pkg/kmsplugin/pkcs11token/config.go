// Package pkcs11token is kmsplugin's Token over a PKCS#11 module (an HSM's, or SoftHSM2's): it logs in to
// one token, finds AES keys by label, encrypts and decrypts with CKM_AES_GCM inside the token, and makes
// new keys that cannot leave it. Through CAKeys it is also a keyplugin.Backend: it makes certapi's CA keys
// (ECDSA P-256) in the token, signs with them there and destroys them. Loading a PKCS#11 module needs cgo
// (dlopen); built without cgo, Open says so.
package pkcs11token

import (
	"errors"
	"fmt"
)

// Config says which token and key to use.
type Config struct {
	// Module is the path of the PKCS#11 module (shared library), e.g. /usr/lib/softhsm/libsofthsm2.so.
	Module string
	// TokenLabel selects the token by its label; Slot is used when it is empty.
	TokenLabel string
	// Slot selects the token by slot ID when TokenLabel is empty.
	Slot uint
	// PIN is the user PIN. It is held only to log in again after the token drops the session.
	PIN string
	// KeyLabel is the CKA_LABEL of the AES key that encrypts (the current key). Keys under other labels
	// still decrypt what they encrypted, while they exist in the token. Serving the KMS v2 API (CurrentKey)
	// and CreateKey need it; CAKeys does not.
	KeyLabel string
}

// Validate says what is missing to open the token. The key label is checked where it is used: the KMS
// v2 API needs it, the CA keys do not.
func (c Config) Validate() error {
	var errs []error
	if c.Module == "" {
		errs = append(errs, errors.New("the PKCS#11 module path is required"))
	}
	if c.PIN == "" {
		errs = append(errs, errors.New("the user PIN is required"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("PKCS#11 configuration: %w", err)
	}
	return nil
}
