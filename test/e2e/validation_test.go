package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/test/e2e/e2etest"
	"github.com/certapi/certapi/test/testhelpers"
)

// TestValidationThroughTheAPI sends every request DESIGN.md forbids through kube-apiserver and checks the
// 422 names the field and says what is accepted, and that nothing was stored.
func TestValidationThroughTheAPI(t *testing.T) {
	ctx := context.Background()
	c, kube := testhelpers.Clients(t, cp.AdminConfig)
	ns := e2etest.Namespace(t, kube)
	d := func(x time.Duration) *metav1.Duration { return &metav1.Duration{Duration: x} }

	cases := []struct {
		name      string
		namespace string
		spec      certapiv1alpha1.ServingCertRequestSpec
		field     string
		message   string
	}{
		{"dnsName in another namespace", ns, certapiv1alpha1.ServingCertRequestSpec{ServiceName: "w", DNSNames: []string{"w.other.svc"}}, "spec.dnsNames[0]", "may only name Services in its own namespace"},
		{"kubernetes.default.svc", ns, certapiv1alpha1.ServingCertRequestSpec{ServiceName: "w", DNSNames: []string{"kubernetes.default.svc"}}, "spec.dnsNames[0]", `namespace "default"`},
		{"serviceName kubernetes in default", "default", certapiv1alpha1.ServingCertRequestSpec{ServiceName: "kubernetes"}, "spec.serviceName", "kube-apiserver's own"},
		{"external name", ns, certapiv1alpha1.ServingCertRequestSpec{ServiceName: "w", DNSNames: []string{"webhook.example.com"}}, "spec.dnsNames[0]", "external names are not accepted"},
		{"IP address", ns, certapiv1alpha1.ServingCertRequestSpec{ServiceName: "w", DNSNames: []string{"10.96.0.1"}}, "spec.dnsNames[0]", "IP addresses are not accepted"},
		{"namespace-wide wildcard", ns, certapiv1alpha1.ServingCertRequestSpec{ServiceName: "w", DNSNames: []string{"*." + ns + ".svc"}}, "spec.dnsNames[0]", "namespace-wide wildcard"},
		{"duration under 1h", ns, certapiv1alpha1.ServingCertRequestSpec{ServiceName: "w", Duration: d(30 * time.Minute)}, "spec.duration", "from 1h to 2160h"},
		{"duration over 2160h", ns, certapiv1alpha1.ServingCertRequestSpec{ServiceName: "w", Duration: d(3000 * time.Hour)}, "spec.duration", "from 1h to 2160h"},
		{"renewBefore not below duration", ns, certapiv1alpha1.ServingCertRequestSpec{ServiceName: "w", Duration: d(2 * time.Hour), RenewBefore: d(2 * time.Hour)}, "spec.renewBefore", "less than spec.duration"},
		{"unknown keyAlgorithm", ns, certapiv1alpha1.ServingCertRequestSpec{ServiceName: "w", KeyAlgorithm: "DSA1024"}, "spec.keyAlgorithm", `supported values: "ECDSAP256", "ECDSAP384", "RSA2048", "RSA3072", "RSA4096"`},
		{"missing serviceName", ns, certapiv1alpha1.ServingCertRequestSpec{}, "spec.serviceName", "Required value"},
		{"invalid serviceName", ns, certapiv1alpha1.ServingCertRequestSpec{ServiceName: "Web_Hook"}, "spec.serviceName", "DNS-1035 label"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			name := fmt.Sprintf("bad-%d", i)
			obj := &certapiv1alpha1.ServingCertRequest{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: tc.spec}
			_, err := c.CertapiV1alpha1().ServingCertRequests(tc.namespace).Create(ctx, obj, metav1.CreateOptions{})
			if !apierrors.IsInvalid(err) {
				t.Fatalf("got %v, want 422 Invalid", err)
			}
			if msg := err.Error(); !strings.Contains(msg, tc.field) || !strings.Contains(msg, tc.message) {
				t.Fatalf("message %q does not name %s and say %q", msg, tc.field, tc.message)
			}
			if _, err := c.CertapiV1alpha1().ServingCertRequests(tc.namespace).Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Fatalf("a rejected request was stored: %v", err)
			}
		})
	}

	t.Run("upper case and trailing dots are normalised", func(t *testing.T) {
		obj := &certapiv1alpha1.ServingCertRequest{
			ObjectMeta: metav1.ObjectMeta{Name: "normalised"},
			Spec: certapiv1alpha1.ServingCertRequestSpec{ServiceName: "w", DNSNames: []string{
				"Other." + strings.ToUpper(ns) + ".Svc.", "*.W." + ns + ".svc.Cluster.Local.", "other." + ns + ".svc",
			}},
		}
		got, err := c.CertapiV1alpha1().ServingCertRequests(ns).Create(ctx, obj, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create: %v", err)
		}
		want := []string{"other." + ns + ".svc", "*.w." + ns + ".svc.cluster.local"}
		if strings.Join(got.Spec.DNSNames, ",") != strings.Join(want, ",") {
			t.Fatalf("dnsNames = %v, want %v", got.Spec.DNSNames, want)
		}
	})

	t.Run("a bad update is refused and the object is unchanged", func(t *testing.T) {
		obj, err := c.CertapiV1alpha1().ServingCertRequests(ns).Create(ctx, e2etest.Request("upd", "w"), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		obj.Spec.Duration = d(time.Minute)
		if _, err := c.CertapiV1alpha1().ServingCertRequests(ns).Update(ctx, obj, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) {
			t.Fatalf("update: %v, want 422", err)
		}
		got, err := c.CertapiV1alpha1().ServingCertRequests(ns).Get(ctx, "upd", metav1.GetOptions{})
		if err != nil || got.Spec.Duration.Duration != 168*time.Hour || got.ResourceVersion != obj.ResourceVersion {
			t.Fatalf("after a refused update: %v, duration %v, rv %s (was %s)", err, got.Spec.Duration, got.ResourceVersion, obj.ResourceVersion)
		}
	})
}
