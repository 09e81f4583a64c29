package apiserver

import (
	"fmt"

	"github.com/spf13/pflag"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
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
}

// DefaultLeaderOptions are the measured defaults (see docs/performance.md).
func DefaultLeaderOptions() LeaderOptions {
	return LeaderOptions{KubeAPIQPS: 2000, KubeAPIBurst: 4000, SecretWorkers: 16, InjectorWorkers: 8, StatusWorkers: 16,
		SecretDelivery: deliveryscope.Policy{Scope: deliveryscope.LabelledNamespaces}}
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
	return errs
}
