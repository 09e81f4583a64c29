package issuer

import (
	"crypto"
	"errors"
	"time"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
)

// Request is one certificate to sign: the identity comes from the parent ServingCertRequest, the key from
// the caller's CSR. It crosses from a follower to the leader as JSON, so it holds only plain data.
type Request struct {
	Namespace     string        `json:"namespace"`
	Name          string        `json:"name"`
	ServiceName   string        `json:"serviceName"`
	DNSNames      []string      `json:"dnsNames,omitempty"`
	Duration      time.Duration `json:"duration"`
	RenewBefore   time.Duration `json:"renewBefore,omitempty"`
	PublicKeyPKIX []byte        `json:"publicKey"`
	// PublicKey, when set, is used instead of PublicKeyPKIX by a caller on the leader that holds the key
	// itself (Secret delivery); it never crosses the handoff.
	PublicKey crypto.PublicKey `json:"-"`
	// Path says which way the certificate goes out (PathServingCerts, PathSecret, PathPCR), for metrics
	// and for what the leader reports after signing. PathPCR also selects PCRBackdate.
	Path string `json:"path,omitempty"`
	// MaxLifetime, when positive, caps the leaf's whole validity, notAfter - notBefore with the backdate
	// included: a PodCertificateRequest's spec.maxExpirationSeconds.
	MaxLifetime time.Duration `json:"maxLifetime,omitempty"`
}

// RequestFor returns the Request for a certificate of the ServingCertRequest namespace/name with spec: its
// Service and DNS names, its lifetime (certapiv1alpha1.DefaultDuration when spec.duration is unset) and
// its renewBefore (zero when unset: the policy's default). The caller adds the key and the Path.
func RequestFor(namespace, name string, spec *certapiv1alpha1.ServingCertRequestSpec) Request {
	duration := certapiv1alpha1.DefaultDuration
	if spec.Duration != nil {
		duration = spec.Duration.Duration
	}
	var renewBefore time.Duration
	if spec.RenewBefore != nil {
		renewBefore = spec.RenewBefore.Duration
	}
	return Request{
		Namespace:   namespace,
		Name:        name,
		ServiceName: spec.ServiceName,
		DNSNames:    spec.DNSNames,
		Duration:    duration,
		RenewBefore: renewBefore,
	}
}

// The issuance paths, as the metrics label them.
const (
	PathServingCerts = "servingcerts"
	PathSecret       = "secret"
	// PathPCR is a PodCertificateRequest answered by the leader's signer.
	PathPCR = "pcr"
)

// PCRBackdate is how far before now a PodCertificateRequest's leaf starts. kube-apiserver refuses a
// PCR status whose notBefore is not within 5 minutes of its own clock, so the usual signer.Backdate
// (5 minutes) is too much there; one minute still covers a kubelet whose clock is a little behind.
const PCRBackdate = time.Minute

// Result is a signed certificate and what a caller needs to use and renew it.
type Result struct {
	CertificatePEM string    `json:"certificate"`
	CABundle       string    `json:"caBundle"`
	SerialNumber   string    `json:"serialNumber"`
	NotBefore      time.Time `json:"notBefore"`
	NotAfter       time.Time `json:"notAfter"`
	RenewalTime    time.Time `json:"renewalTime"`
}

// ErrNoLeader means no replica could sign within the handoff deadline; callers answer 503 with Retry-After.
var ErrNoLeader = errors.New("no certapi replica is leading right now")
