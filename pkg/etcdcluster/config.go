package etcdcluster

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"k8s.io/apiserver/pkg/storage/value"
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
