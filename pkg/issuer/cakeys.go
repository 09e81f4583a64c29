package issuer

import (
	"context"
	"crypto"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/certapi/certapi/pkg/metrics"
	"github.com/certapi/certapi/pkg/signer"
)

// CAKeys makes and holds CA keys outside certapi, in an HSM reached through a key plugin
// (pkg/keyplugin's Client): a key is made and used inside it, the CA record keeps only the key's
// reference, and a key no CA needs any more is destroyed there. Config.Keys nil: certapi makes its CA
// keys in memory and keeps them in its CA record, as it always did.
type CAKeys interface {
	// NewKey makes an ECDSA P-256 key under label and returns it (a signer.ExternalKey) and its reference.
	NewKey(ctx context.Context, label string) (crypto.Signer, string, error)
	// Key returns the key ref names, whose public half is pub, without asking the plugin anything.
	Key(ref string, pub crypto.PublicKey) crypto.Signer
	// Destroy removes the key ref names; a key already gone is not an error.
	Destroy(ctx context.Context, ref string) error
	// List returns the references of the keys whose label starts with prefix, by label.
	List(ctx context.Context, prefix string) (map[string]string, error)
}

// CAKeyLabelPrefix starts the label of every CA key certapi makes in an HSM ("certapi-ca-<unix
// seconds>-<random>"): the keys certapi may destroy once no CA needs them are those under it.
const CAKeyLabelPrefix = "certapi-ca-"

// caKeyOpTimeout bounds one call to the key plugin outside signing (making, listing, destroying keys).
const caKeyOpTimeout = 30 * time.Second

// orphanAge is how old a key under CAKeyLabelPrefix that no CA record names must be before the leader
// destroys it: a key is made moments before the fenced write that records it, so a younger one may be
// one this term is about to record.
const orphanAge = time.Hour

// newCAKey makes the key of a new CA: in the HSM when certapi holds its CA keys there (never in memory
// then, whatever fails), otherwise in memory.
func (i *Issuer) newCAKey(ctx context.Context, now time.Time) (crypto.Signer, error) {
	if i.cfg.Keys == nil {
		return signer.GenerateKey(signer.ECDSAP256)
	}
	suffix := make([]byte, 4)
	if _, err := io.ReadFull(rand.Reader, suffix); err != nil {
		return nil, fmt.Errorf("making a CA key label: %w", err)
	}
	label := CAKeyLabelPrefix + strconv.FormatInt(now.Unix(), 10) + "-" + hex.EncodeToString(suffix)
	ctx, cancel := context.WithTimeout(ctx, caKeyOpTimeout)
	defer cancel()
	key, ref, err := i.cfg.Keys.NewKey(ctx, label)
	metrics.CAKeyOperations.WithLabelValues("generate", keyResult(err)).Inc()
	if err != nil {
		return nil, fmt.Errorf("making a CA key in the HSM: %w", err)
	}
	ext, ok := key.(signer.ExternalKey)
	if !ok {
		return nil, fmt.Errorf("the key plugin's new key %s is a %T, not a key held outside certapi", ref, key)
	}
	klog.FromContext(ctx).Info("Made a CA key in the HSM", "label", label, "ref", ref)
	return meteredKey{ext}, nil
}

// externalKey returns the key a CA record names by ref, for a CA whose public key is pub.
func (i *Issuer) externalKey(ref string, pub crypto.PublicKey) (crypto.Signer, error) {
	if i.cfg.Keys == nil {
		return nil, fmt.Errorf("the CA record names a CA key held in an HSM (%s), and certapi runs without --ca-key-plugin: it never signs with another key instead", ref)
	}
	key, ok := i.cfg.Keys.Key(ref, pub).(signer.ExternalKey)
	if !ok {
		return nil, fmt.Errorf("the key plugin's key %s is not an external key", ref)
	}
	return meteredKey{key}, nil
}

// keyRefs returns the references of the HSM keys a's CAs hold (Active, Next and Pending).
func keyRefs(a signer.Authorities) map[string]bool {
	refs := map[string]bool{}
	add := func(k crypto.Signer) {
		if ext, ok := k.(signer.ExternalKey); ok {
			refs[ext.KeyRef()] = true
		}
	}
	for _, ca := range []*signer.CA{a.Active, a.Next} {
		if ca != nil {
			add(ca.Key)
		}
	}
	if a.Pending != nil {
		add(a.Pending.Key)
	}
	return refs
}

// destroyDropped destroys, in the HSM, the keys of before's CAs that after no longer holds (a CA that
// stopped signing), once after is stored. A key that could not be destroyed is left to the next term's
// sweep (sweepOrphanKeys).
func (i *Issuer) destroyDropped(ctx context.Context, before, after signer.Authorities) {
	if i.cfg.Keys == nil {
		return
	}
	kept := keyRefs(after)
	for ref := range keyRefs(before) {
		if !kept[ref] {
			i.destroyKey(ctx, ref, "its CA no longer signs")
		}
	}
}

func (i *Issuer) destroyKey(ctx context.Context, ref, why string) {
	ctx, cancel := context.WithTimeout(ctx, caKeyOpTimeout)
	defer cancel()
	err := i.cfg.Keys.Destroy(ctx, ref)
	metrics.CAKeyOperations.WithLabelValues("destroy", keyResult(err)).Inc()
	logger := klog.FromContext(ctx)
	if err != nil {
		logger.Error(err, "Could not destroy a CA key in the HSM; the leader tries again at its next term", "ref", ref, "reason", why)
		return
	}
	logger.Info("Destroyed a CA key in the HSM", "ref", ref, "reason", why)
}

// sweepOrphanKeys destroys the keys under CAKeyLabelPrefix that the stored CA record a does not name and
// that are older than orphanAge: keys of CAs that stopped signing whose destruction failed, and keys made
// for a CA whose record was never written (a term that ended between the two).
func (i *Issuer) sweepOrphanKeys(ctx context.Context, a signer.Authorities) {
	if i.cfg.Keys == nil {
		return
	}
	lctx, cancel := context.WithTimeout(ctx, caKeyOpTimeout)
	keys, err := i.cfg.Keys.List(lctx, CAKeyLabelPrefix)
	cancel()
	if err != nil {
		klog.FromContext(ctx).Error(err, "Could not list the CA keys in the HSM to destroy those no CA needs; trying again at the next term")
		return
	}
	used := keyRefs(a)
	now := i.cfg.Clock.Now()
	for ref, label := range keys {
		if used[ref] {
			continue
		}
		made, ok := labelTime(label)
		if !ok || now.Sub(made) < orphanAge {
			continue // not of the form certapi writes, or maybe about to be recorded
		}
		i.destroyKey(ctx, ref, "no CA record names it")
	}
}

// labelTime is when the key labelled label was made, from the label certapi gave it.
func labelTime(label string) (time.Time, bool) {
	rest, ok := strings.CutPrefix(label, CAKeyLabelPrefix)
	if !ok {
		return time.Time{}, false
	}
	secs, _, ok := strings.Cut(rest, "-")
	if !ok {
		return time.Time{}, false
	}
	n, err := strconv.ParseInt(secs, 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.Unix(n, 0), true
}

// keyResult is the result label of certapi_ca_key_operations_total for err.
func keyResult(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, signer.ErrKeyUnavailable):
		return "unavailable"
	default:
		return "error"
	}
}

// meteredKey counts the signatures of an HSM-held CA key by result.
type meteredKey struct{ signer.ExternalKey }

func (k meteredKey) Sign(r io.Reader, digest []byte, opts crypto.SignerOpts) ([]byte, error) {
	sig, err := k.ExternalKey.Sign(r, digest, opts)
	metrics.CAKeyOperations.WithLabelValues("sign", keyResult(err)).Inc()
	return sig, err
}
