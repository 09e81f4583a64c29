package createscr

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
)

func TestReadiness(t *testing.T) {
	withReady := func(generation int64, secret string, cond *metav1.Condition) *certapiv1alpha1.ServingCertRequest {
		obj := &certapiv1alpha1.ServingCertRequest{
			ObjectMeta: metav1.ObjectMeta{Name: "a", Generation: generation},
			Spec:       certapiv1alpha1.ServingCertRequestSpec{ServiceName: "svc", SecretName: secret},
		}
		if cond != nil {
			obj.Status.Conditions = []metav1.Condition{*cond}
		}
		return obj
	}
	for _, tc := range []struct {
		name      string
		obj       *certapiv1alpha1.ServingCertRequest
		wantReady bool
		wantDesc  string
	}{{
		name:     "no condition, no secret: says how it becomes Ready",
		obj:      withReady(1, "", nil),
		wantDesc: "it has no Ready condition yet; without --secret a request becomes Ready when a certificate is first issued through its servingcerts subresource",
	}, {
		name:     "no condition, with a secret",
		obj:      withReady(1, "tls", nil),
		wantDesc: "it has no Ready condition yet",
	}, {
		name:      "ready",
		obj:       withReady(1, "tls", &metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Issued", Message: "certificate 0a issued", ObservedGeneration: 1}),
		wantReady: true,
		wantDesc:  "Ready=True, reason Issued: certificate 0a issued",
	}, {
		name:     "not ready: the reason and message",
		obj:      withReady(1, "tls", &metav1.Condition{Type: "Ready", Status: metav1.ConditionFalse, Reason: "SecretConflict", Message: "Secret tls is not certapi's", ObservedGeneration: 1}),
		wantDesc: "Ready=False, reason SecretConflict: Secret tls is not certapi's",
	}, {
		name:     "ready for an older generation is not ready",
		obj:      withReady(2, "tls", &metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Issued", ObservedGeneration: 1}),
		wantDesc: "Ready=True, reason Issued (about generation 1; the request is at generation 2)",
	}, {
		name:      "a condition without observedGeneration counts",
		obj:       withReady(3, "", &metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue}),
		wantReady: true,
		wantDesc:  "Ready=True",
	}, {
		name:     "other conditions are not Ready",
		obj:      withReady(1, "tls", &metav1.Condition{Type: "Renewing", Status: metav1.ConditionTrue}),
		wantDesc: "it has no Ready condition yet",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			ready, desc := readiness(tc.obj)
			if ready != tc.wantReady || desc != tc.wantDesc {
				t.Fatalf("readiness = %v, %q; want %v, %q", ready, desc, tc.wantReady, tc.wantDesc)
			}
			if strings.Contains(desc, "\n") {
				t.Fatalf("description spans lines: %q", desc)
			}
		})
	}
}
