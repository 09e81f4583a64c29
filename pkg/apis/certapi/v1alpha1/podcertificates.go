package v1alpha1

// Names of certapi's pod certificates: the signer of the PodCertificateRequests certapi answers, the
// ClusterTrustBundle it keeps for that signer, and the key of a podCertificate volume's userAnnotations
// that names the ServingCertRequest whose certificate the pod gets.
const (
	// PodCertificateSignerName is the signerName of a podCertificate projected volume (and of a
	// clusterTrustBundle projection) served by certapi.
	PodCertificateSignerName = "certapi.dev/serving"
	// ClusterTrustBundleName is the ClusterTrustBundle certapi keeps for PodCertificateSignerName: the
	// signer name with "/" as ":" (as the API requires of a signer-linked bundle), then "ca".
	ClusterTrustBundleName = "certapi.dev:serving:ca"
	// UserAnnotationServingCertRequest, in a podCertificate volume's userAnnotations, names the
	// ServingCertRequest, in the pod's namespace, whose certificate the pod gets.
	UserAnnotationServingCertRequest = "certapi.dev/servingcertrequest"
)
