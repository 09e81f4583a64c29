package selftestcmd

import (
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/signer"
	"github.com/certapi/certapi/pkg/signer/signertest"
)

func TestVerifyIssued(t *testing.T) {
	now := time.Now()
	ca := signertest.NewCA(t, now, 0)
	other := signertest.NewCA(t, now, 0)
	key, err := signer.GenerateKey(signer.ECDSAP256)
	if err != nil {
		t.Fatal(err)
	}
	otherKey, err := signer.GenerateKey(signer.ECDSAP256)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Sign(signer.LeafRequest{ServiceName: "web", Namespace: "ns", ClusterDomain: "cluster.local", PublicKey: key.Public(), Duration: time.Hour, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	good := certapiv1alpha1.ServingCertStatus{Certificate: string(leaf.CertificatePEM), CABundle: string(other.CertificatePEM()) + string(ca.CertificatePEM())}
	for _, tc := range []struct {
		name    string
		change  func(s *certapiv1alpha1.ServingCertStatus)
		dnsName string
		when    time.Time
		wantErr string
	}{
		{name: "good", change: func(*certapiv1alpha1.ServingCertStatus) {}},
		{name: "no certificate", change: func(s *certapiv1alpha1.ServingCertStatus) { s.Certificate = "" }, wantErr: "status.certificate: no PEM CERTIFICATE"},
		{name: "empty bundle", change: func(s *certapiv1alpha1.ServingCertStatus) { s.CABundle = "" }, wantErr: "holds no certificate"},
		{name: "another CA", change: func(s *certapiv1alpha1.ServingCertStatus) { s.CABundle = string(other.CertificatePEM()) }, wantErr: "does not verify for web.ns.svc"},
		{name: "another name", change: func(*certapiv1alpha1.ServingCertStatus) {}, dnsName: "api.ns.svc", wantErr: "does not verify for api.ns.svc"},
		{name: "expired", change: func(*certapiv1alpha1.ServingCertStatus) {}, when: now.Add(2 * time.Hour), wantErr: "does not verify"},
		{name: "another key", change: func(s *certapiv1alpha1.ServingCertStatus) {
			l, err := ca.Sign(signer.LeafRequest{ServiceName: "web", Namespace: "ns", ClusterDomain: "cluster.local", PublicKey: otherKey.Public(), Duration: time.Hour, Now: now})
			if err != nil {
				t.Fatal(err)
			}
			s.Certificate = string(l.CertificatePEM)
		}, wantErr: "not for the key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := good
			tc.change(&s)
			dnsName, when := "web.ns.svc", now
			if tc.dnsName != "" {
				dnsName = tc.dnsName
			}
			if !tc.when.IsZero() {
				when = tc.when
			}
			got, roots, err := VerifyIssued(&s, key.Public(), dnsName, when)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("VerifyIssued: %v", err)
			case tc.wantErr == "" && (roots != 2 || got.SerialNumber.Cmp(leaf.Certificate.SerialNumber) != 0):
				t.Errorf("VerifyIssued = serial %v, %d roots; want %v, 2", got.SerialNumber, roots, leaf.Certificate.SerialNumber)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("VerifyIssued: %v; want an error containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestAPIServiceAvailable(t *testing.T) {
	cond := func(status apiregistrationv1.ConditionStatus) *apiregistrationv1.APIService {
		return &apiregistrationv1.APIService{Status: apiregistrationv1.APIServiceStatus{Conditions: []apiregistrationv1.APIServiceCondition{
			{Type: apiregistrationv1.Available, Status: status, Reason: "FailedDiscoveryCheck", Message: "x509: certificate signed by unknown authority"},
		}}}
	}
	for _, tc := range []struct {
		name   string
		svc    *apiregistrationv1.APIService
		want   bool
		reason string
	}{
		{"available", cond(apiregistrationv1.ConditionTrue), true, ""},
		{"not available", cond(apiregistrationv1.ConditionFalse), false, "FailedDiscoveryCheck: x509: certificate signed by unknown authority"},
		{"no condition", &apiregistrationv1.APIService{}, false, "no Available condition yet"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok, why := APIServiceAvailable(tc.svc)
			if ok != tc.want || why != tc.reason {
				t.Errorf("APIServiceAvailable = %v, %q; want %v, %q", ok, why, tc.want, tc.reason)
			}
		})
	}
}

func TestDiscoveryProblem(t *testing.T) {
	list := func(names ...string) *metav1.APIResourceList {
		l := &metav1.APIResourceList{GroupVersion: groupVersion}
		for _, n := range names {
			l.APIResources = append(l.APIResources, metav1.APIResource{Name: n})
		}
		return l
	}
	for _, tc := range []struct {
		name string
		list *metav1.APIResourceList
		err  error
		want string
	}{
		{"served", list("certificateauthorities", "servingcertrequests", "servingcertrequests/servingcerts", "servingcertrequests/status"), nil, ""},
		{"error", nil, errors.New("the server is currently unable to handle the request"), "discovery of certapi.dev/v1alpha1: the server is currently unable to handle the request"},
		{"no subresource", list("servingcertrequests"), nil, "lists no servingcertrequests/servingcerts"},
		{"empty", list(), nil, "lists no servingcertrequests "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := DiscoveryProblem(tc.list, tc.err)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Errorf("DiscoveryProblem = %q; want %q", got, tc.want)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    options
		want string
	}{
		{"good", options{namespace: "certapi", name: "certapi-helm-test", service: "certapi-helm-test", timeout: time.Minute}, ""},
		{"no namespace", options{name: "a", service: "a", timeout: time.Minute}, "--namespace is required"},
		{"bad name", options{namespace: "certapi", name: "Helm_Test", service: "a", timeout: time.Minute}, `--name="Helm_Test"`},
		{"bad timeout", options{namespace: "certapi", name: "a", service: "a"}, "--timeout=0s: want a positive duration"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.o.validate()
			if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("validate() = %v; want %q", err, tc.want)
			}
		})
	}
}
