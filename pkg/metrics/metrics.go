// Package metrics defines certapi's Prometheus metrics, served on /metrics. Expiry must be visible before
// it bites: every request's certificate notAfter and renewal time, and the CA's notAfter, are gauges.
package metrics

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
	// The leader's work queues (secretdelivery, injector, rotation, servingcertrequest-status) report
	// their depth, wait and work durations as workqueue_* series.
	_ "k8s.io/component-base/metrics/prometheus/workqueue"
)

const namespace = "certapi"

var (
	// Issuances counts signatures by path (servingcerts, secret, pcr) and result (issued, invalid, unavailable,
	// denied, failed, error).
	Issuances = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      namespace,
		Name:           "issuances_total",
		Help:           "Certificate issuances by path (servingcerts, secret, pcr: PodCertificateRequests) and result (issued, invalid, unavailable, denied, failed, error).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"path", "result"})

	// IssuanceDuration is the latency of an issuance as this replica saw it, handoff included.
	IssuanceDuration = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Namespace:      namespace,
		Name:           "issuance_duration_seconds",
		Help:           "Latency of certificate issuance on this replica, including a handoff to the leader.",
		Buckets:        []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5},
		StabilityLevel: metrics.ALPHA,
	}, []string{"path"})

	// CANotAfter is the notAfter of each CA certificate by role (Unix seconds).
	CANotAfter = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace:      namespace,
		Name:           "ca_not_after_timestamp_seconds",
		Help:           "notAfter of each CA certificate in the bundle, by role (Active, Next, Retiring), in Unix seconds (leader only); for a CA an organisation's CA signed, the earliest notAfter of its certificate and its chain.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"role"})

	// CARequestPendingSince is when the pending CA certificate request was made (--ca-upstream=Manual).
	CARequestPendingSince = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace: namespace,
		Name:      "ca_request_pending_since_timestamp_seconds",
		Help: "When the CA certificate request that waits for an organisation's CA to sign it was made, in Unix seconds, by reason " +
			"(ReplaceSelfSigned, Rotation, ForceRotation); absent when none waits (leader only). time() minus it is how long it has waited.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"reason"})

	// RotationSteps counts CA lifecycle steps by kind; ForcedSwitch and Distrust deserve an alert.
	RotationSteps = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      namespace,
		Name:           "ca_rotation_steps_total",
		Help:           "CA lifecycle steps taken by this replica as leader: PublishNext, Switch, ForcedSwitch, Retire, Distrust, DropDistrusted.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"step"})

	// InjectionTargets counts the objects that opted in to caBundle injection, by state. Failed deserves
	// an alert: those objects do not get the bundle, and no longer hold a rotation either.
	InjectionTargets = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace:      namespace,
		Name:           "injection_targets",
		Help:           "Objects that opted in to caBundle injection, by state: UpToDate, Pending, Skipped, Conflict, Failed (a write kube-apiserver refused for good; it does not hold CA rotations) (leader only).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"state"})

	// Signatures counts the certificates this replica signed as leader, by path: what the leader did,
	// where Issuances counts what each replica answered (a follower's calls are signed by the leader).
	Signatures = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      namespace,
		Name:           "signatures_total",
		Help:           "Certificates this replica signed as leader, by path (servingcerts, secret, self for certapi's own serving certificate).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"path"})

	// CAKeyOperations counts what certapi asked of the HSM that holds its CA keys (--ca-key-plugin), by
	// operation and result: a rising "unavailable" means the token or its plugin is down and the leader
	// cannot sign (calls are answered 503).
	CAKeyOperations = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      namespace,
		Name:           "ca_key_operations_total",
		Help:           "Operations on the CA keys held in an HSM through the key plugin (--ca-key-plugin), by operation (generate, sign, destroy) and result (ok; unavailable: the token or its plugin cannot be reached and nothing is signed; error).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"operation", "result"})

	// KubeAPIServed is 1 for each API certapi uses when kube-apiserver serves it, 0 when the leader found it
	// missing and left its feature off (an older Kubernetes): the CertificateAuthority's APIsServed
	// condition says what is off.
	KubeAPIServed = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace:      namespace,
		Name:           "kube_api_served",
		Help:           "1 when kube-apiserver serves the API (ClusterTrustBundle, PodCertificateRequest of certificates.k8s.io/v1), else 0: certapi leaves what needs it off (leader only, found through discovery at each leadership term).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"api"})

	// Leader is 1 on the replica that leads, 0 elsewhere.
	Leader = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace:      namespace,
		Name:           "leader",
		Help:           "1 when this replica leads (holds the CA key and signs), else 0; identity names the replica.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"identity"})
)

// ServedCertificates counts what the endpoints of the injection targets that name a Service serve, by
// state (pkg/servedcert: Verified, ExpiringSoon, NoEndpoints, Unreachable, HandshakeFailed,
// NameMismatch, Expired, Untrusted): one per endpoint probed, and one per target whose Service has no
// ready endpoint. Untrusted, NameMismatch and Expired deserve an alert: kube-apiserver's calls to those
// endpoints fail now.
var ServedCertificates = metrics.NewGaugeVec(&metrics.GaugeOpts{
	Namespace:      namespace,
	Name:           "served_certificates",
	Help:           "Endpoints of webhooks, conversion webhooks and APIServices certapi injects, by what they serve as kube-apiserver would judge it (state: Verified, ExpiringSoon, NoEndpoints (one per target without a ready endpoint), Unreachable, HandshakeFailed, NameMismatch, Expired, Untrusted) (leader only).",
	StabilityLevel: metrics.ALPHA,
}, []string{"state"})

// Scheduled snapshots (--snapshot-interval), taken by the leader.
var (
	// Snapshots counts scheduled etcd snapshots by result.
	Snapshots = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      namespace,
		Name:           "snapshots_total",
		Help:           "Scheduled etcd snapshots this replica took as leader (--snapshot-interval), by result (success, failure).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})
	// SnapshotLastSuccess is when the newest scheduled snapshot the leader knows of was saved, for an alert
	// on its age (CertapiSnapshotTooOld): set by the leader that saves one, and at the start of each term
	// from the newest already in --snapshot-dir, so that a replica that just became leader (or restarted)
	// reports the snapshots its predecessors took rather than none. 0 on a replica that never led.
	SnapshotLastSuccess = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace:      namespace,
		Name:           "snapshot_last_success_timestamp_seconds",
		Help:           "When the newest scheduled etcd snapshot this replica knows of as leader was saved, in Unix seconds: set when it saves one, and at the start of its term from the newest in --snapshot-dir (0: none known).",
		StabilityLevel: metrics.ALPHA,
	})
	// SnapshotInterval is --snapshot-interval, on every replica: the alert on the last snapshot's age
	// applies only where snapshots are configured, and scales with the interval.
	SnapshotInterval = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace:      namespace,
		Name:           "snapshot_interval_seconds",
		Help:           "The --snapshot-interval this replica runs with, in seconds; 0 when scheduled snapshots are off.",
		StabilityLevel: metrics.ALPHA,
	})
)

// The embedded etcd cluster of certapi's replicas (--etcd-peer-service).
var (
	// EtcdMembers counts the members of the replicas' embedded etcd cluster by role (voter, learner), as
	// this replica's member last applied the list (embedded cluster mode only).
	EtcdMembers = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace:      namespace,
		Name:           "etcd_members",
		Help:           "Members of the embedded etcd cluster of certapi's replicas, by role (voter, learner), as this replica's member sees them.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"role"})

	// EtcdLeader is 1 on the replica whose etcd member is the etcd leader (which may differ from the
	// signing leader, certapi_leader).
	EtcdLeader = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace:      namespace,
		Name:           "etcd_is_leader",
		Help:           "1 when this replica's embedded etcd member is the etcd leader (it checks members' health and removes dead ones), else 0.",
		StabilityLevel: metrics.ALPHA,
	})

	// EtcdMemberHealthy is 1 for each member that answered the etcd leader's last health check, else 0
	// (published by the etcd leader only). A 0 for longer than --etcd-dead-member-timeout leads to the
	// member's removal when that keeps quorum.
	EtcdMemberHealthy = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace:      namespace,
		Name:           "etcd_member_healthy",
		Help:           "1 when the etcd member answered the etcd leader's last health check, else 0 (etcd leader only).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"member"})
)

var registerOnce sync.Once

// Register adds certapi's metrics to the registry behind /metrics. It is safe to call more than once.
func Register() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(Issuances, IssuanceDuration, CANotAfter, CARequestPendingSince, RotationSteps, InjectionTargets, Leader, Signatures, CAKeyOperations,
			KubeAPIServed, Snapshots, SnapshotLastSuccess, SnapshotInterval, EtcdMembers, EtcdLeader, EtcdMemberHealthy, ServedCertificates)
		legacyregistry.CustomMustRegister(requests)
		legacyregistry.CustomMustRegister(served)
	})
}

// Values of the renewer label of the certificate metrics.
const (
	// RenewerCertapi: the request has spec.secretName, and certapi's leader renews the Secret.
	RenewerCertapi = "certapi"
	// RenewerClient: the workload renews through the servingcerts subresource.
	RenewerClient = "client"
)

// ObserveInjection records the injection targets by state, as the rotation counts them for
// CertificateAuthority status.injection: UpToDate, Skipped, Conflict, Failed, and Pending for the rest.
func ObserveInjection(targets, upToDate, skipped, conflicts, failed int32) {
	pending := max(targets-upToDate-skipped-conflicts-failed, 0)
	InjectionTargets.WithLabelValues("UpToDate").Set(float64(upToDate))
	InjectionTargets.WithLabelValues("Skipped").Set(float64(skipped))
	InjectionTargets.WithLabelValues("Conflict").Set(float64(conflicts))
	InjectionTargets.WithLabelValues("Pending").Set(float64(pending))
	InjectionTargets.WithLabelValues("Failed").Set(float64(failed))
}

// ForgetTerm drops the gauges only a leader publishes (CA lifetimes, a pending CA request, injection targets) and its
// RequestSource (the requests' certificate times and readiness) when its term ends, so that a replica
// that stopped leading does not go on reporting what it saw as leader next to the new leader's figures.
func ForgetTerm() {
	CANotAfter.Reset()
	CARequestPendingSince.Reset()
	InjectionTargets.Reset()
	PublishRequests(nil)
	KubeAPIServed.Reset()
	ServedCertificates.Reset()
	PublishServed(nil)
}
