package podcert

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/issuer"
)

func stub(t *testing.T, key crypto.Signer) []byte {
	t.Helper()
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, key)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

// fixture is a PodCertificateRequest as kubelet makes it for pod web-0 of ServiceAccount web on node n1,
// the pod as the API has it, and the ServingCertRequest web that allows ServiceAccount web.
func fixture(t *testing.T, key crypto.Signer) Input {
	t.Helper()
	pcr := &certificatesv1.PodCertificateRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "req-abc"},
		Spec: certificatesv1.PodCertificateRequestSpec{
			SignerName:                certapiv1alpha1.PodCertificateSignerName,
			PodName:                   "web-0",
			PodUID:                    "pod-uid",
			ServiceAccountName:        "web",
			ServiceAccountUID:         "sa-uid",
			NodeName:                  "n1",
			NodeUID:                   "node-uid",
			MaxExpirationSeconds:      ptr[int32](86400),
			StubPKCS10Request:         stub(t, key),
			UnverifiedUserAnnotations: map[string]string{certapiv1alpha1.UserAnnotationServingCertRequest: "web"},
		},
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "web-0", UID: "pod-uid"},
		Spec: corev1.PodSpec{
			NodeName:           "n1",
			ServiceAccountName: "web",
			Volumes: []corev1.Volume{{Name: "tls", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
				Sources: []corev1.VolumeProjection{{PodCertificate: &corev1.PodCertificateProjection{
					SignerName:      certapiv1alpha1.PodCertificateSignerName,
					KeyType:         "ECDSAP256",
					UserAnnotations: map[string]string{certapiv1alpha1.UserAnnotationServingCertRequest: "web"},
				}}},
			}}}},
		},
	}
	req := &certapiv1alpha1.ServingCertRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "web"},
		Spec: certapiv1alpha1.ServingCertRequestSpec{
			ServiceName:         "web",
			DNSNames:            []string{"*.web.team-a.svc"},
			Duration:            &metav1.Duration{Duration: 168 * time.Hour},
			RenewBefore:         &metav1.Duration{Duration: 2 * time.Hour},
			ServiceAccountNames: []string{"other", "web"},
		},
	}
	return Input{PCR: pcr, Pod: pod, Request: req}
}

func ptr[T any](v T) *T { return &v }

func TestDecide(t *testing.T) {
	p256, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	p384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	p521, err := ecdsa.GenerateKey(elliptic.P521(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	_, ed, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	rsa2048, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	now := metav1.NewTime(time.Now())

	cases := []struct {
		name    string
		key     crypto.Signer
		mutate  func(*Input)
		reason  string // "" means issue
		wait    bool   // leave pending (with reason) rather than deny
		message []string
	}{
		{name: "issued", key: p256},
		{name: "ECDSA P-384 and a default maxExpirationSeconds", key: p384, mutate: func(in *Input) { in.PCR.Spec.MaxExpirationSeconds = nil }},

		{name: "unknown annotation", key: p256, mutate: func(in *Input) { in.PCR.Spec.UnverifiedUserAnnotations["example.com/tenant"] = "x" },
			reason: certificatesv1.PodCertificateRequestConditionInvalidUserConfig, message: []string{`"example.com/tenant"`, certapiv1alpha1.UserAnnotationServingCertRequest}},
		{name: "no annotation", key: p256, mutate: func(in *Input) { in.PCR.Spec.UnverifiedUserAnnotations = nil },
			reason: certificatesv1.PodCertificateRequestConditionInvalidUserConfig, message: []string{"must name the ServingCertRequest"}},
		{name: "annotation that is no name", key: p256, mutate: func(in *Input) {
			in.PCR.Spec.UnverifiedUserAnnotations[certapiv1alpha1.UserAnnotationServingCertRequest] = "Not A Name"
		}, reason: certificatesv1.PodCertificateRequestConditionInvalidUserConfig, message: []string{"cannot be the name"}},
		{name: "ED25519", key: ed, reason: certificatesv1.PodCertificateRequestConditionUnsupportedKeyType, message: []string{"ED25519", AcceptedKeyTypes}},
		{name: "ECDSA P-521", key: p521, reason: certificatesv1.PodCertificateRequestConditionUnsupportedKeyType, message: []string{"ECDSAP521", AcceptedKeyTypes}},
		{name: "RSA 2048", key: rsa2048, reason: certificatesv1.PodCertificateRequestConditionUnsupportedKeyType, message: []string{"RSA2048"}},
		{name: "garbage stub", key: p256, mutate: func(in *Input) { in.PCR.Spec.StubPKCS10Request = []byte("x") }, reason: ReasonInvalidCertificateRequest},

		{name: "no request in the pod's namespace: wait", key: p256, mutate: func(in *Input) { in.Request = nil },
			reason: ReasonServingCertRequestNotFound, wait: true, message: []string{`"web"`, "namespace team-a", "serviceAccountNames: [web]"}},
		{name: "request being deleted: wait", key: p256, mutate: func(in *Input) { in.Request.DeletionTimestamp = &now },
			reason: ReasonServingCertRequestNotFound, wait: true},
		{name: "ServiceAccount not listed", key: p256, mutate: func(in *Input) { in.Request.Spec.ServiceAccountNames = []string{"other"} },
			reason: ReasonServiceAccountNotAllowed, message: []string{`"web"`, `it lists "other"`}},
		{name: "no ServiceAccount listed", key: p256, mutate: func(in *Input) { in.Request.Spec.ServiceAccountNames = nil },
			reason: ReasonServiceAccountNotAllowed, message: []string{"lists none"}},

		{name: "pod gone", key: p256, mutate: func(in *Input) { in.Pod = nil }, reason: ReasonPodMismatch, message: []string{"does not exist"}},
		{name: "pod re-created", key: p256, mutate: func(in *Input) { in.Pod.UID = "new-uid" }, reason: ReasonPodMismatch, message: []string{"UID"}},
		{name: "pod on another node", key: p256, mutate: func(in *Input) { in.Pod.Spec.NodeName = "n2" }, reason: ReasonPodMismatch, message: []string{`"n2"`}},
		{name: "pod of another ServiceAccount", key: p256, mutate: func(in *Input) { in.Pod.Spec.ServiceAccountName = "other" }, reason: ReasonPodMismatch, message: []string{`"other"`}},
		{name: "pod being deleted", key: p256, mutate: func(in *Input) { in.Pod.DeletionTimestamp = &now }, reason: ReasonPodMismatch},
		{name: "pod's volume names another request", key: p256, mutate: func(in *Input) {
			in.Pod.Spec.Volumes[0].Projected.Sources[0].PodCertificate.UserAnnotations[certapiv1alpha1.UserAnnotationServingCertRequest] = "other"
		}, reason: ReasonPodMismatch, message: []string{"no podCertificate volume"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := fixture(t, c.key)
			if c.mutate != nil {
				c.mutate(&in)
			}
			d := Decide(in)
			if c.reason == "" {
				if d.Deny || d.Wait {
					t.Fatalf("denied or waiting (%v, %v): %s: %s", d.Deny, d.Wait, d.Reason, d.Message)
				}
				s := d.Sign
				if s.Namespace != "team-a" || s.Name != "web" || s.ServiceName != "web" || strings.Join(s.DNSNames, ",") != "*.web.team-a.svc" ||
					s.Duration != 168*time.Hour || s.RenewBefore != 2*time.Hour || s.Path != issuer.PathPCR || s.MaxLifetime != 24*time.Hour {
					t.Errorf("sign = %+v", s)
				}
				if pub, ok := s.PublicKey.(*ecdsa.PublicKey); !ok || !pub.Equal(c.key.Public()) {
					t.Errorf("public key is not the PCR's")
				}
				return
			}
			if d.Deny == c.wait || d.Wait != c.wait || d.Reason != c.reason {
				t.Fatalf("got deny=%v wait=%v reason %q (%s); want wait=%v reason %q", d.Deny, d.Wait, d.Reason, d.Message, c.wait, c.reason)
			}
			for _, m := range c.message {
				if !strings.Contains(d.Message, m) {
					t.Errorf("message %q lacks %q", d.Message, m)
				}
			}
			if strings.Contains(d.Message, "BEGIN") {
				t.Errorf("message carries PEM: %s", d.Message)
			}
		})
	}
}

func TestBeginRefreshAt(t *testing.T) {
	nb := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	na := nb.Add(24 * time.Hour)
	for _, c := range []struct {
		name    string
		renewal time.Time
		want    time.Time
	}{
		{"two thirds", nb.Add(16 * time.Hour), nb.Add(16 * time.Hour)},
		{"too early", nb.Add(time.Minute), nb.Add(10 * time.Minute)},
		{"too late", na.Add(-time.Minute), na.Add(-10 * time.Minute)},
		{"at the edges", nb.Add(10 * time.Minute), nb.Add(10 * time.Minute)},
	} {
		if got := BeginRefreshAt(nb, na, c.renewal); !got.Equal(c.want) {
			t.Errorf("%s: %s; want %s", c.name, got, c.want)
		}
	}
	if LifetimeOK(nb, nb.Add(59*time.Minute)) || !LifetimeOK(nb, nb.Add(time.Hour)) {
		t.Error("LifetimeOK: the API requires at least one hour")
	}
}
