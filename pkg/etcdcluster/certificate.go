package etcdcluster

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"time"

	"k8s.io/klog/v2"
)

// verifies it (a restart); else one a member that holds the key issues it (enroll), asked until one does
// or ctx ends.
func (m *Member) firstCertificate(ctx context.Context, now time.Time) error {
	ca := m.PeerCA().CA
	if ca.Key == nil && m.cfg.PeerCARecordKey != "" && m.hasData() {
		withKey, err := m.keyFromVolume(ctx, ca)
		if err == nil {
			m.creds.setCA(withKey)
			ca = withKey
			klog.FromContext(ctx).Info("Loaded the etcd peer CA's key from this member's own data", "peerCA", ca.Certificate.Subject.CommonName)
		} else {
			klog.FromContext(ctx).Info("The etcd peer CA's key is not in this member's data", "reason", err.Error())
		}
	}
	if ca.Key != nil {
		return m.renewCertificate(ctx, now)
	}
	mc, err := m.files.read(m.cfg.Name, ca.TrustPEM(), now)
	if err == nil {
		if err := m.files.write(mc, ca.TrustPEM()); err != nil {
			return fmt.Errorf("storing the trust bundle: %w", err)
		}
		m.creds.cert.Store(mc)
		klog.FromContext(ctx).Info("Starting with the etcd member certificate on this member's volume", "notAfter", mc.NotAfter)
		return nil
	}
	klog.FromContext(ctx).Info("Enrolling with the etcd cluster for a member certificate", "reason", err.Error())
	var last string
	return retry(ctx, 200*time.Millisecond, m.cfg.RetryInterval, func(ctx context.Context) (bool, error) {
		disc, err := m.cfg.Discover(ctx)
		if err == nil {
			err = m.renewCertificateFrom(ctx, disc.ClientURLs, time.Now())
		}
		if err == nil {
			return true, nil
		}
		if errors.Is(err, errWait) && !m.hasData() {
			// No member answered at all.
			if done, berr := m.unanswered(ctx, disc); done || berr != nil {
				return done, berr
			}
		}
		if msg := err.Error(); msg != last {
			klog.FromContext(ctx).Info("Not enrolled yet; asking again", "reason", msg)
			last = msg
		}
		return false, nil
	})
}

// unanswered is a member's step without the peer CA's key, without data and without a certificate, when
// no member answered its enrollment: every volume may have been lost with the key. The designated member
// bootstraps a new cluster with a new peer CA when DecideStart says it may (the rules of a member without
// data that nobody answers: a cluster that never existed, or every other member reporting that it has no
// data either), and puts the new CA in the store; the others report that they have no data, and take the
// store's CA as it is when it changed (they have no data to protect, and whatever they join checks them).
func (m *Member) unanswered(ctx context.Context, disc Discovery) (bool, error) {
	held := m.PeerCA().CA
	if !m.cfg.Designated {
		m.reportNoData(ctx)
		if m.cfg.PeerCAStore == nil {
			return false, nil
		}
		cur, err := m.cfg.PeerCAStore.Current(ctx)
		if err != nil || cur.Certificate.Equal(held.Certificate) {
			return false, nil
		}
		m.creds.setCA(cur)
		klog.FromContext(ctx).Info("Taking the etcd peer CA its store holds now: this member has no data and no certificate", "peerCA", cur.Certificate.Subject.CommonName)
		return false, nil
	}
	in := StartInput{Name: m.cfg.Name, PeerURL: m.cfg.PeerURL, Designated: true, Epoch: m.cfg.ClusterEpoch, OtherPeersExist: disc.OtherPeersExist}
	if m.cfg.Bootstrap != nil {
		if err := m.readBootstrapRecord(ctx, &in); err != nil {
			return false, err
		}
	}
	if err := m.readPublishedCA(ctx, &in); err != nil {
		klog.FromContext(ctx).Error(err, "Not bootstrapping a cluster yet; looking again")
		return false, nil
	}
	plan := DecideStart(in)
	if plan.Action == StartRefuse {
		klog.FromContext(ctx).Info("Etcd member start", "action", plan.Action, "reason", plan.Reason)
		return false, fmt.Errorf("%w: %s", errRefused, plan.Reason)
	}
	if plan.Action != StartBootstrap {
		return false, nil
	}
	ca, err := NewPeerCA(time.Now(), m.cfg.PeerCADuration)
	if err != nil {
		return false, err
	}
	if m.cfg.PeerCAStore != nil {
		if err := m.cfg.PeerCAStore.Replace(ctx, held, ca, ""); err != nil {
			return false, fmt.Errorf("storing a new peer CA: %w", err)
		}
	}
	m.creds.setCA(ca)
	klog.FromContext(ctx).Info("No member holds the etcd peer CA's key: made a new peer CA to bootstrap a new cluster",
		"peerCA", ca.Certificate.Subject.CommonName, "reason", plan.Reason)
	return true, m.renewCertificate(ctx, time.Now())
}

// readPublishedCA fills in.PublishedCA when DecideStart could otherwise bootstrap a first cluster: the
// designated member, without data, nobody answering, no cluster bootstrapped before (rule 4).
func (m *Member) readPublishedCA(ctx context.Context, in *StartInput) error {
	if m.cfg.PublishedCA == nil || in.HasData || in.Answered || !in.Designated || in.ClusterExisted {
		return nil
	}
	var err error
	if in.PublishedCA, err = m.cfg.PublishedCA(ctx); err != nil {
		return fmt.Errorf("looking for a CA bundle certapi published before bootstrapping a new cluster: %w", err)
	}
	return nil
}

// renewCertificate issues a new member certificate from the peer CA the member holds, or has one issued
// by another member when it does not hold the CA's key, and writes it, with the CA's trust bundle, where
// etcd reads it.
func (m *Member) renewCertificate(ctx context.Context, now time.Time) error {
	var urls []string
	if m.etcd != nil {
		urls = m.votingClientURLs()
	}
	return m.renewCertificateFrom(ctx, urls, now)
}

// renewCertificateFrom is renewCertificate, enrolling through the members at clientURLs when this member
// does not hold the CA's key.
func (m *Member) renewCertificateFrom(ctx context.Context, clientURLs []string, now time.Time) error {
	ca := m.PeerCA().CA
	var mc *MemberCertificate
	var err error
	if ca.Key == nil {
		mc, err = m.enroll(ctx, clientURLs, ca.TrustPEM(), now)
	} else {
		hosts := slices.Clone(m.cfg.CertHosts)
		for _, u := range []string{m.cfg.PeerURL, m.cfg.ClientURL} {
			if p, err := url.Parse(u); err == nil {
				hosts = append(hosts, p.Hostname())
			}
		}
		mc, err = ca.IssueMember(m.cfg.Name, hosts, now, m.cfg.MemberCertDuration)
	}
	if err != nil {
		return fmt.Errorf("etcd member %s: %w", m.cfg.Name, err)
	}
	if err := m.files.write(mc, ca.TrustPEM()); err != nil {
		return fmt.Errorf("etcd member %s: storing its certificate: %w", m.cfg.Name, err)
	}
	m.creds.cert.Store(mc)
	return nil
}
