package apiserver

import (
	"errors"
	"fmt"
	"os"
	"time"

	"k8s.io/apimachinery/pkg/util/rand"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/sets"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apiserver/pkg/admission"
	mutatingpolicy "k8s.io/apiserver/pkg/admission/plugin/policy/mutating"
	"k8s.io/apiserver/pkg/admission/plugin/resourcequota"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/mutating"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/validating"
	genericapiserver "k8s.io/apiserver/pkg/server"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	cliflag "k8s.io/component-base/cli/flag"

	"github.com/certapi/certapi/pkg/admission/requestquota"
	"github.com/certapi/certapi/pkg/admission/secretaccess"
	"github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/apis/certapi/validation"
	"github.com/certapi/certapi/pkg/registry/servingcertrequest"
)

// EtcdPathPrefix is where every certapi object lives in etcd: the storage prefix "/registry" followed by
// the group, as kube-apiserver lays out its own groups, so a shared etcd shows certapi's keys in one place.
const EtcdPathPrefix = "/registry/certapi.dev"

// storagePrefix is the generic registry's prefix; it appends "<group>/<resource>" to it.
const storagePrefix = "/registry"

// DefaultDistrustDeadline is --distrust-deadline's default: the longest a distrusted CA stays in the bundle.
const DefaultDistrustDeadline = 15 * time.Minute

// DefaultShutdownDelay is how long a replica keeps serving after SIGTERM before it refuses new calls.
// At least 5 s: when the delay ends, Go's server closes, as idle, only the connections that have carried
// a request or are over 5 s old; a newer one that never carried a request (the aggregator dials one
// ahead and pools it) stays open, and a call sent on it then is dropped unanswered.
const DefaultShutdownDelay = 5 * time.Second

// MinDistrustDeadline is the least --distrust-deadline: the time pkg/servingcert clients, which certapi
// does not track, are given to re-issue (the rotation's distrust dwell).
const MinDistrustDeadline = 5 * time.Second

// Options are everything a certapi server can be told on its command line.
type Options struct {
	RecommendedOptions *genericoptions.RecommendedOptions

	// ClusterDomain is the cluster's DNS domain (kubelet's --cluster-domain).
	ClusterDomain string
	// DataDir holds the embedded etcd's data when no --etcd-servers are given.
	DataDir string
	// LeaderIdentity names this replica in the leader election.
	LeaderIdentity string
	// LeaderSessionTTL is how long a leader that stops renewing its etcd session keeps leadership.
	LeaderSessionTTL time.Duration
	// HandoffTimeout bounds how long a follower waits for the leader to sign.
	HandoffTimeout time.Duration
	// ShutdownDelay is how long a replica answers calls after SIGTERM, closing each connection after its
	// answer, before it refuses new calls and stops.
	ShutdownDelay time.Duration
	// RotationGrace is the least time between publishing a Next CA and letting it sign.
	RotationGrace time.Duration
	// ServiceName and ServiceNamespace name the Service in front of certapi; its own certificate is for it.
	ServiceName, ServiceNamespace string
	// MaxCertificateDuration caps every certificate's lifetime and so how long a Retiring CA stays.
	MaxCertificateDuration time.Duration
	// DistrustDeadline is the longest a distrusted CA stays in the bundle, whatever is not re-issued yet.
	DistrustDeadline time.Duration
	// MaxRequestsPerNamespace is how many ServingCertRequests a namespace that no ResourceQuota limits may
	// hold (--max-servingcertrequests-per-namespace); 0 turns the limit off.
	MaxRequestsPerNamespace int
	// GCHeadroom is how much the Go heap may grow past its live part between collections, within GOGC
	// 50 to 100 (--gc-headroom; cmd/certapi applies it); 0 leaves GOGC at 100.
	GCHeadroom resource.QuantityValue
	// Leader holds the sizes of the leader's loops and its kube-apiserver client.
	Leader LeaderOptions
	// Snapshots configure the leader's scheduled etcd snapshots.
	Snapshots SnapshotOptions
	// RequireEncryptedCAKeys refuses to start when the CA private keys would be stored in etcd unencrypted.
	RequireEncryptedCAKeys bool
	// AllowUnencryptedCARecord loads a CA record stored unencrypted although the encryption configuration
	// encrypts the CA keys, and rewrites it encrypted: the one start after encryption is first configured.
	AllowUnencryptedCARecord bool
	// KeepPublishedCAs has a leader that finds no CA record keep trusting the CAs it finds in the bundles
	// certapi had published (issuer.Config.PublishedBundles).
	KeepPublishedCAs bool
	// EtcdCluster turns the embedded etcd into one member of a cluster of certapi's replicas.
	EtcdCluster EtcdClusterOptions
	// CAUpstream says whose CA certapi's CA is: self-signed, or an intermediate of an organisation's CA.
	CAUpstream CAUpstreamOptions
	// CAKeys says where the CA keys are made and kept: in memory, or in an HSM through a key plugin.
	CAKeys CAKeyOptions

	// featureGateErr is what setting certapi's feature gate defaults failed with (Flags); Validate reports it.
	featureGateErr error
	// requestCounter counts each namespace's ServingCertRequests for the CertapiServingCertRequestLimit
	// admission plugin; the server feeds it from its storage.
	requestCounter *requestquota.Counter
}

// DefaultGCHeadroom is --gc-headroom's default. certapi's live heap is about 13 MiB idle and about 35
// MiB with 10,000 ServingCertRequests: the Go heap keeps GOGC=100 while it is small (idle and issuing,
// when most of what certapi allocates is garbage), and grows by half its live part instead of doubling
// once that part is twice this.
const DefaultGCHeadroom = "16Mi"

// NewOptions returns the defaults: etcd3 storage under EtcdPathPrefix, delegated authentication and
// authorization, and an admission chain without admission webhooks.
func NewOptions() *Options {
	o := &Options{
		RecommendedOptions:      genericoptions.NewRecommendedOptions(storagePrefix, Codecs.LegacyCodec(v1alpha1.SchemeGroupVersion)),
		ClusterDomain:           "cluster.local",
		DataDir:                 "/var/lib/certapi",
		LeaderSessionTTL:        15 * time.Second,
		HandoffTimeout:          3 * time.Second,
		ShutdownDelay:           DefaultShutdownDelay,
		RotationGrace:           time.Hour,
		MaxCertificateDuration:  validation.MaxDuration,
		DistrustDeadline:        DefaultDistrustDeadline,
		MaxRequestsPerNamespace: requestquota.DefaultMaxPerNamespace,
		GCHeadroom:              resource.QuantityValue{Quantity: resource.MustParse(DefaultGCHeadroom)},
		Snapshots:               DefaultSnapshotOptions(),
		requestCounter:          requestquota.NewCounter(),
		ServiceName:             "certapi",
		ServiceNamespace:        "certapi-system",
		Leader:                  DefaultLeaderOptions(),
		EtcdCluster:             DefaultEtcdClusterOptions(),
		CAUpstream:              DefaultCAUpstreamOptions(),
		CAKeys:                  DefaultCAKeyOptions(),
	}
	// /debug/pprof serves heap profiles, which hold whatever the heap holds, to anyone authorized for it:
	// off unless an admin turns it on to debug (--profiling).
	o.RecommendedOptions.Features.EnableProfiling = false
	// Without --tls-cert-file certapi issues its own certificate in memory: nothing is written to disk.
	o.RecommendedOptions.SecureServing.ServerCert.CertDirectory = ""
	// HTTP/1.1 only: kube-apiserver's aggregator proxies every call over one HTTP/2 connection per
	// replica, and when a replica shuts down, the GOAWAY that ends that connection fails every POST the
	// aggregator has already sent on it with a 503 of its own that no client retries
	// (kubernetes/kubernetes#135285). Over HTTP/1.1 each call has its own connection, which the
	// shutdown's 429 + Retry-After closes after its answer. --disable-http2-serving=false restores HTTP/2.
	o.RecommendedOptions.SecureServing.DisableHTTP2Serving = true
	o.RecommendedOptions.Etcd.StorageConfig.EncodeVersioner = runtime.NewMultiGroupVersioner(v1alpha1.SchemeGroupVersion, schema.GroupKind{Group: v1alpha1.GroupName})
	// A webhook whose certificate comes from certapi must never be able to block certapi, so admission
	// webhooks are off unless an admin turns them on. ValidatingAdmissionPolicy still applies.
	// MutatingAdmissionPolicy is off too: in k8s.io/apiserver 0.37 it fetches kube-apiserver's
	// /openapi/v3 every 5 s for as long as the server runs, and an idle certapi makes no periodic calls.
	// --enable-admission-plugins=MutatingAdmissionPolicy turns it on.
	o.RecommendedOptions.Admission.DefaultOffPlugins = sets.New(mutating.PluginName, validating.PluginName, mutatingpolicy.PluginName)
	secretaccess.Register(o.RecommendedOptions.Admission.Plugins)
	// Tenants are bounded in how many ServingCertRequests they keep in certapi's memory: a ResourceQuota
	// with count/servingcertrequests.certapi.dev is enforced here (kube-apiserver's own ResourceQuota
	// plugin never sees what it proxies to certapi), and without one the per-namespace default of
	// --max-servingcertrequests-per-namespace applies. Both come last, after every other check passed, as
	// in kube-apiserver: quota counts only what is otherwise admitted.
	requestquota.Register(o.RecommendedOptions.Admission.Plugins)
	resourcequota.Register(o.RecommendedOptions.Admission.Plugins)
	o.RecommendedOptions.Admission.RecommendedPluginOrder = append(o.RecommendedOptions.Admission.RecommendedPluginOrder,
		secretaccess.PluginName, requestquota.PluginName, resourcequota.PluginName)
	o.RecommendedOptions.ExtraAdmissionInitializers = func(*genericapiserver.RecommendedConfig) ([]admission.PluginInitializer, error) {
		return []admission.PluginInitializer{requestquota.Initializer{MaxPerNamespace: o.MaxRequestsPerNamespace, Counter: o.requestCounter},
			secretaccess.Initializer{Policy: o.Leader.SecretDelivery}}, nil
	}
	return o
}

// Flags returns certapi's flags in named sections, so --help groups them.
func (o *Options) Flags() cliflag.NamedFlagSets {
	var fss cliflag.NamedFlagSets
	fs := fss.FlagSet("certapi")
	fs.StringVar(&o.ClusterDomain, "cluster-domain", o.ClusterDomain,
		"The cluster's DNS domain, as given to kubelet. Certificates carry <service>.<namespace>.svc and <service>.<namespace>.svc.<cluster-domain>, and the CA's name constraints permit only those suffixes.")
	fs.StringVar(&o.DataDir, "data-dir", o.DataDir,
		"Directory of the embedded etcd, used only when --etcd-servers is empty: a single member listening only on Unix sockets inside it "+
			"(a laptop, one replica), or with --etcd-peer-service this replica's member of the replicas' etcd cluster and its TLS files. "+
			"It holds the CA private keys: keep it on a private volume. certapi makes it mode 0700.")

	fs.StringVar(&o.LeaderIdentity, "leader-identity", o.LeaderIdentity,
		"This replica's name in the leader election, the log and the certapi_leader metric. Default: the host name and a random suffix.")
	fs.DurationVar(&o.LeaderSessionTTL, "leader-session-ttl", o.LeaderSessionTTL,
		"TTL of the leader's etcd session (whole seconds). A leader that dies is replaced after at most this long; a leader stopped with SIGTERM resigns at once.")
	fs.DurationVar(&o.HandoffTimeout, "handoff-timeout", o.HandoffTimeout,
		fmt.Sprintf("How long certapi works on one servingcerts call: reading its ServingCertRequest from etcd and signing, on the leader or through a handoff "+
			"from a follower. Past it (no leader, etcd unreachable) the call is answered 503 with Retry-After: %ds. "+
			"client-go retries such answers up to 10 times, so a client-go caller waits at most 11 x (handoff-timeout + %ds) in all: 44s with the default.",
			servingcertrequest.RetryAfterSeconds, servingcertrequest.RetryAfterSeconds))

	fs.DurationVar(&o.ShutdownDelay, "shutdown-delay-duration", o.ShutdownDelay,
		"After SIGTERM, how long certapi keeps answering calls before it refuses new ones (429 with Retry-After) and stops. Meanwhile /readyz fails, "+
			"the leader has already resigned, and every answer closes its connection, so kube-apiserver moves its pooled connections to the other "+
			"replicas without a failed call. Add it to the pod's preStop sleep and the drain when you set terminationGracePeriodSeconds.")

	fs.StringVar(&o.ServiceName, "service-name", o.ServiceName,
		"The Service in front of certapi. Unless --tls-cert-file is given, certapi serves with a certificate for <service-name>.<service-namespace>.svc "+
			"from its own CA, renewed and swapped without a restart; until it has one it serves a self-signed placeholder and /readyz says so. "+
			"Annotate certapi's APIService certapi.dev/inject-ca-bundle=true so kube-apiserver trusts it.")
	fs.StringVar(&o.ServiceNamespace, "service-namespace", o.ServiceNamespace, "The namespace of --service-name.")
	fs.DurationVar(&o.RotationGrace, "rotation-grace", o.RotationGrace,
		"During a CA rotation, the least time between publishing the Next CA in every bundle and letting it sign: time for kubelet to "+
			"rewrite mounted Secrets' ca.crt (at its pod sync, about a minute) and for clients to reload. The switch also waits until every injectable target holds the bundle.")
	fs.DurationVar(&o.MaxCertificateDuration, "max-certificate-duration", o.MaxCertificateDuration,
		"Caps every certificate's lifetime, whatever a request asks. A Retiring CA stays in the bundle this long after the switch (or until "+
			"its own notAfter), so no certificate it signed loses trust while valid. Lower it only to test rotation end to end.")

	fs.Var(&o.GCHeadroom, "gc-headroom", "How much the Go heap may grow past its live part before the next garbage collection, "+
		"but never more than the live part (GOGC=100, Go's default) nor less than half of it (GOGC=50): certapi sets GOGC after each collection. "+
		"With the default, a small heap (idle, issuing) is collected as Go does, and a larger one (many ServingCertRequests, an embedded etcd) "+
		"grows by this much, then by half its live part, instead of doubling: less memory for some more CPU spent collecting. "+
		"0 leaves GOGC at 100. Ignored when the environment sets GOGC.")

	fs.BoolVar(&o.RequireEncryptedCAKeys, "require-encrypted-ca-keys", o.RequireEncryptedCAKeys,
		"Refuse to start when the CA private keys would be stored in etcd unencrypted: when no --encryption-provider-config is given, or its "+
			"EncryptionConfiguration does not list the resource "+caKeysResource().String()+" or lists the identity provider first for it. "+
			"Without this flag certapi logs a loud warning and starts. The deploy manifests turn it on.")
	fs.BoolVar(&o.AllowUnencryptedCARecord, "allow-unencrypted-ca-record", o.AllowUnencryptedCARecord,
		"Load a CA record that is stored in etcd unencrypted although the EncryptionConfiguration encrypts "+caKeysResource().String()+
			", and rewrite it encrypted. Give it for the one start after encryption is first configured, then remove it. Without it such a record is "+
			"refused and no replica signs: whoever can write to certapi's etcd, or craft a snapshot, could otherwise plant a CA that certapi would sign with.")
	fs.BoolVar(&o.KeepPublishedCAs, "keep-published-cas", o.KeepPublishedCAs,
		"When the leader finds no CA record in etcd (its data lost, no snapshot restored), keep trusting, as Retiring, the CAs of certapi's it "+
			"finds in the bundles it had published (its APIService's caBundle and its ClusterTrustBundle), so that certificates they signed keep "+
			"working until they expire (docs/backup-and-restore.md). Off by default: certapi's own ServiceAccount can write those objects, and a CA "+
			"planted there by whoever holds its token would be trusted. Give it only for the start after such a loss.")
	fs.DurationVar(&o.DistrustDeadline, "distrust-deadline", o.DistrustDeadline,
		fmt.Sprintf("After spec.distrust, the longest the distrusted CA stays in the bundle. It leaves every bundle as soon as every Secret certapi "+
			"delivers for an existing ServingCertRequest, and every certapi replica, holds a certificate of the new CA; at this deadline it leaves "+
			"regardless, with a Warning Event and a log line, and what was not re-issued stops verifying. At least %s.", MinDistrustDeadline))

	fs.IntVar(&o.MaxRequestsPerNamespace, "max-servingcertrequests-per-namespace", o.MaxRequestsPerNamespace,
		"How many ServingCertRequests a namespace may hold when no ResourceQuota in it sets "+string(requestquota.QuotaResourceName)+
			" (one that does replaces this limit, higher or lower, and certapi enforces it). Every replica keeps every request in memory, so this "+
			"bounds what one tenant can make certapi hold. Each replica counts from its own watch: creates on several replicas within "+
			"milliseconds of each other may pass it by as many as are in flight. 0 turns it off.")

	o.Leader.AddFlags(fss.FlagSet("leader loops"))
	o.Snapshots.AddFlags(fss.FlagSet("snapshots"))

	o.RecommendedOptions.Etcd.AddFlags(fss.FlagSet("etcd"))
	fss.FlagSet("etcd").Lookup("etcd-servers").Usage += " When empty, certapi runs an embedded etcd in --data-dir."
	o.EtcdCluster.AddFlags(fss.FlagSet("embedded etcd cluster"))
	o.CAUpstream.AddFlags(fss.FlagSet("CA custody"))
	o.CAKeys.AddFlags(fss.FlagSet("CA custody"))
	o.RecommendedOptions.SecureServing.AddFlags(fss.FlagSet("secure serving"))
	o.RecommendedOptions.Authentication.AddFlags(fss.FlagSet("authentication"))
	o.RecommendedOptions.Authorization.AddFlags(fss.FlagSet("authorization"))
	o.RecommendedOptions.Audit.AddFlags(fss.FlagSet("auditing"))
	o.RecommendedOptions.Features.AddFlags(fss.FlagSet("features"))
	fss.FlagSet("features").Lookup("profiling").Usage += ". Off by default in certapi: a heap profile holds whatever certapi's memory holds; turn it on only to debug."
	o.RecommendedOptions.CoreAPI.AddFlags(fss.FlagSet("kubernetes api"))
	o.RecommendedOptions.Admission.AddFlags(fss.FlagSet("admission"))
	o.RecommendedOptions.EgressSelector.AddFlags(fss.FlagSet("egress selector"))
	o.RecommendedOptions.Traces.AddFlags(fss.FlagSet("traces"))
	o.featureGateErr = setProcessFeatureGateDefaults()
	utilfeature.DefaultMutableFeatureGate.AddFlag(fss.FlagSet("features"))
	return fss
}

// AddFlags adds every flag to fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	for _, f := range o.Flags().FlagSets {
		fs.AddFlagSet(f)
	}
}

// Validate checks the options before anything is started, and reports every error at once: certapi's
// own flags' (validateServer), then each group of flags', each validated by its own Validate, as
// sample-apiserver's options do.
func (o *Options) Validate() error {
	embedded := len(o.RecommendedOptions.Etcd.StorageConfig.Transport.ServerList) == 0
	var errs []error
	if o.featureGateErr != nil {
		errs = append(errs, o.featureGateErr)
	}
	errs = append(errs, o.validateServer(embedded)...)
	errs = append(errs, o.Leader.Validate()...)
	errs = append(errs, o.CAUpstream.Validate()...)
	errs = append(errs, o.CAKeys.Validate()...)
	errs = append(errs, o.Snapshots.Validate(embedded)...)
	errs = append(errs, o.EtcdCluster.Validate(!embedded)...)
	errs = append(errs, o.recommendedForValidation().Validate()...)
	return utilerrors.NewAggregate(errs)
}

// validateServer checks the flags of certapi's own section; embedded says whether the embedded etcd runs.
func (o *Options) validateServer(embedded bool) []error {
	var errs []error
	for _, msg := range utilvalidation.IsDNS1035Label(o.ServiceName) {
		errs = append(errs, fmt.Errorf("--service-name %q: %s", o.ServiceName, msg))
	}
	for _, msg := range utilvalidation.IsDNS1123Label(o.ServiceNamespace) {
		errs = append(errs, fmt.Errorf("--service-namespace %q: %s", o.ServiceNamespace, msg))
	}
	for _, msg := range utilvalidation.IsDNS1123Subdomain(o.ClusterDomain) {
		errs = append(errs, fmt.Errorf("--cluster-domain %q: %s", o.ClusterDomain, msg))
	}
	if o.LeaderSessionTTL < time.Second {
		errs = append(errs, fmt.Errorf("--leader-session-ttl %s: must be at least 1s", o.LeaderSessionTTL))
	}
	if o.ShutdownDelay < 0 || o.ShutdownDelay > 5*time.Minute {
		errs = append(errs, fmt.Errorf("--shutdown-delay-duration %s: must be from 0s to 5m", o.ShutdownDelay))
	}
	if o.HandoffTimeout < 100*time.Millisecond || o.HandoffTimeout > time.Minute {
		errs = append(errs, fmt.Errorf("--handoff-timeout %s: must be from 100ms to 1m", o.HandoffTimeout))
	}
	if o.RotationGrace < 0 {
		errs = append(errs, fmt.Errorf("--rotation-grace %s: must not be negative", o.RotationGrace))
	}
	if o.GCHeadroom.Sign() < 0 {
		errs = append(errs, fmt.Errorf("--gc-headroom %s: must not be negative", o.GCHeadroom.String()))
	}
	if o.MaxCertificateDuration < 10*time.Second || o.MaxCertificateDuration > validation.MaxDuration {
		errs = append(errs, fmt.Errorf("--max-certificate-duration %s: must be from 10s to %s", o.MaxCertificateDuration, validation.MaxDuration))
	}
	if o.MaxRequestsPerNamespace < 0 {
		errs = append(errs, fmt.Errorf("--max-servingcertrequests-per-namespace %d: must be 0 (no limit) or more", o.MaxRequestsPerNamespace))
	}
	if o.DistrustDeadline < MinDistrustDeadline {
		errs = append(errs, fmt.Errorf("--distrust-deadline %s: must be at least %s (clients of the servingcerts subresource need a moment to re-issue)",
			o.DistrustDeadline, MinDistrustDeadline))
	}
	if embedded && o.DataDir == "" {
		errs = append(errs, errors.New("give --etcd-servers, or --data-dir for the embedded etcd"))
	}
	return errs
}

// recommendedForValidation is RecommendedOptions as the generic options can validate them: their etcd
// options insist on --etcd-servers, which the embedded etcd fills in only once it runs.
func (o *Options) recommendedForValidation() *genericoptions.RecommendedOptions {
	ro := *o.RecommendedOptions
	if len(ro.Etcd.StorageConfig.Transport.ServerList) == 0 {
		etcd := *ro.Etcd
		etcd.StorageConfig.Transport.ServerList = []string{"unix:///embedded"}
		ro.Etcd = &etcd
	}
	return &ro
}

// Complete fills in what the flags leave to certapi: this replica's name in the leader election. It
// starts nothing: the run function (Run) starts etcd and the server.
func (o *Options) Complete() error {
	if o.LeaderIdentity == "" {
		o.LeaderIdentity = defaultIdentity()
	}
	// The chart names certapi's ServiceAccount as its Service: the instructions to opt a namespace in to
	// Secret delivery name it.
	o.Leader.SecretDelivery.ServiceAccount = types.NamespacedName{Namespace: o.ServiceNamespace, Name: o.ServiceName}
	return nil
}

func defaultIdentity() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "certapi"
	}
	return host + "_" + rand.String(6)
}
