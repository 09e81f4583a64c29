package createscr

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
)

func TestNewServingCertRequest(t *testing.T) {
	typeMeta := metav1.TypeMeta{APIVersion: "certapi.dev/v1alpha1", Kind: "ServingCertRequest"}
	for _, tc := range []struct {
		name    string
		params  RequestParams
		want    certapiv1alpha1.ServingCertRequestSpec
		wantNS  string
		wantErr string
	}{{
		name:   "only the service: everything else is left to the server's defaults",
		params: RequestParams{Name: "a", Service: "svc"},
		want:   certapiv1alpha1.ServingCertRequestSpec{ServiceName: "svc"},
	}, {
		name: "every field",
		params: RequestParams{
			Name: "a", Namespace: "ns", Service: "svc",
			DNSNames:     []string{"Extra.ns.svc.", "*.svc.ns.svc"},
			Duration:     720 * time.Hour,
			RenewBefore:  240 * time.Hour,
			KeyAlgorithm: "RSA3072",
			SecretName:   "svc-tls",

			ServiceAccountNames: []string{"svc", "svc-canary"},
		},
		wantNS: "ns",
		want: certapiv1alpha1.ServingCertRequestSpec{
			ServiceName:  "svc",
			DNSNames:     []string{"Extra.ns.svc.", "*.svc.ns.svc"}, // sent as given; the server normalises
			Duration:     &metav1.Duration{Duration: 720 * time.Hour},
			RenewBefore:  &metav1.Duration{Duration: 240 * time.Hour},
			KeyAlgorithm: certapiv1alpha1.KeyAlgorithmRSA3072,
			SecretName:   "svc-tls",

			ServiceAccountNames: []string{"svc", "svc-canary"},
		},
	}, {
		name:   "key algorithm in any case",
		params: RequestParams{Name: "a", Service: "svc", KeyAlgorithm: "ecdsap384"},
		want:   certapiv1alpha1.ServingCertRequestSpec{ServiceName: "svc", KeyAlgorithm: certapiv1alpha1.KeyAlgorithmECDSAP384},
	}, {
		name:   "out-of-range durations are the server's to reject",
		params: RequestParams{Name: "a", Service: "svc", Duration: 30 * time.Minute},
		want:   certapiv1alpha1.ServingCertRequestSpec{ServiceName: "svc", Duration: &metav1.Duration{Duration: 30 * time.Minute}},
	}, {
		name:    "unknown key algorithm",
		params:  RequestParams{Name: "a", Service: "svc", KeyAlgorithm: "Ed25519"},
		wantErr: `invalid --key-algorithm "Ed25519": must be one of ECDSAP256, ECDSAP384, RSA2048, RSA3072, RSA4096`,
	}, {
		name:    "empty service account",
		params:  RequestParams{Name: "a", Service: "svc", ServiceAccountNames: []string{""}},
		wantErr: "--service-account must not be empty",
	}, {
		name:    "no service",
		params:  RequestParams{Name: "a"},
		wantErr: "--service is required",
	}, {
		name:    "no name",
		params:  RequestParams{Service: "svc"},
		wantErr: "NAME is required",
	}, {
		name:    "empty dns name",
		params:  RequestParams{Name: "a", Service: "svc", DNSNames: []string{"a.ns.svc", " "}},
		wantErr: "--dns-name must not be empty",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := NewServingCertRequest(tc.params)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.TypeMeta != typeMeta || got.Name != tc.params.Name || got.Namespace != tc.wantNS {
				t.Errorf("meta %+v %s/%s, want %+v %s/%s", got.TypeMeta, got.Namespace, got.Name, typeMeta, tc.wantNS, tc.params.Name)
			}
			if !equality.Semantic.DeepEqual(got.Spec, tc.want) {
				t.Errorf("spec\n got %+v\nwant %+v", got.Spec, tc.want)
			}
		})
	}
}

func TestNewServingCertRequestCopiesDNSNames(t *testing.T) {
	names := []string{"a.ns.svc"}
	got, err := NewServingCertRequest(RequestParams{Name: "a", Service: "svc", DNSNames: names})
	if err != nil {
		t.Fatal(err)
	}
	names[0] = "changed"
	if got.Spec.DNSNames[0] != "a.ns.svc" {
		t.Fatalf("the object shares the caller's slice: %v", got.Spec.DNSNames)
	}
}
