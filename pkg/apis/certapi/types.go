package certapi

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// KeyAlgorithm names the kind of private key certapi generates for a request whose certificate it delivers
// into a Secret. Keys that callers bring to the servingcerts subresource are judged by their CSR instead.
// +enum
type KeyAlgorithm string

const (
	// KeyAlgorithmECDSAP256 is an ECDSA key on curve P-256; the default.
	KeyAlgorithmECDSAP256 KeyAlgorithm = "ECDSAP256"
	// KeyAlgorithmECDSAP384 is an ECDSA key on curve P-384.
	KeyAlgorithmECDSAP384 KeyAlgorithm = "ECDSAP384"
	// KeyAlgorithmRSA2048 is a 2048-bit RSA key.
	KeyAlgorithmRSA2048 KeyAlgorithm = "RSA2048"
	// KeyAlgorithmRSA3072 is a 3072-bit RSA key.
	KeyAlgorithmRSA3072 KeyAlgorithm = "RSA3072"
	// KeyAlgorithmRSA4096 is a 4096-bit RSA key.
	KeyAlgorithmRSA4096 KeyAlgorithm = "RSA4096"
)

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// ServingCertRequest declares that the Service spec.serviceName in this namespace serves TLS and needs a
// serving certificate from the cluster's CA. The namespace is the trust boundary: whoever may write
// requests in a namespace may obtain certificates for that namespace's Services and nothing else.
type ServingCertRequest struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ServingCertRequestSpec   `json:"spec,omitempty"`
	Status ServingCertRequestStatus `json:"status,omitempty"`
}

// ServingCertRequestSpec says which Service a certificate is for and how it is made.
type ServingCertRequestSpec struct {
	// serviceName is the Service, in this request's namespace, that serves with the certificate.
	// A DNS-1035 label. Every certificate carries the SANs <serviceName>.<namespace>.svc and
	// <serviceName>.<namespace>.svc.<clusterDomain>.
	// +required
	ServiceName string `json:"serviceName"`

	// dnsNames are extra SANs, each <name>.<namespace>.svc or <name>.<namespace>.svc.<clusterDomain>
	// for a DNS-1035 <name> in this namespace, or *.<serviceName>.<namespace>.svc[.<clusterDomain>] for
	// the pods of a headless Service. Names are stored in lower case without a trailing dot.
	// +optional
	// +listType=atomic
	DNSNames []string `json:"dnsNames,omitempty"`

	// duration is the requested lifetime of each certificate: at least 1h, at most 2160h, default 168h.
	// A certificate never outlives the CA that signs it.
	// +optional
	Duration *metav1.Duration `json:"duration,omitempty"`

	// renewBefore is how long before notAfter a certificate is due for renewal; less than duration.
	// When unset, renewal is due at two thirds of the certificate's actual lifetime.
	// +optional
	RenewBefore *metav1.Duration `json:"renewBefore,omitempty"`

	// keyAlgorithm is the private key certapi generates when it delivers into secretName:
	// ECDSAP256 (default), ECDSAP384, RSA2048, RSA3072 or RSA4096.
	// +optional
	KeyAlgorithm KeyAlgorithm `json:"keyAlgorithm,omitempty"`

	// secretName, when set, asks certapi to deliver tls.crt, tls.key and ca.crt into this
	// kubernetes.io/tls Secret in the request's namespace, and to keep it renewed.
	// +optional
	SecretName string `json:"secretName,omitempty"`

	// serviceAccountNames are the ServiceAccounts of this namespace whose pods may receive this
	// request's certificate from kubelet, through a podCertificate projected volume with signerName
	// certapi.dev/serving and userAnnotations certapi.dev/servingcertrequest: <this request's name>.
	// Empty: none. At most 100 names, each a ServiceAccount name (a DNS subdomain).
	// +optional
	// +listType=set
	ServiceAccountNames []string `json:"serviceAccountNames,omitempty"`
}

// ServingCertRequestStatus reports the latest certificate issued for a request, by either path.
type ServingCertRequestStatus struct {
	// conditions: Ready, with reasons such as Issued, Renewing, SecretConflict and Denied.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// observedGeneration is the spec generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// caBundle is the PEM bundle that clients of this Service should trust.
	// +optional
	CABundle string `json:"caBundle,omitempty"`

	// certificate is the PEM of the latest certificate issued for this request (public data).
	// +optional
	Certificate string `json:"certificate,omitempty"`

	// serialNumber of the latest certificate, in hexadecimal.
	// +optional
	SerialNumber string `json:"serialNumber,omitempty"`

	// notBefore of the latest certificate.
	// +optional
	NotBefore *metav1.Time `json:"notBefore,omitempty"`

	// notAfter of the latest certificate.
	// +optional
	NotAfter *metav1.Time `json:"notAfter,omitempty"`

	// renewalTime is when the latest certificate is due for renewal.
	// +optional
	RenewalTime *metav1.Time `json:"renewalTime,omitempty"`

	// lastIssued is when a certificate was last issued for this request.
	// +optional
	LastIssued *metav1.Time `json:"lastIssued,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// ServingCertRequestList is a list of ServingCertRequests.
type ServingCertRequestList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []ServingCertRequest `json:"items"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// ServingCert is the body of a create on servingcertrequests/{name}/servingcerts: the caller sends a
// PKCS#10 request for a key it holds and receives a certificate for the parent request's Service.
type ServingCert struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ServingCertSpec   `json:"spec"`
	Status ServingCertStatus `json:"status,omitempty"`
}

// ServingCertSpec is what a caller asks for.
type ServingCertSpec struct {
	// certificateRequest is a PEM-encoded PKCS#10 certificate request. Its self-signature is verified;
	// its subject and SANs are ignored, since the identity comes from the parent ServingCertRequest.
	// Accepted keys: RSA of at least 2048 bits, ECDSA P-256 or P-384.
	// +required
	CertificateRequest string `json:"certificateRequest"`

	// duration is the requested lifetime, at most the parent request's duration.
	// +optional
	Duration *metav1.Duration `json:"duration,omitempty"`
}

// ServingCertStatus is the issued certificate.
type ServingCertStatus struct {
	// certificate is the PEM-encoded serving certificate.
	// +optional
	Certificate string `json:"certificate,omitempty"`
	// caBundle is the PEM bundle clients should trust.
	// +optional
	CABundle string `json:"caBundle,omitempty"`
	// serialNumber of the certificate, in hexadecimal.
	// +optional
	SerialNumber string `json:"serialNumber,omitempty"`
	// notBefore of the certificate.
	// +optional
	NotBefore *metav1.Time `json:"notBefore,omitempty"`
	// notAfter of the certificate.
	// +optional
	NotAfter *metav1.Time `json:"notAfter,omitempty"`
	// renewalTime is when the caller should ask for a new certificate.
	// +optional
	RenewalTime *metav1.Time `json:"renewalTime,omitempty"`
}

// CertificateAuthorityRole says what a CA certificate in the bundle is doing now.
// +enum
type CertificateAuthorityRole string

const (
	// CARoleActive signs new and renewed certificates.
	CARoleActive CertificateAuthorityRole = "Active"
	// CARoleNext is trusted already and becomes Active once every target holds it.
	CARoleNext CertificateAuthorityRole = "Next"
	// CARoleRetiring no longer signs and stays trusted until no certificate it signed can be valid.
	CARoleRetiring CertificateAuthorityRole = "Retiring"
)

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// CertificateAuthority is the public face of the in-cluster CA. Exactly one exists, named "default";
// it cannot be deleted. Private keys are never part of it.
type CertificateAuthority struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   CertificateAuthoritySpec   `json:"spec,omitempty"`
	Status CertificateAuthorityStatus `json:"status,omitempty"`
}

// CertificateAuthoritySpec holds what an admin can ask of the CA.
type CertificateAuthoritySpec struct {
	// duration is the lifetime of each new CA certificate: at least 24h, default 8760h.
	// +optional
	Duration *metav1.Duration `json:"duration,omitempty"`

	// forceRotation: a new value starts one rotation (queued if one is running).
	// +optional
	ForceRotation string `json:"forceRotation,omitempty"`

	// distrust: a new value starts an emergency rotation: a new CA signs at once, and every CA older
	// than it (the Active CA, a Next CA and every Retiring CA) is distrusted and leaves the bundle as
	// soon as every Secret certapi delivers for an existing request (and every certapi replica) has been
	// re-issued, or at certapi's --distrust-deadline (default 15m), whichever comes first: then only the
	// new CA is trusted. status.distrust shows its progress.
	// +optional
	Distrust string `json:"distrust,omitempty"`
}

// CertificateAuthorityStatus shows the CA certificates and how far their bundle has reached.
type CertificateAuthorityStatus struct {
	// conditions: Ready and Rotating.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// observedGeneration is the spec generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// leader is the certapi replica that leads now: the one that holds the CA's private key, signs,
	// delivers Secrets and injects bundles. The replica that answers reads it from the leader election in
	// certapi's etcd at each read (get, list, and each watch event it sends) and never stores it: a write's
	// value is dropped. A change of leader alone makes no watch event. Anyone who may read this object may
	// read it (a Lease in certapi's namespace would need RBAC there), and clients such as `kubectl certapi
	// check` read it instead of the table's Leader column, which shows the same value.
	// +optional
	Leader *CertificateAuthorityLeader `json:"leader,omitempty"`

	// caBundle is the PEM bundle of every CA certificate clients should trust now.
	// +optional
	CABundle string `json:"caBundle,omitempty"`

	// active identifies the CA that signs now.
	// +optional
	Active *CertificateAuthorityRef `json:"active,omitempty"`

	// certificates lists the CA certificates in the bundle and their roles.
	// +optional
	// +listType=atomic
	Certificates []CertificateAuthorityCertificate `json:"certificates,omitempty"`

	// injection summarises the objects that opted in to caBundle injection.
	// +optional
	Injection *InjectionSummary `json:"injection,omitempty"`

	// distrust shows the last distrust (spec.distrust): which CAs it removes from trust, what it waits
	// for, what it does not wait for, and how it ended.
	// +optional
	Distrust *DistrustStatus `json:"distrust,omitempty"`

	// served says what the endpoints of the injected webhooks, conversion webhooks and APIServices
	// serve, as kube-apiserver would judge it: certapi's leader does a TLS handshake with each ready
	// endpoint of the Service each of them names and verifies the chain against the bundle it injected,
	// for the name kube-apiserver checks (docs/served-certificates.md). Absent while the check is off
	// (--served-check-interval=0) or has not finished its first round.
	// +optional
	Served *ServedSummary `json:"served,omitempty"`

	// etcd is certapi's own etcd cluster, when its replicas run one (--etcd-peer-service): members, the
	// etcd leader, their health, and the peer CA. Absent with a single embedded member or an external
	// etcd.
	// +optional
	Etcd *EtcdClusterStatus `json:"etcd,omitempty"`

	// pendingRequest is, while certapi's CA is an intermediate of an organisation's CA (certapi's
	// --ca-upstream=Manual or CertificateSigningRequest), the certificate request of the next CA waiting for the organisation's
	// signature: sign it and import the certificate through certificateauthorities/import (kubectl
	// certapi ca request, kubectl certapi ca import). Absent when nothing waits. Its key never leaves
	// certapi.
	// +optional
	PendingRequest *CertificateAuthorityPendingRequest `json:"pendingRequest,omitempty"`
}

// CertificateAuthorityPendingRequest is a CA certificate request waiting for a signature.
type CertificateAuthorityPendingRequest struct {
	// request is the PEM PKCS#10 certificate request: basic constraints CA with path length 0, key
	// usage keyCertSign and cRLSign, extended key usage serverAuth and the name constraints certapi's CA
	// needs, all asked for in its extensionRequest.
	Request string `json:"request"`
	// subjectKeyID of the requested key, in hexadecimal: the certificate to import must certify it.
	SubjectKeyID string `json:"subjectKeyID"`
	// createdAt is when the request was made.
	CreatedAt metav1.Time `json:"createdAt"`
	// reason is why: ReplaceSelfSigned (the Active CA is certapi's own self-signed one, as on the first
	// start), Rotation (a third of the Active CA's chain life is left) or ForceRotation.
	Reason string `json:"reason"`
	// waitingFor says what the request waits for, in words.
	WaitingFor string `json:"waitingFor"`
	// activeNotAfter is when the Active CA's chain expires (the earliest notAfter of its certificate
	// and the chain above it): if nothing is imported by then, certapi can no longer sign.
	ActiveNotAfter metav1.Time `json:"activeNotAfter"`
	// certificateSigningRequest is the name of the certificates.k8s.io CertificateSigningRequest certapi
	// made for the request (--ca-upstream=CertificateSigningRequest); empty when it is signed by hand.
	CertificateSigningRequest string `json:"certificateSigningRequest,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// CertificateAuthorityImport is the body of a create on certificateauthorities/default/import: the CA
// certificate an organisation's CA signed for status.pendingRequest, and its chain. certapi checks it
// against the pending key (the key, CA basic constraints, key usages, name constraints, validity, every
// link of the chain up to a root) and answers 422 listing every problem, or stores it as the Next CA
// and answers with what it stored. Only with certapi's --ca-upstream=Manual or CertificateSigningRequest.
type CertificateAuthorityImport struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   CertificateAuthorityImportSpec   `json:"spec"`
	Status CertificateAuthorityImportStatus `json:"status,omitempty"`
}

// CertificateAuthorityImportSpec is the signed certificate and its chain.
type CertificateAuthorityImportSpec struct {
	// certificate is the PEM certificate signed for the pending request, optionally followed by its
	// chain (as the CertificateSigningRequest API returns it).
	Certificate string `json:"certificate"`
	// chain is more of the chain in PEM: intermediates, and optionally the root (required when
	// certapi has no --ca-upstream-roots).
	// +optional
	Chain string `json:"chain,omitempty"`
}

// CertificateAuthorityImportStatus is what was imported.
type CertificateAuthorityImportStatus struct {
	// role the imported CA took: Next. It signs once every injection target holds it and the rotation
	// grace period has passed.
	// +optional
	Role CertificateAuthorityRole `json:"role,omitempty"`
	// serialNumber of the imported CA certificate, in hexadecimal.
	// +optional
	SerialNumber string `json:"serialNumber,omitempty"`
	// subjectKeyID of the imported CA, in hexadecimal.
	// +optional
	SubjectKeyID string `json:"subjectKeyID,omitempty"`
	// notBefore of the imported certificate.
	// +optional
	NotBefore *metav1.Time `json:"notBefore,omitempty"`
	// notAfter of the imported certificate.
	// +optional
	NotAfter *metav1.Time `json:"notAfter,omitempty"`
	// chainNotAfter is the earliest notAfter of the certificate and its chain: the CA's rotation is
	// timed by it.
	// +optional
	ChainNotAfter *metav1.Time `json:"chainNotAfter,omitempty"`
	// root names the trust anchor the chain was verified to, by subject and serial number.
	// +optional
	Root string `json:"root,omitempty"`
	// warnings are what was accepted but should be known (as "Reason: message"); they are also sent
	// as API warnings and recorded in an Event.
	// +optional
	// +listType=atomic
	Warnings []string `json:"warnings,omitempty"`
}

// CertificateAuthorityLeader is the certapi replica that leads, as the replica that answered read the
// leader election at this read.
type CertificateAuthorityLeader struct {
	// state is Elected when a replica holds the leader election, None when no replica does (nothing is
	// signed, delivered or injected until one does), and Unknown when the replica that answered could not
	// read the election (its etcd was unreachable or slow).
	State LeaderState `json:"state"`

	// identity is the --leader-identity of the replica that leads (its pod's name when installed by the
	// chart or the manifests); set only when state is Elected.
	// +optional
	Identity string `json:"identity,omitempty"`
}

// LeaderState says whether a certapi replica leads.
// +enum
type LeaderState string

const (
	// LeaderStateElected: a replica holds the leader election; identity names it.
	LeaderStateElected LeaderState = "Elected"
	// LeaderStateNone: no replica holds the leader election.
	LeaderStateNone LeaderState = "None"
	// LeaderStateUnknown: the replica that answered could not read the leader election.
	LeaderStateUnknown LeaderState = "Unknown"
)

// DistrustCompletion says how a distrust ended.
// +enum
type DistrustCompletion string

const (
	// DistrustCompletionReissued: everything the distrust waited for was re-issued by the Active CA.
	DistrustCompletionReissued DistrustCompletion = "Reissued"
	// DistrustCompletionDeadline: the distrust deadline passed first, and the distrusted CAs left every
	// bundle regardless; pendingSecrets and pendingReplicas say what was left behind.
	DistrustCompletionDeadline DistrustCompletion = "Deadline"
)

// DistrustStatus is where a distrust stands.
type DistrustStatus struct {
	// distrust is the spec.distrust value acted on.
	Distrust string `json:"distrust"`

	// distrusted identifies the CAs it removes from trust: every CA older than the one it made (the
	// Active CA of the time, a Next CA if one was published, and every Retiring CA). While in the bundle
	// they are listed in certificates with distrusted: true.
	// +optional
	// +listType=atomic
	Distrusted []CertificateAuthorityRef `json:"distrusted,omitempty"`

	// startedAt is when the distrust took effect: a new CA signs from then on.
	StartedAt metav1.Time `json:"startedAt"`

	// deadline is when the distrusted CAs leave every bundle even if what the distrust waits for is not
	// done: startedAt plus certapi's --distrust-deadline.
	// +optional
	Deadline *metav1.Time `json:"deadline,omitempty"`

	// completedAt is when the distrusted CAs left the bundle; unset while the distrust is pending.
	// +optional
	CompletedAt *metav1.Time `json:"completedAt,omitempty"`

	// completion says how the distrust ended: Reissued or Deadline.
	// +optional
	Completion DistrustCompletion `json:"completion,omitempty"`

	// pendingSecrets are the Secrets the distrust waits for: Secrets certapi delivers now, for an
	// existing ServingCertRequest whose spec.secretName names them, that do not hold a certificate of the
	// Active CA yet. After a completion by deadline: those that were left behind.
	// +optional
	PendingSecrets *SecretsSummary `json:"pendingSecrets,omitempty"`

	// pendingReplicas is the number of certapi replicas that do not serve with a certificate of the
	// Active CA yet; the distrust waits for them too.
	// +optional
	PendingReplicas int32 `json:"pendingReplicas,omitempty"`

	// unmanagedSecrets are the Secrets labelled certapi.dev/managed=true that hold a certificate not
	// signed by the Active CA and that certapi will not re-issue: no existing request names them (it was
	// deleted, or another request took the name), they are in conflict, or they are not certapi's. The
	// distrust never waits for them; whoever uses them must replace them.
	// +optional
	UnmanagedSecrets *SecretsSummary `json:"unmanagedSecrets,omitempty"`

	// pendingTargets is, while the distrust is pending, the number of caBundle injection targets that do
	// not hold the current bundle yet (they do not trust the new CA yet). The distrust does not wait for
	// them; status.injection has the details.
	// +optional
	PendingTargets int32 `json:"pendingTargets,omitempty"`

	// pendingEndpoints are, while the distrust is pending, the endpoints of injected webhooks, CRD
	// conversion webhooks and APIServices that certapi's served certificate check last found presenting a
	// certificate of a distrusted CA that their caBundle still verifies: kube-apiserver's calls to them
	// fail once the CA leaves the bundle, so the distrust waits for them (a server that reloads its
	// re-issued certificate), up to its deadline. After a completion by deadline: those left behind.
	// +optional
	PendingEndpoints *EndpointsSummary `json:"pendingEndpoints,omitempty"`
}

// EndpointsSummary counts served endpoints and names the first few.
type EndpointsSummary struct {
	// count is how many there are.
	Count int32 `json:"count"`
	// names are the first few (at most 10), as "<Kind> <name>[ webhook <webhook>]: <host:port>", in
	// lexical order.
	// +optional
	// +listType=atomic
	Names []string `json:"names,omitempty"`
}

// SecretsSummary counts Secrets and names the first few.
type SecretsSummary struct {
	// count is how many there are.
	Count int32 `json:"count"`
	// names are the first few (at most 10), as namespace/name, in lexical order.
	// +optional
	// +listType=atomic
	Names []string `json:"names,omitempty"`
}

// CertificateAuthorityRef identifies one CA certificate.
type CertificateAuthorityRef struct {
	// serialNumber in hexadecimal.
	SerialNumber string `json:"serialNumber"`
	// subjectKeyID in hexadecimal.
	SubjectKeyID string `json:"subjectKeyID"`
}

// CertificateAuthorityCertificate is one CA certificate in the bundle.
type CertificateAuthorityCertificate struct {
	CertificateAuthorityRef `json:",inline"`
	// role is Active, Next or Retiring.
	Role CertificateAuthorityRole `json:"role"`
	// distrusted marks a Retiring CA that spec.distrust removes from trust: it leaves the bundle as soon
	// as status.distrust says, not when its certificates expire.
	// +optional
	Distrusted bool `json:"distrusted,omitempty"`
	// notBefore of the CA certificate.
	NotBefore metav1.Time `json:"notBefore"`
	// notAfter of the CA certificate.
	NotAfter metav1.Time `json:"notAfter"`
}

// InjectionSummary counts the objects that opted in to caBundle injection, by state.
type InjectionSummary struct {
	// targets is the number of opted-in objects.
	Targets int32 `json:"targets"`
	// upToDate is the number that hold the current bundle.
	UpToDate int32 `json:"upToDate"`
	// skipped is the number with nothing to inject (url-only webhooks, local APIServices, ...).
	Skipped int32 `json:"skipped"`
	// conflicts is the number certapi refuses to manage (claimed by another injector or by
	// kube-controller-manager, or fought over).
	Conflicts int32 `json:"conflicts"`
	// failed is the number whose caBundle write kube-apiserver refuses with an error that retrying
	// cannot fix (the object would grow past its size limit, an admission policy forbids the write, the
	// request is malformed). Like conflicts, they do not hold the rotation gate. certapi tries again
	// when the object or the bundle changes.
	// +optional
	Failed int32 `json:"failed,omitempty"`
	// failedTargets names the first few failed targets (at most 10), as "<Kind> <name>" or
	// "<Kind> <namespace>/<name>", in order of kind and name.
	// +optional
	// +listType=atomic
	FailedTargets []string `json:"failedTargets,omitempty"`
}

// ServedSummary counts the injected caBundle slots that name a Service (each webhook of a webhook
// configuration, a CRD's conversion webhook, an APIService) by what their Service's endpoints serve. A
// slot with several endpoints counts in its worst endpoint's state.
type ServedSummary struct {
	// targets is the number of slots checked.
	Targets int32 `json:"targets"`
	// verified is the number whose every endpoint presents a certificate the injected bundle verifies, for
	// <service>.<namespace>.svc, and not about to expire.
	Verified int32 `json:"verified"`
	// expiringSoon is the number whose certificate verifies but has less than a sixth of its lifetime
	// left: the server has most likely not reloaded a renewed certificate.
	// +optional
	ExpiringSoon int32 `json:"expiringSoon,omitempty"`
	// untrusted is the number with an endpoint whose certificate the injected bundle does not verify:
	// kube-apiserver's calls fail with "certificate signed by unknown authority".
	// +optional
	Untrusted int32 `json:"untrusted,omitempty"`
	// nameMismatch is the number with an endpoint whose certificate is not for <service>.<namespace>.svc.
	// +optional
	NameMismatch int32 `json:"nameMismatch,omitempty"`
	// expired is the number with an endpoint whose certificate, or a CA of its chain, is not valid now.
	// +optional
	Expired int32 `json:"expired,omitempty"`
	// handshakeFailed is the number with an endpoint that accepts a connection but completes no TLS
	// handshake.
	// +optional
	HandshakeFailed int32 `json:"handshakeFailed,omitempty"`
	// unreachable is the number with an endpoint certapi could not connect to (refused, timed out, reset,
	// a NetworkPolicy): nothing is known of its certificate.
	// +optional
	Unreachable int32 `json:"unreachable,omitempty"`
	// noEndpoints is the number whose Service does not exist, lacks the port, or has no ready endpoint.
	// +optional
	NoEndpoints int32 `json:"noEndpoints,omitempty"`
	// worstTargets names the slots that are not Verified (at most 10), worst state first, then by name,
	// as "<Kind> <name>[ webhook <webhook>]: <state>".
	// +optional
	// +listType=atomic
	WorstTargets []string `json:"worstTargets,omitempty"`
	// issuers count, for each CA of the bundle that signed what some endpoint presents, the endpoints
	// presenting its certificates (whatever their state), and name the first few: what a distrust or a
	// retirement of that CA would leave without a trusted certificate until they reload.
	// +optional
	// +listType=atomic
	Issuers []ServedIssuer `json:"issuers,omitempty"`
}

// ServedIssuer is one CA of the bundle and the endpoints that present a certificate it signed.
type ServedIssuer struct {
	// serialNumber of the CA, in hexadecimal.
	SerialNumber string `json:"serialNumber"`
	// endpoints is the number of endpoints presenting a certificate it signed.
	Endpoints int32 `json:"endpoints"`
	// names are the first few (at most 10) of them, as in EndpointsSummary.
	// +optional
	// +listType=atomic
	Names []string `json:"names,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// CertificateAuthorityList is a list of CertificateAuthorities (at most one: "default").
type CertificateAuthorityList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []CertificateAuthority `json:"items"`
}

// EtcdMemberRole is a member's part in certapi's own etcd cluster.
// +enum
type EtcdMemberRole string

const (
	// EtcdMemberVoter is a voting member.
	EtcdMemberVoter EtcdMemberRole = "Voter"
	// EtcdMemberLearner replicates without a vote: a member that joined and is not promoted yet.
	EtcdMemberLearner EtcdMemberRole = "Learner"
)

// EtcdClusterStatus is certapi's own etcd cluster (its replicas' embedded members, --etcd-peer-service)
// as the replica whose member is the etcd leader sees it. That replica writes it when it changes, never
// on a schedule.
type EtcdClusterStatus struct {
	// leader is the member that is the etcd leader and wrote this status.
	Leader string `json:"leader"`

	// members lists every member of the cluster, voting or learner, by name (an added learner that has
	// not started yet is named by its etcd member ID in hex).
	// +optional
	// +listType=map
	// +listMapKey=name
	Members []EtcdMemberStatus `json:"members,omitempty"`

	// peerCA is the CA of the members' mutual TLS and where its rotation stands.
	// +optional
	PeerCA *EtcdPeerCAStatus `json:"peerCA,omitempty"`
}

// EtcdMemberStatus is one member of certapi's own etcd cluster.
type EtcdMemberStatus struct {
	// name is the member's name: its pod's.
	Name string `json:"name"`

	// role is Voter or Learner.
	Role EtcdMemberRole `json:"role"`

	// healthy is whether the member answered the etcd leader's latest check.
	Healthy bool `json:"healthy"`
}

// EtcdPeerCAStatus is the peer CA of certapi's own etcd cluster.
type EtcdPeerCAStatus struct {
	// serialNumber is the serial number of the peer CA that signs member certificates, in hex.
	SerialNumber string `json:"serialNumber"`

	// notAfter is when that CA expires.
	NotAfter metav1.Time `json:"notAfter"`

	// rotateAt is when the etcd leader rotates it by itself (two thirds of its life);
	// `kubectl certapi rotate --etcd-peer` rotates it at once.
	// +optional
	RotateAt *metav1.Time `json:"rotateAt,omitempty"`

	// rotating is true while a rotation is under way: the members trust the CA it replaces too, until
	// every member presents a certificate of the new one.
	// +optional
	Rotating bool `json:"rotating,omitempty"`

	// waitingFor names the members a rotation waits for: not reached, or presenting a certificate of the
	// CA it replaces.
	// +optional
	// +listType=atomic
	WaitingFor []string `json:"waitingFor,omitempty"`
}
