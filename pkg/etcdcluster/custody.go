package etcdcluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apiserver/pkg/storage/value"
	"k8s.io/klog/v2"
)

// The peer CA's key in the members' own etcd. With Config.PeerCARecordKey set, the key of the CA that
// signs member certificates is kept in one record of the cluster's own keyspace, sealed with
// Config.Transformer (the EncryptionConfiguration's, as for certapi's CA keys), and in the memory of the
// members that loaded it, never in a Kubernetes object: the PeerCAStore then holds the public part only.
// A member that holds the key writes the record when it is missing; a member that does not loads it
// once it runs (it enrolled, Config.Verifier); a rotation writes the successor's record before the
// store's public part changes, so every member that learns of the new CA finds its key. Each member also
// writes a marker under the record (custodyMarker) saying that it keeps the key this way: once every
// member has, the etcd leader drops the key from a store that still holds it (an upgrade from the
// custody of earlier versions).

// peerCARecord is the sealed record's content, PEM.
type peerCARecord struct {
	Certificate []byte `json:"certificate"`
	Key         []byte `json:"key"`
	Bundle      []byte `json:"bundle,omitempty"`
	Chain       []byte `json:"chain,omitempty"`
}

// recordContext binds a sealed value to its key, as kube-apiserver's etcd3 store does, so a value copied
// under another key does not open.
type recordContext string

func (c recordContext) AuthenticatedData() []byte { return []byte(c) }

// custodyMarker is the key of member name's marker.
func (m *Member) custodyMarker(name string) string {
	return m.cfg.PeerCARecordKey + "/members/" + name
}

// sealPeerCA seals ca for the record.
func (m *Member) sealPeerCA(ctx context.Context, ca *PeerCA) ([]byte, error) {
	keyPEM, err := ca.KeyPEM()
	if err != nil {
		return nil, err
	}
	data, err := json.Marshal(peerCARecord{Certificate: ca.CertificatePEM(), Key: keyPEM, Bundle: ca.Bundle, Chain: ca.Chain})
	if err != nil {
		return nil, fmt.Errorf("encoding the peer CA record: %w", err)
	}
	sealed, err := m.cfg.Transformer.TransformToStorage(ctx, data, recordContext(m.cfg.PeerCARecordKey))
	if err != nil {
		return nil, fmt.Errorf("sealing the peer CA record: %w", err)
	}
	return sealed, nil
}

// readPeerCARecord reads the record: the CA it holds (nil when there is none) and its mod revision.
func (m *Member) readPeerCARecord(ctx context.Context, c *clientv3.Client) (*PeerCA, int64, error) {
	resp, err := c.Get(ctx, m.cfg.PeerCARecordKey)
	if err != nil {
		return nil, 0, fmt.Errorf("reading the peer CA record: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return nil, 0, nil
	}
	kv := resp.Kvs[0]
	ca, err := m.openPeerCARecord(ctx, kv.Value)
	if err != nil {
		return nil, 0, err
	}
	return ca, kv.ModRevision, nil
}

// openPeerCARecord unseals a stored record.
func (m *Member) openPeerCARecord(ctx context.Context, stored []byte) (*PeerCA, error) {
	if m.cfg.RequireEncryptedRecord && !bytes.HasPrefix(stored, []byte("k8s:enc:")) {
		return nil, errors.New("the peer CA record is stored unencrypted while the encryption configuration encrypts: refused (a record planted in etcd or in a crafted snapshot)")
	}
	data, _, err := m.cfg.Transformer.TransformFromStorage(ctx, stored, recordContext(m.cfg.PeerCARecordKey))
	if err != nil {
		return nil, fmt.Errorf("opening the peer CA record (is the encryption configuration the one it was written with?): %w", err)
	}
	var rec peerCARecord
	if err := json.Unmarshal(data, &rec); err != nil {
		return nil, fmt.Errorf("decoding the peer CA record: %w", err)
	}
	ca, err := LoadPeerCA(rec.Certificate, rec.Key, rec.Bundle, rec.Chain)
	if err != nil {
		return nil, fmt.Errorf("the peer CA record: %w", err)
	}
	if ca.Key == nil {
		return nil, errors.New("the peer CA record holds no key")
	}
	return ca, nil
}

// keyFromVolume reads the peer CA's key from this member's own etcd data before etcd starts (the record
// as this member last applied it), when that record holds the CA the member starts with: a member that
// restarts on its data needs no other member, however long they were all stopped.
func (m *Member) keyFromVolume(ctx context.Context, held *PeerCA) (*PeerCA, error) {
	revs, err := ReadRevisions(filepath.Join(m.etcdDir(), "member", "snap", "db"), m.cfg.PeerCARecordKey)
	if err != nil {
		return nil, err
	}
	if len(revs) == 0 || revs[len(revs)-1].Deleted {
		return nil, errors.New("this member's data holds no peer CA record")
	}
	ca, err := m.openPeerCARecord(ctx, revs[len(revs)-1].Value)
	if err != nil {
		return nil, err
	}
	if !ca.Certificate.Equal(held.Certificate) {
		return nil, fmt.Errorf("this member's data holds the record of %s, not of the peer CA it starts with (%s)", ca.Certificate.Subject.CommonName, held.Certificate.Subject.CommonName)
	}
	out := *held
	out.Key = ca.Key
	return &out, nil
}

// writePeerCARecord writes next as the record if the record is still at modRevision (0: absent).
func (m *Member) writePeerCARecord(ctx context.Context, c *clientv3.Client, next *PeerCA, modRevision int64) error {
	sealed, err := m.sealPeerCA(ctx, next)
	if err != nil {
		return err
	}
	cmp := clientv3.Compare(clientv3.ModRevision(m.cfg.PeerCARecordKey), "=", modRevision)
	if modRevision == 0 {
		cmp = clientv3.Compare(clientv3.CreateRevision(m.cfg.PeerCARecordKey), "=", 0)
	}
	resp, err := c.Txn(ctx).If(cmp).Then(clientv3.OpPut(m.cfg.PeerCARecordKey, string(sealed))).Commit()
	if err != nil {
		return fmt.Errorf("writing the peer CA record: %w", err)
	}
	if !resp.Succeeded {
		return errors.New("writing the peer CA record: it changed since it was read")
	}
	return nil
}

// keepCustody runs one step of the key's custody on this member: a member without the key loads it from
// the record when the record's CA is the one it holds; a member with the key writes the record when it
// is missing; and the member writes its marker once, then sets *done. It is quiet when nothing changes.
// It runs on Run's goroutine, through the member's long-lived client of itself.
func (m *Member) keepCustody(ctx context.Context, done *bool) {
	if m.cfg.PeerCARecordKey == "" {
		return
	}
	held := m.PeerCA().CA
	if held.Key != nil && *done {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c, err := m.clients.localClient()
	if err != nil {
		return
	}
	rec, modRev, err := m.readPeerCARecord(cctx, c)
	if err != nil {
		klog.FromContext(ctx).Error(err, "Reading the etcd peer CA's record failed; retried")
		return
	}
	switch {
	case held.Key == nil && rec != nil && rec.Certificate.Equal(held.Certificate):
		m.creds.addKey(rec)
		klog.FromContext(ctx).Info("Loaded the etcd peer CA's key from the members' etcd", "peerCA", held.Certificate.Subject.CommonName)
	case held.Key == nil:
		// The record holds another CA, or none yet: a rotation whose store has not reached this member,
		// or a member that holds the key and has not written it. Look again at the next step.
		return
	case rec == nil || held.Vouches(rec) != nil:
		// None yet, or one of a CA the held one does not vouch for (neither it nor its successor: an
		// older CA, as a restore of the members' etcd from a snapshot brings back). A record of the held
		// CA's successor is a rotation under way, and stays.
		if err := m.writePeerCARecord(cctx, c, held, modRev); err != nil {
			klog.FromContext(ctx).Error(err, "Storing the etcd peer CA's key in the members' etcd failed; retried")
			return
		}
		klog.FromContext(ctx).Info("Stored the etcd peer CA's key, sealed, in the members' etcd", "peerCA", held.Certificate.Subject.CommonName)
	}
	if _, err := c.Put(cctx, m.custodyMarker(m.cfg.Name), time.Now().UTC().Format(time.RFC3339)); err != nil {
		klog.FromContext(ctx).Error(err, "Recording that this member keeps the peer CA's key in etcd failed; retried")
		return
	}
	*done = true
}

// storeRotatedRecord writes next as the record in place of cur, before a rotation step changes the
// store, so that every member that learns of next finds its key.
func (m *Member) storeRotatedRecord(ctx context.Context, c *clientv3.Client, cur, next *PeerCA) error {
	if m.cfg.PeerCARecordKey == "" {
		return nil
	}
	rec, modRev, err := m.readPeerCARecord(ctx, c)
	if err != nil {
		return err
	}
	if rec != nil && !rec.Certificate.Equal(cur.Certificate) && !rec.Certificate.Equal(next.Certificate) {
		return fmt.Errorf("the peer CA record holds %s, neither the current CA nor its successor", rec.Certificate.Subject.CommonName)
	}
	return m.writePeerCARecord(ctx, c, next, modRev)
}

// everyMemberKeepsCustody reports whether each of members has written its custody marker.
func (m *Member) everyMemberKeepsCustody(ctx context.Context, c *clientv3.Client, members []Entry) (bool, error) {
	resp, err := c.Get(ctx, m.custodyMarker(""), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return false, fmt.Errorf("reading the members' custody markers: %w", err)
	}
	have := map[string]bool{}
	for _, kv := range resp.Kvs {
		have[string(kv.Key)] = true
	}
	for _, e := range members {
		if e.Name == "" || !have[m.custodyMarker(e.Name)] {
			return false, nil
		}
	}
	return true, nil
}

// KeyLeftStoreRotation is the rotation request the etcd leader records when it removes ca's key from the
// store: one per CA, so that a CA whose key was once in the store is rotated once.
func KeyLeftStoreRotation(ca *PeerCA) string {
	return "key-left-store-" + ca.Certificate.SerialNumber.Text(16)
}

// dropKeyFromStore, on the etcd leader, removes the key from a store that still holds it (an upgrade
// from the custody of earlier versions), once the record holds the same CA and every member has written
// its marker: until then a member of the earlier version may still need the key from the store.
func (m *Member) dropKeyFromStore(ctx context.Context, c *clientv3.Client, ca *PeerCA, members []Entry, st *PeerCAStatus) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	rec, _, err := m.readPeerCARecord(cctx, c)
	if err != nil || rec == nil || !rec.Certificate.Equal(ca.Certificate) {
		return
	}
	all, err := m.everyMemberKeepsCustody(cctx, c, members)
	if err != nil || !all {
		st.Reason = "the peer CA's key is still in its store: waiting for every member to keep it in etcd"
		return
	}
	// Whoever could read the store could have copied the key: once it is gone from there, a rotation makes
	// a CA whose key never was in it.
	rotate := KeyLeftStoreRotation(ca)
	if err := m.cfg.PeerCAStore.DropKey(cctx, ca, rotate); err != nil {
		klog.FromContext(ctx).Error(err, "Removing the etcd peer CA's key from its store failed; retried")
		return
	}
	klog.FromContext(ctx).Info("Removed the etcd peer CA's key from its store: every member keeps it in the members' etcd; rotating the peer CA, "+
		"whose key was readable there (restart every pod once after the rotation to stop trusting the old CA)",
		"peerCA", ca.Certificate.Subject.CommonName, "rotation", rotate)
}

var _ value.Context = recordContext("")

// identityTransformer stores the record as it is, when no encryption is configured.
type identityTransformer struct{}

func (identityTransformer) TransformFromStorage(_ context.Context, data []byte, _ value.Context) ([]byte, bool, error) {
	return data, false, nil
}

func (identityTransformer) TransformToStorage(_ context.Context, data []byte, _ value.Context) ([]byte, error) {
	return data, nil
}
