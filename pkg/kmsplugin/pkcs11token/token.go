//go:build cgo

package pkcs11token

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/miekg/pkcs11"

	"github.com/certapi/certapi/pkg/kmsplugin"
)

// keySize is the length of the AES keys CreateKey makes: AES-256.
const keySize = 32

// idSize is the length of the random CKA_ID CreateKey gives a key.
const idSize = 16

// Token is a logged-in PKCS#11 token. Its methods are safe for concurrent use; they take turns on one
// session (PKCS#11 runs one operation at a time per session, and a KMS v2 plugin is called a few times a
// minute). A session the token dropped (a restarted HSM, a network HSM that reconnected) is opened and
// logged in again once per call.
type Token struct {
	cfg  Config
	p    *pkcs11.Ctx
	slot uint

	mu       sync.Mutex
	session  pkcs11.SessionHandle
	open     bool
	handles  map[string]pkcs11.ObjectHandle // by key ID, for keys found in this session
	finished bool
}

var _ kmsplugin.Token = (*Token)(nil)

// errClosed is what a call on a closed Token answers.
var errClosed = errors.New("the PKCS#11 token is closed")

// Open loads the module, finds the token and logs in. Close releases it.
func Open(ctx context.Context, cfg Config) (_ *Token, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p := pkcs11.New(cfg.Module)
	if p == nil {
		return nil, fmt.Errorf("loading the PKCS#11 module %s: it cannot be opened or has no C_GetFunctionList", cfg.Module)
	}
	if err := p.Initialize(); err != nil && !isCode(err, pkcs11.CKR_CRYPTOKI_ALREADY_INITIALIZED) {
		p.Destroy()
		return nil, fmt.Errorf("initialising the PKCS#11 module %s: %w", cfg.Module, err)
	}
	t := &Token{cfg: cfg, p: p, handles: map[string]pkcs11.ObjectHandle{}}
	defer func() {
		if err != nil {
			_ = t.Close()
		}
	}()
	if t.slot, err = t.findSlot(); err != nil {
		return nil, err
	}
	if err := t.do(ctx, func(pkcs11.SessionHandle) error { return nil }); err != nil {
		return nil, err
	}
	return t, nil
}

// Close logs out, closes the session and finalises the module.
func (t *Token) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.finished {
		return nil
	}
	t.finished = true
	t.closeSessionLocked()
	err := t.p.Finalize()
	t.p.Destroy()
	if err != nil {
		return fmt.Errorf("finalising the PKCS#11 module: %w", err)
	}
	return nil
}

// findSlot returns the slot of the token named by TokenLabel, or Slot when no label is given.
func (t *Token) findSlot() (uint, error) {
	slots, err := t.p.GetSlotList(true)
	if err != nil {
		return 0, fmt.Errorf("listing the PKCS#11 slots: %w", err)
	}
	var labels []string
	for _, slot := range slots {
		if t.cfg.TokenLabel == "" {
			if slot == t.cfg.Slot {
				return slot, nil
			}
			continue
		}
		info, err := t.p.GetTokenInfo(slot)
		if err != nil {
			return 0, fmt.Errorf("reading the token in slot %d: %w", slot, err)
		}
		label := strings.TrimRight(info.Label, " \x00") // CK_TOKEN_INFO pads the label with blanks
		if label == t.cfg.TokenLabel {
			return slot, nil
		}
		labels = append(labels, fmt.Sprintf("%q (slot %d)", label, slot))
	}
	if t.cfg.TokenLabel == "" {
		return 0, fmt.Errorf("no token in slot %d; slots with a token: %v", t.cfg.Slot, slots)
	}
	return 0, fmt.Errorf("no token labelled %q; tokens: %s", t.cfg.TokenLabel, strings.Join(labels, ", "))
}

// do runs fn on the logged-in session, opening it first when needed. When fn fails because the token
// dropped the session or a key handle went stale, it opens a new session and runs fn once more.
func (t *Token) do(ctx context.Context, fn func(pkcs11.SessionHandle) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.finished {
		return errClosed
	}
	var err error
	for attempt := 0; attempt < 2; attempt++ {
		if !t.open {
			if err = t.openSessionLocked(); err != nil {
				continue
			}
		}
		if err = fn(t.session); err == nil || !retriable(err) {
			return err
		}
		// The session or a handle is gone: start again from a fresh session.
		t.closeSessionLocked()
	}
	return err
}

func (t *Token) openSessionLocked() error {
	session, err := t.p.OpenSession(t.slot, pkcs11.CKF_SERIAL_SESSION)
	if err != nil {
		return fmt.Errorf("opening a session on the token in slot %d: %w", t.slot, err)
	}
	if err := t.p.Login(session, pkcs11.CKU_USER, t.cfg.PIN); err != nil && !isCode(err, pkcs11.CKR_USER_ALREADY_LOGGED_IN) {
		_ = t.p.CloseSession(session)
		return fmt.Errorf("logging in to the token in slot %d: %w", t.slot, err)
	}
	t.session, t.open = session, true
	return nil
}

func (t *Token) closeSessionLocked() {
	if t.open {
		_ = t.p.Logout(t.session)
		_ = t.p.CloseSession(t.session)
	}
	t.open = false
	clear(t.handles)
}

// CurrentKey finds the one AES key labelled KeyLabel and checks that it may encrypt and cannot leave the
// token.
func (t *Token) CurrentKey(ctx context.Context) (kmsplugin.KeyRef, error) {
	var ref kmsplugin.KeyRef
	if t.cfg.KeyLabel == "" {
		return ref, errors.New("no key label is configured: the KMS v2 API needs the label of its AES key")
	}
	err := t.do(ctx, func(s pkcs11.SessionHandle) error {
		found, err := t.find(s, aesKeyTemplate(t.cfg.KeyLabel, nil))
		if err != nil {
			return err
		}
		switch len(found) {
		case 0:
			return fmt.Errorf("no AES secret key labelled %q in the token", t.cfg.KeyLabel)
		case 1:
		default:
			return fmt.Errorf("%d AES secret keys are labelled %q in the token: give each key a label of its own", len(found), t.cfg.KeyLabel)
		}
		id, err := t.checkKey(s, found[0], t.cfg.KeyLabel, true)
		if err != nil {
			return err
		}
		ref = kmsplugin.KeyRef{Label: t.cfg.KeyLabel, ID: id}
		t.handles[ref.KeyID()] = found[0]
		return nil
	})
	return ref, err
}

// Encrypt encrypts with CKM_AES_GCM under key inside the token.
func (t *Token) Encrypt(ctx context.Context, key kmsplugin.KeyRef, iv, plaintext, aad []byte) (kmsplugin.Sealed, error) {
	var sealed kmsplugin.Sealed
	err := t.do(ctx, func(s pkcs11.SessionHandle) error {
		h, err := t.handle(s, key)
		if err != nil {
			return err
		}
		params := pkcs11.NewGCMParams(iv, aad, kmsplugin.GCMTagSize*8)
		defer params.Free()
		if err := t.p.EncryptInit(s, []*pkcs11.Mechanism{pkcs11.NewMechanism(pkcs11.CKM_AES_GCM, params)}, h); err != nil {
			return fmt.Errorf("C_EncryptInit(CKM_AES_GCM): %w", err)
		}
		ciphertext, err := t.p.Encrypt(s, plaintext)
		if err != nil {
			return fmt.Errorf("C_Encrypt: %w", err)
		}
		used := params.IV() // some tokens ignore the IV given and write their own
		if len(used) == 0 {
			used = append([]byte(nil), iv...)
		}
		sealed = kmsplugin.Sealed{IV: used, Ciphertext: ciphertext}
		return nil
	})
	return sealed, err
}

// Decrypt decrypts with CKM_AES_GCM under key inside the token.
func (t *Token) Decrypt(ctx context.Context, key kmsplugin.KeyRef, sealed kmsplugin.Sealed, aad []byte) ([]byte, error) {
	var plaintext []byte
	err := t.do(ctx, func(s pkcs11.SessionHandle) error {
		h, err := t.handle(s, key)
		if err != nil {
			return err
		}
		params := pkcs11.NewGCMParams(sealed.IV, aad, kmsplugin.GCMTagSize*8)
		defer params.Free()
		if err := t.p.DecryptInit(s, []*pkcs11.Mechanism{pkcs11.NewMechanism(pkcs11.CKM_AES_GCM, params)}, h); err != nil {
			return fmt.Errorf("C_DecryptInit(CKM_AES_GCM): %w", err)
		}
		if plaintext, err = t.p.Decrypt(s, sealed.Ciphertext); err != nil {
			return fmt.Errorf("C_Decrypt (a wrong key, IV or key ID, or altered ciphertext): %w", err)
		}
		return nil
	})
	return plaintext, err
}

// CreateKey makes a new AES-256 key labelled label in the token, with a random CKA_ID: sensitive, not
// extractable, for encryption and decryption only. It refuses a label some AES key already has.
func (t *Token) CreateKey(ctx context.Context, label string) (kmsplugin.KeyRef, error) {
	id := make([]byte, idSize)
	if _, err := rand.Read(id); err != nil {
		return kmsplugin.KeyRef{}, fmt.Errorf("making a CKA_ID: %w", err)
	}
	ref := kmsplugin.KeyRef{Label: label, ID: id}
	if err := ref.Validate(); err != nil {
		return kmsplugin.KeyRef{}, err
	}
	if err := ctx.Err(); err != nil {
		return kmsplugin.KeyRef{}, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.finished {
		return kmsplugin.KeyRef{}, errClosed
	}
	// Objects are made in a read-write session of their own; serving needs only a read-only one.
	s, err := t.p.OpenSession(t.slot, pkcs11.CKF_SERIAL_SESSION|pkcs11.CKF_RW_SESSION)
	if err != nil {
		return kmsplugin.KeyRef{}, fmt.Errorf("opening a read-write session on the token in slot %d: %w", t.slot, err)
	}
	defer t.p.CloseSession(s) //nolint:errcheck // nothing to do about it
	if err := t.p.Login(s, pkcs11.CKU_USER, t.cfg.PIN); err != nil && !isCode(err, pkcs11.CKR_USER_ALREADY_LOGGED_IN) {
		return kmsplugin.KeyRef{}, fmt.Errorf("logging in to the token in slot %d: %w", t.slot, err)
	}
	existing, err := t.find(s, aesKeyTemplate(label, nil))
	if err != nil {
		return kmsplugin.KeyRef{}, err
	}
	if len(existing) > 0 {
		return kmsplugin.KeyRef{}, fmt.Errorf("the token already holds an AES key labelled %q: choose a new label for a new key", label)
	}
	template := []*pkcs11.Attribute{
		pkcs11.NewAttribute(pkcs11.CKA_CLASS, pkcs11.CKO_SECRET_KEY),
		pkcs11.NewAttribute(pkcs11.CKA_KEY_TYPE, pkcs11.CKK_AES),
		pkcs11.NewAttribute(pkcs11.CKA_VALUE_LEN, keySize),
		pkcs11.NewAttribute(pkcs11.CKA_LABEL, label),
		pkcs11.NewAttribute(pkcs11.CKA_ID, id),
		pkcs11.NewAttribute(pkcs11.CKA_TOKEN, true),
		pkcs11.NewAttribute(pkcs11.CKA_PRIVATE, true),
		pkcs11.NewAttribute(pkcs11.CKA_SENSITIVE, true),
		pkcs11.NewAttribute(pkcs11.CKA_EXTRACTABLE, false),
		pkcs11.NewAttribute(pkcs11.CKA_ENCRYPT, true),
		pkcs11.NewAttribute(pkcs11.CKA_DECRYPT, true),
		pkcs11.NewAttribute(pkcs11.CKA_WRAP, false),
		pkcs11.NewAttribute(pkcs11.CKA_UNWRAP, false),
		pkcs11.NewAttribute(pkcs11.CKA_SIGN, false),
		pkcs11.NewAttribute(pkcs11.CKA_VERIFY, false),
		pkcs11.NewAttribute(pkcs11.CKA_DERIVE, false),
	}
	if _, err := t.p.GenerateKey(s, []*pkcs11.Mechanism{pkcs11.NewMechanism(pkcs11.CKM_AES_KEY_GEN, nil)}, template); err != nil {
		return kmsplugin.KeyRef{}, fmt.Errorf("C_GenerateKey(CKM_AES_KEY_GEN) for %q: %w", label, err)
	}
	return ref, nil
}

// handle returns the handle of the key named by key, finding it by label and CKA_ID the first time in a
// session.
func (t *Token) handle(s pkcs11.SessionHandle, key kmsplugin.KeyRef) (pkcs11.ObjectHandle, error) {
	if h, ok := t.handles[key.KeyID()]; ok {
		return h, nil
	}
	found, err := t.find(s, aesKeyTemplate(key.Label, key.ID))
	if err != nil {
		return 0, err
	}
	switch len(found) {
	case 0:
		return 0, fmt.Errorf("the token holds no AES key %s (deleted?); what it encrypted cannot be decrypted without it", key)
	case 1:
	default:
		return 0, fmt.Errorf("the token holds %d AES keys %s", len(found), key)
	}
	if _, err := t.checkKey(s, found[0], key.Label, false); err != nil {
		return 0, err
	}
	t.handles[key.KeyID()] = found[0]
	return found[0], nil
}

// find returns the handles of the objects matching template.
func (t *Token) find(s pkcs11.SessionHandle, template []*pkcs11.Attribute) ([]pkcs11.ObjectHandle, error) {
	if err := t.p.FindObjectsInit(s, template); err != nil {
		return nil, fmt.Errorf("C_FindObjectsInit: %w", err)
	}
	found, _, err := t.p.FindObjects(s, 2) // two tell "one" from "more than one"
	if errFinal := t.p.FindObjectsFinal(s); err == nil && errFinal != nil {
		err = errFinal
	}
	if err != nil {
		return nil, fmt.Errorf("C_FindObjects: %w", err)
	}
	return found, nil
}

// checkKey reads a key's CKA_ID and usage and refuses a key that could leave the token, or cannot
// decrypt (nor encrypt, when encrypt is set).
func (t *Token) checkKey(s pkcs11.SessionHandle, h pkcs11.ObjectHandle, label string, encrypt bool) ([]byte, error) {
	attrs, err := t.p.GetAttributeValue(s, h, []*pkcs11.Attribute{
		pkcs11.NewAttribute(pkcs11.CKA_ID, nil),
		pkcs11.NewAttribute(pkcs11.CKA_SENSITIVE, nil),
		pkcs11.NewAttribute(pkcs11.CKA_EXTRACTABLE, nil),
		pkcs11.NewAttribute(pkcs11.CKA_ENCRYPT, nil),
		pkcs11.NewAttribute(pkcs11.CKA_DECRYPT, nil),
	})
	if err != nil {
		return nil, fmt.Errorf("reading the attributes of the key labelled %q: %w", label, err)
	}
	var id []byte
	flags := map[uint]bool{}
	for _, a := range attrs {
		if a.Type == pkcs11.CKA_ID {
			id = a.Value
			continue
		}
		flags[a.Type] = len(a.Value) == 1 && a.Value[0] != 0
	}
	var problems []string
	if !flags[pkcs11.CKA_SENSITIVE] {
		problems = append(problems, "it is not sensitive (CKA_SENSITIVE)")
	}
	if flags[pkcs11.CKA_EXTRACTABLE] {
		problems = append(problems, "it is extractable (CKA_EXTRACTABLE)")
	}
	if !flags[pkcs11.CKA_DECRYPT] {
		problems = append(problems, "it may not decrypt (CKA_DECRYPT)")
	}
	if encrypt && !flags[pkcs11.CKA_ENCRYPT] {
		problems = append(problems, "it may not encrypt (CKA_ENCRYPT)")
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("refusing the key labelled %q: %s", label, strings.Join(problems, "; "))
	}
	if len(id) == 0 {
		return nil, fmt.Errorf("the key labelled %q has no CKA_ID; give it one (certapi-kms-pkcs11 create-key does, pkcs11-tool --id does)", label)
	}
	return id, nil
}

// aesKeyTemplate matches AES secret keys with label and, when id is not nil, that CKA_ID.
func aesKeyTemplate(label string, id []byte) []*pkcs11.Attribute {
	template := []*pkcs11.Attribute{
		pkcs11.NewAttribute(pkcs11.CKA_CLASS, pkcs11.CKO_SECRET_KEY),
		pkcs11.NewAttribute(pkcs11.CKA_KEY_TYPE, pkcs11.CKK_AES),
		pkcs11.NewAttribute(pkcs11.CKA_LABEL, label),
	}
	if id != nil {
		template = append(template, pkcs11.NewAttribute(pkcs11.CKA_ID, id))
	}
	return template
}

// isCode reports whether err is the PKCS#11 return value code.
func isCode(err error, code uint) bool {
	var e pkcs11.Error
	return errors.As(err, &e) && uint(e) == code
}

// retriable reports whether err means the session or a handle went away, so that a new session may
// succeed where this one failed.
func retriable(err error) bool {
	for _, code := range []uint{
		pkcs11.CKR_SESSION_HANDLE_INVALID, pkcs11.CKR_SESSION_CLOSED, pkcs11.CKR_USER_NOT_LOGGED_IN,
		pkcs11.CKR_DEVICE_REMOVED, pkcs11.CKR_TOKEN_NOT_PRESENT, pkcs11.CKR_OBJECT_HANDLE_INVALID,
		pkcs11.CKR_KEY_HANDLE_INVALID,
	} {
		if isCode(err, code) {
			return true
		}
	}
	return false
}
