package apiserver

import (
	"fmt"
	"time"

	"k8s.io/apiserver/pkg/endpoints/openapi"
	genericapiserver "k8s.io/apiserver/pkg/server"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/apiserver/pkg/util/compatibility"
	utilfeature "k8s.io/apiserver/pkg/util/feature"

	"github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/apiserver/readiness"
	"github.com/certapi/certapi/pkg/controller/erasure"
	generatedopenapi "github.com/certapi/certapi/pkg/generated/openapi"
	"github.com/certapi/certapi/pkg/issuer"
	"github.com/certapi/certapi/pkg/metrics"
)

// Config turns the completed options into a server configuration whose storage is etcd, which the run
// function started (startEtcd), and whose clients of kube-apiserver are kube (NewKubeClients). It reads
// the options and changes none of them.
func (o *Options) Config(etcd *Etcd, kube *KubeClients) (*Config, error) {
	metrics.Register()
	// The options applied: the storage reaches etcd as startEtcd does (the embedded etcd's endpoints when
	// it runs one), and with no certificate given, certapi serves with one from its own CA (a placeholder
	// until then).
	recommended := *o.RecommendedOptions
	etcdOptions := *recommended.Etcd
	etcdOptions.StorageConfig.Transport = etcd.transport
	recommended.Etcd = &etcdOptions
	var self *selfServing
	if cert := recommended.SecureServing.ServerCert.CertKey; cert.CertFile == "" && cert.KeyFile == "" {
		var err error
		if self, err = newSelfServing(o.ServiceName, o.ServiceNamespace); err != nil {
			return nil, err
		}
		serving, inner := *recommended.SecureServing, *recommended.SecureServing.SecureServingOptions
		inner.ServerCert.GeneratedCert = self
		serving.SecureServingOptions = &inner
		recommended.SecureServing = &serving
	}

	serverConfig := genericapiserver.NewRecommendedConfig(Codecs)
	namer := openapi.NewDefinitionNamer(Scheme)
	serverConfig.OpenAPIConfig = genericapiserver.DefaultOpenAPIConfig(generatedopenapi.GetOpenAPIDefinitions, namer)
	serverConfig.OpenAPIConfig.Info.Title = "certapi"
	serverConfig.OpenAPIConfig.Info.Version = v1alpha1.Version
	serverConfig.OpenAPIV3Config = genericapiserver.DefaultOpenAPIV3Config(generatedopenapi.GetOpenAPIDefinitions, namer)
	serverConfig.OpenAPIV3Config.Info.Title = "certapi"
	serverConfig.OpenAPIV3Config.Info.Version = v1alpha1.Version
	serverConfig.FeatureGate = utilfeature.DefaultFeatureGate
	// Close open watches when shutting down instead of waiting for them to time out: every operator using
	// pkg/servingcert keeps one open, and a rolling update must not stall on them.
	serverConfig.ShutdownWatchTerminationGracePeriod = 5 * time.Second
	// On SIGTERM, requests that arrive while those in flight drain are answered 429 with Retry-After,
	// which client-go retries (through kube-apiserver's aggregator, on another connection once this one
	// closes), rather than meeting a closing connection, which the aggregator can only answer 503.
	serverConfig.ShutdownSendRetryAfter = true
	serverConfig.ShutdownDelayDuration = o.ShutdownDelay
	serverConfig.EffectiveVersion = compatibility.DefaultBuildEffectiveVersion()

	if err := recommended.ApplyTo(serverConfig); err != nil {
		return nil, fmt.Errorf("applying options: %w", err)
	}
	// A KMS plugin down must not take every replica out of the Service (kmshealth.go).
	if err := readiness.ReportKMSHealth(&serverConfig.Config); err != nil {
		return nil, fmt.Errorf("reporting the KMS plugins' health: %w", err)
	}

	var quorum *readiness.Quorum
	if m := etcd.member; m != nil {
		// Cluster mode: /readyz and /livez ask the member about its quorum before they ask etcd.
		quorum = readiness.NewQuorum(m, m.Name(), kube.Kube, o.ServiceNamespace, o.ServiceName)
		if err := readiness.ReplaceEtcdChecks(&serverConfig.Config, quorum); err != nil {
			return nil, err
		}
	}

	transformer, encrypted, err := caKeysTransformer(serverConfig, o.RequireEncryptedCAKeys)
	if err != nil {
		return nil, err
	}
	upstream, anchor, err := o.CAUpstream.issuerUpstream()
	if err != nil {
		return nil, err
	}
	authn := o.RecommendedOptions.Authentication
	auth := &readiness.Auth{
		ClientCAExpected:      authn != nil && (authn.ClientCert != genericoptions.ClientCertAuthenticationOptions{} || !authn.SkipInClusterLookup),
		RequestHeaderExpected: authn != nil && (authn.RequestHeader.ClientCAFile != "" || !authn.SkipInClusterLookup),
		RequestHeader:         serverConfig.Authentication.RequestHeaderConfig,
		Authorizer:            serverConfig.Authorization.Authorizer,
	}
	if serverConfig.SecureServing != nil {
		auth.ClientCAs = serverConfig.SecureServing.ClientCA
	}
	snapshots := o.Snapshots.schedule(etcd.client, o.DataDir, transformer, encrypted)
	// Only the embedded etcd is certapi's to compact and defragment (erasure.Etcd's Owned says why).
	erase := &erasure.Etcd{Client: etcd.client, Owned: etcd.embedded != nil || etcd.member != nil, Cluster: etcd.member != nil, Snapshots: snapshots,
		RecordDir: o.Snapshots.recordDir(o.DataDir, etcd.embedded != nil || etcd.member != nil)}
	if self != nil {
		self.distrustedRecord = erase.DistrustedRecord()
	}
	return &Config{
		GenericConfig: serverConfig,
		ExtraConfig: ExtraConfig{
			ClusterDomain:          o.ClusterDomain,
			Kube:                   kube,
			RotationGrace:          o.RotationGrace,
			SelfServing:            self,
			AuthReadiness:          auth,
			MaxCertificateDuration: o.MaxCertificateDuration,
			DistrustDeadline:       o.DistrustDeadline,
			RequestCounter:         o.requestCounter,
			Leader:                 o.Leader,
			UpstreamCSR:            o.CAUpstream.upstreamCSR(),
			Snapshots:              snapshots,
			Erasure:                erase,
			KeepPublishedCAs:       o.KeepPublishedCAs,
			EtcdMember:             etcd.member,
			QuorumReadiness:        quorum,
			IssuerConfig: issuer.Config{
				Client:      etcd.client,
				Prefix:      EtcdPathPrefix,
				Transformer: transformer,
				// A record stored unencrypted while the keys are encrypted is refused, unless it is the one
				// start after encryption was configured.
				RequireEncryptedRecord: encrypted && !o.AllowUnencryptedCARecord,
				Identity:               o.LeaderIdentity,
				SessionTTL:             o.LeaderSessionTTL,
				HandoffTimeout:         o.HandoffTimeout,
				Upstream:               upstream,
				BundleAnchor:           anchor,
				Keys:                   o.CAKeys.issuerKeys(),
			},
		},
	}, nil
}
