package createscr

import (
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
)

// KeyAlgorithms are the values the server accepts in spec.keyAlgorithm, in the order the help lists them.
var KeyAlgorithms = []certapiv1alpha1.KeyAlgorithm{
	certapiv1alpha1.KeyAlgorithmECDSAP256,
	certapiv1alpha1.KeyAlgorithmECDSAP384,
	certapiv1alpha1.KeyAlgorithmRSA2048,
	certapiv1alpha1.KeyAlgorithmRSA3072,
	certapiv1alpha1.KeyAlgorithmRSA4096,
}

// RequestParams are the parts of the command line that make up a ServingCertRequest.
// Zero values leave the matching field unset, so that the server applies its default.
type RequestParams struct {
	// Name is the request's metadata.name.
	Name string
	// Namespace, when not empty, is written into metadata.namespace.
	Namespace string
	// Service is spec.serviceName.
	Service string
	// DNSNames are spec.dnsNames, sent as given: the server validates and normalises them.
	DNSNames []string
	// Duration is spec.duration; zero leaves it unset.
	Duration time.Duration
	// RenewBefore is spec.renewBefore; zero leaves it unset.
	RenewBefore time.Duration
	// KeyAlgorithm is spec.keyAlgorithm, matched case-insensitively against KeyAlgorithms.
	KeyAlgorithm string
	// SecretName is spec.secretName.
	SecretName string
	// ServiceAccountNames are spec.serviceAccountNames, sent as given: the server validates them.
	ServiceAccountNames []string
}

// NewServingCertRequest builds the object the command sends. It checks only what the server cannot
// explain better itself: that NAME and --service are present and that --key-algorithm is one of
// KeyAlgorithms. Every other rule (DNS names, duration range, renewBefore below duration, ...) is the
// server's, which answers with a message naming the field.
func NewServingCertRequest(p RequestParams) (*certapiv1alpha1.ServingCertRequest, error) {
	if p.Name == "" {
		return nil, fmt.Errorf("NAME is required")
	}
	if p.Service == "" {
		return nil, fmt.Errorf("--service is required: the name of the Service that serves with the certificate")
	}
	alg, err := ParseKeyAlgorithm(p.KeyAlgorithm)
	if err != nil {
		return nil, err
	}
	for _, n := range p.DNSNames {
		if strings.TrimSpace(n) == "" {
			return nil, fmt.Errorf("--dns-name must not be empty")
		}
	}
	for _, n := range p.ServiceAccountNames {
		if strings.TrimSpace(n) == "" {
			return nil, fmt.Errorf("--service-account must not be empty")
		}
	}
	obj := &certapiv1alpha1.ServingCertRequest{
		TypeMeta: metav1.TypeMeta{
			APIVersion: certapiv1alpha1.SchemeGroupVersion.String(),
			Kind:       "ServingCertRequest",
		},
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace},
		Spec: certapiv1alpha1.ServingCertRequestSpec{
			ServiceName:  p.Service,
			KeyAlgorithm: alg,
			SecretName:   p.SecretName,
		},
	}
	if len(p.DNSNames) > 0 {
		obj.Spec.DNSNames = append([]string(nil), p.DNSNames...)
	}
	if len(p.ServiceAccountNames) > 0 {
		obj.Spec.ServiceAccountNames = append([]string(nil), p.ServiceAccountNames...)
	}
	if p.Duration != 0 {
		obj.Spec.Duration = &metav1.Duration{Duration: p.Duration}
	}
	if p.RenewBefore != 0 {
		obj.Spec.RenewBefore = &metav1.Duration{Duration: p.RenewBefore}
	}
	return obj, nil
}

// ParseKeyAlgorithm returns the KeyAlgorithm that s names, ignoring case; "" stays "" (the server's
// default, ECDSAP256).
func ParseKeyAlgorithm(s string) (certapiv1alpha1.KeyAlgorithm, error) {
	if s == "" {
		return "", nil
	}
	for _, a := range KeyAlgorithms {
		if strings.EqualFold(s, string(a)) {
			return a, nil
		}
	}
	return "", fmt.Errorf("invalid --key-algorithm %q: must be one of %s", s, keyAlgorithmList())
}

// keyAlgorithmList is KeyAlgorithms joined for messages and help.
func keyAlgorithmList() string {
	names := make([]string, len(KeyAlgorithms))
	for i, a := range KeyAlgorithms {
		names[i] = string(a)
	}
	return strings.Join(names, ", ")
}
