package apiserver

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	genericapiserver "k8s.io/apiserver/pkg/server"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/server/healthz"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"

	"github.com/certapi/certapi/pkg/apis/certapi"
	"github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/controller"
	"github.com/certapi/certapi/pkg/controller/erasure"
	"github.com/certapi/certapi/pkg/controller/leader"
	"github.com/certapi/certapi/pkg/controller/servedcert"
	"github.com/certapi/certapi/pkg/controller/status"
	"github.com/certapi/certapi/pkg/issuer"
	"github.com/certapi/certapi/pkg/metrics"
	"github.com/certapi/certapi/pkg/registry/certificateauthority"
	"github.com/certapi/certapi/pkg/registry/listwatch"
	"github.com/certapi/certapi/pkg/registry/servingcertrequest"
)

// Server is a certapi API server with its issuer.
type Server struct {
	GenericAPIServer *genericapiserver.GenericAPIServer
	Issuer           *issuer.Issuer

	// term is what every leadership term of this process is run with (see lead).
	term leader.Config
	// status holds the running term's status writer, nil between terms.
	status atomic.Pointer[status.Writer]
	self   *selfServing
	// clients are the process's clients, shared by every term.
	clients controller.Clients
	// broadcaster is the process's one Event broadcaster; recorder reports for the servingcerts path,
	// and each leader loop takes a recorder of its own name from it.
	broadcaster events.EventBroadcaster
	recorder    events.EventRecorder
}

// New builds the server, its issuer, and installs the certapi.dev API group. It starts nothing: Run does.
func (c completedConfig) New() (*Server, error) {
	generic, err := c.GenericConfig.New("certapi", genericapiserver.NewEmptyDelegate())
	if err != nil {
		return nil, fmt.Errorf("creating the generic API server: %w", err)
	}
	metrics.Register()
	s := &Server{GenericAPIServer: generic}
	leaderOpts := c.ExtraConfig.Leader
	if c.ExtraConfig.Kube == nil {
		return nil, fmt.Errorf("no kube-apiserver client: give --kubeconfig, or run in a cluster")
	}
	clients, err := leaderClients(c.GenericConfig.LoopbackClientConfig, c.ExtraConfig.Kube, c.GenericConfig.TracerProvider, leaderOpts)
	if err != nil {
		return nil, err
	}
	s.clients = clients
	s.broadcaster = events.NewBroadcaster(&events.EventSinkImpl{Interface: clients.Kube.EventsV1()})
	s.recorder = s.broadcaster.NewRecorder(controller.EventScheme, "certapi.dev/issuer")

	icfg := c.ExtraConfig.IssuerConfig
	icfg.OnIssued = s.recordIssued
	icfg.OnLeadershipChange = func(leading bool) {
		v := 0.0
		if leading {
			v = 1
		}
		metrics.Leader.WithLabelValues(icfg.Identity).Set(v)
	}
	icfg.OnLeading = s.lead
	if c.ExtraConfig.KeepPublishedCAs {
		icfg.PublishedBundles = publishedBundles(clients)
	}
	scr, scrStatus, err := servingcertrequest.NewREST(Scheme, c.GenericConfig.RESTOptionsGetter, c.ExtraConfig.ClusterDomain)
	if err != nil {
		return nil, err
	}
	icfg.CheckHandoff = servingcertrequest.HandoffCheck(scr)
	if self := c.ExtraConfig.SelfServing; self != nil {
		// Followers hand over their own serving certificate too, which belongs to no ServingCertRequest.
		icfg.CheckHandoff = selfHandoffCheck(self.namespace, self.service, icfg.CheckHandoff)
	}
	iss, err := issuer.New(icfg)
	if err != nil {
		return nil, err
	}
	s.Issuer = iss
	metrics.Leader.WithLabelValues(icfg.Identity).Set(0)
	if auth := c.ExtraConfig.AuthReadiness; auth != nil {
		// A replica that takes requests before it can authenticate and authorize them answers them as
		// system:anonymous (403): it is not ready until both work.
		if err := generic.AddReadyzChecks(
			healthz.NamedCheck("certapi-delegated-authentication", auth.CheckAuthentication),
			healthz.NamedCheck("certapi-delegated-authorization", auth.CheckAuthorization),
		); err != nil {
			return nil, fmt.Errorf("adding the delegated authentication and authorization readiness checks: %w", err)
		}
	}
	if self := c.ExtraConfig.SelfServing; self != nil {
		s.self = self
		if err := generic.AddReadyzChecks(
			healthz.NamedCheck("certapi-serving-certificate", self.check),
			healthz.NamedCheck("certapi-certificate-authority", self.checkAuthority),
		); err != nil {
			return nil, fmt.Errorf("adding the serving certificate and CertificateAuthority readiness checks: %w", err)
		}
	}

	apiGroupInfo := genericapiserver.NewDefaultAPIGroupInfo(certapi.GroupName, Scheme, metav1.ParameterCodec, Codecs)
	ca, caStatus, err := certificateauthority.NewREST(Scheme, c.GenericConfig.RESTOptionsGetter, iss.Leader)
	if err != nil {
		return nil, err
	}
	apiGroupInfo.VersionedResourcesStorageMap[v1alpha1.Version] = map[string]rest.Storage{
		"servingcertrequests":              scr,
		"servingcertrequests/status":       scrStatus,
		"servingcertrequests/servingcerts": servingcertrequest.NewServingCertsREST(scr, iss, iss.HandoffTimeout(), s.denied),
		"certificateauthorities":           ca,
		"certificateauthorities/status":    caStatus,
		"certificateauthorities/import":    certificateauthority.NewImportREST(iss, iss.HandoffTimeout(), s.recordImported),
	}
	if err := generic.InstallAPIGroup(&apiGroupInfo); err != nil {
		return nil, fmt.Errorf("installing the certapi.dev API group: %w", err)
	}
	if m := c.ExtraConfig.EtcdMember; m != nil {
		w := newEtcdStatusWriter(m, certificateauthority.NewStatusUpdater(caStatus, Scheme).UpdateStatus)
		generic.AddPostStartHookOrDie("certapi-etcd-cluster-status", func(hc genericapiserver.PostStartHookContext) error {
			go w.run(hc)
			return nil
		})
	}
	if q := c.ExtraConfig.QuorumReadiness; q != nil {
		generic.AddPostStartHookOrDie("certapi-etcd-quorum-readiness", func(hc genericapiserver.PostStartHookContext) error {
			go q.Run(hc)
			return nil
		})
	}
	if counter := c.ExtraConfig.RequestCounter; counter != nil {
		// Every replica counts each namespace's requests (names only) from its own watch cache.
		lw := listwatch.New(scr, Scheme,
			func() runtime.Object { return &v1alpha1.ServingCertRequest{} },
			func() runtime.Object { return &v1alpha1.ServingCertRequestList{} })
		generic.AddPostStartHookOrDie("certapi-servingcertrequest-counter", func(hc genericapiserver.PostStartHookContext) error {
			go counter.Run(hc, lw)
			return nil
		})
	}
	// The leader reads certapi's objects and writes request status through this server's storage, not
	// through its loopback.
	s.clients.CertapiStorage = &controller.CertapiListWatchers{
		ServingCertRequests: listwatch.New(scr, Scheme,
			func() runtime.Object { return &v1alpha1.ServingCertRequest{} },
			func() runtime.Object { return &v1alpha1.ServingCertRequestList{} }),
		CertificateAuthorities: listwatch.New(ca, Scheme,
			func() runtime.Object { return &v1alpha1.CertificateAuthority{} },
			func() runtime.Object { return &v1alpha1.CertificateAuthorityList{} }),
	}
	s.term = leader.Config{
		ClusterDomain: c.ExtraConfig.ClusterDomain,
		Clients:       s.clients,
		Broadcaster:   s.broadcaster,
		Issuer:        iss,
		StatusUpdater: servingcertrequest.NewStatusUpdater(scrStatus, Scheme), StatusInterval: c.ExtraConfig.StatusInterval,
		StatusWorkers: leaderOpts.StatusWorkers, SecretWorkers: leaderOpts.SecretWorkers, InjectorWorkers: leaderOpts.InjectorWorkers,
		SecretDelivery: leaderOpts.SecretDelivery,
		ServedCheck:    servedcert.Options{Interval: leaderOpts.ServedCheckInterval, Timeout: leaderOpts.ServedCheckTimeout, Workers: leaderOpts.ServedCheckWorkers},
		RotationGrace:  c.ExtraConfig.RotationGrace, MaxCertificateDuration: c.ExtraConfig.MaxCertificateDuration,
		DistrustDeadline: c.ExtraConfig.DistrustDeadline,
		Snapshots:        c.ExtraConfig.Snapshots,
		Erasure:          eraser(c.ExtraConfig.Erasure),
		WatchReplicas:    s.self != nil,
		StatusWriter:     &s.status,
		UpstreamCSR:      c.ExtraConfig.UpstreamCSR,
	}
	return s, nil
}

// eraser is e as the term's Eraser: none (not a nil *erasure.Etcd in an interface) when e is nil.
func eraser(e *erasure.Etcd) erasure.Eraser {
	if e == nil {
		return nil
	}
	return e
}

// lead runs the loops only the leader runs, until ctx (the term) ends.
func (s *Server) lead(ctx context.Context) error { return leader.Run(ctx, s.term) }

// Run serves until ctx ends, taking part in the leader election meanwhile. On the way out the issuer
// resigns first, so a follower takes over while this replica still drains its requests.
func (s *Server) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	issuerCtx, stopIssuer := context.WithCancel(ctx)
	defer func() {
		stopIssuer()
		wg.Wait()
	}()
	if err := s.broadcaster.StartRecordingToSinkWithContext(ctx); err != nil {
		return fmt.Errorf("starting the event recorder: %w", err)
	}
	defer s.broadcaster.Shutdown()
	s.GenericAPIServer.AddPostStartHookOrDie("certapi-issuer", func(genericapiserver.PostStartHookContext) error {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.Issuer.Run(issuerCtx); err != nil {
				klog.FromContext(issuerCtx).Error(err, "Issuer stopped")
			}
		}()
		if s.self != nil {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.self.run(issuerCtx, s.Issuer, cache.ToListerWatcherWithContext(s.clients.CertapiStorage.CertificateAuthorities))
			}()
		}
		return nil
	})
	return s.GenericAPIServer.PrepareRun().RunWithContext(ctx)
}

// recordImported records an Event on CertificateAuthority/default for a CA certificate imported through
// certificateauthorities/import: Normal, or Warning when the import was accepted with warnings.
func (s *Server) recordImported(res *issuer.ImportResult) {
	ref := &corev1.ObjectReference{APIVersion: v1alpha1.APIVersion, Kind: "CertificateAuthority", Name: v1alpha1.CertificateAuthorityName}
	msg := fmt.Sprintf("imported the CA certificate %s signed under %s, valid (with its chain) until %s; it is the Next CA and signs once every target holds it",
		res.SerialNumber, res.Root, res.ChainNotAfter.UTC().Format(time.RFC3339))
	eventType := corev1.EventTypeNormal
	if len(res.Warnings) > 0 {
		eventType = corev1.EventTypeWarning
		var ws []string
		for _, w := range res.Warnings {
			ws = append(ws, w.String())
		}
		msg += "; warnings: " + strings.Join(ws, "; ")
	}
	if len(msg) > 1000 {
		msg = msg[:997] + "..."
	}
	s.recorder.Eventf(ref, nil, eventType, "Imported", "ImportCA", "%s", msg)
}

// requestRef points an Event at a ServingCertRequest.
func requestRef(namespace, name string) *corev1.ObjectReference {
	return &corev1.ObjectReference{APIVersion: v1alpha1.APIVersion, Kind: "ServingCertRequest", Namespace: namespace, Name: name}
}

// denied records a refused servingcerts request on its parent; the message says what was wrong, never the input.
func (s *Server) denied(namespace, name, message string) {
	s.recorder.Eventf(requestRef(namespace, name), nil, corev1.EventTypeWarning, status.ReasonDenied, "IssueServingCert", "%s", message)
}

// recordIssued is called on the leader after every signature.
func (s *Server) recordIssued(req issuer.Request, res *issuer.Result) {
	path := req.Path
	if path == "" {
		path = "self"
	}
	metrics.Signatures.WithLabelValues(path).Inc()
	if req.Name == "" {
		return // certapi's own serving certificate: no request to report on
	}
	if req.Path == issuer.PathSecret {
		// Secret delivery reports a certificate once it is in the Secret.
		return
	}
	if req.Path != issuer.PathPCR { // the PodCertificateRequest signer records its own Event, naming the pod
		s.recordIssuedEvent(req, res)
	}
	if w := s.status.Load(); w != nil {
		w.RecordIssued(types.NamespacedName{Namespace: req.Namespace, Name: req.Name}, status.Issued{
			Certificate:  res.CertificatePEM,
			CABundle:     res.CABundle,
			SerialNumber: res.SerialNumber,
			NotBefore:    res.NotBefore,
			NotAfter:     res.NotAfter,
			RenewalTime:  res.RenewalTime,
			IssuedAt:     time.Now(),
		})
	}
}

// recordIssuedEvent records an Issued Event on the request. The recorder aggregates repeats, so N pods
// renewing against one request do not flood the namespace.
func (s *Server) recordIssuedEvent(req issuer.Request, res *issuer.Result) {
	s.recorder.Eventf(requestRef(req.Namespace, req.Name), nil, corev1.EventTypeNormal, status.ReasonIssued, "IssueServingCert",
		"issued certificate %s for %s.%s.svc, valid until %s", res.SerialNumber, req.ServiceName, req.Namespace, res.NotAfter.UTC().Format(time.RFC3339))
}
