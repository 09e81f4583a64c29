package apiserver

import (
	"time"

	genericapiserver "k8s.io/apiserver/pkg/server"

	"github.com/certapi/certapi/pkg/admission/requestquota"
	"github.com/certapi/certapi/pkg/apiserver/filters"
	"github.com/certapi/certapi/pkg/apiserver/readiness"
	"github.com/certapi/certapi/pkg/controller/erasure"
	"github.com/certapi/certapi/pkg/controller/leader"
	"github.com/certapi/certapi/pkg/etcdcluster"
	"github.com/certapi/certapi/pkg/issuer"
	"github.com/certapi/certapi/pkg/snapshot"
)

// QuorumRetryAfterSeconds is the Retry-After of the 503 certapi answers while its etcd cluster has no
// quorum (filters.QuorumRetryAfterSeconds says why 3 s).
const QuorumRetryAfterSeconds = filters.QuorumRetryAfterSeconds

// ExtraConfig is what certapi needs beyond a generic API server's config.
type ExtraConfig struct {
	// ClusterDomain is the cluster's DNS domain, the suffix of every fully qualified Service name.
	ClusterDomain string
	// IssuerConfig configures the issuer; its Client is owned by the caller (Etcd). Complete sets its
	// ClusterDomain and MaxCertificateDuration from this config's.
	IssuerConfig issuer.Config
	// Kube reaches kube-apiserver (Secrets, Events, SubjectAccessReviews): --kubeconfig or in-cluster. The
	// leader's clients are made from its config.
	Kube *KubeClients
	// RotationGrace is the least time between publishing a Next CA and letting it sign.
	RotationGrace time.Duration
	// MaxCertificateDuration caps every leaf's lifetime; a Retiring CA stays trusted this long.
	MaxCertificateDuration time.Duration
	// DistrustDeadline is the longest a distrusted CA stays in the bundle.
	DistrustDeadline time.Duration
	// SelfServing, when set, is the provider of certapi's own serving certificate: the server issues it
	// from its own CA and reports not ready until it has.
	SelfServing *selfServing
	// AuthReadiness, when set, holds the /readyz checks of delegated authentication and authorization.
	AuthReadiness *readiness.Auth
	// StatusInterval bounds how often the leader writes one request's status.
	StatusInterval time.Duration
	// Leader sizes the leader's loops and its kube-apiserver client.
	Leader LeaderOptions
	// UpstreamCSR, when set, has the leader ask for its CA certificates through CertificateSigningRequests
	// (--ca-upstream=CertificateSigningRequest).
	UpstreamCSR *leader.UpstreamCSR
	// Snapshots, when set, is the leader's schedule of etcd snapshots.
	Snapshots *snapshot.Schedule
	// Erasure is how the leader erases etcd's history and the snapshots taken before once a distrust
	// completes; its Snapshots are Snapshots.
	Erasure *erasure.Etcd
	// KeepPublishedCAs has a leader that finds no CA record keep the CAs of certapi's it finds in the
	// bundles it had published, as Retiring (--keep-published-cas).
	KeepPublishedCAs bool
	// RequestCounter, when set, is the CertapiServingCertRequestLimit admission plugin's count of each
	// namespace's ServingCertRequests: the server feeds it from its own storage once it serves.
	RequestCounter *requestquota.Counter
	// EtcdMember, when set, is this replica's member of certapi's own etcd cluster (owned by Etcd):
	// while it is the etcd leader, the server writes what it sees of the cluster into
	// CertificateAuthority/default's status.etcd, when that changes.
	EtcdMember *etcdcluster.Member
	// QuorumReadiness, set with EtcdMember, is the quorum-aware etcd part of /readyz and /livez; the
	// server runs its watch of the Service's EndpointSlices.
	QuorumReadiness *readiness.Quorum
}

// Config is the whole configuration of a certapi server. Complete it to make a Server.
type Config struct {
	GenericConfig *genericapiserver.RecommendedConfig
	ExtraConfig   ExtraConfig
}

// completedConfig is a Config whose defaults Complete filled in.
type completedConfig struct {
	GenericConfig genericapiserver.CompletedConfig
	ExtraConfig   *ExtraConfig
}

// CompletedConfig is a Config with every default filled in; only it can make a Server, and only
// Config.Complete can make one: its one field is private to this package.
type CompletedConfig struct {
	*completedConfig
}

// DefaultStatusInterval is ExtraConfig.StatusInterval when it is zero. A request's first status change is
// written at once; this bounds how often it is written again, so that a burst of renewals against one
// request (many pods of one webhook) makes few writes.
const DefaultStatusInterval = 200 * time.Millisecond

// Complete fills in the defaults, here and nowhere else: New takes the completed config as it is.
func (c *Config) Complete() CompletedConfig {
	// No nil pointer in an interface: a filter without its source is left out.
	var auth filters.AuthenticationGate
	if a := c.ExtraConfig.AuthReadiness; a != nil {
		auth = a
	}
	var quorum filters.QuorumSource
	if m := c.ExtraConfig.EtcdMember; m != nil {
		quorum = m
	}
	c.GenericConfig.BuildHandlerChainFunc = filters.Chain(auth, quorum)
	extra := &c.ExtraConfig
	if extra.StatusInterval <= 0 {
		extra.StatusInterval = DefaultStatusInterval
	}
	if extra.Leader == (LeaderOptions{}) {
		extra.Leader = DefaultLeaderOptions()
	}
	// The issuer signs with the server's cluster domain and lifetime cap.
	extra.IssuerConfig.ClusterDomain = extra.ClusterDomain
	extra.IssuerConfig.MaxCertificateDuration = extra.MaxCertificateDuration
	return CompletedConfig{&completedConfig{GenericConfig: c.GenericConfig.Complete(), ExtraConfig: extra}}
}
