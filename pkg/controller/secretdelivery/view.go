package secretdelivery

import (
	"crypto/sha256"
	"crypto/x509"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/apis/certapi/validation"
	"github.com/certapi/certapi/pkg/signer"
)

// maxCachedNames bounds the DNS names a secretView keeps of a certificate: a request's certificate has
// at most validation.MaxDNSNames plus the Service's two names, so one with more is not certapi's to
// keep, and is re-issued (or ignored) without looking at them.
const maxCachedNames = validation.MaxDNSNames + 2

// maxCachedNameBytes bounds the total length of the names kept (253 is the longest DNS name).
const maxCachedNameBytes = maxCachedNames * 253

// cachedAnnotations are the only annotations a secretView keeps: certapi's own.
var cachedAnnotations = []string{
	certapiv1alpha1.AnnotationServingCertRequest, certapiv1alpha1.AnnotationServingCertRequestUID, certapiv1alpha1.AnnotationSerialNumber,
	certapiv1alpha1.AnnotationNotAfter, certapiv1alpha1.AnnotationRenewalTime, certapiv1alpha1.AnnotationGeneration,
	certapiv1alpha1.AnnotationRenewRequestedAt,
}

// secretView is all Secret delivery keeps of a Secret, in its cache and from a direct GET: certapi's
// label and annotations, the Secret's type, and what decide needs of its data, the certificate parsed
// once. It holds no private key, and no data a tenant controls beyond a bounded summary: a labelled
// Secret of any size costs a few hundred bytes (plus its certificate's DNS names, at most
// maxCachedNameBytes).
type secretView struct {
	// ObjectMeta keeps namespace, name, UID and resourceVersion, the label LabelManaged and the
	// cachedAnnotations; nothing else.
	metav1.ObjectMeta
	Type      corev1.SecretType
	Immutable bool
	// HasCert says tls.crt is not empty.
	HasCert bool
	// Cert summarises the first certificate in tls.crt; nil when tls.crt is empty or not usable, and
	// then CertError says why.
	Cert      *leafSummary
	CertError string
	// KeyMarker stands for tls.key: the SHA-256 of its public half (keyMarker), "" when tls.key is
	// missing or does not parse.
	KeyMarker string
	// BundleDigest is the SHA-256 of ca.crt.
	BundleDigest [sha256.Size]byte
}

// leafSummary is what decide and the distrust tally need of a certificate.
type leafSummary struct {
	// AuthorityKeyID identifies the CA that signed it.
	AuthorityKeyID []byte
	// SerialNumber as signer.FormatSerialNumber writes it.
	SerialNumber string
	NotAfter     time.Time
	// DNSNames are its names, sorted, without repeats; nil when TooManyNames.
	DNSNames []string
	// TooManyNames: more than maxCachedNames names, or longer than maxCachedNameBytes in all.
	TooManyNames bool
	// PublicKeyMarker is publicKeyMarker of the certificate: equal to the KeyMarker of its private key.
	PublicKeyMarker string
}

// summarizeLeaf summarises a parsed certificate.
func summarizeLeaf(cert *x509.Certificate) *leafSummary {
	l := &leafSummary{
		AuthorityKeyID:  slices.Clone(cert.AuthorityKeyId),
		SerialNumber:    signer.FormatSerialNumber(cert.SerialNumber),
		NotAfter:        cert.NotAfter,
		PublicKeyMarker: publicKeyMarker(cert),
	}
	total := 0
	for _, n := range cert.DNSNames {
		total += len(n)
	}
	if len(cert.DNSNames) > maxCachedNames || total > maxCachedNameBytes {
		l.TooManyNames = true
		return l
	}
	names := slices.Clone(cert.DNSNames)
	slices.Sort(names)
	l.DNSNames = slices.Compact(names)
	return l
}

// viewOf makes the secretView of s. It reads s and keeps nothing of it but the view.
func viewOf(s *corev1.Secret) *secretView {
	v := &secretView{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:       s.Namespace,
			Name:            s.Name,
			UID:             s.UID,
			ResourceVersion: s.ResourceVersion,
		},
		Type:      s.Type,
		Immutable: s.Immutable != nil && *s.Immutable,
	}
	if val, ok := s.Labels[certapiv1alpha1.LabelManaged]; ok {
		v.Labels = map[string]string{certapiv1alpha1.LabelManaged: val}
	}
	for _, k := range cachedAnnotations {
		if val, ok := s.Annotations[k]; ok {
			if v.Annotations == nil {
				v.Annotations = map[string]string{}
			}
			v.Annotations[k] = val
		}
	}
	if crt := s.Data[corev1.TLSCertKey]; len(crt) > 0 {
		v.HasCert = true
		cert, err := parseLeaf(crt)
		if err != nil {
			v.CertError = err.Error()
		} else {
			v.Cert = summarizeLeaf(cert)
		}
	}
	v.KeyMarker = keyMarker(s.Data[corev1.TLSPrivateKeyKey])
	v.BundleDigest = sha256.Sum256(s.Data[certapiv1alpha1.SecretKeyCABundle])
	return v
}

// viewSecret is the Secret cache's transform: it replaces each Secret by its secretView, so the cache
// holds neither private keys nor the bulk of any Secret's data, and each certificate is parsed once,
// when the Secret arrives, not on every look. It is idempotent, as transforms must be.
func viewSecret(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.Secret:
		return viewOf(o), nil
	case *secretView:
		return o, nil
	}
	return obj, nil
}
