package v1alpha1

// Condition types certapi sets in status.conditions.
const (
	// ConditionReady says whether a ServingCertRequest's certificate is current, or whether the
	// CertificateAuthority is signing.
	ConditionReady = "Ready"
	// ConditionRotating says where a CertificateAuthority's rotation stands.
	ConditionRotating = "Rotating"
)
