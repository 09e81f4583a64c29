package kubectlcertapi

import (
	"bytes"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/signer"
)

func TestInspectSecret(t *testing.T) {
	active := newCA(t, t0.Add(-24*time.Hour), 365*24*time.Hour)
	retiring := newCA(t, t0.Add(-300*24*time.Hour), 365*24*time.Hour)
	stranger := newCA(t, t0.Add(-24*time.Hour), 365*24*time.Hour)
	bundle := signer.EncodeBundle(active.Certificate, retiring.Certificate)
	roles := map[string]string{active.SubjectKeyID(): "Active", retiring.SubjectKeyID(): "Retiring"}
	good, goodKey := leaf(t, active, "web", "team-a", t0, 168*time.Hour)
	old, oldKey := leaf(t, retiring, "web", "team-a", t0, 168*time.Hour)
	foreign, foreignKey := leaf(t, stranger, "web", "team-a", t0, 168*time.Hour)
	_, otherKey := leaf(t, active, "web", "team-a", t0, time.Hour)

	secret := func(cert, key, ca []byte, renewal string) *corev1.Secret {
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "web-tls", Labels: map[string]string{certapiv1alpha1.LabelManaged: "true"},
				Annotations: map[string]string{certapiv1alpha1.AnnotationServingCertRequest: "web"}},
			Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{corev1.TLSCertKey: cert, corev1.TLSPrivateKeyKey: key, certapiv1alpha1.SecretKeyCABundle: ca},
		}
		if renewal != "" {
			s.Annotations[certapiv1alpha1.AnnotationRenewalTime] = renewal
		}
		return s
	}
	future := formatTime(t0.Add(100 * time.Hour))
	for _, tc := range []struct {
		name      string
		secret    *corev1.Secret
		now       time.Time
		signedBy  string
		verified  bool
		keyOK     bool
		caCurrent bool
		problems  []string
	}{
		{name: "current", secret: secret(good, goodKey, bundle, future), now: t0, signedBy: "Active", verified: true, keyOK: true, caCurrent: true},
		{name: "from the Retiring CA, still trusted", secret: secret(old, oldKey, bundle, future), now: t0, signedBy: "Retiring", verified: true, keyOK: true, caCurrent: true},
		{name: "foreign CA, stale ca.crt", secret: secret(foreign, foreignKey, []byte("old"), future), now: t0, signedBy: "unknown", keyOK: true,
			problems: []string{"no CA in the current bundle signed it", "ca.crt is not the current trust bundle", "does not verify against the current trust bundle"}},
		{name: "key of another certificate", secret: secret(good, otherKey, bundle, future), now: t0, signedBy: "Active", verified: true, caCurrent: true,
			problems: []string{"tls.key does not go with tls.crt"}},
		{name: "renewal overdue", secret: secret(good, goodKey, bundle, formatTime(t0.Add(-time.Hour))), now: t0, signedBy: "Active", verified: true, keyOK: true, caCurrent: true,
			problems: []string{"renewal was due at " + formatTime(t0.Add(-time.Hour)) + " and has not happened"}},
		{name: "expired", secret: secret(good, goodKey, bundle, future), now: t0.Add(200 * time.Hour), signedBy: "Active", keyOK: true, caCurrent: true,
			problems: []string{"the certificate expired at", "does not verify"}},
		{name: "no certificate", secret: secret(nil, goodKey, bundle, ""), now: t0, signedBy: "unknown", problems: []string{"no tls.crt"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := InspectSecret(tc.secret, bundle, roles, nil, tc.now)
			if r.SignedBy != tc.signedBy || r.Verified != tc.verified || r.KeyMatches != tc.keyOK || r.CABundleCurrent != tc.caCurrent {
				t.Errorf("signedBy %q verified %v keyMatches %v caBundleCurrent %v, want %q %v %v %v (problems %q)",
					r.SignedBy, r.Verified, r.KeyMatches, r.CABundleCurrent, tc.signedBy, tc.verified, tc.keyOK, tc.caCurrent, r.Problems)
			}
			all := strings.Join(r.Problems, "\n")
			if len(tc.problems) == 0 && len(r.Problems) > 0 {
				t.Errorf("problems %q, want none", r.Problems)
			}
			for _, p := range tc.problems {
				if !strings.Contains(all, p) {
					t.Errorf("problems %q lack %q", r.Problems, p)
				}
			}
			var out bytes.Buffer
			if err := PrintInspection(&out, r, tc.now); err != nil {
				t.Fatal(err)
			}
			if strings.Contains(out.String(), "PRIVATE KEY") || strings.Contains(out.String(), string(tc.secret.Data[corev1.TLSPrivateKeyKey])) {
				t.Fatalf("the private key is printed:\n%s", out.String())
			}
		})
	}

	t.Run("printed for people", func(t *testing.T) {
		r := InspectSecret(secret(good, goodKey, bundle, future), bundle, roles, nil, t0)
		var out bytes.Buffer
		if err := PrintInspection(&out, r, t0); err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{
			"Secret:          team-a/web-tls (kubernetes.io/tls)",
			"Delivered by:    ServingCertRequest team-a/web",
			"Subject:         CN=web.team-a.svc",
			"DNS names:       web.team-a.svc, web.team-a.svc.cluster.local",
			"Signed by:       Active CA",
			"Key:             ECDSA P-256, tls.key matches",
			"(7d left)",
			"Renewal time:    " + future + " (in 4d4h)",
			"ca.crt:          the current trust bundle",
			"Verifies:        yes",
			"No problems found.",
		} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("output lacks %q:\n%s", want, out.String())
			}
		}
	})

	t.Run("bundle unreadable", func(t *testing.T) {
		r := InspectSecret(secret(good, goodKey, bundle, future), nil, map[string]string{}, errFake("forbidden"), t0)
		if r.Verified || !strings.Contains(r.VerifyError, "the current trust bundle could not be read: forbidden") {
			t.Fatalf("%+v", r)
		}
	})
}

type errFake string

func (e errFake) Error() string { return string(e) }
