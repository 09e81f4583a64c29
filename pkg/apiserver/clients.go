package apiserver

import (
	"context"
	"crypto/x509"
	"fmt"

	certificatesv1 "k8s.io/api/certificates/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	restclient "k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/controller"
	"github.com/certapi/certapi/pkg/controller/expiry"
	"github.com/certapi/certapi/pkg/controller/injector"
	"github.com/certapi/certapi/pkg/controller/podcert"
	"github.com/certapi/certapi/pkg/controller/rotation"
	"github.com/certapi/certapi/pkg/controller/secretdelivery"
	"github.com/certapi/certapi/pkg/controller/status"
	"github.com/certapi/certapi/pkg/controller/trustbundle"
	"github.com/certapi/certapi/pkg/generated/clientset/versioned"
	"github.com/certapi/certapi/pkg/metrics"
	"github.com/certapi/certapi/pkg/signer"
)

// newClients makes the clients the leader's loops share, once per process: certapi's own through the
// loopback, and kube-apiserver's from one config limited by --kube-api-qps and --kube-api-burst.
func newClients(loopback, kube *restclient.Config, o LeaderOptions) (controller.Clients, error) {
	cfg := restclient.CopyConfig(kube)
	cfg.QPS, cfg.Burst = o.KubeAPIQPS, o.KubeAPIBurst
	// No gzip: a streamed list (the informers' WatchList) is compressed anew at every flush, so each
	// watched Secret cost kube-apiserver a gzip writer's set-up, its compression and certapi the
	// decompression, for bytes that cross the cluster network (or loopback) once.
	cfg.DisableCompression = true
	if cfg.UserAgent == "" {
		cfg.UserAgent = restclient.DefaultKubernetesUserAgent() + " certapi"
	}
	c, err := controller.NewKubeClients(cfg)
	if err != nil {
		return c, err
	}
	loopbackConfig := restclient.CopyConfig(loopback)
	loopbackConfig.QPS, loopbackConfig.Burst = 2000, 4000 // this process talking to itself
	loopbackConfig.DisableCompression = true              // compressing for itself is work for nothing
	if c.Certapi, err = versioned.NewForConfig(loopbackConfig); err != nil {
		return c, fmt.Errorf("creating the loopback client: %w", err)
	}
	return c, nil
}

// lead runs the loops only the leader runs, until ctx (the term) ends. Each term gets a new Context and
// new controllers: nothing a deposed leader queued can leak into the next term. If any controller
// cannot be built or fails, the term ends with an error and this replica stops leading: a leader runs
// all of its loops or none.
func (s *Server) lead(ctx context.Context) error {
	defer metrics.ForgetTerm()
	cc := controller.NewContext(s.clusterDomain, s.clients, s.broadcaster)
	w := status.New(s.statusUpdater, s.statusInterval, s.leader.StatusWorkers)
	s.status.Store(w)
	defer s.status.CompareAndSwap(w, nil)

	var rot *rotation.Controller
	delivery, err := secretdelivery.New(secretdelivery.Options{
		Context:   cc,
		Authority: s.Issuer,
		Status:    w,
		Workers:   s.leader.SecretWorkers,
		// A re-issued Secret may be what a pending distrust waits for.
		OnChange: func() { rot.Reissued() },
	})
	if err != nil {
		return fmt.Errorf("building Secret delivery: %w", err)
	}
	inj, err := injector.New(injector.Options{
		Context: cc,
		Source:  s.Issuer,
		Workers: s.leader.InjectorWorkers,
		// A target that changed state may open the rotation gate.
		OnChange: func() { rot.Progress() },
	})
	if err != nil {
		return fmt.Errorf("building caBundle injection: %w", err)
	}
	served, err := servedCertificatesV1(s.clients.Kube)
	if err != nil {
		return err
	}
	var ctb *trustbundle.Publisher
	if served[resourceClusterTrustBundles] {
		if ctb, err = trustbundle.New(trustbundle.Options{Context: cc, Source: s.Issuer, OnChange: func() { rot.Progress() }}); err != nil {
			return fmt.Errorf("building the ClusterTrustBundle publisher: %w", err)
		}
	} else {
		klog.FromContext(ctx).Info("kube-apiserver serves no certificates.k8s.io/v1 ClusterTrustBundles (Kubernetes 1.37 or later does): no ClusterTrustBundle is published")
	}
	var pcrs *podcert.Signer
	if served[resourcePodCertificateRequests] {
		if pcrs, err = podcert.New(podcert.Options{Context: cc, Authority: s.Issuer}); err != nil {
			return fmt.Errorf("building the PodCertificateRequest signer: %w", err)
		}
	} else {
		klog.FromContext(ctx).Info("kube-apiserver serves no certificates.k8s.io/v1 PodCertificateRequests (Kubernetes 1.37 or later does): signer certapi.dev/serving answers none")
	}
	requests := cc.CertapiInformers.Certapi().V1alpha1().ServingCertRequests().Lister()
	rot, err = rotation.New(rotation.Options{
		Context:                cc,
		Authority:              s.Issuer,
		Targets:                targets{inj: inj, ctb: ctb},
		Grace:                  s.rotationGrace,
		MaxCertificateDuration: s.maxDuration,
		DistrustDeadline:       s.distrustDeadline,
		Distrust: func(ctx context.Context, active *x509.Certificate) rotation.DistrustProgress {
			// What a distrust waits for: every Secret certapi delivers for an existing request, and every
			// certapi replica's own serving certificate, from the Active CA.
			tally, ok := delivery.Distrust(active)
			p := rotation.DistrustProgress{Known: ok, PendingSecrets: tally.Pending, UnmanagedSecrets: tally.Unmanaged}
			if s.self != nil && ok {
				n, err := s.Issuer.ServingNotFrom(ctx, signer.FormatSerialNumber(active.SerialNumber))
				p.Known, p.PendingReplicas = err == nil, n
			}
			return p
		},
		BundleChanged: func(_ context.Context, bundle []byte) {
			// Every request's status.caBundle follows; the writer coalesces and paces the writes.
			all, err := requests.List(labels.Everything())
			if err != nil {
				return
			}
			for _, r := range all {
				w.SetBundle(types.NamespacedName{Namespace: r.Namespace, Name: r.Name}, string(bundle))
			}
		},
	})
	if err != nil {
		return fmt.Errorf("building the CA rotation: %w", err)
	}
	expiries, err := expiry.New(cc)
	if err != nil {
		return fmt.Errorf("building the expiry metrics: %w", err)
	}
	runnables := []controller.Named{
		{Name: "status", Runnable: w},
		{Name: "expiry", Runnable: expiries},
		{Name: "secretdelivery", Runnable: delivery},
		{Name: "injector", Runnable: inj},
		{Name: "rotation", Runnable: rot},
	}
	if ctb != nil {
		runnables = append(runnables, controller.Named{Name: "trustbundle", Runnable: ctb})
	}
	if pcrs != nil {
		runnables = append(runnables, controller.Named{Name: "podcert", Runnable: pcrs})
	}
	if s.snapshots != nil {
		// Never ends the term: a failed snapshot is logged, counted and tried again an interval later.
		runnables = append(runnables, controller.Named{Name: "snapshots", Runnable: s.snapshots})
	}
	if s.self != nil {
		// A replica re-issuing its own certificate may be what a pending distrust waits for.
		runnables = append(runnables, controller.Named{Name: "replicas", Runnable: controller.RunFunc(func(ctx context.Context) error {
			return s.Issuer.WatchServing(ctx, rot.Reissued)
		})})
	}
	return cc.RunTerm(ctx, runnables...)
}

// The certificates.k8s.io/v1 resources the leader's loops use when kube-apiserver serves them.
const (
	resourceClusterTrustBundles    = "clustertrustbundles"
	resourcePodCertificateRequests = "podcertificaterequests"
)

// servedCertificatesV1 returns the resources of certificates.k8s.io/v1 that kube-apiserver serves:
// ClusterTrustBundles and PodCertificateRequests are GA in Kubernetes 1.37, and certapi runs without
// them on an older cluster.
func servedCertificatesV1(kube kubernetes.Interface) (map[string]bool, error) {
	list, err := kube.Discovery().ServerResourcesForGroupVersion(certificatesv1.SchemeGroupVersion.String())
	if apierrors.IsNotFound(err) {
		return map[string]bool{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("discovering the resources of %s: %w", certificatesv1.SchemeGroupVersion, err)
	}
	served := map[string]bool{}
	for _, r := range list.APIResources {
		served[r.Name] = true
	}
	return served, nil
}

// targets adapts the injector and the ClusterTrustBundle publisher (nil when there is none) to what
// the rotation needs, and publishes their summary as a metric: the ClusterTrustBundle is one more
// target, which the gate waits for like any injected object.
type targets struct {
	inj *injector.Injector
	ctb *trustbundle.Publisher
}

func (t targets) AllHold(bundle []byte) bool {
	return t.inj.AllHold(bundle) && (t.ctb == nil || t.ctb.Holds(bundle))
}

func (t targets) Summary() certapiv1alpha1.InjectionSummary {
	s := t.inj.Summary()
	if t.ctb != nil {
		s.Targets++
		if t.ctb.UpToDate() {
			s.UpToDate++
		} else {
			s.Pending++
		}
	}
	metrics.InjectionTargets.WithLabelValues("UpToDate").Set(float64(s.UpToDate))
	metrics.InjectionTargets.WithLabelValues("Skipped").Set(float64(s.Skipped))
	metrics.InjectionTargets.WithLabelValues("Conflict").Set(float64(s.Conflicts))
	metrics.InjectionTargets.WithLabelValues("Pending").Set(float64(s.Pending))
	metrics.InjectionTargets.WithLabelValues("Failed").Set(float64(s.Failed))
	return *s.InjectionSummary()
}
