package v1alpha1

// Names of certapi's pod certificates: the signer of the PodCertificateRequests certapi answers (and of
// the ClusterTrustBundle it keeps), and the key of a podCertificate volume's userAnnotations that names
// the ServingCertRequest whose certificate the pod gets.
const (
	// PodCertificateSignerName is the signerName of a podCertificate projected volume (and of a
	// clusterTrustBundle projection) served by certapi.
	PodCertificateSignerName = "certapi.dev/serving"
	// UserAnnotationServingCertRequest, in a podCertificate volume's userAnnotations, names the
	// ServingCertRequest, in the pod's namespace, whose certificate the pod gets.
	UserAnnotationServingCertRequest = "certapi.dev/servingcertrequest"
)
