package v1alpha1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

const (
	// DefaultDuration is a certificate's lifetime when spec.duration is not given.
	DefaultDuration = 168 * time.Hour
	// DefaultCADuration is a CA certificate's lifetime when the CertificateAuthority gives none.
	DefaultCADuration = 8760 * time.Hour
)

func addDefaultingFuncs(scheme *runtime.Scheme) error {
	return RegisterDefaults(scheme)
}

// SetDefaults_ServingCertRequestSpec fills duration and keyAlgorithm. renewBefore stays unset on purpose:
// its default depends on the lifetime a certificate really gets, so it is computed at issuance.
func SetDefaults_ServingCertRequestSpec(obj *ServingCertRequestSpec) {
	if obj.Duration == nil {
		obj.Duration = &metav1.Duration{Duration: DefaultDuration}
	}
	if obj.KeyAlgorithm == "" {
		obj.KeyAlgorithm = KeyAlgorithmECDSAP256
	}
}

// SetDefaults_CertificateAuthoritySpec fills the CA lifetime.
func SetDefaults_CertificateAuthoritySpec(obj *CertificateAuthoritySpec) {
	if obj.Duration == nil {
		obj.Duration = &metav1.Duration{Duration: DefaultCADuration}
	}
}
