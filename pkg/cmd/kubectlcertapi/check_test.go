package kubectlcertapi

import (
	"bytes"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/signer"
)

func TestCheck(t *testing.T) {
	active := newCA(t, t0.Add(-24*time.Hour), 365*24*time.Hour)
	older := newCA(t, t0.Add(-24*time.Hour), 365*24*time.Hour)
	ca := caObject(idle(), nil, caEntry(active, "Active"))
	apiService := func(available apiregistrationv1.ConditionStatus, bundle []byte, skip bool) *apiregistrationv1.APIService {
		s := &apiregistrationv1.APIService{ObjectMeta: metav1.ObjectMeta{Name: apiServiceName},
			Spec: apiregistrationv1.APIServiceSpec{Group: "certapi.dev", Version: "v1alpha1", CABundle: bundle, InsecureSkipTLSVerify: skip,
				Service: &apiregistrationv1.ServiceReference{Namespace: "certapi-system", Name: "certapi"}}}
		if available != "" {
			s.Status.Conditions = []apiregistrationv1.APIServiceCondition{{Type: apiregistrationv1.Available, Status: available, Reason: "FailedDiscoveryCheck", Message: "no response"}}
		}
		return s
	}
	bundle := signer.EncodeBundle(active.Certificate)
	healthy := CheckInput{CA: ca, APIService: apiService("True", bundle, false), Now: t0}

	for _, tc := range []struct {
		name    string
		change  func(*CheckInput)
		failing []string
		detail  string
		// waitsOnCA: only a change of CertificateAuthority/default mends the failures, so check --wait
		// reads again on the CA's watch alone (pollNeeded is false while the watch follows the CA).
		waitsOnCA bool
	}{
		{name: "healthy", change: func(*CheckInput) {}},
		{name: "discovery fails", change: func(in *CheckInput) {
			in.DiscoveryErr = errFake("the server is currently unable to handle the request")
		},
			failing: []string{checkAPI}, detail: "discovery of certapi.dev/v1alpha1 through kube-apiserver failed: the server is currently unable"},
		{name: "the read fails: the certificate is not verified either", change: func(in *CheckInput) { in.CA, in.CAErr = nil, errFake("x509: certificate signed by unknown authority") },
			failing: []string{checkAPI, checkLeader, checkCertificate}, detail: "x509: certificate signed by unknown authority"},
		{name: "APIService not available", change: func(in *CheckInput) { in.APIService = apiService("False", bundle, false) },
			failing: []string{checkAPIService}, detail: "is not Available: FailedDiscoveryCheck: no response"},
		{name: "APIService without conditions", change: func(in *CheckInput) { in.APIService = apiService("", bundle, false) },
			failing: []string{checkAPIService}, detail: "has no Available condition yet"},
		{name: "no leader", change: func(in *CheckInput) { in.CA = withLeader(ca, certapiv1alpha1.LeaderStateNone, "") },
			failing: []string{checkLeader}, detail: "no certapi replica leads"},
		{name: "election unreadable", change: func(in *CheckInput) { in.CA = withLeader(ca, certapiv1alpha1.LeaderStateUnknown, "") },
			failing: []string{checkLeader}, detail: "could not read its leader election"},
		{name: "a certapi older than the plugin", change: func(in *CheckInput) { in.CA = ca.DeepCopy(); in.CA.Status.Leader = nil },
			failing: []string{checkLeader}, detail: "has no status.leader: certapi is older than this plugin"},
		{name: "verification off", change: func(in *CheckInput) { in.APIService = apiService("True", nil, true) },
			failing: []string{checkCertificate}, detail: "sets insecureSkipTLSVerify"},
		{name: "no caBundle", change: func(in *CheckInput) { in.APIService = apiService("True", nil, false) },
			failing: []string{checkCertificate}, detail: "has no caBundle"},
		{name: "a stale caBundle", change: func(in *CheckInput) {
			in.APIService = apiService("True", signer.EncodeBundle(older.Certificate), false)
		},
			failing: []string{checkCertificate}, detail: "caBundle lacks the Active CA " + serial(active)},
		{name: "an expired CA", change: func(in *CheckInput) { in.Now = active.Certificate.NotAfter },
			failing: []string{checkCertificate}, detail: "expired at", waitsOnCA: true},
		{name: "no Active CA yet", change: func(in *CheckInput) { in.CA = caObject(idle(), nil) },
			failing: []string{checkCertificate}, detail: "names no Active CA yet", waitsOnCA: true},
		{name: "no CertificateAuthority yet", change: func(in *CheckInput) {
			in.CA, in.CAErr = nil, apierrors.NewNotFound(schema.GroupResource{Group: "certapi.dev", Resource: "certificateauthorities"}, "default")
		},
			failing: []string{checkAPI, checkLeader, checkCertificate}, detail: "does not exist yet", waitsOnCA: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := healthy
			tc.change(&in)
			results := Check(in)
			if len(results) != 4 {
				t.Fatalf("%d results, want 4", len(results))
			}
			if got := strings.Join(failing(results), ","); got != strings.Join(tc.failing, ",") {
				t.Fatalf("failing %q, want %q: %+v", got, tc.failing, results)
			}
			var details []string
			for _, r := range results {
				details = append(details, r.Detail)
			}
			if !strings.Contains(strings.Join(details, "\n"), tc.detail) {
				t.Errorf("details %q lack %q", details, tc.detail)
			}
			if len(tc.failing) == 0 {
				return
			}
			if got := pollNeeded(results, true); got == tc.waitsOnCA {
				t.Errorf("pollNeeded with the CA followed = %v, want %v", got, !tc.waitsOnCA)
			}
			if !pollNeeded(results, false) {
				t.Error("pollNeeded without the CA followed = false: nothing would wake check --wait")
			}
		})
	}

	var out bytes.Buffer
	if err := PrintChecks(&out, Check(healthy)); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"CHECK                 RESULT   DETAIL",
		"API served            ok       kube-apiserver serves certapi.dev/v1alpha1 from certapi",
		"leader                ok       certapi-0 leads",
		"serving certificate   ok       kube-apiserver verified certapi's certificate for certapi.certapi-system.svc",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

func withLeader(ca *certapiv1alpha1.CertificateAuthority, state certapiv1alpha1.LeaderState, identity string) *certapiv1alpha1.CertificateAuthority {
	ca = ca.DeepCopy()
	ca.Status.Leader = &certapiv1alpha1.CertificateAuthorityLeader{State: state, Identity: identity}
	return ca
}

// TestLeaderIdentity: the plugins learn who leads from status.leader, and say why no one is known.
func TestLeaderIdentity(t *testing.T) {
	for _, tc := range []struct {
		name    string
		leader  *certapiv1alpha1.CertificateAuthorityLeader
		want    string
		wantErr string
	}{
		{"a leader", &certapiv1alpha1.CertificateAuthorityLeader{State: certapiv1alpha1.LeaderStateElected, Identity: "certapi-1"}, "certapi-1", ""},
		{"none", &certapiv1alpha1.CertificateAuthorityLeader{State: certapiv1alpha1.LeaderStateNone}, "", "no certapi replica leads"},
		{"unknown", &certapiv1alpha1.CertificateAuthorityLeader{State: certapiv1alpha1.LeaderStateUnknown}, "", "could not read its leader election"},
		{"elected without an identity", &certapiv1alpha1.CertificateAuthorityLeader{State: certapiv1alpha1.LeaderStateElected}, "", `state "Elected", identity ""`},
		{"a state from a newer certapi", &certapiv1alpha1.CertificateAuthorityLeader{State: "Handing"}, "", `state "Handing"`},
		{"an older certapi", nil, "", "has no status.leader: certapi is older than this plugin"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := leaderIdentity(&certapiv1alpha1.CertificateAuthority{Status: certapiv1alpha1.CertificateAuthorityStatus{Leader: tc.leader}})
			if got != tc.want || (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("leaderIdentity = %q, %v; want %q, %q", got, err, tc.want, tc.wantErr)
			}
		})
	}
}
