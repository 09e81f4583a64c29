package etcdcluster

import (
	"context"
	"crypto/tls"
	"net"
	"slices"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/etcdserver"
	"k8s.io/klog/v2"

	"github.com/certapi/certapi/pkg/controller"
)

// Member is a running etcd member of the cluster: Start makes one, Run keeps it, Stop stops it.
type Member struct {
	// The member's jobs live in files of their own, each with the smallest state it needs:
	//
	//   - the lifecycle (start.go, join.go, certificate.go): Start decides how to start, joins as a
	//     learner and promotes itself; its memory (reportedNoData, lastJoinRefusal) is Start's alone;
	//   - the maintainer (maintainer.go): Run's rounds on the project's queue (one key), which act on
	//     DecideMaintenance on the etcd leader; their memory from round to round is the queue's sync's
	//     alone (maintenance);
	//   - the peer-CA rotator (rotator.go, custody.go): SetPeerCA, rotatePeerCA and the key's custody,
	//     over creds, the peer CA and member certificate this member holds, under creds' own lock;
	//   - the quorum observer (quorum.go): the leader watch and QuorumLost, under quorum's own lock and
	//     an atomic read on every request;
	//   - the status (status.go): what the maintenance loop saw, under status' own lock, with its
	//     listeners;
	//   - the etcd clients (clients.go): one long-lived client per purpose, closed by Stop.
	//
	// cfg, etcd, files, tls, log and maintainer are set by Start and not changed afterwards.

	cfg   Config
	etcd  *embed.Etcd
	files pkiFiles
	// tls is the client side of the members' mutual TLS (see etcdClients for how it follows rotations).
	tls *tls.Config
	// log is Start's logger (memberLogger), for what is told the member without a context (SetPeerCA).
	log klog.Logger
	// maintainer runs Run's maintenance rounds; wakeMaintainer asks for one at once.
	maintainer *controller.Queue[maintainerKey]

	// reportedNoData is when this member last reported that it has no data (while starting).
	reportedNoData time.Time
	// lastJoinRefusal is the members that last refused to add this one, logged when it changes.
	lastJoinRefusal string

	creds   *credentials
	quorum  quorumObserver
	status  statusBoard
	clients etcdClients
	// stopOnce makes Stop safe to call more than once.
	stopOnce sync.Once
}

// memberLogger is the logger a member's Start and Run log through: ctx's, named etcd-member, with the
// member's name (key "member").
func memberLogger(ctx context.Context, name string) klog.Logger {
	return klog.FromContext(ctx).WithName("etcd-member").WithValues("member", name)
}

// Stop stops etcd and closes the member's clients. It is safe to call more than once.
func (m *Member) Stop() {
	m.stopOnce.Do(func() {
		if m.maintainer != nil {
			m.maintainer.ShutDown()
		}
		m.clients.close()
		if m.etcd != nil {
			// embed.Etcd.Close panics when called twice.
			m.etcd.Close()
		}
	})
}

// EtcdServerHasStopped is closed when etcd has stopped.
func (m *Member) EtcdServerHasStopped() <-chan struct{} { return m.etcd.Server.StopNotify() }

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

// ClientURLs are the endpoints to give etcd clients such as certapi's storage and leader election: this
// member's own, over loopback (no DNS, no network on the way), and no other. etcd's client spreads its
// requests over every endpoint it is given, so with the other members' URLs a share of this replica's
// calls went to a member on another node, and when that node was lost (no reset, its packets dropped)
// they waited until gRPC's keepalive gave the connection up, 40 s and more: nearly every call failed
// while two replicas of three were healthy (TestNodeLost, test/node/multinode). A replica whose own
// member is cut off has nothing to gain from the others either: its member answers that it has no
// quorum and the replica leaves the Service (DecideReadiness), and its leadership lapses with its lease.
func (m *Member) ClientURLs() []string {
	return []string{m.localClientURL()}
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
