package etcdcluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/etcdserver"
	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/apiserver/pkg/storage/value"
	"k8s.io/klog/v2"

	"github.com/certapi/certapi/pkg/metrics"
	"github.com/certapi/certapi/pkg/notify"
)

// Discovery is what a starting member learns of its peers.
type Discovery struct {
	// ClientURLs are the client URLs of the other members to ask for the member list.
	ClientURLs []string
	// OtherPeersExist is true when another member exists (its pod has an address), answering or not.
	OtherPeersExist bool
}

// BootstrapRecord remembers, outside etcd, that a cluster was bootstrapped, so that ordinal 0 with a
// lost volume never bootstraps a second cluster while the others restart (see DecideStart).
type BootstrapRecord interface {
	// Existed reports whether a cluster was bootstrapped before.
	Existed(ctx context.Context) (bool, error)
	// Record notes that this member has just bootstrapped a cluster, and forgets every NoData report.
	Record(ctx context.Context) error
	// ReportNoData notes that this member has no data and waits for a cluster.
	ReportNoData(ctx context.Context) error
	// ReportedNoData reports whether each of members reported NoData within the last window.
	ReportedNoData(ctx context.Context, members []string, window time.Duration) (bool, error)
}

// PeerCAState is the peer CA as its store holds it, with the on-demand request to rotate it.
type PeerCAState struct {
	CA *PeerCA
	// KeyInStore is true when the store holds the CA's private key too (the custody of earlier versions).
	KeyInStore bool
	// Requested is the latest request to rotate the CA (empty: none); Handled is the request the last
	// rotation began for (see DecidePeerCA).
	Requested, Handled string
}

// PeerCAStore keeps the peer CA where every member reads it at start (in a cluster, the Secret of
// incluster.PeerCASecret). The etcd leader rotates the CA through it; every member learns of the change
// through Member.SetPeerCA.
type PeerCAStore interface {
	// Replace stores next in place of cur and records handled as the request acted on (empty: leave the
	// record as it is). It fails, changing nothing, when the store no longer holds cur.
	Replace(ctx context.Context, cur, next *PeerCA, handled string) error
	// DropKey removes the private key of ca from the store, which keeps its public part, and asks for a
	// rotation named rotate in the same write (as the operator's request would be recorded); it fails,
	// changing nothing, when the store no longer holds ca.
	DropKey(ctx context.Context, ca *PeerCA, rotate string) error
	// Current reads the CA the store holds now.
	Current(ctx context.Context) (*PeerCA, error)
}

// NoDataWindow is how recent a member's report of having no data must be to count (see DecideStart):
// members that wait report every RetryInterval, at most every NoDataWindow/4.
const NoDataWindow = 2 * time.Minute

// Config describes one member.
type Config struct {
	// Name is the member's name: the pod name, <statefulset>-<ordinal>.
	Name string
	// Dir is the member's private directory on its own volume: etcd's data goes in Dir/etcd, its TLS
	// files in Dir/etcd-pki.
	Dir string
	// PeerURL and ClientURL are what the member advertises (https://<pod>.<headless service>:2380/2379).
	PeerURL, ClientURL string
	// ListenPeerURL and ListenClientURL are where it listens (https://0.0.0.0:2380/2379).
	ListenPeerURL, ListenClientURL string
	// CertHosts are the DNS names and IP addresses its certificate holds besides localhost: the hosts of
	// PeerURL and ClientURL are added.
	CertHosts []string
	// Designated is true for the member that may bootstrap the cluster (ordinal 0).
	Designated bool
	// ClusterEpoch counts the restores of the cluster from a snapshot (EpochFileName): data of an earlier
	// epoch is moved aside at start, data of a later one refused.
	ClusterEpoch int
	// CA is the peer CA as the member starts; it signs the member's certificate. SetPeerCA replaces it.
	// A CA without its key (only its public part: certificate, bundle, chain) makes the member enroll
	// through a member that holds the key instead (Proof), unless the certificate it has on its volume is
	// still good.
	CA *PeerCA
	// PeerCARecordKey, when set, is the key in the members' etcd that keeps the peer CA with its private
	// key, sealed with Transformer (custody.go); PeerCAStore then holds the public part only, and a member
	// that holds the key drops it from a store that still has it once every member keeps it this way.
	// Empty keeps the key in PeerCAStore (the custody of earlier versions).
	PeerCARecordKey string
	// Transformer seals the record (the EncryptionConfiguration's transformer of certapi's CA keys); nil
	// stores it as it is.
	Transformer value.Transformer
	// RequireEncryptedRecord refuses a record stored unencrypted (Transformer encrypts).
	RequireEncryptedRecord bool
	// ListenEnrollURL is where the member answers joining members' enrollment requests
	// (https://0.0.0.0:<port>), when Verifier is set; other members are asked on the same port at their
	// client URL's host.
	ListenEnrollURL string
	// EnrollmentURL, when set, gives the enrollment URL of the member whose client URL is given; nil asks
	// at the same host on ListenEnrollURL's port (every member listens on the same ports).
	EnrollmentURL func(clientURL string) string
	// Verifier establishes a joining member's identity before this member issues its certificate; nil
	// enrolls nobody.
	Verifier IdentityVerifier
	// Proof returns this member's proof of identity (its pod's projected token) for enrolling; needed when
	// CA comes without its key.
	Proof func() (string, error)
	// PeerCAStore, when set, lets this member rotate the peer CA while it is the etcd leader (DecidePeerCA);
	// nil never rotates (a CA given as files).
	PeerCAStore PeerCAStore
	// PeerCARotateAt is the fraction of the peer CA's life after which the etcd leader rotates it; 0 means
	// DefaultPeerCARotateAt.
	PeerCARotateAt float64
	// PeerCADuration is the lifetime of a new peer CA made by a rotation; 0 means DefaultPeerCADuration.
	PeerCADuration time.Duration
	// AcceptNewPeerCA starts the member with CA even when the CAs it trusted before (its trust file, from
	// its last run) do not vouch for it. Without it, a member with a PeerCAStore refuses to start then
	// (ErrPeerCANotVouched): CA was replaced in the store outside a rotation.
	AcceptNewPeerCA bool
	// MemberCertDuration is the member certificate's lifetime; 0 means DefaultMemberCertDuration.
	MemberCertDuration time.Duration
	// Discover finds the other members.
	Discover func(ctx context.Context) (Discovery, error)
	// Bootstrap, when set, records bootstraps and tells whether one happened before.
	Bootstrap BootstrapRecord
	// PublishedCA, when set, is asked by the designated member before it would bootstrap a new cluster
	// where none was bootstrapped before: it names the object holding a CA bundle that certapi published
	// (empty: none), and DecideStart refuses to bootstrap when one is found (a certapi ran with a CA on data
	// this cluster does not hold). An error makes the member look again later, never bootstrap.
	PublishedCA func(ctx context.Context) (string, error)
	// DeadMemberTimeout is how long a member must stay unhealthy before the etcd leader removes it; 0
	// never removes.
	DeadMemberTimeout time.Duration
	// StalledLearnerTimeout is how long a learner may stay unhealthy before the leader removes it
	// (default DefaultStalledLearnerTimeout; DecideMaintenance says why).
	StalledLearnerTimeout time.Duration
	// DesiredMembers, when set, tells the etcd leader how many members the StatefulSet wants (its
	// spec.replicas); ok false when unknown. A stopped member whose ordinal is at or past it was scaled
	// away and is removed without waiting out DeadMemberTimeout (still only when DecideMaintenance
	// allows).
	DesiredMembers func(ctx context.Context) (n int, ok bool)
	// CheckInterval is how often the maintenance loop checks members (default 5s).
	CheckInterval time.Duration
	// RetryInterval is the longest wait between start attempts and promotion attempts (default 5s).
	RetryInterval time.Duration
}

// Validate checks c before anything starts, naming what is wrong.
func (c *Config) Validate() error {
	var errs []error
	if c.Name == "" {
		errs = append(errs, errors.New("member name is empty"))
	}
	if o := Ordinal(c.Name); c.Name != "" && (o < 0 || o >= MaxMembers) {
		errs = append(errs, fmt.Errorf("member name %q: expected <statefulset>-<ordinal> with an ordinal from 0 to %d (a cluster has at most %d members)", c.Name, MaxMembers-1, MaxMembers))
	}
	if c.Dir == "" {
		errs = append(errs, errors.New("member directory is empty"))
	}
	for what, u := range map[string]string{"peer URL": c.PeerURL, "client URL": c.ClientURL, "listen peer URL": c.ListenPeerURL, "listen client URL": c.ListenClientURL} {
		p, err := url.Parse(u)
		if err != nil || p.Scheme != "https" || p.Port() == "" {
			errs = append(errs, fmt.Errorf("%s %q: expected https://<host>:<port>", what, u))
		}
	}
	if c.CA == nil {
		errs = append(errs, errors.New("no peer CA given"))
	} else if c.CA.Key == nil && c.Proof == nil {
		errs = append(errs, errors.New("the peer CA is given without its key, and no proof of identity to enroll with"))
	}
	if c.Verifier != nil || (c.CA != nil && c.CA.Key == nil) {
		if p, err := url.Parse(c.ListenEnrollURL); err != nil || p.Scheme != "https" || p.Port() == "" {
			errs = append(errs, fmt.Errorf("listen enroll URL %q: expected https://<host>:<port>", c.ListenEnrollURL))
		}
	}
	if c.Discover == nil {
		errs = append(errs, errors.New("no discovery given"))
	}
	if c.ClusterEpoch < 0 {
		errs = append(errs, fmt.Errorf("cluster epoch %d is negative; expected 0 (never restored) or more", c.ClusterEpoch))
	}
	if c.DeadMemberTimeout < 0 {
		errs = append(errs, fmt.Errorf("dead-member timeout %s is negative; expected 0 (never remove) or more", c.DeadMemberTimeout))
	}
	return errors.Join(errs...)
}

// Member is a running etcd member of the cluster.
type Member struct {
	cfg   Config
	etcd  *embed.Etcd
	files pkiFiles
	tls   *tls.Config

	// reportedNoData is when this member last reported that it has no data (while starting).
	reportedNoData time.Time
	// lastJoinRefusal is the members that last refused to add this one, logged when it changes.
	lastJoinRefusal string

	mu     sync.Mutex
	cert   *MemberCertificate
	peer   PeerCAState
	status Status
	// peerChanged wakes Run when SetPeerCA brought another CA: the member re-issues its certificate.
	peerChanged chan struct{}
	// custodyDone is true once this member has done its part of the key's custody (custody.go).
	custodyDone bool
	// foreignPeerCA is the CA the store last offered that the CA this member holds does not vouch for
	// (nil when the store's is vouched for); the etcd leader's member writes its own back over it.
	foreignPeerCA *PeerCA
	// statusListeners hear when Status changes in more than its time (see AddStatusListener).
	statusListeners notify.Listeners
	// quorum is what the member knows of its cluster's quorum (under mu); quorumLost is quorum.Lost for
	// readers on every request.
	quorum     QuorumState
	quorumLost atomic.Bool
	// lostCtx ends when the quorum is held lost (under mu; see QuorumLostContext).
	lostCtx    context.Context
	lostCancel context.CancelFunc
}

// Status is what a member knows of its cluster, for metrics and `kubectl certapi status`.
type Status struct {
	// Members and Learners count voting members and learners in the latest member list.
	Members, Learners int
	// Leader is true when this member is the etcd leader.
	Leader bool
	// Healthy maps member names to their health, as the etcd leader checked it (empty elsewhere).
	Healthy map[string]bool
	// Decision is the maintenance loop's latest reason to remove or keep a dead member ("" when none
	// was considered).
	Decision string
	// CheckedAt is when this status was taken.
	CheckedAt time.Time
	// PeerCA is the peer CA as this member knows it.
	PeerCA PeerCAStatus
}

// PeerCAStatus is the peer CA's state, for `kubectl certapi status` and the log.
type PeerCAStatus struct {
	// SerialNumber and NotAfter are the signing CA's.
	SerialNumber string
	NotAfter     time.Time
	// Rotating is true while the bundle trusts the CA it replaces too.
	Rotating bool
	// RotateAt is when the etcd leader rotates it by itself (set on the etcd leader).
	RotateAt time.Time
	// Waiting names the members a rotation waits for (on the etcd leader).
	Waiting []string
	// Reason is the etcd leader's latest decision, in words.
	Reason string
}

// errWait means: nothing to do yet, look again.
var errWait = errors.New("waiting")

// errRefused means: this member must not start; looking again changes nothing.
var errRefused = errors.New("refused")

// Start starts this member: it issues itself a certificate, decides how to start (DecideStart), starts
// etcd, and returns once the member is ready and a voting member (a learner promotes itself first), or
// ctx ends. Run keeps it; Stop stops it.
func Start(ctx context.Context, cfg Config) (*Member, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("etcd member: %w", err)
	}
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
	m := &Member{cfg: cfg, files: newPKIFiles(filepath.Join(cfg.Dir, PKIDirName)), peer: PeerCAState{CA: cfg.CA}, peerChanged: make(chan struct{}, 1)}
	if cfg.PeerCAStore != nil && !cfg.AcceptNewPeerCA {
		// The store (a Secret) is read at start; the trust file is what this member trusted when it last
		// ran, on its own volume. A CA neither the same nor a successor of one of those was not made by a
		// rotation: issuing from it would start a member its peers do not trust.
		if err := heldTrustVouches(m.files.TrustedCAFile, cfg.CA); err != nil {
			return nil, fmt.Errorf("etcd member %s: %w (the peer CA read at start was replaced outside a rotation: put back the one the "+
				"store held, which a running member writes back itself; if the replacement is deliberate, start every member once "+
				"with --etcd-accept-new-peer-ca)", cfg.Name, err)
		}
	}
	if err := m.firstCertificate(ctx, time.Now()); err != nil {
		return nil, fmt.Errorf("etcd member %s: %w", cfg.Name, err)
	}
	tlsCfg, err := transport.TLSInfo{CertFile: m.files.CertFile, KeyFile: m.files.KeyFile, TrustedCAFile: m.files.TrustedCAFile}.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("etcd member %s: client TLS: %w", cfg.Name, err)
	}
	m.tls = tlsCfg

	var lastReason string
	err = retry(ctx, 200*time.Millisecond, cfg.RetryInterval, func(ctx context.Context) (bool, error) {
		err := m.startOnce(ctx, &lastReason)
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, errWait):
			return false, nil
		case errors.Is(err, errRefused), ctx.Err() != nil:
			return false, err
		default:
			klog.ErrorS(err, "Starting the etcd member failed; trying again", "member", cfg.Name)
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
		klog.ErrorS(err, "Could not record the member's local client URL", "member", cfg.Name)
	}
	return m, nil
}

// retry calls fn until it is done or fails, waiting first, then twice as long each time up to most,
// until ctx ends. (wait.ExponentialBackoff stops at its cap; this goes on at the cap.)
func retry(ctx context.Context, first, most time.Duration, fn func(context.Context) (bool, error)) error {
	delay := first
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		done, err := fn(ctx)
		if err != nil || done {
			return err
		}
		t.Reset(delay)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		delay = min(2*delay, most)
	}
}

// etcdDir is etcd's data directory.
func (m *Member) etcdDir() string { return filepath.Join(m.cfg.Dir, "etcd") }

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
		if in.ClusterExisted, err = m.cfg.Bootstrap.Existed(ctx); err != nil {
			return fmt.Errorf("reading the bootstrap record: %w", err)
		}
		if others := m.otherMembers(ctx); in.ClusterExisted && in.OtherPeersExist && len(others) > 0 {
			if in.OthersReportNoData, err = m.cfg.Bootstrap.ReportedNoData(ctx, others, NoDataWindow); err != nil {
				return fmt.Errorf("reading the members' reports: %w", err)
			}
		}
	}
	if err := m.readPublishedCA(ctx, &in); err != nil {
		return err
	}
	plan := DecideStart(in)
	if plan.Reason != *lastReason || plan.Action != StartWait {
		klog.InfoS("Etcd member start", "member", m.cfg.Name, "action", plan.Action, "reason", plan.Reason)
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
		klog.InfoS("Moved the data of an earlier cluster epoch aside", "member", m.cfg.Name, "dataEpoch", in.DataEpoch, "epoch", in.Epoch, "to", aside)
		return m.startOnce(ctx, lastReason)
	case StartWait:
		if !in.HasData && m.cfg.Bootstrap != nil && time.Since(m.reportedNoData) > NoDataWindow/4 {
			if err := m.cfg.Bootstrap.ReportNoData(ctx); err != nil {
				klog.ErrorS(err, "Could not report that this member has no data", "member", m.cfg.Name)
			} else {
				m.reportedNoData = time.Now()
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
			klog.InfoS("Moved the data of this removed etcd member aside", "member", m.cfg.Name, "to", aside)
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
			klog.ErrorS(err, "Could not record the cluster epoch of this member's data", "member", m.cfg.Name)
		}
	}
	if plan.Action == StartBootstrap && m.cfg.Bootstrap != nil {
		if err := m.cfg.Bootstrap.Record(ctx); err != nil {
			// The cluster runs; without the record a later ordinal 0 that loses its volume while every
			// other member is down bootstraps anew. Say so and go on.
			klog.ErrorS(err, "Could not record the etcd bootstrap", "member", m.cfg.Name)
		}
	}
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

// memberList asks each URL in turn for the member list; it returns the URL that answered, or "".
func (m *Member) memberList(ctx context.Context, urls []string) (string, []Entry) {
	for _, u := range urls {
		if u == m.cfg.ClientURL {
			continue
		}
		c, err := m.client(ctx, []string{u})
		if err != nil {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		resp, err := c.MemberList(cctx)
		cancel()
		_ = c.Close()
		if err != nil {
			klog.V(2).InfoS("Peer did not answer", "url", u, "err", err)
			continue
		}
		return u, convertMembers(resp.Members)
	}
	return "", nil
}

// joinCandidates are the client URLs to ask, in turn, to add this member: the member that answered the
// member list first, then the other voting members' advertised client URLs, then every other member found.
// etcd's strict reconfiguration check refuses an add on a member that has not been connected to a
// quorum of voters for 5 s; that is a fact about the member asked, not the cluster, so another may accept.
func joinCandidates(answered string, members []Entry, discovered []string, self string) []string {
	out := []string{answered}
	add := func(u string) {
		if u != "" && u != self && !slices.Contains(out, u) {
			out = append(out, u)
		}
	}
	for _, e := range members {
		if !e.IsLearner {
			for _, u := range e.ClientURLs {
				add(u)
			}
		}
	}
	for _, u := range discovered {
		add(u)
	}
	return out
}

// join removes this member's stale entries through the member at url and adds it as a learner through
// the first of candidates that accepts; it returns the initial cluster to start with.
func (m *Member) join(ctx context.Context, url string, candidates []string, stale []uint64) (string, error) {
	if len(stale) > 0 {
		c, err := m.client(ctx, []string{url})
		if err != nil {
			return "", err
		}
		for _, id := range stale {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			_, err := c.MemberRemove(cctx, id)
			cancel()
			if err != nil && !errors.Is(err, rpctypes.ErrMemberNotFound) {
				_ = c.Close()
				return "", fmt.Errorf("removing the stale entry %x of this member: %w", id, err)
			}
			klog.InfoS("Removed a stale etcd member entry of this member (its data was lost)", "member", m.cfg.Name, "id", fmt.Sprintf("%x", id))
		}
		_ = c.Close()
	}
	var refusals []string
	for _, u := range candidates {
		initial, err := m.addAsLearner(ctx, u)
		switch {
		case err == nil:
			m.lastJoinRefusal = ""
			return initial, nil
		case errors.Is(err, rpctypes.ErrTooManyLearners):
			klog.InfoS("Another etcd member is joining; waiting for it to be promoted", "member", m.cfg.Name)
			return "", errWait
		case errors.Is(err, rpctypes.ErrUnhealthy):
			// etcd adds a member only through a member that has been connected to a quorum of voters for
			// 5 s: after a restart or a join, the next join waits that long. Ask the next member.
			refusals = append(refusals, u)
			continue
		}
		return "", fmt.Errorf("adding this member as a learner through %s: %w", u, err)
	}
	if msg := strings.Join(refusals, ", "); msg != m.lastJoinRefusal {
		klog.InfoS("Every etcd member asked refused to add this one for now (not connected to a quorum of voters for 5 s); trying again",
			"member", m.cfg.Name, "refusedBy", refusals)
		m.lastJoinRefusal = msg
	}
	return "", errWait
}

// addAsLearner asks the member at url to add this member as a learner and returns the initial cluster.
func (m *Member) addAsLearner(ctx context.Context, url string) (string, error) {
	c, err := m.client(ctx, []string{url})
	if err != nil {
		return "", err
	}
	defer func() { _ = c.Close() }()
	// Raft drops a configuration change proposed while another is unapplied (two members joining at the
	// same moment), and the call then waits for nothing: keep the wait short and try again. Should the
	// add have been applied after all, the next attempt finds it as a stale entry of this member's peer
	// URL and removes it first.
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	resp, err := c.MemberAddAsLearner(cctx, []string{m.cfg.PeerURL})
	cancel()
	if err != nil {
		return "", err
	}
	klog.InfoS("Added this member as an etcd learner", "member", m.cfg.Name, "id", fmt.Sprintf("%x", resp.Member.ID), "through", url)
	var parts []string
	for _, mm := range resp.Members {
		switch {
		case mm.ID == resp.Member.ID:
			parts = append(parts, m.cfg.Name+"="+m.cfg.PeerURL)
		case mm.Name != "":
			for _, p := range mm.PeerURLs {
				parts = append(parts, mm.Name+"="+p)
			}
		}
	}
	return strings.Join(parts, ","), nil
}

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

func mustURL(s string) url.URL {
	u, err := url.Parse(s)
	if err != nil {
		panic(err) // Validate checked it
	}
	return *u
}

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
	klog.InfoS("Etcd member is ready", "member", m.cfg.Name, "id", fmt.Sprintf("%x", uint64(e.Server.MemberID())), "learner", e.Server.IsLearner())
	return nil
}

// promote makes a learner a voting member: MemberPromote refuses until the learner has caught up with
// the leader, so it is tried again with backoff until it succeeds or ctx ends.
func (m *Member) promote(ctx context.Context) error {
	if !m.etcd.Server.IsLearner() {
		return nil
	}
	id := uint64(m.etcd.Server.MemberID())
	err := retry(ctx, 100*time.Millisecond, m.cfg.RetryInterval, func(ctx context.Context) (bool, error) {
		select {
		case <-m.etcd.Server.StopNotify():
			// The leader removed this learner (it was unhealthy too long, DecideMaintenance): give up, so
			// that the process restarts and joins anew.
			return false, errors.New("etcd stopped: the cluster removed this learner")
		default:
		}
		if !m.etcd.Server.IsLearner() {
			return true, nil
		}
		c, err := m.client(ctx, m.votingClientURLs())
		if err != nil {
			return false, nil
		}
		defer func() { _ = c.Close() }()
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err = c.MemberPromote(cctx, id)
		cancel()
		switch {
		case err == nil || errors.Is(err, rpctypes.ErrMemberNotLearner):
			klog.InfoS("Promoted this etcd learner to a voting member", "member", m.cfg.Name)
			return true, nil
		case errors.Is(err, rpctypes.ErrMemberNotFound):
			return false, fmt.Errorf("the cluster removed this learner before its promotion: %w", err)
		case errors.Is(err, rpctypes.ErrMemberLearnerNotReady):
			klog.V(2).InfoS("Learner not yet in sync; promotion retried", "member", m.cfg.Name)
		default:
			klog.V(1).InfoS("Promotion failed; retried", "member", m.cfg.Name, "err", err)
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("promoting this learner: %w", err)
	}
	// The local server learns of its promotion when it applies the entry.
	return wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(context.Context) (bool, error) {
		return !m.etcd.Server.IsLearner(), nil
	})
}

// votingClientURLs are the client URLs of the voting members, this one's first when it votes.
func (m *Member) votingClientURLs() []string {
	var urls []string
	for _, mm := range m.etcd.Server.Cluster().Members() {
		if !mm.IsLearner {
			urls = append(urls, mm.ClientURLs...)
		}
	}
	slices.SortStableFunc(urls, func(a, b string) int {
		switch {
		case a == m.cfg.ClientURL:
			return -1
		case b == m.cfg.ClientURL:
			return 1
		}
		return 0
	})
	return urls
}

// ClientURLs are the endpoints to give etcd clients such as certapi's storage: this member's own over
// loopback first (no DNS on the way), then the other voting members' advertised URLs (a client reaches
// the cluster while this member is cut off).
func (m *Member) ClientURLs() []string {
	urls := []string{m.localClientURL()}
	for _, u := range m.votingClientURLs() {
		if u != m.cfg.ClientURL {
			urls = append(urls, u)
		}
	}
	return urls
}

// localClientURL is the listen client URL, with a wildcard address replaced by loopback.
func (m *Member) localClientURL() string {
	u := mustURL(m.cfg.ListenClientURL)
	if ip := net.ParseIP(u.Hostname()); ip != nil && ip.IsUnspecified() {
		host := "127.0.0.1"
		if ip.To4() == nil {
			host = "::1"
		}
		u.Host = net.JoinHostPort(host, u.Port())
	}
	return u.String()
}

// ClientTLSFiles are the certificate, key and CA files a client of this cluster uses (the member's own).
func (m *Member) ClientTLSFiles() (certFile, keyFile, caFile string) {
	return m.files.CertFile, m.files.KeyFile, m.files.TrustedCAFile
}

// Members is the member list as this member has applied it (no network call).
func (m *Member) Members() []Entry { return convertClusterMembers(m.etcd.Server) }

// Name is this member's name.
func (m *Member) Name() string { return m.cfg.Name }

// ID is this member's etcd ID.
func (m *Member) ID() uint64 { return uint64(m.etcd.Server.MemberID()) }

// Status returns the latest status the maintenance loop saw.
func (m *Member) Status() Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.status
}

// AddStatusListener adds lis, told whenever Status changes in what it shows (the member counts, the
// leadership, health, the peer CA and what its rotation waits for; not CheckedAt, nor the reasons'
// words), until remove is called. A cluster that does not change tells nobody anything.
func (m *Member) AddStatusListener(lis dynamiccertificates.Listener) (remove func()) {
	return m.statusListeners.AddListener(lis)
}

// sameShown reports whether a and b show the same: everything but the time and the reasons' words.
func sameShown(a, b Status) bool {
	pa, pb := a.PeerCA, b.PeerCA
	return a.Members == b.Members && a.Learners == b.Learners && a.Leader == b.Leader && maps.Equal(a.Healthy, b.Healthy) &&
		pa.SerialNumber == pb.SerialNumber && pa.NotAfter.Equal(pb.NotAfter) && pa.Rotating == pb.Rotating &&
		pa.RotateAt.Equal(pb.RotateAt) && slices.Equal(pa.Waiting, pb.Waiting)
}

func (m *Member) client(ctx context.Context, endpoints []string) (*clientv3.Client, error) {
	if len(endpoints) == 0 {
		return nil, errors.New("no endpoints")
	}
	return clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		TLS:         m.tls.Clone(),
		DialTimeout: 3 * time.Second,
		Context:     ctx,
		Logger:      zap.NewNop(),
	})
}

// SetPeerCA tells the member the peer CA's latest state (from its store's watch, or the etcd leader's
// own rotation). When the CA differs from the one the member holds, Run re-issues the member
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
	m.mu.Lock()
	if err := m.peer.CA.Vouches(st.CA); err != nil {
		first := m.foreignPeerCA == nil || !m.foreignPeerCA.Equal(st.CA)
		m.foreignPeerCA = st.CA
		m.mu.Unlock()
		if first {
			klog.ErrorS(err, "Ignoring the etcd peer CA in its store: no rotation made it. The etcd leader's member writes back the CA the members hold",
				"member", m.cfg.Name, "offered", st.CA.Certificate.Subject.CommonName, "held", m.PeerCA().CA.Certificate.Subject.CommonName)
		}
		return
	}
	m.foreignPeerCA = nil
	if st.CA.Key == nil && m.peer.CA.Key != nil && st.CA.Certificate.Equal(m.peer.CA.Certificate) {
		// The store holds the public part only: the key this member holds stays (custody.go).
		ca := *st.CA
		ca.Key = m.peer.CA.Key
		st.CA = &ca
	}
	changed := !st.CA.Equal(m.peer.CA)
	m.peer = st
	m.mu.Unlock()
	if changed {
		select {
		case m.peerChanged <- struct{}{}:
		default:
		}
	}
}

// PeerCA returns the peer CA's state as this member holds it.
func (m *Member) PeerCA() PeerCAState {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.peer
}

// firstCertificate gives the member its certificate as it starts: one it issues itself when it holds the
// peer CA's key (given, or read from its own etcd data: keyFromVolume); else the one on its volume while more than a third of its life is left and the bundle
// verifies it (a restart); else one a member that holds the key issues it (enroll), asked until one does
// or ctx ends.
func (m *Member) firstCertificate(ctx context.Context, now time.Time) error {
	ca := m.PeerCA().CA
	if ca.Key == nil && m.cfg.PeerCARecordKey != "" && m.hasData() {
		withKey, err := m.keyFromVolume(ctx, ca)
		if err == nil {
			m.mu.Lock()
			m.peer.CA = withKey
			m.mu.Unlock()
			ca = withKey
			klog.InfoS("Loaded the etcd peer CA's key from this member's own data", "member", m.cfg.Name, "peerCA", ca.Certificate.Subject.CommonName)
		} else {
			klog.InfoS("The etcd peer CA's key is not in this member's data", "member", m.cfg.Name, "reason", err.Error())
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
		m.mu.Lock()
		m.cert = mc
		m.mu.Unlock()
		klog.InfoS("Starting with the etcd member certificate on this member's volume", "member", m.cfg.Name, "notAfter", mc.NotAfter)
		return nil
	}
	klog.InfoS("Enrolling with the etcd cluster for a member certificate", "member", m.cfg.Name, "reason", err.Error())
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
			klog.InfoS("Not enrolled yet; asking again", "member", m.cfg.Name, "reason", msg)
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
		if m.cfg.Bootstrap != nil && time.Since(m.reportedNoData) > NoDataWindow/4 {
			if err := m.cfg.Bootstrap.ReportNoData(ctx); err != nil {
				klog.ErrorS(err, "Could not report that this member has no data", "member", m.cfg.Name)
			} else {
				m.reportedNoData = time.Now()
			}
		}
		if m.cfg.PeerCAStore == nil {
			return false, nil
		}
		cur, err := m.cfg.PeerCAStore.Current(ctx)
		if err != nil || cur.Certificate.Equal(held.Certificate) {
			return false, nil
		}
		m.mu.Lock()
		m.peer.CA = cur
		m.mu.Unlock()
		klog.InfoS("Taking the etcd peer CA its store holds now: this member has no data and no certificate", "member", m.cfg.Name, "peerCA", cur.Certificate.Subject.CommonName)
		return false, nil
	}
	in := StartInput{Name: m.cfg.Name, PeerURL: m.cfg.PeerURL, Designated: true, Epoch: m.cfg.ClusterEpoch, OtherPeersExist: disc.OtherPeersExist}
	if m.cfg.Bootstrap != nil {
		var err error
		if in.ClusterExisted, err = m.cfg.Bootstrap.Existed(ctx); err != nil {
			return false, fmt.Errorf("reading the bootstrap record: %w", err)
		}
		if others := m.otherMembers(ctx); in.ClusterExisted && in.OtherPeersExist && len(others) > 0 {
			if in.OthersReportNoData, err = m.cfg.Bootstrap.ReportedNoData(ctx, others, NoDataWindow); err != nil {
				return false, fmt.Errorf("reading the members' reports: %w", err)
			}
		}
	}
	if err := m.readPublishedCA(ctx, &in); err != nil {
		klog.ErrorS(err, "Not bootstrapping a cluster yet; looking again", "member", m.cfg.Name)
		return false, nil
	}
	plan := DecideStart(in)
	if plan.Action == StartRefuse {
		klog.InfoS("Etcd member start", "member", m.cfg.Name, "action", plan.Action, "reason", plan.Reason)
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
	m.mu.Lock()
	m.peer.CA = ca
	m.mu.Unlock()
	klog.InfoS("No member holds the etcd peer CA's key: made a new peer CA to bootstrap a new cluster",
		"member", m.cfg.Name, "peerCA", ca.Certificate.Subject.CommonName, "reason", plan.Reason)
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
	m.mu.Lock()
	m.cert = mc
	m.mu.Unlock()
	return nil
}

// Run keeps the member until ctx ends: it renews the member certificate, and on the etcd leader it
// checks every member's health and removes one that stayed dead past the timeout when
// DecideMaintenance allows. It returns when ctx ends or etcd stops.
func (m *Member) Run(ctx context.Context) error {
	var tracker HealthTracker
	var lastReason, lastPeerReason string
	ticker := time.NewTicker(m.cfg.CheckInterval)
	defer ticker.Stop()
	// The leader watch is Run's own: it ends with Run.
	quorumLost := make(chan struct{}, 1)
	watchCtx, stopWatch := context.WithCancel(ctx)
	var watch sync.WaitGroup
	defer func() {
		stopWatch()
		watch.Wait()
	}()
	watch.Go(func() { m.watchLeader(watchCtx, quorumLost) })
	if m.cfg.Verifier != nil {
		watch.Go(func() {
			if err := m.serveEnrollment(watchCtx); err != nil {
				klog.ErrorS(err, "This etcd member cannot enroll joining members; they enroll through another", "member", m.cfg.Name)
			}
		})
	}
	reissue := false
	for {
		m.mu.Lock()
		renewAt := m.cert.RenewAt
		m.mu.Unlock()
		m.keepCustody(ctx)
		if reissue || !time.Now().Before(renewAt) {
			if err := m.renewCertificate(ctx, time.Now()); err != nil {
				klog.ErrorS(err, "Renewing the etcd member certificate failed; retried", "member", m.cfg.Name)
			} else {
				klog.InfoS("Renewed the etcd member certificate", "member", m.cfg.Name, "peerCA", m.PeerCA().CA.Certificate.SerialNumber.Text(16))
				reissue = false
			}
		}
		m.maintain(ctx, &tracker, &lastReason, &lastPeerReason)
		select {
		case <-ctx.Done():
			return nil
		case err := <-m.etcd.Err():
			return fmt.Errorf("etcd member %s: %w", m.cfg.Name, err)
		case <-m.etcd.Server.StopNotify():
			return fmt.Errorf("etcd member %s stopped", m.cfg.Name)
		case <-m.peerChanged:
			reissue = true
		case <-quorumLost:
			// Check at once which members this one still reaches, for the 503s' message.
		case <-ticker.C:
		}
	}
}

// maintain runs one round of the maintenance loop.
func (m *Member) maintain(ctx context.Context, tracker *HealthTracker, lastReason, lastPeerReason *string) {
	self := m.ID()
	members := convertClusterMembers(m.etcd.Server)
	peer := m.PeerCA()
	st := Status{Leader: uint64(m.etcd.Server.Leader()) == self, CheckedAt: time.Now(), PeerCA: PeerCAStatus{
		SerialNumber: peer.CA.Certificate.SerialNumber.Text(16), NotAfter: peer.CA.Certificate.NotAfter, Rotating: peer.CA.Rotating(),
	}}
	for _, mm := range members {
		if mm.IsLearner {
			st.Learners++
		} else {
			st.Members++
		}
	}
	if !st.Leader {
		*tracker = HealthTracker{}
		m.setStatus(st)
		if m.QuorumLost() {
			m.checkReach(ctx, members)
		}
		return
	}
	c, err := m.client(ctx, []string{m.localClientURL()})
	if err != nil {
		m.setStatus(st)
		return
	}
	defer func() { _ = c.Close() }()
	healthy := map[uint64]bool{self: true}
	for id, a := range askStatus(ctx, c, members, self) {
		healthy[id] = a.healthy
	}
	states := tracker.Observe(time.Now(), members, healthy)
	// Only an unhealthy member can be removed: ask for the StatefulSet's size (an API call) only then, so
	// that a healthy cluster costs kube-apiserver nothing.
	anyUnhealthy := slices.ContainsFunc(states, func(s MemberState) bool { return !s.Healthy })
	if m.cfg.DesiredMembers != nil && anyUnhealthy {
		if n, ok := m.cfg.DesiredMembers(ctx); ok {
			for i := range states {
				if o := Ordinal(states[i].Name); o >= 0 && o >= n {
					states[i].Departed = true
				}
			}
		}
	}
	st.Healthy = map[string]bool{}
	for _, s := range states {
		name := s.Name
		if name == "" {
			name = fmt.Sprintf("%x", s.ID)
		}
		st.Healthy[name] = s.Healthy
	}
	act := DecideMaintenance(MaintenanceInput{Members: states, Now: time.Now(), DeadMemberTimeout: m.cfg.DeadMemberTimeout, StalledLearnerTimeout: m.cfg.StalledLearnerTimeout})
	st.Decision = act.Reason
	m.rotatePeerCA(ctx, c, peer, members, &st.PeerCA, lastPeerReason)
	m.setStatus(st)
	if act.Reason != "" && act.Reason != *lastReason {
		klog.InfoS("Etcd membership", "reason", act.Reason)
	}
	*lastReason = act.Reason
	if !act.Remove {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := c.MemberRemove(cctx, act.ID); err != nil {
		klog.ErrorS(err, "Removing a dead etcd member failed", "member", act.Name, "id", fmt.Sprintf("%x", act.ID), "peerURLs", peerURLs(states, act.ID))
		return
	}
	// An unstarted learner has no name yet: its peer URL says whose it was.
	klog.InfoS("Removed a dead etcd member", "member", act.Name, "id", fmt.Sprintf("%x", act.ID), "peerURLs", peerURLs(states, act.ID))
}

// peerURLs are the peer URLs of member id in states.
func peerURLs(states []MemberState, id uint64) []string {
	for _, s := range states {
		if s.ID == id {
			return s.PeerURLs
		}
	}
	return nil
}

func (m *Member) setStatus(st Status) {
	m.mu.Lock()
	changed := !sameShown(m.status, st)
	m.status = st
	m.mu.Unlock()
	if changed {
		defer m.statusListeners.Notify()
	}
	metrics.EtcdMembers.WithLabelValues("voter").Set(float64(st.Members))
	metrics.EtcdMembers.WithLabelValues("learner").Set(float64(st.Learners))
	leader := 0.0
	if st.Leader {
		leader = 1
	}
	metrics.EtcdLeader.Set(leader)
	// Only the etcd leader checks health; elsewhere the series would be stale.
	metrics.EtcdMemberHealthy.Reset()
	for name, ok := range st.Healthy {
		v := 0.0
		if ok {
			v = 1
		}
		metrics.EtcdMemberHealthy.WithLabelValues(name).Set(v)
	}
}

// Stop stops etcd. It is safe to call more than once.
func (m *Member) Stop() {
	if m.etcd != nil {
		m.etcd.Close()
	}
}

// EtcdServerHasStopped is closed when etcd has stopped.
func (m *Member) EtcdServerHasStopped() <-chan struct{} { return m.etcd.Server.StopNotify() }

// LocalIPs are this host's non-loopback addresses, for the member certificate.
func LocalIPs() []string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	var ips []string
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
			ips = append(ips, n.IP.String())
		}
	}
	return ips
}

func convertMembers(in []*etcdserverpb.Member) []Entry {
	out := make([]Entry, 0, len(in))
	for _, m := range in {
		out = append(out, Entry{ID: m.ID, Name: m.Name, PeerURLs: m.PeerURLs, ClientURLs: m.ClientURLs, IsLearner: m.IsLearner})
	}
	return out
}

// convertClusterMembers reads the member list as this server has applied it.
func convertClusterMembers(s *etcdserver.EtcdServer) []Entry {
	in := s.Cluster().Members()
	out := make([]Entry, 0, len(in))
	for _, m := range in {
		out = append(out, Entry{ID: uint64(m.ID), Name: m.Name, PeerURLs: m.PeerURLs, ClientURLs: m.ClientURLs, IsLearner: m.IsLearner})
	}
	return out
}

// rotatePeerCA runs one step of the peer CA's rotation on the etcd leader (DecidePeerCA): it begins one
// when due or asked for, and finishes it once every member presents a certificate of the new CA, each
// through the store, and keeps the key's record (custody.go) through c, a client of this member. st is
// filled with what it saw.
func (m *Member) rotatePeerCA(ctx context.Context, c *clientv3.Client, peer PeerCAState, members []Entry, st *PeerCAStatus, lastReason *string) {
	if m.cfg.PeerCAStore == nil {
		return
	}
	m.mu.Lock()
	foreign := m.foreignPeerCA
	m.mu.Unlock()
	if foreign != nil {
		// The store holds a CA no rotation made (SetPeerCA ignored it): put back the one the members hold,
		// guarded by the store still holding that foreign CA. No rotation step runs until it is back.
		st.Reason = "the peer CA's store held a CA that the members' CA does not vouch for; writing theirs back"
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := m.cfg.PeerCAStore.Replace(cctx, foreign, peer.CA, ""); err != nil {
			klog.ErrorS(err, "Writing the etcd peer CA back to its store failed; retried")
			return
		}
		klog.InfoS("Wrote the etcd peer CA the members hold back to its store, in place of one it does not vouch for",
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
		klog.InfoS("Etcd peer CA", "action", plan.Action, "reason", plan.Reason)
	}
	*lastReason = plan.Reason
	var next *PeerCA
	switch plan.Action {
	case PeerCABegin:
		var err error
		if next, err = ca.Successor(time.Now(), m.cfg.PeerCADuration); err != nil {
			klog.ErrorS(err, "Rotating the etcd peer CA failed; retried")
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
		klog.ErrorS(err, "Storing the rotated etcd peer CA's key in the members' etcd failed; retried", "action", plan.Action)
		return
	}
	if err := m.cfg.PeerCAStore.Replace(cctx, ca, next, handled); err != nil {
		klog.ErrorS(err, "Storing the rotated etcd peer CA failed; retried", "action", plan.Action)
		return
	}
	// The store tells every member of the change, this one included (SetPeerCA), in the order it
	// changed: one source of truth, never this member's own copy ahead of the store's.
	klog.InfoS("Stored the rotated etcd peer CA", "action", plan.Action, "serial", next.Certificate.SerialNumber.Text(16), "notAfter", next.Certificate.NotAfter)
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
				klog.V(2).InfoS("Could not reach an etcd member to see its certificate", "member", out[i].Name, "err", err)
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
