package v1alpha1

// Condition types certapi sets in status.conditions.
const (
	// ConditionReady says whether a ServingCertRequest's certificate is current, or whether the
	// CertificateAuthority is signing.
	ConditionReady = "Ready"
	// ConditionRotating says where a CertificateAuthority's rotation stands.
	ConditionRotating = "Rotating"
	// ConditionRecovered says that certapi found no CA record in its etcd (its data was lost and not
	// restored) and created a new CA after it had published others, and what it did with those.
	ConditionRecovered = "Recovered"
	// ConditionAwaitingSignature is True while a CA certificate request waits for an organisation's CA
	// to sign it (--ca-upstream=Manual or CertificateSigningRequest; status.pendingRequest); its reason is the request's, its message
	// says since when and when the Active CA's chain expires. Absent when nothing waits.
	ConditionAwaitingSignature = "AwaitingSignature"
	// ConditionAPIsServed says whether kube-apiserver serves every API certapi uses (certificates.k8s.io/v1
	// ClusterTrustBundles and PodCertificateRequests, Kubernetes 1.37 or later) or, when not, what certapi
	// leaves off for want of one: certapi runs everything else on an older Kubernetes.
	ConditionAPIsServed = "APIsServed"
	// ConditionHistoryErased says whether what certapi keeps of the past besides the CA record no longer
	// holds the keys of the CAs the last completed distrust dropped: etcd's history (compacted and
	// defragmented) and the scheduled snapshots taken before (replaced by a fresh one). Set once a distrust
	// completes; once that distrust's history is erased, its lastTransitionTime is not before
	// status.distrust.completedAt.
	ConditionHistoryErased = "HistoryErased"
	// ConditionServing says whether the endpoints of the Service of a ServingCertRequest, as the webhooks,
	// conversion webhooks and APIServices certapi injects call it, present a certificate the injected
	// bundle verifies for <service>.<namespace>.svc: True (reason Verified, or ExpiringSoon), False with
	// what is wrong as the reason (Untrusted, NameMismatch, Expired, HandshakeFailed, NoEndpoints), or
	// Unknown when certapi cannot reach them (Unreachable). Absent when no injected object calls the
	// Service (docs/served-certificates.md).
	ConditionServing = "Serving"
)

// Reasons of a CertificateAuthority's APIsServed condition.
const (
	// APIsServedReasonAllServed: kube-apiserver serves every API certapi uses.
	APIsServedReasonAllServed = "AllServed"
	// APIsServedReasonNotServed: kube-apiserver lacks an API; the message says which and what is off.
	APIsServedReasonNotServed = "NotServed"
)

// Reasons of a CertificateAuthority's Rotating condition.
const (
	// RotatingReasonIdle: no rotation is running.
	RotatingReasonIdle = "Idle"
	// RotatingReasonNextPublished: a Next CA is in the bundle and signs once the gate opens.
	RotatingReasonNextPublished = "NextPublished"
	// RotatingReasonRetiring: a Retiring CA stays in the bundle until no certificate it signed is valid.
	RotatingReasonRetiring = "Retiring"
	// RotatingReasonDistrusted: a distrusted CA leaves the bundle once its certificates are re-issued;
	// clients of the servingcerts subresource should re-issue at once (pkg/servingcert does).
	RotatingReasonDistrusted = "Distrusted"
)

// Reasons of a CertificateAuthority's Recovered condition.
const (
	// RecoveredReasonKeptPublishedCAs: the CAs of certapi's found in the bundles it had published stay in
	// the bundle as Retiring until no certificate they signed can still be valid.
	RecoveredReasonKeptPublishedCAs = "KeptPublishedCAs"
	// RecoveredReasonNoPublishedCAKept: certificates were found in the bundles certapi had published, but
	// none is a CA of certapi's valid now; certificates of the lost CA are no longer trusted.
	RecoveredReasonNoPublishedCAKept = "NoPublishedCAKept"
)

// Reasons of a CertificateAuthority's HistoryErased condition.
const (
	// HistoryErasedReasonErased: certapi compacted and defragmented its own etcd after the distrust
	// completed, and replaced the scheduled snapshots taken before with a fresh one.
	HistoryErasedReasonErased = "Erased"
	// HistoryErasedReasonExternalEtcd: certapi stores in an etcd it does not own (--etcd-servers) and
	// leaves its compaction and defragmentation to the operator; the message says what to run.
	HistoryErasedReasonExternalEtcd = "ExternalEtcd"
	// HistoryErasedReasonFailed: erasing failed and is tried again; the message says why.
	HistoryErasedReasonFailed = "Failed"
)
