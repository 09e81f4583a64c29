package validation

import (
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/certapi/certapi/pkg/apis/certapi"
	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
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

// annotations returns annotations whose UserMetadataBytes are exactly size (size >= 20).
func annotations(size int) map[string]string {
	// {"annotations":{"a":""}} is 24 bytes; every further byte of the value adds one.
	m := map[string]string{"a": strings.Repeat("x", size-24)}
	if got := UserMetadataBytes(&metav1.ObjectMeta{Annotations: m}); got != size {
		panic(fmt.Sprintf("annotations(%d) measure %d", size, got))
	}
	return m
}

func TestValidateUserMetadataSize(t *testing.T) {
	big := strings.Repeat("f", 300)
	manyFinalizers := make([]string, 0, 200)
	for i := range 200 {
		manyFinalizers = append(manyFinalizers, fmt.Sprintf("example.com/%d-%s", i, big[:200]))
	}
	cases := []struct {
		name     string
		meta     metav1.ObjectMeta
		old      *metav1.ObjectMeta // nil: a create
		wantErr  bool
		contains string
	}{
		{name: "none", meta: metav1.ObjectMeta{}},
		{name: "at the limit", meta: metav1.ObjectMeta{Annotations: annotations(MaxUserMetadataBytes)}},
		{name: "one byte over", meta: metav1.ObjectMeta{Annotations: annotations(MaxUserMetadataBytes + 1)}, wantErr: true,
			contains: fmt.Sprintf("%d bytes (as JSON); a ServingCertRequest accepts at most %d bytes (32 KiB)", MaxUserMetadataBytes+1, MaxUserMetadataBytes)},
		{name: "250 KiB of annotations (the review's)", meta: metav1.ObjectMeta{Annotations: map[string]string{"a": strings.Repeat("x", 250*1024)}}, wantErr: true, contains: "32 KiB"},
		{name: "labels and annotations add up", meta: metav1.ObjectMeta{
			Labels:      map[string]string{"l": strings.Repeat("x", MaxUserMetadataBytes/2)},
			Annotations: map[string]string{"a": strings.Repeat("x", MaxUserMetadataBytes/2)},
		}, wantErr: true},
		{name: "finalizers count", meta: metav1.ObjectMeta{Finalizers: manyFinalizers}, wantErr: true},
		{name: "ownerReferences count", meta: metav1.ObjectMeta{OwnerReferences: func() []metav1.OwnerReference {
			var refs []metav1.OwnerReference
			for i := range 200 {
				refs = append(refs, metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: fmt.Sprintf("%d-%s", i, big[:150]), UID: "u"})
			}
			return refs
		}()}, wantErr: true},
		{name: "update within the limit", meta: metav1.ObjectMeta{Annotations: annotations(1000)}, old: &metav1.ObjectMeta{}},
		{name: "update past the limit", meta: metav1.ObjectMeta{Annotations: annotations(MaxUserMetadataBytes + 1)}, old: &metav1.ObjectMeta{}, wantErr: true},
		{name: "update of an object stored over the limit that does not grow it",
			meta: metav1.ObjectMeta{Annotations: annotations(40000)}, old: &metav1.ObjectMeta{Annotations: annotations(40000), Finalizers: []string{"example.com/f"}}},
		{name: "update of an object stored over the limit that grows it",
			meta: metav1.ObjectMeta{Annotations: annotations(40001)}, old: &metav1.ObjectMeta{Annotations: annotations(40000)}, wantErr: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			errs := ValidateUserMetadataSize(&tc.meta, tc.old, "ServingCertRequest", field.NewPath("metadata"))
			if !tc.wantErr {
				if len(errs) != 0 {
					t.Fatalf("want valid, got %v", errs)
				}
				return
			}
			if len(errs) != 1 || errs[0].Field != "metadata" || !strings.Contains(errs[0].Error(), tc.contains) {
				t.Fatalf("want one error on metadata containing %q, got %v", tc.contains, errs)
			}
		})
	}
}

// TestMetadataLimitIsChecked shows that every create and update of either kind checks the limit, not only
// the helper.
func TestMetadataLimitIsChecked(t *testing.T) {
	over := metav1.ObjectMeta{Annotations: annotations(MaxUserMetadataBytes + 1)}
	okSCR := scr("team-a", nil)
	okSCR.ResourceVersion = "1"
	bigSCR := okSCR.DeepCopy()
	bigSCR.Annotations = over.Annotations
	okCA := &certapi.CertificateAuthority{ObjectMeta: metav1.ObjectMeta{Name: "default", ResourceVersion: "1"}, Spec: certapi.CertificateAuthoritySpec{Duration: dur(8760 * time.Hour)}}
	bigCA := okCA.DeepCopy()
	bigCA.Annotations = over.Annotations
	for name, errs := range map[string]field.ErrorList{
		"ServingCertRequest create":   ValidateServingCertRequest(bigSCR, "cluster.local"),
		"ServingCertRequest update":   ValidateServingCertRequestUpdate(bigSCR, okSCR, "cluster.local"),
		"CertificateAuthority create": ValidateCertificateAuthority(bigCA),
		"CertificateAuthority update": ValidateCertificateAuthorityUpdate(bigCA, okCA),
	} {
		if len(errs) != 1 || errs[0].Field != "metadata" || !strings.Contains(errs[0].Error(), "32 KiB") {
			t.Errorf("%s with %d bytes of annotations: %v; want one error on metadata that names the limit", name, MaxUserMetadataBytes+1, errs)
		}
	}
}

func TestValidateRenewRequest(t *testing.T) {
	for _, tc := range []struct {
		name    string
		value   *string
		wantErr bool
	}{
		{name: "absent"},
		{name: "a time", value: ptrTo("2026-12-06T18:00:00.123456789Z")},
		{name: "at the limit", value: ptrTo(strings.Repeat("x", maxTriggerLength))},
		{name: "one byte over", value: ptrTo(strings.Repeat("x", maxTriggerLength+1)), wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := &certapi.ServingCertRequest{
				ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: "team-a"},
				Spec:       certapi.ServingCertRequestSpec{ServiceName: "webhook", Duration: dur(168 * time.Hour)},
			}
			if tc.value != nil {
				req.Annotations = map[string]string{certapiv1alpha1.AnnotationRenewRequestedAt: *tc.value}
			}
			for what, errs := range map[string]field.ErrorList{
				"create": ValidateServingCertRequest(req, "cluster.local"),
				"update": ValidateServingCertRequestUpdate(req, &certapi.ServingCertRequest{ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: "team-a", ResourceVersion: "1"}}, "cluster.local"),
			} {
				got := false
				for _, e := range errs {
					if e.Field == "metadata.annotations[certapi.dev/renew-requested-at]" && e.Type == field.ErrorTypeTooLong {
						got = true
					}
				}
				if got != tc.wantErr {
					t.Errorf("%s: errors %v, want a TooLong of the annotation: %v", what, errs, tc.wantErr)
				}
			}
		})
	}
}

func ptrTo(s string) *string { return &s }
