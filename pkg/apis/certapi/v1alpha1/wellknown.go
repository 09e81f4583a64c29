package v1alpha1

// Well-known names of certapi's API, declared once here and used by the server, both kubectl plugins,
// pkg/servingcert and the tests: they are part of the public contract, so a copy that drifts would be a
// silent break for every user.

// CertificateAuthorityName is the name of the only CertificateAuthority object that may exist.
const CertificateAuthorityName = "default"

// FieldManager is the field manager of every write the certapi server makes (Secrets, caBundle fields,
// ConfigMaps, ClusterTrustBundles, status), so that managedFields show which fields certapi owns.
const FieldManager = "certapi"

// AnnotationInjectCABundle opts a webhook configuration, CRD, APIService or ConfigMap in to caBundle
// injection when its value is "true".
const AnnotationInjectCABundle = "certapi.dev/inject-ca-bundle"

// AnnotationKeepForeignCA, "true" on an object that opts in to caBundle injection, makes certapi write
// its CA bundle followed by the CA certificates of another issuer already in the caBundle field (a
// cert-manager, service-ca or kube-webhook-certgen CA), instead of replacing them, until the annotation
// is removed: kube-apiserver then trusts both while the webhook moves to a certificate from certapi's CA
// (see docs/migration.md). certapi's own CAs are never kept this way.
const AnnotationKeepForeignCA = "certapi.dev/keep-foreign-ca"

// Labels and annotations certapi puts on the Secrets it delivers into. An operator pre-creates a Secret
// (from a Helm chart, Argo CD, ...) annotated AnnotationServingCertRequest=<request name> to hand it to
// certapi, and the other annotations let anyone see what the Secret holds without parsing it.
const (
	// LabelManaged ("true") marks the Secrets certapi writes. certapi watches only Secrets with this
	// label, never every Secret in the cluster.
	LabelManaged = "certapi.dev/managed"
	// AnnotationServingCertRequest names the ServingCertRequest (in the Secret's namespace) that delivers
	// into the Secret. certapi writes a Secret only when it carries this annotation naming the request.
	AnnotationServingCertRequest = "certapi.dev/servingcertrequest"
	// AnnotationServingCertRequestUID is the UID of that ServingCertRequest. certapi records it with
	// every write. A Secret that records another UID was delivered for an earlier request of the same
	// name, which no longer exists (deleted and created again, or lost with certapi's etcd data): the
	// request of that name adopts it, re-issues it and records its own UID; one that records the UID of a
	// request that exists is not written (SecretConflict). A Secret annotated with the name only (handed
	// over from a chart) is adopted by name, and certapi records the UID.
	AnnotationServingCertRequestUID = "certapi.dev/servingcertrequest-uid"
	// AnnotationSerialNumber is the serial of the certificate in tls.crt, lower-case hex.
	AnnotationSerialNumber = "certapi.dev/serial-number"
	// AnnotationNotAfter is the notAfter of the certificate in tls.crt, RFC 3339.
	AnnotationNotAfter = "certapi.dev/not-after"
	// AnnotationRenewalTime is when certapi renews the certificate in tls.crt, RFC 3339.
	AnnotationRenewalTime = "certapi.dev/renewal-time"
	// AnnotationGeneration is the ServingCertRequest metadata.generation the certificate was issued
	// for; a different generation means the spec changed and the certificate is re-issued.
	AnnotationGeneration = "certapi.dev/generation"
	// AnnotationRenewRequestedAt, set on a ServingCertRequest with spec.secretName to a value it did not
	// hold before (`kubectl certapi renew` writes the current time, RFC 3339), asks certapi to re-issue the
	// certificate in the request's Secret now, whatever its renewal time. certapi records the value it
	// re-issued for in the same annotation on the Secret, so each value is honoured once.
	AnnotationRenewRequestedAt = "certapi.dev/renew-requested-at"
)

// Secret delivery (spec.secretName) works only in namespaces that opt in, unless certapi runs with
// --secret-delivery-scope=cluster: a namespace opts in with the label certapi.dev/secret-delivery=enabled,
// together with a RoleBinding in it to the ClusterRole certapi:secret-delivery (the chart's
// <fullname>:secret-delivery) for certapi's ServiceAccount. So certapi's token reads and writes Secrets
// only where a namespace's admin asked for it.
const (
	// LabelSecretDelivery on a Namespace, with the value "enabled", opts it in to Secret delivery. Any
	// other value, or none, is not opted in.
	LabelSecretDelivery = "certapi.dev/secret-delivery"
	// SecretDeliveryEnabled is the value of LabelSecretDelivery that opts a namespace in.
	SecretDeliveryEnabled = "enabled"
	// ClusterRoleSecretDelivery is the name of the ClusterRole (get, list, watch, create, patch on
	// secrets) that an opted-in namespace binds to certapi's ServiceAccount, as the chart names it for a
	// release named certapi (<fullname>:secret-delivery otherwise).
	ClusterRoleSecretDelivery = "certapi:secret-delivery"
)

// The values of certapi's --secret-delivery-scope (the chart's secretDelivery.scope).
const (
	// SecretDeliveryScopeLabelledNamespaces, the default: Secrets are delivered only in namespaces
	// labelled certapi.dev/secret-delivery=enabled, and a request with spec.secretName anywhere else is
	// refused at admission.
	SecretDeliveryScopeLabelledNamespaces = "labelled-namespaces"
	// SecretDeliveryScopeCluster: Secrets are delivered in every namespace, and certapi's ServiceAccount
	// needs the ClusterRole certapi:secret-delivery cluster-wide (it can then read every Secret of the
	// cluster). Only when an admin asks for it by name.
	SecretDeliveryScopeCluster = "cluster"
)

// SecretKeyCABundle is the data key of the CA bundle in a Secret certapi delivers, next to tls.crt and
// tls.key: the name cert-manager and Kubernetes' own service-account Secrets use.
const SecretKeyCABundle = "ca.crt"

// The etcd peer CA of certapi's own etcd cluster (--etcd-peer-service): the Secret that holds it in
// certapi's namespace, and the annotation that asks for its rotation.
const (
	// DefaultEtcdPeerCASecretName is the peer CA Secret's default name (--etcd-peer-ca-secret; the Helm
	// chart names it <fullname>-etcd-peer-ca).
	DefaultEtcdPeerCASecretName = "certapi-etcd-peer-ca"
	// AnnotationEtcdPeerCARotate, set on the peer CA Secret to a value it did not hold before, asks the
	// replica whose member is the etcd leader to rotate the peer CA now (`kubectl certapi rotate
	// --etcd-peer` sets it). The value handled is recorded in AnnotationEtcdPeerCARotated.
	AnnotationEtcdPeerCARotate = "certapi.dev/etcd-peer-ca-rotate"
	// AnnotationEtcdPeerCARotated is the AnnotationEtcdPeerCARotate value the latest rotation began for.
	AnnotationEtcdPeerCARotated = "certapi.dev/etcd-peer-ca-rotated"
)

// With --ca-upstream=CertificateSigningRequest, certapi asks for each of its CA certificates through a
// certificates.k8s.io/v1 CertificateSigningRequest named PendingCA.Name ("certapi-ca-<key ID>").
const (
	// LabelCARequest ("true") marks the CertificateSigningRequests certapi made for its CA certificates.
	// certapi watches only those, and deletes an unsigned one whose request no longer waits.
	LabelCARequest = "certapi.dev/ca-request"
	// AnnotationCertManagerRequestIsCA ("true") asks cert-manager's CertificateSigningRequest signers for
	// a CA certificate: the certificates.k8s.io API has no field for it, and cert-manager reads this
	// annotation. Other signers ignore it and read the request's basic constraints, if they honour any.
	AnnotationCertManagerRequestIsCA = "experimental.cert-manager.io/request-is-ca"
)
