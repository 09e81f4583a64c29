package issuer

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apiserver/pkg/storage/value"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/certapi/certapi/pkg/notify"
	"github.com/certapi/certapi/pkg/signer"
)

// Config is what an Issuer needs.
type Config struct {
	// Client reaches the etcd that holds certapi's objects.
	Client *clientv3.Client
	// Prefix is certapi's key prefix in etcd, e.g. /registry/certapi.dev.
	Prefix string
	// Transformer encrypts the CA record as the storage layer would (identity when not configured).
	Transformer value.Transformer
	// RequireEncryptedRecord refuses to load a CA record stored unencrypted (ErrUnencryptedRecord): set it
	// when Transformer encrypts, unless a record written before encryption was configured is to be loaded
	// and rewritten encrypted once.
	RequireEncryptedRecord bool
	// Identity names this replica in the election, the log and the leader metric.
	Identity string
	// SessionTTL is the etcd session's lease: a leader that stops renewing it loses leadership after this.
	SessionTTL time.Duration
	// HandoffTimeout bounds how long a follower waits for the leader to answer.
	HandoffTimeout time.Duration
	// ClusterDomain is the suffix of fully qualified Service names.
	ClusterDomain string
	// CADuration is the lifetime of a CA this replica creates.
	CADuration time.Duration
	// MaxCertificateDuration, when positive, caps every leaf's lifetime (see signer.RotationPolicy).
	MaxCertificateDuration time.Duration
	// Clock is the time source; nil means the real clock.
	Clock clock.PassiveClock
	// OnIssued, when set, is called on the leader after each signature, by either path.
	OnIssued func(req Request, res *Result)
	// OnLeading, when set, is started in a goroutine each time this replica becomes leader, with a context
	// that ends when leadership ends. It must return when that context ends. If it returns an error
	// before then, the term ends: this replica resigns, and the election (this replica included) starts
	// over after a backoff. A leader runs all of its loops or does not lead.
	OnLeading func(ctx context.Context) error
	// OnLeadershipChange, when set, is called with true when this replica starts leading and false when it stops.
	OnLeadershipChange func(leading bool)
	// CheckHandoff is asked about each request a follower hands this replica while it leads; without it
	// every handed-over request is refused (see HandoffCheck).
	CheckHandoff HandoffCheck
	// PublishedBundles, when set, is asked by a leader that finds no CA record, before it creates one, for
	// the CA bundles certapi had published: the CAs of certapi's found there stay trusted as Retiring
	// (see Recovery). Give only objects that certapi alone writes. An error ends the term: no CA is
	// created before they were read. Objects that do not exist are left out, without an error. Leave it nil
	// unless the operator opted in: whoever holds certapi's ServiceAccount token can write those objects,
	// and a CA planted there would be trusted for up to the longest certificate lifetime.
	PublishedBundles func(ctx context.Context) ([]PublishedBundle, error)
	// Upstream, when set, makes certapi's CA an intermediate of an organisation's CA, signed by hand: the
	// next CA is a certificate request that waits for the signed certificate to be imported (Import);
	// see Upstream. nil: certapi makes self-signed CAs, as it always did.
	Upstream *Upstream
	// BundleAnchor says which certificate of a CA an organisation's CA signed goes into the bundles:
	// signer.AnchorRoot (the default when empty) or signer.AnchorIntermediate. Self-signed CAs are in
	// every bundle as themselves, whatever it says.
	BundleAnchor signer.BundleAnchor
	// Keys, when set, holds the CA keys in an HSM: every new CA key is made there and used there, the CA
	// record keeps only its reference, and a key no CA needs is destroyed there (see CAKeys). CAs whose
	// keys the record holds (made before it was set) sign until rotation replaces them.
	Keys CAKeys
}

// Issuer signs certificates for every replica: directly on the leader, through an etcd handoff elsewhere.
type Issuer struct {
	cfg   Config
	store caStore

	// writeMu serialises the CA writes that start from the state in memory (Rotate, Import), so that one
	// does not fail the other's fenced write.
	writeMu sync.Mutex

	mu      sync.RWMutex
	leading bool
	auth    signer.Authorities
	bundle  []byte
	modRev  int64
	// recovery is the CA record's Recovery (nil when it has none); recoveredThisTerm says this replica
	// created the record in its current term.
	recovery          *Recovery
	recoveredThisTerm bool
	// termKey and termRev identify the election key of the current or last term; CA writes are fenced on them.
	termKey string
	termRev int64
	// leaseRenewedAt is when the last successful grant or keepalive of the election lease was sent, and
	// leaseTTL the TTL etcd answered, on the local CLOCK_BOOTTIME (now, bootTime): see lease.go.
	leaseRenewedAt time.Time
	leaseTTL       time.Duration
	// leaseLapseLogged is set once a refusal to sign for want of a known-valid lease has been logged.
	leaseLapseLogged atomic.Bool
	// leaseCh is closed and replaced when the lease becomes known valid again or the term ends, to wake
	// the calls that wait for that (signAsLeader).
	leaseCh chan struct{}
	// now reads the local clock that does not jump and counts suspended time (bootTime), for the lease
	// and the publication of Next; tests replace it.
	now func() time.Time
	// published is the Next CA this replica published in this term, and when by now: the grace period
	// must pass on that clock too, not only on the wall clock (see effective).
	published struct {
		next *x509.Certificate
		at   time.Time
	}

	servers serverLease

	listeners notify.Listeners

	// logger is Run's (log), for what is logged outside a call that carries a context: signing.
	logger atomic.Pointer[klog.Logger]
}

// log returns the logger Run was given, named "issuer"; klog's own before Run.
func (i *Issuer) log() klog.Logger {
	if l := i.logger.Load(); l != nil {
		return *l
	}
	return klog.Background()
}

// New returns an Issuer; Run makes it take part in the election.
func New(cfg Config) (*Issuer, error) {
	if cfg.Client == nil || cfg.Prefix == "" || cfg.Identity == "" {
		return nil, errors.New("issuer: Client, Prefix and Identity are required")
	}
	if cfg.Transformer == nil {
		cfg.Transformer = identityTransformer{}
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = 15 * time.Second
	}
	if cfg.HandoffTimeout <= 0 {
		cfg.HandoffTimeout = 3 * time.Second
	}
	if cfg.CADuration <= 0 {
		cfg.CADuration = signer.DefaultCADuration
	}
	anchor, err := signer.ParseBundleAnchor(string(cfg.BundleAnchor))
	if err != nil {
		return nil, fmt.Errorf("issuer: %w", err)
	}
	cfg.BundleAnchor = anchor
	i := &Issuer{cfg: cfg, now: bootTime}
	i.store = &keystore{client: cfg.Client, key: cfg.Prefix + "/" + CAKeysResource + "/default", transformer: cfg.Transformer,
		requireEncrypted: cfg.RequireEncryptedRecord, externalKey: i.externalKey}
	return i, nil
}

// Signing returns the Active CA and the trust bundle while this replica leads and its election lease is
// known to be alive (see lease.go).
func (i *Issuer) Signing() (*signer.CA, []byte, bool) {
	auth, bundle, ok := i.current()
	return auth.Active, bundle, ok
}

// State returns the CAs and the rotation's progress while this replica leads and its election lease is
// known to be alive.
func (i *Issuer) State() (signer.Authorities, bool) {
	auth, _, ok := i.current()
	return auth, ok
}

// current returns the CAs and the bundle while this replica leads and its election lease is known to be
// alive; a leader whose lease may have expired says so in the log, once per lapse.
func (i *Issuer) current() (signer.Authorities, []byte, bool) {
	i.mu.RLock()
	leading, auth, bundle, valid := i.leading, i.effectiveLocked(i.auth, i.cfg.Clock.Now()), i.bundle, i.leaseValidLocked()
	i.mu.RUnlock()
	auth.Anchor = i.cfg.BundleAnchor
	if !leading || auth.Active == nil {
		return signer.Authorities{}, nil, false
	}
	if !valid {
		i.noteLeaseLapse()
		return signer.Authorities{}, nil, false
	}
	return auth, bundle, true
}

// Bundle returns the trust bundle while this replica leads; it satisfies the injector's bundle source.
func (i *Issuer) Bundle() ([]byte, bool) {
	_, bundle, ok := i.Signing()
	return bundle, ok
}

// HandoffTimeout is how long a follower waits for the leader to sign (Config.HandoffTimeout, defaulted).
func (i *Issuer) HandoffTimeout() time.Duration { return i.cfg.HandoffTimeout }

// Leading reports whether this replica leads and can sign.
func (i *Issuer) Leading() bool {
	_, _, ok := i.Signing()
	return ok
}

// Leader returns the identity of the replica that holds the leader election now, read from etcd (this
// replica's own identity, without a read, while it leads). ok is false when no replica holds it: nobody
// signs, delivers Secrets or injects bundles until one does. A replica that has just won the election and
// is still loading the CA counts as the leader.
func (i *Issuer) Leader(ctx context.Context) (identity string, ok bool, err error) {
	if i.Leading() {
		return i.cfg.Identity, true, nil
	}
	// The election's keys are <prefix>/leader/<lease>; the one created first is the leader's
	// (concurrency.Election.Leader, which needs a session of its own).
	resp, err := i.cfg.Client.Get(ctx, i.cfg.Prefix+"/leader/", clientv3.WithFirstCreate()...)
	if err != nil {
		return "", false, fmt.Errorf("reading the leader election from etcd: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return "", false, nil
	}
	return string(resp.Kvs[0].Value), true, nil
}

// Issue signs req: here when this replica leads, otherwise through the leader. ErrNoLeader (wrapped) means
// nobody could sign in time.
func (i *Issuer) Issue(ctx context.Context, req Request) (*Result, error) {
	if res, led, err := i.signAsLeader(ctx, req); led {
		return res, err
	}
	return i.handoff(ctx, req)
}

// signAsLeader signs req here when this replica leads; led is false when it does not (or no longer does),
// and req should go to the leader there is. A leader whose election lease is not known to be alive (etcd
// was unreachable for a while) waits, within ctx, for etcd to renew the lease, and signs then, or for the
// term to end; at ctx's end the error wraps ErrNoLeader.
func (i *Issuer) signAsLeader(ctx context.Context, req Request) (res *Result, led bool, err error) {
	for {
		changed := i.leaseChanged() // before the attempt, so that a renewal right after it is not missed
		res, err := i.Sign(req)
		if !errors.Is(err, ErrNotLeading) {
			return res, true, err
		}
		if !i.leaseLapsed() {
			if i.Leading() {
				continue // etcd renewed the lease between the attempt and this check: sign now
			}
			return nil, false, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, true, fmt.Errorf("%w: etcd did not renew the leader's election lease in time", ErrNoLeader)
		}
	}
}

// SignedLog is the message Sign logs at verbosity SignedLogLevel for every certificate it returns, with
// the replica's identity, its term (the revision of its election key: terms are ordered by it), the serial
// number and leaseValidAt, a moment after the signature at which the election lease was known valid. Terms
// are fenced by the lease, so ordered by leaseValidAt the terms of all replicas' lines never go back: a
// check that no two replicas signed at the same moment (test/node/nodetest.CheckFencing).
const SignedLog = "Signed a certificate"

// SignedLogLevel is the verbosity (--v) from which Sign logs SignedLog: one line per certificate.
const SignedLogLevel = 3

// ErrNotLeading is returned by Sign on a replica that does not lead (or lost its session a moment ago).
var ErrNotLeading = errors.New("this replica does not lead")

// Sign signs req with the Active CA on this replica through Policy.Sign, the one issuance policy, and
// tells OnIssued. It refuses, with ErrNotLeading, the moment leadership is lost or the election lease is
// no longer known to be alive, and it discards a signature finished after that moment (a process paused
// while signing): every certificate it returns was made while this replica certainly led.
func (i *Issuer) Sign(req Request) (*Result, error) {
	ca, bundle, ok := i.Signing()
	if !ok {
		return nil, ErrNotLeading
	}
	res, err := i.policy().Sign(ca, bundle, req, i.cfg.Clock.Now())
	if err != nil && !errors.Is(err, signer.ErrKeyUnavailable) {
		// A rotation's switch or a distrust may have replaced ca while it signed, and destroyed its key in
		// the HSM right after (adopt): the caller wants a certificate of the CA that signs now, so sign
		// once more with that one rather than fail a call that came a moment too early. (A token that
		// cannot sign at all is not asked twice: the caller would wait two timeouts for the same 503.)
		again, againBundle, ok := i.Signing()
		if !ok {
			return nil, ErrNotLeading // the next leader signs it
		}
		if again != ca {
			res, err = i.policy().Sign(again, againBundle, req, i.cfg.Clock.Now())
		}
	}
	if err != nil {
		return nil, err
	}
	// The lease is checked after the signature was made, so it was known valid at validAt: the next term
	// cannot begin before then, which is what SignedLog lets a checker hold every signature to.
	validAt := i.cfg.Clock.Now()
	if !i.leaseValid() {
		i.noteLeaseLapse()
		return nil, ErrNotLeading
	}
	if v := i.log().V(SignedLogLevel); v.Enabled() {
		i.mu.RLock()
		term := i.termRev
		i.mu.RUnlock()
		v.Info(SignedLog, "identity", i.cfg.Identity, "term", term, "serialNumber", res.SerialNumber,
			"leaseValidAt", validAt.UTC().Format(time.RFC3339Nano))
	}
	if i.cfg.OnIssued != nil {
		i.cfg.OnIssued(req, res)
	}
	return res, nil
}
