package issuer

import (
	"bytes"
	"context"
	"crypto"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apiserver/pkg/storage/value"

	"github.com/certapi/certapi/pkg/signer"
)

// CAKeysResource is the resource name under which the CA key pairs are stored, and the name an admin lists in
// an EncryptionConfiguration (as "certificateauthoritykeys.certapi.dev") to encrypt them at rest.
const CAKeysResource = "certificateauthoritykeys"

// ErrFenced means a CA write was refused because this replica no longer holds the election key it wrote
// under: another replica leads now, or the session ended.
var ErrFenced = errors.New("CA write refused: this replica no longer leads (its election key is gone)")

// caRecord is the stored form of the CA key pairs and the rotation's progress. It goes through the same
// value transformers as every other certapi object, so an EncryptionConfiguration encrypts it; it is never
// served by the API. It holds the private keys of the CAs that sign or will sign (Active, Next) only: a
// Retiring CA's entry holds its certificate alone.
//
// One record holds every key rather than one etcd key per CA: it is read and written in one fenced
// transaction as it is, and splitting it would not shrink what a leak exposes, since whoever reads one
// value under certapi's prefix (an etcd snapshot, a backup, a client with read access) reads them all,
// and the record holds at most two keys, both of which sign now or will.
type caRecord struct {
	APIVersion    string     `json:"apiVersion"`
	Kind          string     `json:"kind"`
	Authorities   []caEntry  `json:"authorities"`
	NextPublished *time.Time `json:"nextPublished,omitempty"`
	ForceRotation string     `json:"forceRotation,omitempty"`
	Distrust      string     `json:"distrust,omitempty"`
	SwitchedAt    *time.Time `json:"switchedAt,omitempty"`
	ForcedSwitch  bool       `json:"forcedSwitch,omitempty"`
	// LastStepAt is when the last rotation step was saved (signer.Authorities.LastStepAt).
	LastStepAt *time.Time `json:"lastStepAt,omitempty"`
	// Pending is the next CA's key and certificate request while they wait for an organisation's CA to
	// sign (signer.Authorities.Pending).
	Pending *pendingEntry `json:"pending,omitempty"`
	// Recovery is set when the record was created with none stored and certapi had published CAs
	// before (see Recovery); every later write keeps it.
	Recovery *Recovery `json:"recovery,omitempty"`
}

type caEntry struct {
	// Role is Active, Next or Retiring, as in CertificateAuthority status.
	Role           string     `json:"role"`
	Until          *time.Time `json:"until,omitempty"`
	Distrusted     bool       `json:"distrusted,omitempty"`
	DistrustedAt   *time.Time `json:"distrustedAt,omitempty"`
	CertificatePEM string     `json:"certificatePEM"`
	// KeyPEM is the private key of an Active or Next CA; empty for a Retiring one, which no longer signs,
	// and for a CA whose key is held in an HSM (KeyRef).
	KeyPEM string `json:"keyPEM,omitempty"`
	// KeyRef names the key of an Active or Next CA held in an HSM (signer.ExternalKey, Config.Keys): the
	// record never holds that key, only this reference to it.
	KeyRef string `json:"keyRef,omitempty"`
	// ChainPEM is, for a CA an organisation's CA signed, the verified chain above its certificate
	// (signer.CA.ChainPEM); empty for a self-signed CA.
	ChainPEM string `json:"chainPEM,omitempty"`
}

// pendingEntry is a CA key whose certificate request waits for a signature.
type pendingEntry struct {
	// KeyPEM is the key in memory; KeyRef names it instead when it is held in an HSM.
	KeyPEM     string    `json:"keyPEM,omitempty"`
	KeyRef     string    `json:"keyRef,omitempty"`
	RequestPEM string    `json:"requestPEM"`
	CreatedAt  time.Time `json:"createdAt"`
	Reason     string    `json:"reason,omitempty"`
}

// Roles of CA entries in the record and in CertificateAuthority status.
const (
	RoleActive   = "Active"
	RoleNext     = "Next"
	RoleRetiring = "Retiring"
)

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func timeOf(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}

func encodeRecord(a signer.Authorities) (caRecord, error) {
	rec := caRecord{APIVersion: "certapi.dev/internal", Kind: "CertificateAuthorityKeys",
		NextPublished: timePtr(a.NextPublished), ForceRotation: a.ForceRotation, Distrust: a.Distrust,
		SwitchedAt: timePtr(a.SwitchedAt), ForcedSwitch: a.ForcedSwitch, LastStepAt: timePtr(a.LastStepAt)}
	add := func(role string, ca *signer.CA, r signer.Retiring) error {
		var keyPEM, keyRef string
		if role != RoleRetiring {
			var err error
			if keyPEM, keyRef, err = encodeKey(ca.Key); err != nil {
				return fmt.Errorf("encoding the key of the %s CA: %w", role, err)
			}
		}
		rec.Authorities = append(rec.Authorities, caEntry{Role: role, Until: timePtr(r.Until), Distrusted: r.Distrusted,
			DistrustedAt: timePtr(r.DistrustedAt), CertificatePEM: string(ca.CertificatePEM()), KeyPEM: keyPEM, KeyRef: keyRef, ChainPEM: string(ca.ChainPEM())})
		return nil
	}
	if p := a.Pending; p != nil {
		keyPEM, keyRef, err := encodeKey(p.Key)
		if err != nil {
			return rec, fmt.Errorf("encoding the key of the pending CA certificate request: %w", err)
		}
		rec.Pending = &pendingEntry{KeyPEM: keyPEM, KeyRef: keyRef, RequestPEM: string(p.RequestPEM), CreatedAt: p.CreatedAt, Reason: string(p.Reason)}
	}
	if err := add(RoleActive, a.Active, signer.Retiring{}); err != nil {
		return rec, err
	}
	if a.Next != nil {
		if err := add(RoleNext, a.Next, signer.Retiring{}); err != nil {
			return rec, err
		}
	}
	for _, r := range a.Retiring {
		if err := add(RoleRetiring, r.CA, r); err != nil {
			return rec, err
		}
	}
	return rec, nil
}

// encodeKey is a CA key as the record keeps it: PEM for a key in memory, the reference alone for one held
// in an HSM.
func encodeKey(key crypto.Signer) (keyPEM, keyRef string, err error) {
	if ext, ok := key.(signer.ExternalKey); ok {
		return "", ext.KeyRef(), nil
	}
	b, err := signer.EncodeKeyPEM(key)
	return string(b), "", err
}

// externalKeyFunc returns the HSM-held key ref names, whose public half is pub (Issuer.externalKey).
type externalKeyFunc func(ref string, pub crypto.PublicKey) (crypto.Signer, error)

// decodeRecord returns the CAs a record holds, resolving the references of HSM-held keys with
// externalKey. keysToDrop is true when it holds the key of a Retiring CA (a record written before
// Retiring CAs dropped theirs): the key is not loaded, and the leader rewrites the record without it.
func decodeRecord(rec caRecord, externalKey externalKeyFunc) (a signer.Authorities, keysToDrop bool, err error) {
	a = signer.Authorities{NextPublished: timeOf(rec.NextPublished), ForceRotation: rec.ForceRotation, Distrust: rec.Distrust,
		SwitchedAt: timeOf(rec.SwitchedAt), ForcedSwitch: rec.ForcedSwitch, LastStepAt: timeOf(rec.LastStepAt)}
	for i, e := range rec.Authorities {
		var ca *signer.CA
		if e.Role == RoleRetiring {
			keysToDrop = keysToDrop || e.KeyPEM != ""
			ca, err = signer.LoadCACertificate([]byte(e.CertificatePEM))
		} else if e.KeyRef != "" {
			ca, err = loadExternalCA([]byte(e.CertificatePEM), e.KeyRef, externalKey)
		} else {
			ca, err = signer.LoadCA([]byte(e.CertificatePEM), []byte(e.KeyPEM))
		}
		if err != nil {
			return a, false, fmt.Errorf("loading CA %d (%s) of the stored record: %w", i, e.Role, err)
		}
		if ca, err = ca.WithChain([]byte(e.ChainPEM)); err != nil {
			return a, false, fmt.Errorf("loading CA %d (%s) of the stored record: %w", i, e.Role, err)
		}
		switch e.Role {
		case RoleActive:
			a.Active = ca
		case RoleNext:
			a.Next = ca
		case RoleRetiring:
			a.Retiring = append(a.Retiring, signer.Retiring{CA: ca, Until: timeOf(e.Until), Distrusted: e.Distrusted, DistrustedAt: timeOf(e.DistrustedAt)})
		default:
			return a, false, fmt.Errorf("CA %d of the stored record has unknown role %q", i, e.Role)
		}
	}
	if a.Active == nil {
		return a, false, errors.New("the stored CA record has no Active CA")
	}
	if p := rec.Pending; p != nil {
		key, err := decodePendingKey(p, externalKey)
		if err != nil {
			return a, false, fmt.Errorf("loading the key of the pending CA certificate request of the stored record: %w", err)
		}
		a.Pending = &signer.PendingCA{Key: key, RequestPEM: []byte(p.RequestPEM), CreatedAt: p.CreatedAt, Reason: signer.PendingReason(p.Reason)}
	}
	return a, keysToDrop, nil
}

// loadExternalCA loads a CA whose key an HSM holds under ref.
func loadExternalCA(certPEM []byte, ref string, externalKey externalKeyFunc) (*signer.CA, error) {
	ca, err := signer.LoadCACertificate(certPEM)
	if err != nil {
		return nil, err
	}
	key, err := externalKey(ref, ca.Certificate.PublicKey)
	if err != nil {
		return nil, err
	}
	return signer.LoadCAWithKey(certPEM, key)
}

// decodePendingKey returns the key of a pending certificate request: from PEM, or the HSM's key whose
// public half is the request's.
func decodePendingKey(p *pendingEntry, externalKey externalKeyFunc) (crypto.Signer, error) {
	if p.KeyRef == "" {
		return signer.ParseKeyPEM([]byte(p.KeyPEM))
	}
	csr, err := signer.ParseCSR([]byte(p.RequestPEM))
	if err != nil {
		return nil, fmt.Errorf("reading the request: %w", err)
	}
	return externalKey(p.KeyRef, csr.PublicKey)
}

// ErrUnencryptedRecord means the stored CA record is not encrypted although the encryption configuration
// encrypts the CA keys, and the leader did not load it (Config.RequireEncryptedRecord).
var ErrUnencryptedRecord = errors.New("the CA record in etcd is stored unencrypted while the encryption configuration encrypts the CA keys: " +
	"it was written before encryption was configured, or by someone who can write to certapi's etcd, and certapi does not load it. " +
	"If it predates the encryption configuration, start certapi once with --allow-unencrypted-ca-record, which loads it and rewrites it encrypted; " +
	"otherwise restore a snapshot taken with encryption configured")

// encryptedPrefix starts every value an encrypting provider of an EncryptionConfiguration writes.
var encryptedPrefix = []byte("k8s:enc:")

// keystore reads and writes the CA record in etcd. Writes are fenced on the leader's election key.
type keystore struct {
	client      *clientv3.Client
	key         string
	transformer value.Transformer
	// requireEncrypted refuses a record stored without an encrypting provider's prefix.
	requireEncrypted bool
	// externalKey resolves the references of HSM-held keys (Issuer.externalKey).
	externalKey externalKeyFunc
}

// authenticatedData binds the ciphertext to its key, as kube-apiserver's etcd3 store does, so a value
// copied under another key does not decrypt.
type authenticatedData string

func (d authenticatedData) AuthenticatedData() []byte { return []byte(d) }

// caStore keeps the CA record: keystore in etcd; tests use a fake.
type caStore interface {
	load(ctx context.Context) (loaded, error)
	save(ctx context.Context, a signer.Authorities, rec *Recovery, modRevision int64, leaderKey string, leaderRev int64) (int64, error)
}

// loaded is what keystore.load read.
type loaded struct {
	auth signer.Authorities
	// modRevision is the record's, for the next fenced write.
	modRevision int64
	// found is false when no record is stored.
	found bool
	// recovery is the record's Recovery, nil when it has none.
	recovery *Recovery
	// rewrite says why the record must be written again as it is now (empty: it need not be): it was
	// stored in a form the transformer calls stale (unencrypted while encryption is configured now, or
	// under an old key), or it holds the key of a Retiring CA.
	rewrite string
}

// load returns the stored CAs, the record's mod revision, and whether the leader must rewrite it.
func (k *keystore) load(ctx context.Context) (loaded, error) {
	resp, err := k.client.Get(ctx, k.key)
	if err != nil {
		return loaded{}, fmt.Errorf("reading the CA record: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return loaded{}, nil
	}
	kv := resp.Kvs[0]
	// With identity listed as a later provider, the transformer reads a plaintext value and only calls it
	// stale; a CA planted in etcd or in a crafted snapshot would then be loaded, and signed with. Refused
	// unless the record is known to predate the encryption configuration (the migration flag).
	if k.requireEncrypted && !bytes.HasPrefix(kv.Value, encryptedPrefix) {
		return loaded{}, ErrUnencryptedRecord
	}
	data, stale, err := k.transformer.TransformFromStorage(ctx, kv.Value, authenticatedData(k.key))
	if err != nil {
		return loaded{}, fmt.Errorf("decrypting the CA record (is --encryption-provider-config the one it was written with?): %w", err)
	}
	var rec caRecord
	if err := json.Unmarshal(data, &rec); err != nil {
		return loaded{}, fmt.Errorf("decoding the CA record: %w", err)
	}
	a, keysToDrop, err := decodeRecord(rec, k.externalKey)
	if err != nil {
		return loaded{}, err
	}
	l := loaded{auth: a, modRevision: kv.ModRevision, found: true, recovery: rec.Recovery}
	switch {
	case stale:
		l.rewrite = "it is stored unencrypted or under an old key of the encryption configuration"
	case keysToDrop:
		l.rewrite = "it holds the private key of a Retiring CA, which no longer signs"
	}
	return l, nil
}

// save writes a, with recovery, if the record is still at modRevision (0: absent) and the election key
// leaderKey still has createRevision leaderRev, and returns the new mod revision. Both conditions are one
// etcd transaction, so a deposed leader cannot overwrite a CA that its successor wrote.
func (k *keystore) save(ctx context.Context, a signer.Authorities, recovery *Recovery, modRevision int64, leaderKey string, leaderRev int64) (int64, error) {
	rec, err := encodeRecord(a)
	if err != nil {
		return 0, err
	}
	rec.Recovery = recovery
	data, err := json.Marshal(rec)
	if err != nil {
		return 0, fmt.Errorf("encoding the CA record: %w", err)
	}
	stored, err := k.transformer.TransformToStorage(ctx, data, authenticatedData(k.key))
	if err != nil {
		return 0, fmt.Errorf("encrypting the CA record: %w", err)
	}
	var recordCmp clientv3.Cmp
	if modRevision == 0 {
		recordCmp = clientv3.Compare(clientv3.CreateRevision(k.key), "=", 0)
	} else {
		recordCmp = clientv3.Compare(clientv3.ModRevision(k.key), "=", modRevision)
	}
	resp, err := k.client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(leaderKey), "=", leaderRev), recordCmp).
		Then(clientv3.OpPut(k.key, string(stored))).
		Commit()
	if err != nil {
		return 0, fmt.Errorf("writing the CA record: %w", err)
	}
	if !resp.Succeeded {
		return 0, ErrFenced
	}
	return resp.Header.Revision, nil
}

// identityTransformer stores values as they are, when no encryption is configured.
type identityTransformer struct{}

func (identityTransformer) TransformFromStorage(_ context.Context, data []byte, _ value.Context) ([]byte, bool, error) {
	return data, false, nil
}

func (identityTransformer) TransformToStorage(_ context.Context, data []byte, _ value.Context) ([]byte, error) {
	return data, nil
}
