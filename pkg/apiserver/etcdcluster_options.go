package apiserver

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"

	"github.com/certapi/certapi/pkg/etcdcluster"
	"github.com/certapi/certapi/pkg/etcdcluster/incluster"
)

// DefaultDeadMemberTimeout is --etcd-dead-member-timeout's default.
const DefaultDeadMemberTimeout = 10 * time.Minute

// EtcdClusterOptions configure the embedded etcd cluster of certapi's replicas: with --etcd-peer-service
// and no --etcd-servers, each replica's embedded etcd is one member of a cluster over mutual TLS.
type EtcdClusterOptions struct {
	// PeerService is the headless Service's DNS name (<service>.<namespace>.svc); setting it turns
	// cluster mode on.
	PeerService string
	// MemberName is this member's name, the pod name <statefulset>-<ordinal>.
	MemberName string
	// BindAddress is where the member listens for peers and clients.
	BindAddress string
	// ClientPort and PeerPort are the member's ports.
	ClientPort, PeerPort int
	// DeadMemberTimeout is how long a member stays unhealthy before the etcd leader removes it; 0 never.
	DeadMemberTimeout time.Duration
	// ClusterEpoch counts the cluster's restores from a snapshot (etcdcluster.EpochFileName).
	ClusterEpoch int
	// PeerCASecret names the Secret in --service-namespace that holds the peer CA.
	PeerCASecret string
	// PeerCACertFile and PeerCAKeyFile give the peer CA as files instead of the Secret.
	PeerCACertFile, PeerCAKeyFile string
	// AcceptNewPeerCA starts the member with the peer CA of the Secret even when the CAs it trusted before do
	// not vouch for it (etcdcluster.Config.AcceptNewPeerCA).
	AcceptNewPeerCA bool
	// PeerCACustody is where the peer CA's private key is kept: PeerCACustodySecret or PeerCACustodyEtcd.
	PeerCACustody string
	// EnrollPort is where a member that holds the peer CA's key answers joining members (custody etcd).
	EnrollPort int
	// MemberTokenFile is the projected ServiceAccount token, audience incluster.MemberTokenAudience, with
	// which this member proves that it is a pod of certapi's StatefulSet when it enrolls (custody etcd).
	MemberTokenFile string
	// AdvertiseHost, when set, is the host the member advertises instead of <member-name>.<peer-service>
	// (a hidden flag: for members of one machine in tests, where no Service's DNS exists).
	AdvertiseHost string
}

// Where the etcd peer CA's private key is kept (--etcd-peer-ca-custody).
const (
	// PeerCACustodySecret keeps it in the peer CA Secret, beside its certificate (the default of earlier
	// versions; a running cluster switches from it to PeerCACustodyEtcd without a failed call).
	PeerCACustodySecret = "secret"
	// PeerCACustodyEtcd keeps it in the members' own etcd, sealed with the CA keys' encryption, and in
	// the members' memory; the Secret holds the public part only, and members without the key enroll.
	PeerCACustodyEtcd = "etcd"
	// peerCARecordKey is the record's key in certapi's keyspace (EtcdPathPrefix).
	peerCARecordKey = EtcdPathPrefix + "/etcdpeercas/default"
)

// DefaultMemberTokenFile is --etcd-member-token-file's default: where the chart mounts the projected
// token.
const DefaultMemberTokenFile = "/var/run/secrets/certapi.dev/etcd-member/token"

// DefaultEtcdClusterOptions are the defaults: cluster mode off.
func DefaultEtcdClusterOptions() EtcdClusterOptions {
	return EtcdClusterOptions{
		BindAddress:       "0.0.0.0",
		ClientPort:        2379,
		PeerPort:          2380,
		DeadMemberTimeout: DefaultDeadMemberTimeout,
		PeerCASecret:      incluster.DefaultSecretName,
		PeerCACustody:     PeerCACustodyEtcd,
		EnrollPort:        2381,
		MemberTokenFile:   DefaultMemberTokenFile,
	}
}

// Enabled reports whether cluster mode is on.
func (o *EtcdClusterOptions) Enabled() bool { return o.PeerService != "" }

// AddFlags adds the cluster flags.
func (o *EtcdClusterOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.PeerService, "etcd-peer-service", o.PeerService,
		"DNS name of a headless Service (publishNotReadyAddresses: true) in front of certapi's StatefulSet, e.g. certapi-etcd.certapi-system.svc. "+
			"With it, and no --etcd-servers, every replica's embedded etcd is a member of one cluster: ordinal 0 bootstraps it, the others "+
			"join as learners and are promoted when caught up, over mutual TLS from a peer CA certapi keeps itself (--etcd-peer-ca-secret). "+
			"Members advertise https://<member-name>.<etcd-peer-service>:<port>. Empty: a single-member etcd on Unix sockets in --data-dir.")
	fs.StringVar(&o.MemberName, "etcd-member-name", o.MemberName,
		"This replica's etcd member name: its pod name, <statefulset>-<ordinal>. Only ordinal 0 ever bootstraps a cluster. Default: $HOSTNAME, else the host name.")
	fs.StringVar(&o.BindAddress, "etcd-bind-address", o.BindAddress, "The IP address the etcd member listens on for peers and clients (cluster mode).")
	fs.IntVar(&o.ClientPort, "etcd-client-port", o.ClientPort, "The etcd member's client port (cluster mode).")
	fs.IntVar(&o.PeerPort, "etcd-peer-port", o.PeerPort, "The etcd member's peer port (cluster mode).")
	fs.DurationVar(&o.DeadMemberTimeout, "etcd-dead-member-timeout", o.DeadMemberTimeout,
		"How long an etcd member must stay unreachable before the etcd leader removes it from the cluster, and only while the healthy voting members "+
			"that remain are a quorum of the cluster before and after the removal; never the last member, one at a time. A pod that comes back "+
			"after its removal moves its old data aside and joins anew. 0 never removes a member.")
	fs.IntVar(&o.ClusterEpoch, "etcd-cluster-epoch", o.ClusterEpoch,
		"How many times the etcd cluster has been restored from a snapshot (cluster mode). Raise it by one with each restore, to the "+
			"--cluster-epoch given to certapi snapshot restore: a member whose data is of an earlier epoch waits for the restored member to "+
			"answer, then moves its data aside and joins it, rather than restart the old cluster with other members that kept their data; a "+
			"member whose data is of a later epoch refuses to start. Chart value etcd.cluster.epoch.")
	fs.StringVar(&o.PeerCASecret, "etcd-peer-ca-secret", o.PeerCASecret,
		"Secret in --service-namespace holding the etcd peer CA (tls.crt, tls.key, ca.crt). The first replica that finds none creates it; the others read it. "+
			"Every member issues itself a short-lived certificate from it at start. Whoever can read this Secret can read certapi's etcd.")
	fs.BoolVar(&o.AcceptNewPeerCA, "etcd-accept-new-peer-ca", o.AcceptNewPeerCA,
		"Start the member with the peer CA of --etcd-peer-ca-secret even when the CAs it trusted when it last ran do not vouch for it (neither the same "+
			"CA nor its successor through a rotation). Without it such a member refuses to start (one without etcd data drops its member certificate and enrolls "+
			"again instead), and running members ignore such a CA and write theirs back: a CA put into the Secret outside a rotation would split the cluster. Give it on every member once, only after replacing the CA on purpose.")
	fs.StringVar(&o.PeerCACertFile, "etcd-peer-ca-cert-file", o.PeerCACertFile, "The etcd peer CA's certificate as a file, instead of --etcd-peer-ca-secret. Needs --etcd-peer-ca-key-file and --etcd-peer-ca-custody=secret: the key is the operator's file, and certapi never rotates it.")
	fs.StringVar(&o.PeerCAKeyFile, "etcd-peer-ca-key-file", o.PeerCAKeyFile, "The etcd peer CA's private key as a file (PEM), with --etcd-peer-ca-cert-file.")
	fs.StringVar(&o.PeerCACustody, "etcd-peer-ca-custody", o.PeerCACustody,
		"Where the etcd peer CA's private key is kept. \"secret\": in --etcd-peer-ca-secret, beside its certificate, so that whoever reads that Secret "+
			"can read certapi's etcd (the default of earlier versions). \"etcd\" (the default): only in the members' own etcd, sealed with the encryption of the CA keys (--encryption-provider-config), "+
			"and in the members' memory; the Secret holds the public part only. A member that starts without a certificate then proves to a member "+
			"that holds the key that it is a pod of certapi's StatefulSet (--etcd-member-token-file, checked with a TokenReview and against the pod) "+
			"and gets its certificate from it (--etcd-enroll-port). Switching a running cluster from secret to etcd keeps it serving: once every "+
			"member keeps the key in etcd, the etcd leader removes it from the Secret (switching back then needs the key put back by hand).")
	fs.IntVar(&o.EnrollPort, "etcd-enroll-port", o.EnrollPort,
		"With --etcd-peer-ca-custody=etcd: the port on which a member that holds the peer CA's key issues joining members their certificates (TLS; "+
			"a joining member verifies it against the peer CA and sends its token only then).")
	fs.StringVar(&o.MemberTokenFile, "etcd-member-token-file", o.MemberTokenFile,
		"With --etcd-peer-ca-custody=etcd: a projected ServiceAccount token of this pod with audience "+incluster.MemberTokenAudience+
			", with which the member proves, when it enrolls, that it is a pod of certapi's StatefulSet.")
	fs.StringVar(&o.AdvertiseHost, "etcd-advertise-host", o.AdvertiseHost,
		"The host the etcd member advertises in its peer and client URLs instead of <member-name>.<etcd-peer-service>; it must stay the same across restarts. For members on one machine (tests), where no Service's DNS exists.")
	_ = fs.MarkHidden("etcd-advertise-host")
}

// Validate checks the cluster flags; externalEtcd is true when --etcd-servers is given.
func (o *EtcdClusterOptions) Validate(externalEtcd bool) []error {
	if !o.Enabled() {
		return nil
	}
	var errs []error
	if externalEtcd {
		errs = append(errs, errors.New("--etcd-peer-service forms an embedded etcd cluster and --etcd-servers names an external etcd: give one of them"))
	}
	if msgs := utilvalidation.IsDNS1123Subdomain(strings.TrimSuffix(o.PeerService, ".")); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("--etcd-peer-service %q: expected a DNS name such as certapi-etcd.certapi-system.svc: %s", o.PeerService, strings.Join(msgs, "; ")))
	}
	name := o.memberName()
	if msgs := utilvalidation.IsDNS1123Label(name); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("--etcd-member-name %q: expected a pod name <statefulset>-<ordinal>: %s", name, strings.Join(msgs, "; ")))
	} else if etcdcluster.Ordinal(name) < 0 {
		errs = append(errs, fmt.Errorf("--etcd-member-name %q: expected a pod name ending in -<ordinal> (a StatefulSet's), e.g. certapi-0", name))
	} else if etcdcluster.Ordinal(name) >= etcdcluster.MaxMembers {
		errs = append(errs, fmt.Errorf("--etcd-member-name %q: ordinal %d, but a cluster has at most %d members (ordinals 0 to %d); run at most %d replicas", name, etcdcluster.Ordinal(name), etcdcluster.MaxMembers, etcdcluster.MaxMembers-1, etcdcluster.MaxMembers))
	}
	if h := o.AdvertiseHost; h != "" && net.ParseIP(h) == nil && len(utilvalidation.IsDNS1123Subdomain(h)) > 0 {
		errs = append(errs, fmt.Errorf("--etcd-advertise-host %q: expected a DNS name or an IP address", h))
	}
	if net.ParseIP(o.BindAddress) == nil {
		errs = append(errs, fmt.Errorf("--etcd-bind-address %q: expected an IP address such as 0.0.0.0", o.BindAddress))
	}
	for flag, p := range map[string]int{"--etcd-client-port": o.ClientPort, "--etcd-peer-port": o.PeerPort} {
		if p < 1 || p > 65535 {
			errs = append(errs, fmt.Errorf("%s %d: expected a port from 1 to 65535", flag, p))
		}
	}
	if o.ClientPort == o.PeerPort {
		errs = append(errs, fmt.Errorf("--etcd-client-port and --etcd-peer-port are both %d: they must differ", o.ClientPort))
	}
	if o.DeadMemberTimeout < 0 || (o.DeadMemberTimeout > 0 && o.DeadMemberTimeout < time.Minute) {
		errs = append(errs, fmt.Errorf("--etcd-dead-member-timeout %s: expected 0 (never remove) or at least 1m (a member restarting must not be removed)", o.DeadMemberTimeout))
	}
	if o.ClusterEpoch < 0 {
		errs = append(errs, fmt.Errorf("--etcd-cluster-epoch %d: expected 0 (never restored) or more", o.ClusterEpoch))
	}
	if (o.PeerCACertFile == "") != (o.PeerCAKeyFile == "") {
		errs = append(errs, errors.New("--etcd-peer-ca-cert-file and --etcd-peer-ca-key-file go together: give both or neither"))
	}
	switch o.PeerCACustody {
	case PeerCACustodySecret:
	case PeerCACustodyEtcd:
		if o.PeerCACertFile != "" {
			errs = append(errs, errors.New("--etcd-peer-ca-cert-file gives the peer CA's key as a file, and --etcd-peer-ca-custody=etcd (the default) keeps it in etcd: give --etcd-peer-ca-custody=secret with the files, or neither file"))
		}
		if o.EnrollPort < 1 || o.EnrollPort > 65535 || o.EnrollPort == o.ClientPort || o.EnrollPort == o.PeerPort {
			errs = append(errs, fmt.Errorf("--etcd-enroll-port %d: expected a port from 1 to 65535 other than the client and peer ports", o.EnrollPort))
		}
		if o.MemberTokenFile == "" {
			errs = append(errs, errors.New("--etcd-member-token-file is empty: --etcd-peer-ca-custody=etcd needs the pod's projected token to enroll with"))
		}
	default:
		errs = append(errs, fmt.Errorf("--etcd-peer-ca-custody %q: expected %q or %q", o.PeerCACustody, PeerCACustodySecret, PeerCACustodyEtcd))
	}
	if o.PeerCACertFile == "" {
		if msgs := utilvalidation.IsDNS1123Subdomain(o.PeerCASecret); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("--etcd-peer-ca-secret %q: %s", o.PeerCASecret, strings.Join(msgs, "; ")))
		}
	}
	return errs
}

func (o *EtcdClusterOptions) memberName() string {
	if o.MemberName != "" {
		return o.MemberName
	}
	if h := os.Getenv("HOSTNAME"); h != "" {
		return h
	}
	h, _ := os.Hostname()
	return h
}

// memberConfig is this member's etcdcluster.Config as the flags describe it, before the peer CA and its
// custody are known: names, URLs, ports and timeouts. It starts nothing.
func (o *EtcdClusterOptions) memberConfig(dataDir string) (etcdcluster.Config, error) {
	dir, err := filepath.Abs(dataDir)
	if err != nil {
		return etcdcluster.Config{}, fmt.Errorf("resolving --data-dir %q: %w", dataDir, err)
	}
	name := o.memberName()
	host := name + "." + strings.TrimSuffix(o.PeerService, ".")
	if o.AdvertiseHost != "" {
		host = o.AdvertiseHost
	}
	cfg := etcdcluster.Config{
		Name:              name,
		Dir:               dir,
		PeerURL:           "https://" + net.JoinHostPort(host, strconv.Itoa(o.PeerPort)),
		ClientURL:         "https://" + net.JoinHostPort(host, strconv.Itoa(o.ClientPort)),
		ListenPeerURL:     "https://" + net.JoinHostPort(o.BindAddress, strconv.Itoa(o.PeerPort)),
		ListenClientURL:   "https://" + net.JoinHostPort(o.BindAddress, strconv.Itoa(o.ClientPort)),
		Designated:        etcdcluster.Ordinal(name) == 0,
		DeadMemberTimeout: o.DeadMemberTimeout,
		AcceptNewPeerCA:   o.AcceptNewPeerCA,
		ClusterEpoch:      o.ClusterEpoch,
	}
	ips := etcdcluster.LocalIPs()
	cfg.CertHosts = append([]string{host}, ips...)
	cfg.Discover = etcdcluster.DNSDiscovery(o.PeerService, o.ClientPort, ips)
	return cfg, nil
}
