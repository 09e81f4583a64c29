package apiserver

import (
	"fmt"
	"time"

	"github.com/spf13/pflag"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/controller/servedcert"
	"github.com/certapi/certapi/pkg/deliveryscope"
)

// LeaderOptions size the loops only the leader runs and its client of kube-apiserver.
type LeaderOptions struct {
	// KubeAPIQPS and KubeAPIBurst limit the leader's requests to kube-apiserver (Secrets, Events,
	// injection patches). Delivering hundreds of Secrets at once is a few requests each; kube-apiserver's
	// priority and fairness protects it, so the client-side limiter must not be what limits a burst.
	KubeAPIQPS   float32
	KubeAPIBurst int
	// SecretWorkers, InjectorWorkers and StatusWorkers are how many Secrets, injection targets and
	// request statuses the leader writes at once.
	SecretWorkers, InjectorWorkers, StatusWorkers int
	// SecretDelivery is where Secrets are delivered (--secret-delivery-scope) and certapi's
	// ServiceAccount, named in the instructions to opt a namespace in (Options.Complete sets it to the
	// Service's namespace and name, as the chart names it). The admission plugin CertapiSecretAccess uses
	// it too.
	SecretDelivery deliveryscope.Policy
	// ServedCheckInterval, ServedCheckTimeout and ServedCheckWorkers run the verifier of what injected
	// webhooks and APIServices serve (pkg/controller/servedcert): how often each endpoint is probed again
	// with no event (0 turns the verifier off), how long one probe may take, and how many run at once.
	ServedCheckInterval, ServedCheckTimeout time.Duration
	ServedCheckWorkers                      int
}

// DefaultLeaderOptions are the measured defaults (see docs/performance.md).
func DefaultLeaderOptions() LeaderOptions {
	return LeaderOptions{KubeAPIQPS: 2000, KubeAPIBurst: 4000, SecretWorkers: 16, InjectorWorkers: 8, StatusWorkers: 16,
		SecretDelivery:      deliveryscope.Policy{Scope: deliveryscope.LabelledNamespaces},
		ServedCheckInterval: servedcert.DefaultInterval, ServedCheckTimeout: servedcert.DefaultTimeout, ServedCheckWorkers: servedcert.DefaultWorkers}
}

// AddFlags adds the leader's flags to fs.
func (o *LeaderOptions) AddFlags(fs *pflag.FlagSet) {
	fs.Float32Var(&o.KubeAPIQPS, "kube-api-qps", o.KubeAPIQPS,
		"Requests per second the leader may make to kube-apiserver (Secrets, Events, caBundle patches), with bursts of --kube-api-burst. "+
			"kube-apiserver's API priority and fairness still protects it.")
	fs.IntVar(&o.KubeAPIBurst, "kube-api-burst", o.KubeAPIBurst, "Burst of requests the leader may make to kube-apiserver; see --kube-api-qps.")
	fs.Var(&o.SecretDelivery.Scope, "secret-delivery-scope", fmt.Sprintf(
		"Where certapi delivers Secrets (ServingCertRequest spec.secretName). %s: only into namespaces labelled %s=%s, where a RoleBinding gives "+
			"certapi's ServiceAccount the ClusterRole %s; a request with spec.secretName anywhere else is refused at admission. %s: into every "+
			"namespace, which needs that ClusterRole bound cluster-wide (certapi's token then reads every Secret of the cluster).",
		deliveryscope.LabelledNamespaces, certapiv1alpha1.LabelSecretDelivery, certapiv1alpha1.SecretDeliveryEnabled,
		certapiv1alpha1.ClusterRoleSecretDelivery, deliveryscope.Cluster))
	fs.IntVar(&o.SecretWorkers, "secret-delivery-workers", o.SecretWorkers, "How many Secrets the leader delivers at once.")
	fs.IntVar(&o.InjectorWorkers, "injector-workers", o.InjectorWorkers, "How many caBundle injection targets the leader checks or patches at once.")
	fs.IntVar(&o.StatusWorkers, "status-workers", o.StatusWorkers, "How many ServingCertRequest status writes the leader makes at once.")
	fs.DurationVar(&o.ServedCheckInterval, "served-check-interval", o.ServedCheckInterval,
		"How often the leader probes again, with no API event, each endpoint of the webhooks, conversion webhooks and APIServices it injects "+
			"(a TLS handshake only, jittered by 10%), to check that what they serve verifies against the injected bundle (docs/served-certificates.md). "+
			"Changes to those objects, their bundle, Services and EndpointSlices are probed at once. 0 turns the check off, and with it the "+
			"cluster-wide watch of Services and EndpointSlices.")
	fs.DurationVar(&o.ServedCheckTimeout, "served-check-timeout", o.ServedCheckTimeout, "How long one probe of a served certificate (connection and TLS handshake) may take; a slower endpoint is Unreachable.")
	fs.IntVar(&o.ServedCheckWorkers, "served-check-workers", o.ServedCheckWorkers, "How many endpoints the leader probes at once.")
}

// Validate reports flag values the leader cannot run with.
func (o *LeaderOptions) Validate() []error {
	var errs []error
	if o.KubeAPIQPS <= 0 {
		errs = append(errs, fmt.Errorf("--kube-api-qps %v: must be positive", o.KubeAPIQPS))
	}
	if o.KubeAPIBurst < 1 {
		errs = append(errs, fmt.Errorf("--kube-api-burst %d: must be at least 1", o.KubeAPIBurst))
	}
	for _, w := range []struct {
		flag string
		n    int
	}{{"--secret-delivery-workers", o.SecretWorkers}, {"--injector-workers", o.InjectorWorkers}, {"--status-workers", o.StatusWorkers}} {
		if w.n < 1 || w.n > 256 {
			errs = append(errs, fmt.Errorf("%s %d: must be between 1 and 256", w.flag, w.n))
		}
	}
	if o.ServedCheckInterval != 0 && o.ServedCheckInterval < time.Second {
		errs = append(errs, fmt.Errorf("--served-check-interval %s: must be 0 (off) or at least 1s", o.ServedCheckInterval))
	}
	if o.ServedCheckTimeout < 100*time.Millisecond || o.ServedCheckTimeout > time.Minute {
		errs = append(errs, fmt.Errorf("--served-check-timeout %s: must be between 100ms and 1m", o.ServedCheckTimeout))
	}
	if o.ServedCheckWorkers < 1 || o.ServedCheckWorkers > 64 {
		errs = append(errs, fmt.Errorf("--served-check-workers %d: must be between 1 and 64", o.ServedCheckWorkers))
	}
	return errs
}
