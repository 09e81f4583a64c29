package validation

import (
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/certapi/certapi/pkg/apis/certapi"
)

func scr(ns string, mutate func(*certapi.ServingCertRequestSpec)) *certapi.ServingCertRequest {
	obj := &certapi.ServingCertRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: ns},
		Spec: certapi.ServingCertRequestSpec{
			ServiceName:  "webhook",
			Duration:     &metav1.Duration{Duration: 168 * time.Hour},
			KeyAlgorithm: certapi.KeyAlgorithmECDSAP256,
		},
	}
	if mutate != nil {
		mutate(&obj.Spec)
	}
	return obj
}

func dur(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }

func TestValidateServingCertRequest(t *testing.T) {
	cases := []struct {
		name    string
		ns      string
		mutate  func(*certapi.ServingCertRequestSpec)
		field   string // "" means valid
		message string
	}{
		{name: "minimal", ns: "team-a"},
		{name: "dns names in own namespace", ns: "team-a", mutate: func(s *certapi.ServingCertRequestSpec) {
			s.DNSNames = []string{"other.team-a.svc", "other.team-a.svc.cluster.local", "*.webhook.team-a.svc", "*.webhook.team-a.svc.cluster.local"}
		}},
		{name: "renewBefore below duration", ns: "team-a", mutate: func(s *certapi.ServingCertRequestSpec) { s.RenewBefore = dur(time.Hour) }},
		{name: "every key algorithm", ns: "team-a", mutate: func(s *certapi.ServingCertRequestSpec) { s.KeyAlgorithm = certapi.KeyAlgorithmRSA4096 }},
		{name: "duration bounds inclusive", ns: "team-a", mutate: func(s *certapi.ServingCertRequestSpec) { s.Duration = dur(2160 * time.Hour) }},

		{name: "missing serviceName", ns: "team-a", mutate: func(s *certapi.ServingCertRequestSpec) { s.ServiceName = "" }, field: "spec.serviceName", message: "Required value"},
		{name: "invalid serviceName", ns: "team-a", mutate: func(s *certapi.ServingCertRequestSpec) { s.ServiceName = "1abc" }, field: "spec.serviceName", message: "DNS-1035"},
		{name: "kubernetes in default", ns: "default", mutate: func(s *certapi.ServingCertRequestSpec) { s.ServiceName = "kubernetes" }, field: "spec.serviceName", message: "kube-apiserver's own"},
		{name: "dnsName in another namespace", ns: "team-a", mutate: func(s *certapi.ServingCertRequestSpec) { s.DNSNames = []string{"webhook.team-b.svc"} }, field: "spec.dnsNames[0]", message: `namespace "team-b"`},
		{name: "kubernetes.default.svc from default", ns: "default", mutate: func(s *certapi.ServingCertRequestSpec) { s.DNSNames = []string{"kubernetes.default.svc"} }, field: "spec.dnsNames[0]", message: "kube-apiserver's own"},
		{name: "kubernetes.default.svc from elsewhere", ns: "team-a", mutate: func(s *certapi.ServingCertRequestSpec) { s.DNSNames = []string{"kubernetes.default.svc"} }, field: "spec.dnsNames[0]", message: `namespace "default"`},
		{name: "external name", ns: "team-a", mutate: func(s *certapi.ServingCertRequestSpec) { s.DNSNames = []string{"example.com"} }, field: "spec.dnsNames[0]", message: "external names are not accepted"},
		{name: "svc lookalike", ns: "team-a", mutate: func(s *certapi.ServingCertRequestSpec) { s.DNSNames = []string{"webhook.team-a.svc.evil.com"} }, field: "spec.dnsNames[0]", message: "external names"},
		{name: "IPv4", ns: "team-a", mutate: func(s *certapi.ServingCertRequestSpec) { s.DNSNames = []string{"10.0.0.1"} }, field: "spec.dnsNames[0]", message: "IP addresses are not accepted"},
		{name: "IPv6", ns: "team-a", mutate: func(s *certapi.ServingCertRequestSpec) { s.DNSNames = []string{"::1"} }, field: "spec.dnsNames[0]", message: "IP addresses are not accepted"},
		{name: "namespace-wide wildcard", ns: "team-a", mutate: func(s *certapi.ServingCertRequestSpec) { s.DNSNames = []string{"*.team-a.svc"} }, field: "spec.dnsNames[0]", message: "namespace-wide wildcard"},
		{name: "wildcard of another service", ns: "team-a", mutate: func(s *certapi.ServingCertRequestSpec) { s.DNSNames = []string{"*.other.team-a.svc"} }, field: "spec.dnsNames[0]", message: "only for this request's Service"},
		{name: "bare service name", ns: "team-a", mutate: func(s *certapi.ServingCertRequestSpec) { s.DNSNames = []string{"webhook"} }, field: "spec.dnsNames[0]", message: "accepted:"},
		{name: "service.namespace", ns: "team-a", mutate: func(s *certapi.ServingCertRequestSpec) { s.DNSNames = []string{"webhook.team-a"} }, field: "spec.dnsNames[0]", message: "accepted:"},
		{name: "wrong cluster domain", ns: "team-a", mutate: func(s *certapi.ServingCertRequestSpec) { s.DNSNames = []string{"webhook.team-a.svc.other.local"} }, field: "spec.dnsNames[0]", message: "external names"},
		{name: "too many labels", ns: "team-a", mutate: func(s *certapi.ServingCertRequestSpec) { s.DNSNames = []string{"a.b.team-a.svc"} }, field: "spec.dnsNames[0]", message: "too many labels"},
		{name: "duration under 1h", ns: "team-a", mutate: func(s *certapi.ServingCertRequestSpec) { s.Duration = dur(59 * time.Minute) }, field: "spec.duration", message: "from 1h to 2160h"},
		{name: "duration over 2160h", ns: "team-a", mutate: func(s *certapi.ServingCertRequestSpec) { s.Duration = dur(2161 * time.Hour) }, field: "spec.duration", message: "from 1h to 2160h"},
		{name: "renewBefore equal to duration", ns: "team-a", mutate: func(s *certapi.ServingCertRequestSpec) { s.RenewBefore = dur(168 * time.Hour) }, field: "spec.renewBefore", message: "less than spec.duration"},
		{name: "renewBefore negative", ns: "team-a", mutate: func(s *certapi.ServingCertRequestSpec) { s.RenewBefore = dur(-time.Hour) }, field: "spec.renewBefore", message: "positive"},
		{name: "unknown key algorithm", ns: "team-a", mutate: func(s *certapi.ServingCertRequestSpec) { s.KeyAlgorithm = "Ed25519" }, field: "spec.keyAlgorithm", message: `"ECDSAP256"`},
		{name: "invalid secretName", ns: "team-a", mutate: func(s *certapi.ServingCertRequestSpec) { s.SecretName = "Not_Valid" }, field: "spec.secretName", message: "RFC 1123"},
		{name: "serviceAccountNames", ns: "team-a", mutate: func(s *certapi.ServingCertRequestSpec) { s.ServiceAccountNames = []string{"webhook", "webhook.v2"} }},
		{name: "invalid serviceAccountName", ns: "team-a", mutate: func(s *certapi.ServingCertRequestSpec) { s.ServiceAccountNames = []string{"webhook", "Not_Valid"} }, field: "spec.serviceAccountNames[1]", message: "ServiceAccount"},
		{name: "repeated serviceAccountName", ns: "team-a", mutate: func(s *certapi.ServingCertRequestSpec) { s.ServiceAccountNames = []string{"webhook", "webhook"} }, field: "spec.serviceAccountNames[1]", message: "Duplicate"},
		{name: "too many serviceAccountNames", ns: "team-a", mutate: func(s *certapi.ServingCertRequestSpec) {
			for i := range MaxServiceAccountNames + 1 {
				s.ServiceAccountNames = append(s.ServiceAccountNames, fmt.Sprintf("sa-%d", i))
			}
		}, field: "spec.serviceAccountNames", message: "Too many"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obj := scr(tc.ns, tc.mutate)
			obj.Spec.DNSNames = NormalizeDNSNames(obj.Spec.DNSNames)
			errs := ValidateServingCertRequest(obj, "cluster.local")
			if tc.field == "" {
				if len(errs) > 0 {
					t.Fatalf("want valid, got %v", errs)
				}
				return
			}
			if len(errs) == 0 {
				t.Fatalf("want an error on %s, got none", tc.field)
			}
			for _, e := range errs {
				if e.Field == tc.field && strings.Contains(e.Error(), tc.message) {
					return
				}
			}
			t.Fatalf("want an error on %s containing %q, got %v", tc.field, tc.message, errs)
		})
	}
}

func TestNormalizeDNSNames(t *testing.T) {
	got := NormalizeDNSNames([]string{"Other.Team-A.SVC.", "other.team-a.svc", "x.team-a.svc.cluster.local."})
	want := []string{"other.team-a.svc", "x.team-a.svc.cluster.local"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("got %v, want %v", got, want)
	}
	if NormalizeDNSNames(nil) != nil {
		t.Fatal("nil must stay nil so that an absent field stays absent")
	}
}

func TestValidateCertificateAuthority(t *testing.T) {
	cases := []struct {
		name, objName string
		duration      *metav1.Duration
		field         string
	}{
		{name: "default", objName: "default", duration: dur(8760 * time.Hour)},
		{name: "other name", objName: "mine", duration: dur(8760 * time.Hour), field: "metadata.name"},
		{name: "too short", objName: "default", duration: dur(time.Hour), field: "spec.duration"},
		{name: "missing duration", objName: "default", field: "spec.duration"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			errs := ValidateCertificateAuthority(&certapi.CertificateAuthority{
				ObjectMeta: metav1.ObjectMeta{Name: tc.objName},
				Spec:       certapi.CertificateAuthoritySpec{Duration: tc.duration},
			})
			if tc.field == "" {
				if len(errs) != 0 {
					t.Fatalf("want valid, got %v", errs)
				}
				return
			}
			if len(errs) == 0 || errs[0].Field != tc.field {
				t.Fatalf("want an error on %s, got %v", tc.field, errs)
			}
		})
	}
}
