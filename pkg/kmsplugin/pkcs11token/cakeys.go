//go:build cgo

package pkcs11token

import (
	"bytes"
	"context"
	"crypto"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/miekg/pkcs11"

	"github.com/certapi/certapi/pkg/keyplugin"
)

// CAKeys is the token as certapi's CA key store (a keyplugin.Backend): ECDSA P-256 key pairs made in the
// token, whose private halves are token objects that are private, sensitive, not extractable and may
// only sign, and signatures made there with CKM_ECDSA. It shares the Token's session and lock.
type CAKeys struct {
	t *Token
}

var _ keyplugin.Backend = (*CAKeys)(nil)

// CAKeys returns the token as certapi's CA key store.
func (t *Token) CAKeys() *CAKeys { return &CAKeys{t: t} }

// listBatch is how many object handles List asks C_FindObjects for at a time.
const listBatch = 64

// NewKey makes an ECDSA P-256 key pair labelled label (CKM_EC_KEY_PAIR_GEN) with a random CKA_ID shared
// by both halves, and returns its reference and public key. Labels need not be unique.
func (k *CAKeys) NewKey(ctx context.Context, label string) (string, crypto.PublicKey, error) {
	id := make([]byte, idSize)
	if _, err := rand.Read(id); err != nil {
		return "", nil, fmt.Errorf("making a CKA_ID: %w", err)
	}
	ref := formatCARef(id)
	public := []*pkcs11.Attribute{
		pkcs11.NewAttribute(pkcs11.CKA_CLASS, pkcs11.CKO_PUBLIC_KEY),
		pkcs11.NewAttribute(pkcs11.CKA_KEY_TYPE, pkcs11.CKK_EC),
		pkcs11.NewAttribute(pkcs11.CKA_EC_PARAMS, p256Params),
		pkcs11.NewAttribute(pkcs11.CKA_LABEL, label),
		pkcs11.NewAttribute(pkcs11.CKA_ID, id),
		pkcs11.NewAttribute(pkcs11.CKA_TOKEN, true),
		pkcs11.NewAttribute(pkcs11.CKA_PRIVATE, false),
		pkcs11.NewAttribute(pkcs11.CKA_VERIFY, true),
		pkcs11.NewAttribute(pkcs11.CKA_ENCRYPT, false),
		pkcs11.NewAttribute(pkcs11.CKA_WRAP, false),
	}
	private := []*pkcs11.Attribute{
		pkcs11.NewAttribute(pkcs11.CKA_CLASS, pkcs11.CKO_PRIVATE_KEY),
		pkcs11.NewAttribute(pkcs11.CKA_KEY_TYPE, pkcs11.CKK_EC),
		pkcs11.NewAttribute(pkcs11.CKA_LABEL, label),
		pkcs11.NewAttribute(pkcs11.CKA_ID, id),
		pkcs11.NewAttribute(pkcs11.CKA_TOKEN, true),
		pkcs11.NewAttribute(pkcs11.CKA_PRIVATE, true),
		pkcs11.NewAttribute(pkcs11.CKA_SENSITIVE, true),
		pkcs11.NewAttribute(pkcs11.CKA_EXTRACTABLE, false),
		pkcs11.NewAttribute(pkcs11.CKA_SIGN, true),
		pkcs11.NewAttribute(pkcs11.CKA_DECRYPT, false),
		pkcs11.NewAttribute(pkcs11.CKA_UNWRAP, false),
		pkcs11.NewAttribute(pkcs11.CKA_DERIVE, false),
	}
	var pub crypto.PublicKey
	err := k.t.doRW(ctx, func(s pkcs11.SessionHandle) error {
		pubH, privH, err := k.t.p.GenerateKeyPair(s, []*pkcs11.Mechanism{pkcs11.NewMechanism(pkcs11.CKM_EC_KEY_PAIR_GEN, nil)}, public, private)
		if err != nil {
			return fmt.Errorf("C_GenerateKeyPair(CKM_EC_KEY_PAIR_GEN, P-256) for %q: %w", label, err)
		}
		attrs, err := k.t.p.GetAttributeValue(s, pubH, []*pkcs11.Attribute{pkcs11.NewAttribute(pkcs11.CKA_EC_POINT, nil)})
		if err == nil {
			pub, err = parseECPoint(attrs[0].Value)
		}
		if err != nil {
			// Leave no key behind that nobody has the public half of.
			_ = k.t.p.DestroyObject(s, privH)
			_ = k.t.p.DestroyObject(s, pubH)
			return fmt.Errorf("reading the public key of the new key %s: %w", ref, err)
		}
		return nil
	})
	if err != nil {
		return "", nil, caKeyError(err)
	}
	return ref, pub, nil
}

// Sign signs digest with CKM_ECDSA under the private key ref names, inside the token, and returns the
// ASN.1 DER signature. hash is not needed: CKM_ECDSA signs the digest as given.
func (k *CAKeys) Sign(ctx context.Context, ref string, digest []byte, _ crypto.Hash) ([]byte, error) {
	id, err := parseCARef(ref)
	if err != nil {
		return nil, err
	}
	var sig []byte
	err = k.t.do(ctx, func(s pkcs11.SessionHandle) error {
		h, err := k.t.caKeyHandle(s, ref, id)
		if err != nil {
			return err
		}
		if err := k.t.p.SignInit(s, []*pkcs11.Mechanism{pkcs11.NewMechanism(pkcs11.CKM_ECDSA, nil)}, h); err != nil {
			return fmt.Errorf("C_SignInit(CKM_ECDSA) with %s: %w", ref, err)
		}
		raw, err := k.t.p.Sign(s, digest)
		if err != nil {
			return fmt.Errorf("C_Sign with %s: %w", ref, err)
		}
		sig, err = p256SignatureDER(raw)
		return err
	})
	if err != nil {
		return nil, caKeyError(err)
	}
	return sig, nil
}

// Destroy destroys both halves of the key pair ref names (the EC private and public key objects with its
// CKA_ID), or returns keyplugin.ErrNotFound when the token holds neither.
func (k *CAKeys) Destroy(ctx context.Context, ref string) error {
	id, err := parseCARef(ref)
	if err != nil {
		return err
	}
	err = k.t.doRW(ctx, func(s pkcs11.SessionHandle) error {
		var found []pkcs11.ObjectHandle
		for _, class := range []uint{pkcs11.CKO_PRIVATE_KEY, pkcs11.CKO_PUBLIC_KEY} {
			handles, err := k.t.findAll(s, ecKeyTemplate(class, id))
			if err != nil {
				return err
			}
			found = append(found, handles...)
		}
		if len(found) == 0 {
			return fmt.Errorf("%w: the token holds no EC key %s", keyplugin.ErrNotFound, ref)
		}
		delete(k.t.handles, caHandleKey(id))
		for _, h := range found {
			if err := k.t.p.DestroyObject(s, h); err != nil {
				return fmt.Errorf("C_DestroyObject of %s: %w", ref, err)
			}
		}
		return nil
	})
	return caKeyError(err)
}

// List returns the EC private keys in the token whose label starts with labelPrefix; keys without a
// CKA_ID, which no reference can name, are left out.
func (k *CAKeys) List(ctx context.Context, labelPrefix string) ([]keyplugin.KeyInfo, error) {
	var keys []keyplugin.KeyInfo
	err := k.t.do(ctx, func(s pkcs11.SessionHandle) error {
		keys = nil // a retry starts again
		handles, err := k.t.findAll(s, ecKeyTemplate(pkcs11.CKO_PRIVATE_KEY, nil))
		if err != nil {
			return err
		}
		for _, h := range handles {
			attrs, err := k.t.p.GetAttributeValue(s, h, []*pkcs11.Attribute{
				pkcs11.NewAttribute(pkcs11.CKA_LABEL, nil),
				pkcs11.NewAttribute(pkcs11.CKA_ID, nil),
			})
			if err != nil {
				return fmt.Errorf("reading the label and CKA_ID of an EC private key: %w", err)
			}
			label, id := string(attrs[0].Value), attrs[1].Value
			if len(id) == 0 || len(id) > maxCAKeyIDSize || !strings.HasPrefix(label, labelPrefix) {
				continue
			}
			keys = append(keys, keyplugin.KeyInfo{Ref: formatCARef(id), Label: label})
		}
		return nil
	})
	if err != nil {
		return nil, caKeyError(err)
	}
	return keys, nil
}

// Check returns nil when the token's session is open and logged in as the user, opening and logging in
// again when the token dropped it.
func (k *CAKeys) Check(ctx context.Context) error {
	return caKeyError(k.t.do(ctx, func(s pkcs11.SessionHandle) error {
		info, err := k.t.p.GetSessionInfo(s)
		if err != nil {
			return fmt.Errorf("C_GetSessionInfo: %w", err)
		}
		if info.State != pkcs11.CKS_RO_USER_FUNCTIONS && info.State != pkcs11.CKS_RW_USER_FUNCTIONS {
			// Retriable: do opens a new session and logs in.
			return fmt.Errorf("the session is in state %d, not logged in as the user: %w", info.State, pkcs11.Error(pkcs11.CKR_USER_NOT_LOGGED_IN))
		}
		return nil
	}))
}

// caKeyHandle returns the handle of the EC private key with CKA_ID id, finding it the first time in a
// session and refusing a key that may not sign, could leave the token or is not on P-256.
func (t *Token) caKeyHandle(s pkcs11.SessionHandle, ref string, id []byte) (pkcs11.ObjectHandle, error) {
	if h, ok := t.handles[caHandleKey(id)]; ok {
		return h, nil
	}
	found, err := t.find(s, ecKeyTemplate(pkcs11.CKO_PRIVATE_KEY, id))
	if err != nil {
		return 0, err
	}
	switch len(found) {
	case 0:
		return 0, fmt.Errorf("%w: the token holds no EC private key %s", keyplugin.ErrNotFound, ref)
	case 1:
	default:
		return 0, fmt.Errorf("the token holds %d EC private keys %s: a CKA_ID must name one key", len(found), ref)
	}
	attrs, err := t.p.GetAttributeValue(s, found[0], []*pkcs11.Attribute{
		pkcs11.NewAttribute(pkcs11.CKA_EC_PARAMS, nil),
		pkcs11.NewAttribute(pkcs11.CKA_SIGN, nil),
		pkcs11.NewAttribute(pkcs11.CKA_SENSITIVE, nil),
		pkcs11.NewAttribute(pkcs11.CKA_EXTRACTABLE, nil),
	})
	if err != nil {
		return 0, fmt.Errorf("reading the attributes of %s: %w", ref, err)
	}
	var problems []string
	flags := map[uint]bool{}
	for _, a := range attrs {
		if a.Type == pkcs11.CKA_EC_PARAMS {
			if !bytes.Equal(a.Value, p256Params) {
				problems = append(problems, "it is not on P-256 (CKA_EC_PARAMS "+hex.EncodeToString(a.Value)+")")
			}
			continue
		}
		flags[a.Type] = len(a.Value) == 1 && a.Value[0] != 0
	}
	if !flags[pkcs11.CKA_SIGN] {
		problems = append(problems, "it may not sign (CKA_SIGN)")
	}
	if !flags[pkcs11.CKA_SENSITIVE] {
		problems = append(problems, "it is not sensitive (CKA_SENSITIVE)")
	}
	if flags[pkcs11.CKA_EXTRACTABLE] {
		problems = append(problems, "it is extractable (CKA_EXTRACTABLE)")
	}
	if len(problems) > 0 {
		return 0, fmt.Errorf("refusing the key %s: %s", ref, strings.Join(problems, "; "))
	}
	t.handles[caHandleKey(id)] = found[0]
	return found[0], nil
}

// caHandleKey is the key of a CA key's handle in Token.handles, apart from the AES keys' key IDs.
func caHandleKey(id []byte) string { return "ca:" + hex.EncodeToString(id) }

// ecKeyTemplate matches EC keys of class (CKO_PRIVATE_KEY or CKO_PUBLIC_KEY) and, when id is not nil,
// that CKA_ID.
func ecKeyTemplate(class uint, id []byte) []*pkcs11.Attribute {
	template := []*pkcs11.Attribute{
		pkcs11.NewAttribute(pkcs11.CKA_CLASS, class),
		pkcs11.NewAttribute(pkcs11.CKA_KEY_TYPE, pkcs11.CKK_EC),
	}
	if id != nil {
		template = append(template, pkcs11.NewAttribute(pkcs11.CKA_ID, id))
	}
	return template
}

// findAll returns the handles of every object matching template.
func (t *Token) findAll(s pkcs11.SessionHandle, template []*pkcs11.Attribute) ([]pkcs11.ObjectHandle, error) {
	if err := t.p.FindObjectsInit(s, template); err != nil {
		return nil, fmt.Errorf("C_FindObjectsInit: %w", err)
	}
	var all []pkcs11.ObjectHandle
	var err error
	for {
		var found []pkcs11.ObjectHandle
		if found, _, err = t.p.FindObjects(s, listBatch); err != nil || len(found) == 0 {
			break
		}
		all = append(all, found...)
	}
	if errFinal := t.p.FindObjectsFinal(s); err == nil && errFinal != nil {
		err = errFinal
	}
	if err != nil {
		return nil, fmt.Errorf("C_FindObjects: %w", err)
	}
	return all, nil
}

// doRW runs fn on a read-write session of its own, logged in as the user, under the Token's lock: making
// and destroying token objects needs one, serving needs only the read-only session do keeps.
func (t *Token) doRW(ctx context.Context, fn func(pkcs11.SessionHandle) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.finished {
		return errClosed
	}
	s, err := t.p.OpenSession(t.slot, pkcs11.CKF_SERIAL_SESSION|pkcs11.CKF_RW_SESSION)
	if err != nil {
		return fmt.Errorf("opening a read-write session on the token in slot %d: %w", t.slot, err)
	}
	defer t.p.CloseSession(s) //nolint:errcheck // nothing to do about it
	if err := t.p.Login(s, pkcs11.CKU_USER, t.cfg.PIN); err != nil && !isCode(err, pkcs11.CKR_USER_ALREADY_LOGGED_IN) {
		return fmt.Errorf("logging in to the token in slot %d: %w", t.slot, err)
	}
	return fn(s)
}

// caKeyError wraps keyplugin.ErrUnavailable around an error that means the token cannot be used right now,
// so that the key plugin answers 503 (try again later) rather than 500.
func caKeyError(err error) error {
	if err == nil || errors.Is(err, keyplugin.ErrNotFound) || errors.Is(err, keyplugin.ErrInvalidRequest) {
		return err
	}
	if errors.Is(err, errClosed) || unavailable(err) {
		return fmt.Errorf("%w: %w", keyplugin.ErrUnavailable, err)
	}
	return err
}

// unavailable reports whether err means the token, its session or its login is gone or busy: a state a
// later call may find changed.
func unavailable(err error) bool {
	for _, code := range []uint{
		pkcs11.CKR_SESSION_HANDLE_INVALID, pkcs11.CKR_SESSION_CLOSED, pkcs11.CKR_USER_NOT_LOGGED_IN,
		pkcs11.CKR_DEVICE_REMOVED, pkcs11.CKR_TOKEN_NOT_PRESENT, pkcs11.CKR_TOKEN_NOT_RECOGNIZED,
		pkcs11.CKR_DEVICE_ERROR, pkcs11.CKR_DEVICE_MEMORY, pkcs11.CKR_SESSION_COUNT,
		pkcs11.CKR_CRYPTOKI_NOT_INITIALIZED, pkcs11.CKR_SLOT_ID_INVALID,
	} {
		if isCode(err, code) {
			return true
		}
	}
	return false
}
