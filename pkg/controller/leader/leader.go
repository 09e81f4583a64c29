// Package leader wires one leadership term: the controllers only the leader runs, built on the term's
// Context in the order they depend on each other, and run together until the term ends. Every
// dependency between them is a value made before it is used: the rotation listens to Secret delivery,
// the injector, the ClusterTrustBundle publisher and the replicas' serving records through their
// Notifiers, and nothing is captured before it is assigned.
package leader

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"

	"github.com/certapi/certapi/pkg/controller"
	"github.com/certapi/certapi/pkg/controller/erasure"
	"github.com/certapi/certapi/pkg/controller/expiry"
	"github.com/certapi/certapi/pkg/controller/injector"
	"github.com/certapi/certapi/pkg/controller/podcert"
	"github.com/certapi/certapi/pkg/controller/rotation"
	"github.com/certapi/certapi/pkg/controller/secretdelivery"
	"github.com/certapi/certapi/pkg/controller/servedcert"
	"github.com/certapi/certapi/pkg/controller/status"
	"github.com/certapi/certapi/pkg/controller/trustbundle"
	"github.com/certapi/certapi/pkg/controller/upstreamcsr"
	"github.com/certapi/certapi/pkg/deliveryscope"
	"github.com/certapi/certapi/pkg/issuer"
	"github.com/certapi/certapi/pkg/metrics"
	"github.com/certapi/certapi/pkg/snapshot"
)

// Issuer is what a term needs of the issuer (*issuer.Issuer is one): the CA's state and rotation, and
// the replicas' serving records that a distrust waits for.
type Issuer interface {
	rotation.Authority
	// Bundle is the trust bundle to inject and publish (controller.BundleSource).
	Bundle() (pem []byte, ok bool)
	// ServingNotFrom counts the replicas not serving with a certificate of the CA with that serial.
	ServingNotFrom(ctx context.Context, serial string) (int, error)
	// WatchServing calls onChange whenever a replica's serving record changes, until ctx ends.
	WatchServing(ctx context.Context, onChange func()) error
	// Import stores a CA certificate an organisation's CA signed for the pending request as the Next CA.
	Import(ctx context.Context, req issuer.ImportRequest) (*issuer.ImportResult, error)
}

// UpstreamCSR configures the CertificateSigningRequests of --ca-upstream=CertificateSigningRequest.
type UpstreamCSR struct {
	// SignerName is the signerName every CertificateSigningRequest asks.
	SignerName string
	// Expiration, when positive, is the validity asked of the signer (expirationSeconds).
	Expiration time.Duration
}

// Config is what every term of this process shares. The process makes it once.
type Config struct {
	// ClusterDomain is the cluster's DNS domain.
	ClusterDomain string
	// Clients and Broadcaster are the process's clients and its one Event broadcaster (started by it).
	Clients     controller.Clients
	Broadcaster events.EventBroadcaster
	// Issuer signs and rotates.
	Issuer Issuer
	// StatusUpdater writes request status; StatusInterval bounds how often one request's is written.
	StatusUpdater  status.Updater
	StatusInterval time.Duration
	// StatusWorkers, SecretWorkers and InjectorWorkers are how many writes of each the leader makes at once.
	StatusWorkers, SecretWorkers, InjectorWorkers int
	// SecretDelivery is where Secrets are delivered (--secret-delivery-scope).
	SecretDelivery deliveryscope.Policy
	// RotationGrace, MaxCertificateDuration and DistrustDeadline are the rotation's policy.
	RotationGrace, MaxCertificateDuration, DistrustDeadline time.Duration
	// Snapshots, when set, takes the scheduled etcd snapshots.
	Snapshots *snapshot.Schedule
	// Erasure, when set, erases etcd's history and the scheduled snapshots taken before, once per
	// completed distrust (its Snapshots are these Snapshots).
	Erasure erasure.Eraser
	// WatchReplicas makes a pending distrust wait for every replica to serve with a certificate of the
	// Active CA (certapi serves itself from its own CA).
	WatchReplicas bool
	// ServedCheck configures the verifier of what injected webhooks and APIServices serve (its Interval,
	// Timeout and Workers; the term fills in the rest). Interval 0 turns it off.
	ServedCheck servedcert.Options
	// UpstreamCSR, when set, carries each pending CA certificate request to its signer through a
	// CertificateSigningRequest and imports what the signer issues (package upstreamcsr).
	UpstreamCSR *UpstreamCSR
	// StatusWriter holds the running term's status writer, nil between terms: the servingcerts path
	// records what it issued through it. Required.
	StatusWriter *atomic.Pointer[status.Writer]
}

// Run runs one leadership term until ctx ends. Each term gets a new Context and new controllers:
// nothing a deposed leader queued can leak into the next. If a controller cannot be built or fails, the
// term ends with an error: a leader runs all of its loops or none.
func Run(ctx context.Context, c Config) error {
	defer metrics.ForgetTerm()
	cc := controller.NewContext(c.ClusterDomain, c.Clients, c.Broadcaster)
	apis, err := discoverAPIs(ctx, c.Clients.Kube.Discovery())
	if err != nil {
		return err
	}
	w := status.New(c.StatusUpdater, c.StatusInterval, c.StatusWorkers)
	c.StatusWriter.Store(w)
	defer c.StatusWriter.CompareAndSwap(w, nil)
	term := []controller.Named{{Name: "status", Runnable: w}}

	if _, err := expiry.New(cc); err != nil {
		return fmt.Errorf("building the expiry metrics: %w", err)
	}
	delivery, err := secretdelivery.New(secretdelivery.Options{Context: cc, Authority: c.Issuer, Status: w, Workers: c.SecretWorkers, Policy: c.SecretDelivery})
	if err != nil {
		return fmt.Errorf("building Secret delivery: %w", err)
	}
	inj, err := injector.New(injector.Options{Context: cc, Source: c.Issuer, Workers: c.InjectorWorkers, Logger: klog.FromContext(ctx).WithName("injector")})
	if err != nil {
		return fmt.Errorf("building caBundle injection: %w", err)
	}
	term = append(term, controller.Named{Name: "secretdelivery", Runnable: delivery}, controller.Named{Name: "injector", Runnable: inj})
	targets := []rotation.Target{inj}
	// What a pending distrust waits for: the Secrets certapi delivers, the endpoints the served check finds
	// presenting a distrusted CA's certificate and, when certapi serves itself from its CA, every
	// replica's own serving certificate.
	reissued := []controller.Notifier{delivery}
	var servedView rotation.Served
	if c.ServedCheck.Interval > 0 {
		o := c.ServedCheck
		o.Context, o.Targets, o.Requests = cc, inj, c.StatusUpdater
		served, err := servedcert.New(o)
		if err != nil {
			return fmt.Errorf("building the served certificate check: %w", err)
		}
		term = append(term, controller.Named{Name: "servedcert", Runnable: served})
		servedView = served
		reissued = append(reissued, served)
	}
	if apis.On[apiClusterTrustBundle.Name] {
		ctb, err := trustbundle.New(trustbundle.Options{Context: cc, Source: c.Issuer})
		if err != nil {
			return fmt.Errorf("building the ClusterTrustBundle publisher: %w", err)
		}
		targets = append(targets, ctb)
		term = append(term, controller.Named{Name: "trustbundle", Runnable: ctb})
	}
	if apis.On[apiPodCertificateRequest.Name] {
		pcrs, err := podcert.New(podcert.Options{Context: cc, Authority: c.Issuer})
		if err != nil {
			return fmt.Errorf("building the PodCertificateRequest signer: %w", err)
		}
		term = append(term, controller.Named{Name: "podcert", Runnable: pcrs})
	}
	if c.WatchReplicas {
		replicas := &controller.Listeners{}
		reissued = append(reissued, replicas)
		term = append(term, controller.Named{Name: "replicas", Runnable: controller.RunFunc(func(ctx context.Context) error {
			return c.Issuer.WatchServing(ctx, replicas.Notify)
		})})
	}
	progress := distrustProgress{delivery: delivery, issuer: c.Issuer, replicas: c.WatchReplicas}
	bundles := bundleFollower{requests: cc.CertapiInformers.Certapi().V1alpha1().ServingCertRequests().Lister(), status: w}
	rot, err := rotation.New(rotation.Options{
		Context: cc, Authority: c.Issuer, Targets: targets, Reissued: reissued,
		Grace: c.RotationGrace, MaxCertificateDuration: c.MaxCertificateDuration, DistrustDeadline: c.DistrustDeadline,
		Distrust: progress.of, Served: servedView, BundleChanged: bundles.set, Conditions: []metav1.Condition{apis.Condition},
		UpstreamSignerName: upstreamSignerName(c.UpstreamCSR),
	})
	if err != nil {
		return fmt.Errorf("building the CA rotation: %w", err)
	}
	term = append(term, controller.Named{Name: "rotation", Runnable: rot})
	if c.Erasure != nil {
		// Never ends the term: a failed erasure is reported and tried again with backoff.
		er, err := erasure.New(erasure.Options{Context: cc, Eraser: c.Erasure})
		if err != nil {
			return fmt.Errorf("building the erasure of a distrust's history: %w", err)
		}
		term = append(term, controller.Named{Name: "erasure", Runnable: er})
	}
	if u := c.UpstreamCSR; u != nil {
		// Never ends the term: a failed request or import is reported and tried again with backoff.
		up, err := upstreamcsr.New(upstreamcsr.Options{Context: cc, Authority: c.Issuer, SignerName: u.SignerName, Expiration: u.Expiration})
		if err != nil {
			return fmt.Errorf("building the CertificateSigningRequests of the CA certificate requests: %w", err)
		}
		term = append(term, controller.Named{Name: "upstreamcsr", Runnable: up})
	}
	if c.Snapshots != nil {
		// Never ends the term: a failed snapshot is logged, counted and tried again an interval later.
		term = append(term, controller.Named{Name: "snapshots", Runnable: c.Snapshots})
	}
	return cc.RunTerm(ctx, term...)
}

// upstreamSignerName is u's signer, empty without one.
func upstreamSignerName(u *UpstreamCSR) string {
	if u == nil {
		return ""
	}
	return u.SignerName
}

// discoverAPIs finds out through discovery which of the optional APIs kube-apiserver serves (decideAPIs),
// logs each one missing with what is off, and sets certapi_kube_api_served.
func discoverAPIs(ctx context.Context, d discovery.DiscoveryInterface) (apisDecision, error) {
	served, err := servedCertificatesV1(d)
	if err != nil {
		return apisDecision{}, err
	}
	version := ""
	if v, err := d.ServerVersion(); err == nil {
		version = v.GitVersion
	} else {
		klog.FromContext(ctx).Info("Cannot read kube-apiserver's version; the APIsServed condition names none", "err", err)
	}
	apis := decideAPIs(served, version)
	for _, a := range optionalAPIs {
		v := 0.0
		if apis.On[a.Name] {
			v = 1
		}
		metrics.KubeAPIServed.WithLabelValues(a.Name).Set(v)
	}
	for _, a := range apis.Missing {
		klog.FromContext(ctx).Info(a.notServed(apis.Server)+"; everything else runs", "api", a.Name)
	}
	return apis, nil
}
