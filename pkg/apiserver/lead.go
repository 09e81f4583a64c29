package apiserver

import (
	"context"
	"crypto/x509"
	"fmt"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	restclient "k8s.io/client-go/rest"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/controller"
	"github.com/certapi/certapi/pkg/controller/expiry"
	"github.com/certapi/certapi/pkg/controller/injector"
	"github.com/certapi/certapi/pkg/controller/rotation"
	"github.com/certapi/certapi/pkg/controller/secretdelivery"
	"github.com/certapi/certapi/pkg/controller/status"
	"github.com/certapi/certapi/pkg/generated/clientset/versioned"
	"github.com/certapi/certapi/pkg/metrics"
	"github.com/certapi/certapi/pkg/signer"
)

// newClients makes the clients the leader's loops share, once per process: certapi's own through the
// loopback, and kube-apiserver's from one config limited by --kube-api-qps and --kube-api-burst.
func newClients(loopback, kube *restclient.Config, o LeaderOptions) (controller.Clients, error) {
	cfg := restclient.CopyConfig(kube)
	cfg.QPS, cfg.Burst = o.KubeAPIQPS, o.KubeAPIBurst
	if cfg.UserAgent == "" {
		cfg.UserAgent = restclient.DefaultKubernetesUserAgent() + " certapi"
	}
	c, err := controller.NewKubeClients(cfg)
	if err != nil {
		return c, err
	}
	loopbackConfig := restclient.CopyConfig(loopback)
	loopbackConfig.QPS, loopbackConfig.Burst = 2000, 4000 // this process talking to itself
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
	cc := controller.NewContext(s.clusterDomain, s.clients, s.broadcaster)
	w := status.New(s.clients.Certapi, s.statusInterval, s.leader.StatusWorkers)
	w.UseCache(cc.CertapiInformers.Certapi().V1alpha1().ServingCertRequests().Lister())
	s.status.Store(w)
	defer s.status.CompareAndSwap(w, nil)

	delivery, err := secretdelivery.New(secretdelivery.Options{
		Context:   cc,
		Authority: s.Issuer,
		Status:    w,
		Workers:   s.leader.SecretWorkers,
	})
	if err != nil {
		return fmt.Errorf("building Secret delivery: %w", err)
	}
	var rot *rotation.Controller
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
	requests := cc.CertapiInformers.Certapi().V1alpha1().ServingCertRequests().Lister()
	rot, err = rotation.New(rotation.Options{
		Context:                cc,
		Authority:              s.Issuer,
		Targets:                targets{inj},
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
	return cc.RunTerm(ctx,
		controller.Named{Name: "status", Runnable: w},
		controller.Named{Name: "expiry", Runnable: expiries},
		controller.Named{Name: "secretdelivery", Runnable: delivery},
		controller.Named{Name: "injector", Runnable: inj},
		controller.Named{Name: "rotation", Runnable: rot},
	)
}

// targets adapts the injector to what the rotation needs, and publishes its summary as a metric.
type targets struct{ *injector.Injector }

func (t targets) Summary() certapiv1alpha1.InjectionSummary {
	s := t.Injector.Summary()
	metrics.InjectionTargets.WithLabelValues("UpToDate").Set(float64(s.UpToDate))
	metrics.InjectionTargets.WithLabelValues("Skipped").Set(float64(s.Skipped))
	metrics.InjectionTargets.WithLabelValues("Conflict").Set(float64(s.Conflicts))
	metrics.InjectionTargets.WithLabelValues("Pending").Set(float64(s.Pending))
	return *s.InjectionSummary()
}
