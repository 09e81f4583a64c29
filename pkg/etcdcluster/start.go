package etcdcluster

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
)

// errWait means: nothing to do yet, look again.
var errWait = errors.New("waiting")

// errRefused means: this member must not start; looking again changes nothing.
var errRefused = errors.New("refused")

// Start starts this member: it issues itself a certificate, decides how to start (DecideStart), starts
// etcd, and returns once the member is ready and a voting member (a learner promotes itself first), or
// ctx ends. Run keeps it; Stop stops it. It logs through ctx's logger, named etcd-member, with the
// member's name.
func Start(ctx context.Context, cfg Config) (*Member, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("etcd member: %w", err)
	}
	logger := memberLogger(ctx, cfg.Name)
	ctx = klog.NewContext(ctx, logger)
	if cfg.CheckInterval <= 0 {
		cfg.CheckInterval = 5 * time.Second
	}
	if cfg.RetryInterval <= 0 {
		cfg.RetryInterval = 5 * time.Second
	}
	if cfg.Transformer == nil {
		cfg.Transformer = identityTransformer{}
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating %q: %w", cfg.Dir, err)
	}
	if err := os.Chmod(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("restricting %q to its owner: %w", cfg.Dir, err)
	}
	m := &Member{cfg: cfg, files: newPKIFiles(filepath.Join(cfg.Dir, PKIDirName)), creds: newCredentials(cfg.CA), log: logger}
	if cfg.PeerCAStore != nil && !cfg.AcceptNewPeerCA {
		// The store (a Secret) is read at start; the trust file is what this member trusted when it last
		// ran, on its own volume. A CA neither the same nor a successor of one of those was not made by a
		// rotation: issuing from it would start a member its peers do not trust.
		err := heldTrustVouches(m.files.TrustedCAFile, cfg.CA)
		if err != nil && !m.hasData() {
			// A member without data has nothing the check protects: what it joins checks it, as
			// unanswered's members do. It is how a member that enrolled with a cluster just before every
			// volume was lost (on a new volume, from a member still terminating) meets the new cluster's CA.
			klog.FromContext(ctx).Info("Discarding the etcd member certificate on this member's volume: it is of a peer CA the store no longer holds, and this member has no data",
				"reason", err.Error())
			if err := m.files.remove(); err != nil {
				return nil, fmt.Errorf("etcd member %s: %w", cfg.Name, err)
			}
			err = nil
		}
		if err != nil {
			return nil, fmt.Errorf("etcd member %s: %w (the peer CA read at start was replaced outside a rotation: put back the one the "+
				"store held, which a running member writes back itself; if the replacement is deliberate, start every member once "+
				"with --etcd-accept-new-peer-ca)", cfg.Name, err)
		}
	}
	if err := m.firstCertificate(ctx, time.Now()); err != nil {
		return nil, fmt.Errorf("etcd member %s: %w", cfg.Name, err)
	}
	if err := m.loadClientTLS(); err != nil {
		return nil, err
	}

	var lastReason string
	err := retry(ctx, 200*time.Millisecond, cfg.RetryInterval, func(ctx context.Context) (bool, error) {
		err := m.startOnce(ctx, &lastReason)
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, errWait):
			return false, nil
		case errors.Is(err, errRefused), ctx.Err() != nil:
			return false, err
		default:
			logger.Error(err, "Starting the etcd member failed; trying again")
			return false, nil
		}
	})
	if err != nil {
		m.Stop()
		return nil, fmt.Errorf("etcd member %s: %w", cfg.Name, err)
	}
	if err := m.promote(ctx); err != nil {
		m.Stop()
		return nil, fmt.Errorf("etcd member %s: %w", cfg.Name, err)
	}
	if err := m.writeLocalClientURL(); err != nil {
		// Only `certapi snapshot save --data-dir` in the pod needs it; the member runs without.
		logger.Error(err, "Could not record the member's local client URL")
	}
	m.maintainer = m.newMaintainer()
	return m, nil
}

// retry calls fn until it is done or fails, waiting first, then twice as long each time up to most (and
// on at most), until ctx ends: apimachinery's wait.Backoff, whose steps stay at their cap once they reach
// it (wait.ExponentialBackoffWithContext would stop there instead).
func retry(ctx context.Context, first, most time.Duration, fn wait.ConditionWithContextFunc) error {
	backoff := wait.Backoff{Duration: first, Factor: 2, Cap: most, Steps: math.MaxInt32}
	return backoff.DelayFunc().Until(ctx, true, true, fn)
}

// etcdDir is etcd's data directory.
func (m *Member) etcdDir() string { return filepath.Join(m.cfg.Dir, "etcd") }

// hasData reports whether etcd's data directory holds a member (a WAL).
func (m *Member) hasData() bool {
	fi, err := os.Stat(filepath.Join(m.etcdDir(), "member", "wal"))
	return err == nil && fi.IsDir()
}

// startOnce looks at the data and the peers, decides, and starts etcd; errWait when it must wait.
func (m *Member) startOnce(ctx context.Context, lastReason *string) error {
	in := StartInput{Name: m.cfg.Name, PeerURL: m.cfg.PeerURL, HasData: m.hasData(), Designated: m.cfg.Designated, Epoch: m.cfg.ClusterEpoch}
	if in.HasData {
		var err error
		if in.DataEpoch, err = ReadEpoch(m.etcdDir()); err != nil {
			return fmt.Errorf("%w: %w", errRefused, err)
		}
	}
	disc, err := m.cfg.Discover(ctx)
	if err != nil {
		return fmt.Errorf("discovering peers: %w", err)
	}
	in.OtherPeersExist = disc.OtherPeersExist
	answered, members := m.memberList(ctx, disc.ClientURLs)
	in.Answered, in.Members = answered != "", members
	if m.cfg.Bootstrap != nil && !in.HasData && !in.Answered && in.Designated {
		if err := m.readBootstrapRecord(ctx, &in); err != nil {
			return err
		}
	}
	if err := m.readPublishedCA(ctx, &in); err != nil {
		return err
	}
	plan := DecideStart(in)
	if plan.Reason != *lastReason || plan.Action != StartWait {
		klog.FromContext(ctx).Info("Etcd member start", "action", plan.Action, "reason", plan.Reason)
		*lastReason = plan.Reason
	}
	ecfg := m.embedConfig()
	switch plan.Action {
	case StartRefuse:
		return fmt.Errorf("%w: %s", errRefused, plan.Reason)
	case StartDiscardStale:
		aside := fmt.Sprintf("%s.before-epoch-%d-%d", m.etcdDir(), in.Epoch, time.Now().Unix())
		if err := os.Rename(m.etcdDir(), aside); err != nil {
			return fmt.Errorf("moving the data of an earlier cluster epoch aside: %w", err)
		}
		klog.FromContext(ctx).Info("Moved the data of an earlier cluster epoch aside", "dataEpoch", in.DataEpoch, "epoch", in.Epoch, "to", aside)
		return m.startOnce(ctx, lastReason)
	case StartWait:
		if !in.HasData {
			m.reportNoData(ctx)
			if err := m.dropReplacedCA(ctx); err != nil {
				return err
			}
		}
		return errWait
	case StartRestart:
		ecfg.ClusterState = embed.ClusterStateFlagExisting
		ecfg.InitialCluster = m.cfg.Name + "=" + m.cfg.PeerURL
	case StartBootstrap:
		ecfg.ClusterState = embed.ClusterStateFlagNew
		ecfg.InitialCluster = m.cfg.Name + "=" + m.cfg.PeerURL
	case StartDiscardAndJoin, StartJoin:
		if plan.Action == StartDiscardAndJoin {
			aside := fmt.Sprintf("%s.removed-%d", m.etcdDir(), time.Now().Unix())
			if err := os.Rename(m.etcdDir(), aside); err != nil {
				return fmt.Errorf("moving the data of a removed member aside: %w", err)
			}
			klog.FromContext(ctx).Info("Moved the data of this removed etcd member aside", "to", aside)
		}
		initial, err := m.join(ctx, answered, joinCandidates(answered, members, disc.ClientURLs, m.cfg.ClientURL), plan.Remove)
		if err != nil {
			return err
		}
		ecfg.ClusterState = embed.ClusterStateFlagExisting
		ecfg.InitialCluster = initial
	}
	if err := m.startEtcd(ctx, ecfg); err != nil {
		return err
	}
	if plan.Action != StartRestart {
		// A new data directory belongs to this member's epoch. Should the record fail, the next start
		// takes the data for an earlier epoch's (when the epoch is above 0) and rejoins: slow, not unsafe.
		if err := WriteEpoch(m.etcdDir(), m.cfg.ClusterEpoch); err != nil {
			klog.FromContext(ctx).Error(err, "Could not record the cluster epoch of this member's data")
		}
	}
	if plan.Action == StartBootstrap && m.cfg.Bootstrap != nil {
		if err := m.cfg.Bootstrap.Record(ctx); err != nil {
			// The cluster runs; without the record a later ordinal 0 that loses its volume while every
			// other member is down bootstraps anew. Say so and go on.
			klog.FromContext(ctx).Error(err, "Could not record the etcd bootstrap")
		}
	}
	return nil
}

// dropReplacedCA is the waiting step of a member without data: when the store holds a peer CA that the one
// the member holds does not vouch for, a new cluster began with a new CA after this member enrolled (every
// volume was lost, and it enrolled on its new volume with a member still terminating), and no member will
// ever answer its certificate. It takes the store's CA, drops that certificate and enrolls again, as Start
// does for such a member after a restart; having no data, it has nothing the vouching protects.
func (m *Member) dropReplacedCA(ctx context.Context) error {
	if m.cfg.PeerCAStore == nil {
		return nil
	}
	held := m.PeerCA().CA
	cur, err := m.cfg.PeerCAStore.Current(ctx)
	if err != nil || held.Vouches(cur) == nil {
		return nil
	}
	klog.FromContext(ctx).Info("Discarding the etcd member certificate on this member's volume: the store holds a new peer CA its own does not vouch for, and this member has no data",
		"held", held.Certificate.Subject.CommonName, "peerCA", cur.Certificate.Subject.CommonName)
	if err := m.files.remove(); err != nil {
		return fmt.Errorf("etcd member %s: %w", m.cfg.Name, err)
	}
	m.creds.setCA(cur)
	if err := m.firstCertificate(ctx, time.Now()); err != nil {
		return fmt.Errorf("etcd member %s: %w", m.cfg.Name, err)
	}
	return m.loadClientTLS()
}

// loadClientTLS builds the client side of the members' mutual TLS from the member's files: its certificate,
// read again at each handshake, and the CAs it trusts, read now. Start calls it once it holds a
// certificate, and again when it enrolled anew under another CA (dropReplacedCA), before any client is made.
func (m *Member) loadClientTLS() error {
	tlsCfg, err := transport.TLSInfo{CertFile: m.files.CertFile, KeyFile: m.files.KeyFile, TrustedCAFile: m.files.TrustedCAFile}.ClientConfig()
	if err != nil {
		return fmt.Errorf("etcd member %s: client TLS: %w", m.cfg.Name, err)
	}
	m.tls = tlsCfg
	m.clients.tls, m.clients.localURL = tlsCfg, m.localClientURL()
	return nil
}

// otherMembers are the names of the other members the StatefulSet wants (<prefix>-<ordinal> for every
// ordinal below DesiredMembers but this one's), or nil when that is unknown.
func (m *Member) otherMembers(ctx context.Context) []string {
	if m.cfg.DesiredMembers == nil {
		return nil
	}
	n, ok := m.cfg.DesiredMembers(ctx)
	i := strings.LastIndex(m.cfg.Name, "-")
	if !ok || i < 0 {
		return nil
	}
	var names []string
	for o := range n {
		if name := fmt.Sprintf("%s-%d", m.cfg.Name[:i], o); name != m.cfg.Name {
			names = append(names, name)
		}
	}
	return names
}

// readBootstrapRecord fills in what the bootstrap record says: whether a cluster was bootstrapped before,
// and, when other members exist, whether every other member the StatefulSet wants reported just now that
// it has no data.
func (m *Member) readBootstrapRecord(ctx context.Context, in *StartInput) error {
	var err error
	if in.ClusterExisted, err = m.cfg.Bootstrap.Existed(ctx); err != nil {
		return fmt.Errorf("reading the bootstrap record: %w", err)
	}
	if others := m.otherMembers(ctx); in.ClusterExisted && in.OtherPeersExist && len(others) > 0 {
		if in.OthersReportNoData, err = m.cfg.Bootstrap.ReportedNoData(ctx, others, NoDataWindow); err != nil {
			return fmt.Errorf("reading the members' reports: %w", err)
		}
	}
	return nil
}

// reportNoData notes in the bootstrap record that this member has no data and waits, at most every
// NoDataWindow/4.
func (m *Member) reportNoData(ctx context.Context) {
	if m.cfg.Bootstrap == nil || time.Since(m.reportedNoData) <= NoDataWindow/4 {
		return
	}
	if err := m.cfg.Bootstrap.ReportNoData(ctx); err != nil {
		klog.FromContext(ctx).Error(err, "Could not report that this member has no data")
		return
	}
	m.reportedNoData = time.Now()
}

// embedConfig is etcd's configuration for this member, but for how it starts (ClusterState,
// InitialCluster), which startOnce sets from its plan.
func (m *Member) embedConfig() *embed.Config {
	cfg := embed.NewConfig()
	cfg.Name = m.cfg.Name
	cfg.Dir = m.etcdDir()
	cfg.ListenClientUrls = []url.URL{mustURL(m.cfg.ListenClientURL)}
	cfg.AdvertiseClientUrls = []url.URL{mustURL(m.cfg.ClientURL)}
	cfg.ListenPeerUrls = []url.URL{mustURL(m.cfg.ListenPeerURL)}
	cfg.AdvertisePeerUrls = []url.URL{mustURL(m.cfg.PeerURL)}
	tlsInfo := transport.TLSInfo{CertFile: m.files.CertFile, KeyFile: m.files.KeyFile, TrustedCAFile: m.files.TrustedCAFile, ClientCertAuth: true,
		// Only members' certificates: one the peer CA signed for any other name gets nothing from either port.
		AllowedCNs: MemberNames(m.cfg.Name)}
	cfg.ClientTLSInfo = tlsInfo
	cfg.PeerTLSInfo = tlsInfo
	cfg.InitialClusterToken = "certapi"
	cfg.LogLevel = "error"
	cfg.AutoCompactionMode = "periodic"
	cfg.AutoCompactionRetention = "1h"
	// Refuse, in etcd itself too, a reconfiguration that would leave fewer started members than a quorum.
	cfg.StrictReconfigCheck = true
	return cfg
}

// mustURL parses a URL Config.Validate has checked.
func mustURL(s string) url.URL {
	u, err := url.Parse(s)
	if err != nil {
		panic(err) // Validate checked it
	}
	return *u
}

// startEtcd starts etcd with cfg and returns once it is ready, or fails, or ctx ends.
func (m *Member) startEtcd(ctx context.Context, cfg *embed.Config) error {
	if cfg.ClusterState == embed.ClusterStateFlagExisting && !m.hasData() {
		// A joining member must not publish an empty data directory's leftovers.
		if err := os.RemoveAll(m.etcdDir()); err != nil {
			return fmt.Errorf("clearing %q: %w", m.etcdDir(), err)
		}
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("starting etcd: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return fmt.Errorf("etcd failed while starting: %w", err)
	case <-e.Server.StopNotify():
		e.Close()
		return fmt.Errorf("etcd stopped while starting (a member the cluster removed, or a wrong cluster)")
	case <-ctx.Done():
		e.Close()
		return ctx.Err()
	}
	m.etcd = e
	klog.FromContext(ctx).Info("Etcd member is ready", "id", fmt.Sprintf("%x", uint64(e.Server.MemberID())), "learner", e.Server.IsLearner())
	return nil
}

// promote makes a learner a voting member: MemberPromote refuses until the learner has caught up with
