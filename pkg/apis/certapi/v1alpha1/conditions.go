package v1alpha1

// Condition types certapi sets in status.conditions.
const (
	// ConditionReady says whether a ServingCertRequest's certificate is current, or whether the
	// CertificateAuthority is signing.
	ConditionReady = "Ready"
	// ConditionRotating says where a CertificateAuthority's rotation stands.
	ConditionRotating = "Rotating"
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
