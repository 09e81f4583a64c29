// Package requestquota bounds how many ServingCertRequests a namespace holds, so that no tenant can fill
// certapi's memory: every replica keeps every request in its watch cache and the leader in its informer.
//
// Two mechanisms, one per situation:
//   - A ResourceQuota that sets count/servingcertrequests.certapi.dev in a namespace is enforced by the
//     ResourceQuota admission plugin of k8s.io/apiserver in certapi's own admission chain (kube-apiserver's
//     does not see requests it proxies to an aggregated server), with the configuration QuotaConfiguration
//     returns. kube-controller-manager's quota controller counts the requests through discovery and keeps
//     the quota's status.used; the plugin adds each create to it.
//   - In a namespace that no such ResourceQuota limits, the plugin of this package (PluginName) refuses a
//     create once the namespace holds --max-servingcertrequests-per-namespace requests, counted by each
//     replica from its own watch of the storage (Counter). It needs no ResourceQuota in every namespace,
//     no kube-controller-manager and no RBAC, so it holds by default; a ResourceQuota, when an admin
//     creates one, replaces it for that namespace, higher or lower.
//
// Neither counts the servingcerts subresource or status writes: they create no object.
package requestquota

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apiserver/pkg/admission"
	genericadmissioninitializer "k8s.io/apiserver/pkg/admission/initializer"
	quota "k8s.io/apiserver/pkg/quota/v1"
	"k8s.io/apiserver/pkg/quota/v1/generic"
	"k8s.io/client-go/informers"
	corev1listers "k8s.io/client-go/listers/core/v1"

	"github.com/certapi/certapi/pkg/apis/certapi"
)

// PluginName is the name to enable or disable the per-namespace default with --enable-admission-plugins
// and --disable-admission-plugins.
const PluginName = "CertapiServingCertRequestLimit"

// DefaultMaxPerNamespace is the default of --max-servingcertrequests-per-namespace: far more requests
// than a namespace's Services need, few enough that one namespace full of the largest requests validation
// allows (about 68 KB each) adds well under 100 MiB to a replica (test/e2e TestTenantBounds measured
// +77 MiB of anonymous memory for 300 of them), within the chart's 256Mi limit.
const DefaultMaxPerNamespace = 250

// syncWait is how long a create waits for a replica's count that has not been listed yet (at start-up)
// before it is answered 429 with Retry-After.
const syncWait = 5 * time.Second

var servingCertRequests = certapi.Resource("servingcertrequests")

// QuotaResourceName is the resource a ResourceQuota sets to limit ServingCertRequests in its namespace:
// count/servingcertrequests.certapi.dev.
var QuotaResourceName = generic.ObjectCountQuotaResourceNameFor(servingCertRequests)

// QuotaConfiguration is the ResourceQuota plugin's configuration: an object count for
// ServingCertRequests. (The CertificateAuthority is cluster-scoped; quota does not apply to it.)
func QuotaConfiguration() quota.Configuration {
	return generic.NewConfiguration([]quota.Evaluator{generic.NewObjectCountEvaluator(servingCertRequests, nil, "")}, nil)
}

// Initializer hands the ResourceQuota plugin its quota configuration and this package's plugin its limit
// and Counter. Give it to the admission options as an extra initializer.
type Initializer struct {
	// MaxPerNamespace is --max-servingcertrequests-per-namespace; 0 turns the default limit off.
	MaxPerNamespace int
	// Counter counts the requests of each namespace; required unless MaxPerNamespace is 0.
	Counter *Counter
}

var _ admission.PluginInitializer = Initializer{}

// Initialize configures the plugins that want what Initializer holds.
func (i Initializer) Initialize(plugin admission.Interface) {
	if w, ok := plugin.(genericadmissioninitializer.WantsQuotaConfiguration); ok {
		w.SetQuotaConfiguration(QuotaConfiguration())
	}
	if p, ok := plugin.(*Plugin); ok {
		p.max, p.counter = i.MaxPerNamespace, i.Counter
	}
}

// Register adds the plugin to plugins.
func Register(plugins *admission.Plugins) {
	plugins.Register(PluginName, func(io.Reader) (admission.Interface, error) {
		return &Plugin{Handler: admission.NewHandler(admission.Create)}, nil
	})
}

// Plugin refuses a ServingCertRequest create in a namespace that no ResourceQuota for
// QuotaResourceName limits, once the namespace holds max requests.
type Plugin struct {
	*admission.Handler
	max     int
	counter *Counter
	quotas  corev1listers.ResourceQuotaLister
	synced  func() bool
}

var (
	_ admission.ValidationInterface                                = &Plugin{}
	_ genericadmissioninitializer.WantsExternalKubeInformerFactory = &Plugin{}
)

// SetExternalKubeInformerFactory takes the ResourceQuota lister (the same informer the ResourceQuota
// plugin uses).
func (p *Plugin) SetExternalKubeInformerFactory(f informers.SharedInformerFactory) {
	inf := f.Core().V1().ResourceQuotas()
	p.quotas = inf.Lister()
	p.synced = inf.Informer().HasSynced
}

// ValidateInitialization fails start-up when the plugin lacks what it needs.
func (p *Plugin) ValidateInitialization() error {
	switch {
	case p.max < 0:
		return fmt.Errorf("%s: the limit is %d; want 0 (off) or more", PluginName, p.max)
	case p.max > 0 && p.counter == nil:
		return errors.New(PluginName + " needs a Counter")
	case p.quotas == nil:
		return errors.New(PluginName + " needs the ResourceQuota informer")
	}
	return nil
}

// Validate refuses a create past the namespace's default limit.
func (p *Plugin) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if p.max == 0 || a.GetOperation() != admission.Create || a.GetResource().GroupResource() != servingCertRequests || a.GetSubresource() != "" {
		return nil
	}
	ns := a.GetNamespace()
	limited, err := p.quotaLimits(ns)
	if err != nil {
		return apierrors.NewInternalError(fmt.Errorf("listing the ResourceQuotas of namespace %s: %w", ns, err))
	}
	if limited {
		return nil // the ResourceQuota plugin enforces the admin's limit
	}
	if !p.counter.WaitForSync(ctx, syncWait) {
		return apierrors.NewTooManyRequests("certapi is still counting the ServingCertRequests of each namespace; try again", 1)
	}
	if ok, msg := Decide(p.max, p.counter.Count(ns), ns); !ok {
		return admission.NewForbidden(a, errors.New(msg))
	}
	if !a.IsDryRun() {
		p.counter.Admitted(ns, a.GetName())
	}
	return nil
}

// quotaLimits reports whether a ResourceQuota in ns sets QuotaResourceName. Before the ResourceQuota
// informer has synced it reports false: the default limit then applies, never no limit.
func (p *Plugin) quotaLimits(ns string) (bool, error) {
	if p.synced != nil && !p.synced() {
		return false, nil
	}
	qs, err := p.quotas.ResourceQuotas(ns).List(labels.Everything())
	if err != nil {
		return false, err
	}
	return QuotaLimits(qs), nil
}

// QuotaLimits reports whether any of quotas sets a hard limit on QuotaResourceName.
func QuotaLimits(quotas []*corev1.ResourceQuota) bool {
	for _, q := range quotas {
		if _, ok := q.Spec.Hard[QuotaResourceName]; ok {
			return true
		}
	}
	return false
}

// Decide says whether one more ServingCertRequest is admitted into namespace ns, which holds count of
// them and whose limit is max; when not, msg says why and what to do.
func Decide(max, count int, ns string) (ok bool, msg string) {
	if count < max {
		return true, ""
	}
	return false, fmt.Sprintf("namespace %s holds %d ServingCertRequests, the most certapi admits in a namespace that no ResourceQuota limits "+
		"(--max-servingcertrequests-per-namespace=%d); delete requests no longer used, or ask an admin for a ResourceQuota that sets %s "+
		"in this namespace, which then replaces this limit", ns, count, max, QuotaResourceName)
}
