package kubectlcertapi

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/signer"
	"github.com/certapi/certapi/pkg/signer/signertest"
)

// t0 is the tests' "now".
var t0 = time.Date(2030, 6, 1, 12, 0, 0, 0, time.UTC)

func newCA(t *testing.T, notBefore time.Time, life time.Duration) *signer.CA {
	t.Helper()
	return signertest.NewCA(t, notBefore, life)
}

// leaf signs a certificate for svc.ns.svc with ca and returns its PEM and key PEM.
func leaf(t *testing.T, ca *signer.CA, svc, ns string, now time.Time, d time.Duration) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	l, err := ca.Sign(signer.LeafRequest{ServiceName: svc, Namespace: ns, ClusterDomain: "cluster.local", PublicKey: &key.PublicKey, Duration: d, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return l.CertificatePEM, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
}

// caEntry is the status entry of ca in role.
func caEntry(ca *signer.CA, role certapiv1alpha1.CertificateAuthorityRole) certapiv1alpha1.CertificateAuthorityCertificate {
	return certapiv1alpha1.CertificateAuthorityCertificate{
		CertificateAuthorityRef: certapiv1alpha1.CertificateAuthorityRef{
			SerialNumber: signer.FormatSerialNumber(ca.Certificate.SerialNumber), SubjectKeyID: ca.SubjectKeyID()},
		Role: role, NotBefore: metav1.NewTime(ca.Certificate.NotBefore), NotAfter: metav1.NewTime(ca.Certificate.NotAfter),
	}
}

func serial(ca *signer.CA) string { return signer.FormatSerialNumber(ca.Certificate.SerialNumber) }

// caObject is CertificateAuthority/default with the given CAs, Rotating condition and injection summary,
// led by certapi-0.
func caObject(rotating metav1.Condition, inj *certapiv1alpha1.InjectionSummary, entries ...certapiv1alpha1.CertificateAuthorityCertificate) *certapiv1alpha1.CertificateAuthority {
	ca := &certapiv1alpha1.CertificateAuthority{ObjectMeta: metav1.ObjectMeta{Name: "default", Generation: 1}}
	ca.Status.ObservedGeneration = 1
	ca.Status.Leader = &certapiv1alpha1.CertificateAuthorityLeader{State: certapiv1alpha1.LeaderStateElected, Identity: "certapi-0"}
	ca.Status.Certificates = entries
	for _, e := range entries {
		if e.Role == certapiv1alpha1.CARoleActive {
			ref := e.CertificateAuthorityRef
			ca.Status.Active = &ref
		}
	}
	ca.Status.Injection = inj
	ca.Status.Conditions = []metav1.Condition{
		{Type: certapiv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Signing", Message: "signs"},
		rotating,
	}
	return ca
}

func idle() metav1.Condition {
	return metav1.Condition{Type: certapiv1alpha1.ConditionRotating, Status: metav1.ConditionFalse, Reason: certapiv1alpha1.RotatingReasonIdle, Message: "no rotation is running"}
}
