package etcdcluster

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/klog/v2"
)

// credentials are the peer CA as this member holds it and the member certificate it has from it: the
// state that the start, the rotator (SetPeerCA, rotatePeerCA), the key's custody and enrollment share.
// It has its own lock, held only to read or swap a value; the certificate is an atomic of its own.
type credentials struct {
	mu sync.Mutex
	// peer is the peer CA's state as this member holds it.
	peer PeerCAState
	// foreign is the CA the store last offered that the CA this member holds does not vouch for (nil when
	// the store's is vouched for); the etcd leader's member writes its own back over it.
	foreign *PeerCA
	// cert is this member's certificate, read and swapped on its own (enrollment's handshakes read it).
	cert atomic.Pointer[MemberCertificate]
	// reissue is set when SetPeerCA brought another CA: the maintainer's next round re-issues the member
	// certificate from it (and clears it once that worked).
	reissue atomic.Bool
}

// newCredentials holds ca, with no member certificate yet.
func newCredentials(ca *PeerCA) *credentials {
	return &credentials{peer: PeerCAState{CA: ca}}
}

// state returns the peer CA's state.
func (c *credentials) state() PeerCAState {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.peer
}

// setCA replaces the CA held (at start, before anyone else reads it, or with its key added).
func (c *credentials) setCA(ca *PeerCA) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.peer.CA = ca
}

// addKey gives the CA held the key of rec when rec is the same CA (custody.go: a member that enrolled
// loads the key from the record); a CA changed meanwhile is left as it is.
func (c *credentials) addKey(rec *PeerCA) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.peer.CA.Certificate.Equal(rec.Certificate) {
		ca := *c.peer.CA
		ca.Key = rec.Key
		c.peer.CA = &ca
	}
}

// foreignCA is the CA the store holds that the members' CA does not vouch for, or nil.
func (c *credentials) foreignCA() *PeerCA {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.foreign
}

// SetPeerCA tells the member the peer CA's latest state (from its store's watch, or the etcd leader's
// own rotation). When the CA differs from the one the member holds, Run's maintainer re-issues the member
// certificate from it at once and writes the new trust bundle (which etcd reads at its next start).
//
// A CA that the one the member holds does not vouch for (PeerCA.Vouches: not the same, not its successor)
// is ignored, with the rest of that state: it was not made by a rotation, and re-issuing from it would
// leave this member with a certificate its peers do not trust. The etcd leader's member writes the CA the
// members hold back to the store (rotatePeerCA).
func (m *Member) SetPeerCA(st PeerCAState) {
	if st.CA == nil {
		return
	}
	held, changed, first, err := m.creds.offer(st)
	if changed {
		m.wakeMaintainer()
	}
	if err != nil && first {
		m.log.Error(err, "Ignoring the etcd peer CA in its store: no rotation made it. The etcd leader's member writes back the CA the members hold",
			"offered", st.CA.Certificate.Subject.CommonName, "held", held.Certificate.Subject.CommonName)
	}
}

// offer is SetPeerCA's step under the lock: it takes st when the CA held vouches for its CA, and marks
// the member certificate for re-issue when the CA changed (changed); otherwise it remembers st's CA as
// foreign and returns why, with first true when that CA was not the one refused last. held is the CA
// held afterwards.
func (c *credentials) offer(st PeerCAState) (held *PeerCA, changed, first bool, refused error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.peer.CA.Vouches(st.CA); err != nil {
		first := c.foreign == nil || !c.foreign.Equal(st.CA)
		c.foreign = st.CA
		return c.peer.CA, false, first, err
	}
	c.foreign = nil
	if st.CA.Key == nil && c.peer.CA.Key != nil && st.CA.Certificate.Equal(c.peer.CA.Certificate) {
		// The store holds the public part only: the key this member holds stays (custody.go).
		ca := *st.CA
		ca.Key = c.peer.CA.Key
		st.CA = &ca
	}
	changed = !st.CA.Equal(c.peer.CA)
	c.peer = st
	if changed {
		c.reissue.Store(true)
	}
	return c.peer.CA, changed, false, nil
}

// PeerCA returns the peer CA's state as this member holds it.
func (m *Member) PeerCA() PeerCAState { return m.creds.state() }

// rotatePeerCA runs one step of the peer CA's rotation on the etcd leader (DecidePeerCA): it begins one
// when due or asked for, and finishes it once every member presents a certificate of the new CA, each
// through the store, and keeps the key's record (custody.go) through c, a client of this member. st is
// filled with what it saw.
func (m *Member) rotatePeerCA(ctx context.Context, c *clientv3.Client, peer PeerCAState, members []Entry, st *PeerCAStatus, lastReason *string) {
	if m.cfg.PeerCAStore == nil {
		return
	}
	foreign := m.creds.foreignCA()
	if foreign != nil {
		// The store holds a CA no rotation made (SetPeerCA ignored it): put back the one the members hold,
		// guarded by the store still holding that foreign CA. No rotation step runs until it is back.
		st.Reason = "the peer CA's store held a CA that the members' CA does not vouch for; writing theirs back"
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := m.cfg.PeerCAStore.Replace(cctx, foreign, peer.CA, ""); err != nil {
			klog.FromContext(ctx).Error(err, "Writing the etcd peer CA back to its store failed; retried")
			return
		}
		klog.FromContext(ctx).Info("Wrote the etcd peer CA the members hold back to its store, in place of one it does not vouch for",
			"held", peer.CA.Certificate.Subject.CommonName, "replaced", foreign.Certificate.Subject.CommonName)
		return
	}
	if m.cfg.PeerCARecordKey != "" && peer.KeyInStore {
		m.dropKeyFromStore(ctx, c, peer.CA, members, st)
	}
	ca := peer.CA
	in := PeerCAInput{
		Now: time.Now(), NotBefore: ca.Certificate.NotBefore, NotAfter: ca.Certificate.NotAfter, Rotating: st.Rotating,
		Requested: peer.Requested, Handled: peer.Handled, RotateAt: m.cfg.PeerCARotateAt,
	}
	if in.Rotating {
		in.Members = m.presented(ctx, members, ca)
	}
	plan := DecidePeerCA(in)
	st.RotateAt, st.Waiting, st.Reason = plan.RotateAt, plan.Waiting, plan.Reason
	if plan.Reason != *lastReason && (plan.Action != PeerCAKeep || in.Rotating) {
		klog.FromContext(ctx).Info("Etcd peer CA", "action", plan.Action, "reason", plan.Reason)
	}
	*lastReason = plan.Reason
	var next *PeerCA
	switch plan.Action {
	case PeerCABegin:
		var err error
		if next, err = ca.Successor(time.Now(), m.cfg.PeerCADuration); err != nil {
			klog.FromContext(ctx).Error(err, "Rotating the etcd peer CA failed; retried")
			return
		}
	case PeerCAFinish:
		next = ca.Settled()
	default:
		return
	}
	handled := ""
	if plan.Handled != peer.Handled {
		handled = plan.Handled
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := m.storeRotatedRecord(cctx, c, ca, next); err != nil {
		klog.FromContext(ctx).Error(err, "Storing the rotated etcd peer CA's key in the members' etcd failed; retried", "action", plan.Action)
		return
	}
	if err := m.cfg.PeerCAStore.Replace(cctx, ca, next, handled); err != nil {
		klog.FromContext(ctx).Error(err, "Storing the rotated etcd peer CA failed; retried", "action", plan.Action)
		return
	}
	// The store tells every member of the change, this one included (SetPeerCA), in the order it
	// changed: one source of truth, never this member's own copy ahead of the store's.
	klog.FromContext(ctx).Info("Stored the rotated etcd peer CA", "action", plan.Action, "serial", next.Certificate.SerialNumber.Text(16), "notAfter", next.Certificate.NotAfter)
}

// presented looks at the certificate each member presents on its client URL (the same files serve its
// peer URL): whether a TLS handshake succeeded, and whether ca signed the certificate.
func (m *Member) presented(ctx context.Context, members []Entry, ca *PeerCA) []PeerCAMember {
	out := make([]PeerCAMember, len(members))
	var wg sync.WaitGroup
	for i, mm := range members {
		out[i].Name = mm.Name
		if out[i].Name == "" {
			out[i].Name = fmt.Sprintf("%x", mm.ID)
		}
		if len(mm.ClientURLs) == 0 {
			continue
		}
		target := mm.ClientURLs[0]
		if mm.ID == m.ID() {
			// Itself over loopback: its advertised name need not resolve where it runs.
			target = m.localClientURL()
		}
		u, err := url.Parse(target)
		if err != nil {
			continue
		}
		wg.Go(func() {
			cfg := m.tls.Clone()
			cfg.ServerName = u.Hostname()
			d := tls.Dialer{NetDialer: &net.Dialer{Timeout: 2 * time.Second}, Config: cfg}
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			conn, err := d.DialContext(cctx, "tcp", u.Host)
			if err != nil {
				klog.FromContext(ctx).V(2).Info("Could not reach an etcd member to see its certificate", "member", out[i].Name, "err", err)
				return
			}
			defer func() { _ = conn.Close() }()
			certs := conn.(*tls.Conn).ConnectionState().PeerCertificates
			out[i].Reached = len(certs) > 0
			out[i].Current = len(certs) > 0 && ca.Signed(certs[0])
		})
	}
	wg.Wait()
	return out
}
