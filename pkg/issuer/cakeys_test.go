package issuer

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/certapi/certapi/pkg/signer"
	"github.com/certapi/certapi/pkg/signer/signertest"
)

// noHSM resolves no key reference: a record of keys in memory only.
func noHSM(ref string, _ crypto.PublicKey) (crypto.Signer, error) {
	return nil, fmt.Errorf("no HSM in this test, yet the record names key %s", ref)
}

// fakeHSM is CAKeys over keys in memory, standing in for a key plugin: what certapi stores and destroys.
type fakeHSM struct {
	mu        sync.Mutex
	keys      map[string]*ecdsa.PrivateKey
	labels    map[string]string
	destroyed []string
	made      int
	down      bool
	// beforeSign, when set, runs once at the start of the next signature, outside the lock: what
	// happens elsewhere while a signature is on its way to the token.
	beforeSign func()
	// afterDestroy, when set, runs once after the next key is destroyed, outside the lock.
	afterDestroy func()
}

func newFakeHSM() *fakeHSM {
	return &fakeHSM{keys: map[string]*ecdsa.PrivateKey{}, labels: map[string]string{}}
}

// hsmKey is a key of fakeHSM, as the plugin's client returns it: it signs through the HSM.
type hsmKey struct {
	h   *fakeHSM
	ref string
	pub crypto.PublicKey
}

func (k hsmKey) Public() crypto.PublicKey { return k.pub }
func (k hsmKey) KeyRef() string           { return k.ref }
func (k hsmKey) Sign(r io.Reader, digest []byte, opts crypto.SignerOpts) ([]byte, error) {
	k.h.mu.Lock()
	before := k.h.beforeSign
	k.h.beforeSign = nil
	k.h.mu.Unlock()
	if before != nil {
		before()
	}
	k.h.mu.Lock()
	defer k.h.mu.Unlock()
	if k.h.down {
		return nil, fmt.Errorf("%w: token down", signer.ErrKeyUnavailable)
	}
	priv, ok := k.h.keys[k.ref]
	if !ok {
		return nil, fmt.Errorf("key %s not found", k.ref)
	}
	return priv.Sign(r, digest, opts)
}

func (h *fakeHSM) add(label string, priv *ecdsa.PrivateKey) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	ref := fmt.Sprintf("id=%02d", h.made) // never one of a destroyed key's
	h.made++
	h.keys[ref], h.labels[ref] = priv, label
	return ref
}

func (h *fakeHSM) NewKey(_ context.Context, label string) (crypto.Signer, string, error) {
	if h.down {
		return nil, "", fmt.Errorf("%w: token down", signer.ErrKeyUnavailable)
	}
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, "", err
	}
	ref := h.add(label, priv)
	return hsmKey{h: h, ref: ref, pub: priv.Public()}, ref, nil
}

func (h *fakeHSM) Key(ref string, pub crypto.PublicKey) crypto.Signer {
	return hsmKey{h: h, ref: ref, pub: pub}
}

func (h *fakeHSM) Destroy(_ context.Context, ref string) error {
	h.mu.Lock()
	delete(h.keys, ref)
	delete(h.labels, ref)
	h.destroyed = append(h.destroyed, ref)
	after := h.afterDestroy
	h.afterDestroy = nil
	h.mu.Unlock()
	if after != nil {
		after()
	}
	return nil
}

func (h *fakeHSM) List(_ context.Context, prefix string) (map[string]string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]string{}
	for ref, label := range h.labels {
		if strings.HasPrefix(label, prefix) {
			out[ref] = label
		}
	}
	return out, nil
}

func hsmIssuer(t *testing.T, h *fakeHSM, now time.Time) *Issuer {
	t.Helper()
	i := &Issuer{cfg: Config{Keys: h, ClusterDomain: signertest.ClusterDomain, Clock: clocktesting.NewFakePassiveClock(now)}}
	return i
}

// hsmCA is a CA whose key the fake HSM holds, made as the issuer makes one.
func hsmCA(t *testing.T, i *Issuer, now time.Time) *signer.CA {
	t.Helper()
	key, err := i.newCAKey(context.Background(), now)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := signer.NewCA(signer.CAOptions{ClusterDomain: signertest.ClusterDomain, Now: now, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// TestRecordKeepsHSMKeysAsReferences: a CA record of HSM-held keys holds their references and no key
// material, and loads back into keys that sign through the HSM.
func TestRecordKeepsHSMKeysAsReferences(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	h := newFakeHSM()
	i := hsmIssuer(t, h, now)
	active, next := hsmCA(t, i, now), hsmCA(t, i, now)
	pending, err := i.newRequest(context.Background(), signer.PendingRotation, now)
	if err != nil {
		t.Fatal(err)
	}
	a := signer.Authorities{Active: active, Next: next, Pending: pending,
		Retiring: []signer.Retiring{{CA: signertest.NewCA(t, now, time.Hour).WithoutKey(), Until: now.Add(time.Hour)}}}
	rec, err := encodeRecord(a)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), "PRIVATE KEY") || strings.Contains(string(raw), `"keyPEM"`) {
		t.Fatalf("the record of HSM-held keys holds key material: %s", raw)
	}
	for _, e := range rec.Authorities[:2] {
		if e.KeyRef == "" {
			t.Fatalf("%s CA: no key reference in the record", e.Role)
		}
	}
	if rec.Pending == nil || rec.Pending.KeyRef == "" {
		t.Fatal("the pending request's key reference is not in the record")
	}

	got, _, err := decodeRecord(rec, i.externalKey)
	if err != nil {
		t.Fatal(err)
	}
	for name, k := range map[string]crypto.Signer{"Active": got.Active.Key, "Next": got.Next.Key, "Pending": got.Pending.Key} {
		ext, ok := k.(signer.ExternalKey)
		if !ok {
			t.Fatalf("%s key loaded as %T, want a key held in the HSM", name, k)
		}
		digest := sha256.Sum256([]byte(name))
		sig, err := ext.Sign(rand.Reader, digest[:], crypto.SHA256)
		if err != nil {
			t.Fatalf("%s key: signing through the HSM: %v", name, err)
		}
		if !ecdsa.VerifyASN1(ext.Public().(*ecdsa.PublicKey), digest[:], sig) {
			t.Fatalf("%s key: the signature does not verify with the CA's public key", name)
		}
	}

	// Without the plugin, the record does not load: certapi never signs with another key instead.
	_, _, err = decodeRecord(rec, (&Issuer{}).externalKey)
	if err == nil || !strings.Contains(err.Error(), "--ca-key-plugin") {
		t.Fatalf("decoding a record of HSM-held keys without a key plugin: %v; want an error naming --ca-key-plugin", err)
	}
}

// TestHSMDownFailsAsUnavailable: a token that cannot sign fails a new key and a signature with
// signer.ErrKeyUnavailable (503 with Retry-After), and no key is made in memory instead.
func TestHSMDownFailsAsUnavailable(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	h := newFakeHSM()
	i := hsmIssuer(t, h, now)
	ca := hsmCA(t, i, now)
	h.down = true
	if _, err := i.newCAKey(context.Background(), now); !errors.Is(err, signer.ErrKeyUnavailable) {
		t.Fatalf("making a key while the token is down: %v; want ErrKeyUnavailable", err)
	}
	digest := sha256.Sum256([]byte("x"))
	if _, err := ca.Key.Sign(rand.Reader, digest[:], crypto.SHA256); !errors.Is(err, signer.ErrKeyUnavailable) {
		t.Fatalf("signing while the token is down: %v; want ErrKeyUnavailable", err)
	}
}

// TestDestroyDropped: once a record is stored, the keys of the CAs it no longer holds as signing (Active,
// Next, Pending) are destroyed in the HSM, and no other.
func TestDestroyDropped(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	h := newFakeHSM()
	i := hsmIssuer(t, h, now)
	oldActive, next, later := hsmCA(t, i, now), hsmCA(t, i, now), hsmCA(t, i, now)
	pending, err := i.newRequest(context.Background(), signer.PendingRotation, now)
	if err != nil {
		t.Fatal(err)
	}
	inMemory := signertest.NewCA(t, now, time.Hour)
	ref := func(ca *signer.CA) string { return ca.Key.(signer.ExternalKey).KeyRef() }
	for _, tc := range []struct {
		name          string
		before, after signer.Authorities
		want          []string
	}{
		{"publish Next: nothing dropped",
			signer.Authorities{Active: oldActive}, signer.Authorities{Active: oldActive, Next: next}, nil},
		{"switch: the old Active retires, its key goes",
			signer.Authorities{Active: oldActive, Next: next},
			signer.Authorities{Active: next, Retiring: []signer.Retiring{{CA: oldActive.WithoutKey()}}}, []string{ref(oldActive)}},
		{"import: the pending key becomes Next's, kept",
			signer.Authorities{Active: later, Pending: pending}, signer.Authorities{Active: later, Next: &signer.CA{Certificate: later.Certificate, Key: pending.Key}}, nil},
		{"a CA of a key in memory retires: nothing to destroy",
			signer.Authorities{Active: inMemory, Next: later}, signer.Authorities{Active: later}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h.destroyed = nil
			i.destroyDropped(context.Background(), tc.before, tc.after)
			if !slices.Equal(h.destroyed, tc.want) {
				t.Fatalf("destroyed %v, want %v", h.destroyed, tc.want)
			}
		})
	}
}

// TestSweepOrphanKeys: at a term's start, the keys certapi made that no CA record names and that are
// older than orphanAge are destroyed; the record's keys, young keys (maybe about to be recorded) and
// keys certapi did not make stay.
func TestSweepOrphanKeys(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	h := newFakeHSM()
	i := hsmIssuer(t, h, now)
	active := hsmCA(t, i, now.Add(-48*time.Hour))
	priv := signertest.ECKey(t, elliptic.P256())
	oldOrphan := h.add(fmt.Sprintf("%s%d-0a0b0c0d", CAKeyLabelPrefix, now.Add(-2*orphanAge).Unix()), priv)
	youngOrphan := h.add(fmt.Sprintf("%s%d-0a0b0c0e", CAKeyLabelPrefix, now.Add(-orphanAge/2).Unix()), priv)
	foreign := h.add("kms-kek-1", priv)
	odd := h.add(CAKeyLabelPrefix+"by-hand", priv)

	i.sweepOrphanKeys(context.Background(), signer.Authorities{Active: active})
	if !slices.Equal(h.destroyed, []string{oldOrphan}) {
		t.Fatalf("destroyed %v, want only the old orphan %s", h.destroyed, oldOrphan)
	}
	for _, ref := range []string{active.Key.(signer.ExternalKey).KeyRef(), youngOrphan, foreign, odd} {
		if _, ok := h.keys[ref]; !ok {
			t.Errorf("key %s (%s) was destroyed", ref, h.labels[ref])
		}
	}
}

// TestSignAgainAfterTheSwitch: a signature begun with the Active CA while a rotation's switch replaces it
// and destroys its key in the token (destroyDropped, right after the switch) is made again with the new
// Active CA: the caller gets a certificate, never "no such key".
func TestSignAgainAfterTheSwitch(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	h := newFakeHSM()
	i := hsmIssuer(t, h, now)
	old, next := hsmCA(t, i, now), hsmCA(t, i, now)
	i.now = func() time.Time { return now }
	i.leading, i.leaseRenewedAt, i.leaseTTL = true, now, time.Minute
	i.auth = signer.Authorities{Active: old, Next: next}
	switched := signer.Authorities{Active: next, Retiring: []signer.Retiring{{CA: old.WithoutKey(), Until: now.Add(time.Hour)}}}
	i.termKey = "term"
	// The switch as Rotate and an import store it: the CAs this replica signs with replaced, then the keys
	// no CA holds any more destroyed.
	h.beforeSign = func() {
		i.adopt(context.Background(), signer.Authorities{Active: old, Next: next}, switched, 2, "term", false)
	}
	pub, err := x509.MarshalPKIXPublicKey(signertest.ECKey(t, elliptic.P256()).Public())
	if err != nil {
		t.Fatal(err)
	}
	req := Request{Namespace: "team-a", Name: "webhook", ServiceName: "webhook", Duration: time.Hour, PublicKeyPKIX: pub, Path: PathServingCerts}
	res, err := i.Sign(req)
	if err != nil {
		t.Fatalf("a signature begun as the switch destroyed the old key: %v; want a certificate of the new Active CA", err)
	}
	if len(h.destroyed) != 1 || h.destroyed[0] != old.Key.(signer.ExternalKey).KeyRef() {
		t.Fatalf("destroyed %v; want the old Active CA's key", h.destroyed)
	}
	certs, err := signer.ParseBundle([]byte(res.CertificatePEM))
	if err != nil || len(certs) == 0 {
		t.Fatalf("parsing the certificate: %v", err)
	}
	if err := certs[0].CheckSignatureFrom(next.Certificate); err != nil {
		t.Fatalf("the certificate is not the new Active CA's: %v", err)
	}

	// A signature that starts the moment the old key is destroyed: the switch came first, so it signs
	// with the new Active CA at once.
	third := hsmCA(t, i, now)
	i.auth = signer.Authorities{Active: next, Next: third}
	again := signer.Authorities{Active: third, Retiring: []signer.Retiring{{CA: next.WithoutKey(), Until: now.Add(time.Hour)}}}
	var afterErr error
	h.afterDestroy = func() { _, afterErr = i.Sign(req) }
	i.adopt(context.Background(), signer.Authorities{Active: next, Next: third}, again, 3, "term", false)
	if afterErr != nil {
		t.Fatalf("a signature begun as the old key was destroyed: %v; the switch must come before the destroy", afterErr)
	}
}

// lostTermKV answers the issuer's check of its leader key as etcd does once the term has ended: no key.
type lostTermKV struct{ clientv3.KV }

func (lostTermKV) Get(context.Context, string, ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	return &clientv3.GetResponse{}, nil
}

// fencedStore is a caStore with no record whose every write is fenced: the term ended first.
type fencedStore struct{ memStore }

func (*fencedStore) save(context.Context, signer.Authorities, *Recovery, int64, string, int64) (int64, error) {
	return 0, ErrFenced
}

// TestFencedCreateDestroysTheNewKey: a leader whose term ends between making a new CA's key in the HSM
// and the fenced write of its record (which then stores nothing) destroys that key at once, rather than
// leave it to a later term's sweep an hour on.
func TestFencedCreateDestroysTheNewKey(t *testing.T) {
	now := time.Now()
	h := newFakeHSM()
	i := hsmIssuer(t, h, now)
	i.cfg.CADuration = signer.DefaultCADuration
	i.cfg.Client = &clientv3.Client{KV: lostTermKV{}}
	i.store = &fencedStore{}
	i.now = time.Now
	if _, created, err := i.loadOrCreateCA(context.Background(), "leader", 1); !errors.Is(err, ErrFenced) || created {
		t.Fatalf("loadOrCreateCA with the term ended: created %v, %v; want ErrFenced", created, err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.made != 1 || len(h.destroyed) != 1 || len(h.keys) != 0 {
		t.Errorf("the HSM made %d keys, destroyed %v, holds %d; want the one key made destroyed", h.made, h.destroyed, len(h.keys))
	}
}
