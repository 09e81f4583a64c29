package podcert

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"fmt"
	"strings"
	"testing"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
)

func TestTrimUserAnnotations(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	blob := strings.Repeat("x", 250*1024)
	many := map[string]string{certapiv1alpha1.UserAnnotationServingCertRequest: "web"}
	for i := range 20 {
		many[fmt.Sprintf("example.com/k%02d", i)] = blob[:10*1024]
	}
	cases := []struct {
		name string
		in   map[string]string
		want map[string]string
		// inMessage must appear in the denial made from the trimmed map ("" for no denial).
		inMessage string
	}{
		{name: "none", in: nil, want: nil},
		{name: "only the request name", in: map[string]string{certapiv1alpha1.UserAnnotationServingCertRequest: "web"},
			want: map[string]string{certapiv1alpha1.UserAnnotationServingCertRequest: "web"}},
		{name: "a 250 KiB request name is cut to one past the longest valid name",
			in:        map[string]string{certapiv1alpha1.UserAnnotationServingCertRequest: blob},
			want:      map[string]string{certapiv1alpha1.UserAnnotationServingCertRequest: blob[:254]},
			inMessage: "no more than 253"},
		{name: "an unknown key keeps its name, not its 250 KiB value",
			in:        map[string]string{certapiv1alpha1.UserAnnotationServingCertRequest: "web", "example.com/tenant": blob},
			want:      map[string]string{certapiv1alpha1.UserAnnotationServingCertRequest: "web", "example.com/tenant": ""},
			inMessage: `unknown userAnnotations key(s) "example.com/tenant"`},
		{name: "only unknown keys", in: map[string]string{"example.com/tenant": blob},
			want:      map[string]string{"example.com/tenant": ""},
			inMessage: `"example.com/tenant"`},
		{name: "twenty unknown keys: the first eight by name and how many more",
			in: many,
			want: map[string]string{certapiv1alpha1.UserAnnotationServingCertRequest: "web",
				"example.com/k00": "", "example.com/k01": "", "example.com/k02": "", "example.com/k03": "",
				"example.com/k04": "", "example.com/k05": "", "example.com/k06": "", "example.com/k07": "", "…and 12 more": ""},
			inMessage: `"example.com/k07", "…and 12 more"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := TrimUserAnnotations(tc.in)
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			// Decide decides the same on the trimmed annotations as on the original ones.
			in := fixture(t, key)
			in.PCR.Spec.UnverifiedUserAnnotations = tc.in
			orig := Decide(in)
			in.PCR.Spec.UnverifiedUserAnnotations = got
			trimmed := Decide(in)
			if orig.Deny != trimmed.Deny || orig.Wait != trimmed.Wait || orig.Reason != trimmed.Reason {
				t.Errorf("Decide on the original: deny=%v wait=%v %s; on the trimmed: deny=%v wait=%v %s",
					orig.Deny, orig.Wait, orig.Reason, trimmed.Deny, trimmed.Wait, trimmed.Reason)
			}
			if tc.inMessage != "" && (!trimmed.Deny || !strings.Contains(trimmed.Message, tc.inMessage)) {
				t.Errorf("denial from the trimmed annotations: %v %q; want one that says %q", trimmed.Deny, trimmed.Message, tc.inMessage)
			}
			if tc.inMessage == "" && tc.in != nil && trimmed.Deny {
				t.Errorf("denied after trimming: %s", trimmed.Message)
			}
		})
	}
}

func TestTrim(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	blob := strings.Repeat("x", 100*1024)
	pending := func() *certificatesv1.PodCertificateRequest {
		pcr := fixture(t, key).PCR
		pcr.ResourceVersion = "5"
		pcr.Labels = map[string]string{"l": blob}
		pcr.Annotations = map[string]string{"a": blob}
		pcr.Finalizers = []string{"example.com/f"}
		pcr.OwnerReferences = []metav1.OwnerReference{{Kind: "Pod", Name: "web-0"}}
		pcr.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}
		pcr.Spec.UnverifiedUserAnnotations["example.com/tenant"] = blob
		return pcr
	}
	answeredPCR := pending()
	answeredPCR.Status = certificatesv1.PodCertificateRequestStatus{CertificateChain: "chain",
		Conditions: []metav1.Condition{{Type: certificatesv1.PodCertificateRequestConditionTypeIssued, Status: metav1.ConditionTrue}}}
	cases := []struct {
		name     string
		in       *certificatesv1.PodCertificateRequest
		wantUser map[string]string
		wantStub bool
	}{
		{name: "pending: the stub stays, userAnnotations cut to what Decide reads", in: pending(),
			wantUser: map[string]string{certapiv1alpha1.UserAnnotationServingCertRequest: "web", "example.com/tenant": ""}, wantStub: true},
		{name: "answered: stub, certificate and userAnnotations go", in: answeredPCR},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, err := trim(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			pcr := out.(*certificatesv1.PodCertificateRequest)
			if pcr.Labels != nil || pcr.Annotations != nil || pcr.Finalizers != nil || pcr.OwnerReferences != nil || pcr.ManagedFields != nil {
				t.Errorf("metadata kept: %+v", pcr.ObjectMeta)
			}
			if pcr.ResourceVersion != "5" || pcr.Name != "req-abc" || pcr.Spec.PodName != "web-0" {
				t.Errorf("what the signer needs was dropped: %+v", pcr)
			}
			if fmt.Sprint(pcr.Spec.UnverifiedUserAnnotations) != fmt.Sprint(tc.wantUser) {
				t.Errorf("userAnnotations %v, want %v", pcr.Spec.UnverifiedUserAnnotations, tc.wantUser)
			}
			if (pcr.Spec.StubPKCS10Request != nil) != tc.wantStub || pcr.Status.CertificateChain != "" {
				t.Errorf("stub kept %v (want %v), certificate %q", pcr.Spec.StubPKCS10Request != nil, tc.wantStub, pcr.Status.CertificateChain)
			}
		})
	}
}
