package expiry

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/metrics"
)

func TestReadinessAndRenewer(t *testing.T) {
	ready := func(status metav1.ConditionStatus, reason string) []metav1.Condition {
		return []metav1.Condition{{Type: certapiv1alpha1.ConditionReady, Status: status, Reason: reason}}
	}
	for _, tc := range []struct {
		name        string
		secretName  string
		conditions  []metav1.Condition
		wantReady   bool
		wantReason  string
		wantRenewer string
	}{
		{name: "new servingcerts request, never called", wantRenewer: metrics.RenewerClient},
		{name: "issued through servingcerts", conditions: ready(metav1.ConditionTrue, "Issued"), wantReady: true, wantReason: "Issued", wantRenewer: metrics.RenewerClient},
		{name: "Secret pending", secretName: "tls", conditions: ready(metav1.ConditionFalse, "Pending"), wantReason: "Pending", wantRenewer: metrics.RenewerCertapi},
		{name: "Secret conflict", secretName: "tls", conditions: ready(metav1.ConditionFalse, "SecretConflict"), wantReason: "SecretConflict", wantRenewer: metrics.RenewerCertapi},
		{name: "Secret renewing, still valid", secretName: "tls", conditions: ready(metav1.ConditionTrue, "Renewing"), wantReady: true, wantReason: "Renewing", wantRenewer: metrics.RenewerCertapi},
		{name: "other conditions only", conditions: []metav1.Condition{{Type: "Other", Status: metav1.ConditionTrue, Reason: "X"}}, wantRenewer: metrics.RenewerClient},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &certapiv1alpha1.ServingCertRequest{
				Spec:   certapiv1alpha1.ServingCertRequestSpec{ServiceName: "web", SecretName: tc.secretName},
				Status: certapiv1alpha1.ServingCertRequestStatus{Conditions: tc.conditions},
			}
			if ok, reason := Readiness(r); ok != tc.wantReady || reason != tc.wantReason {
				t.Errorf("Readiness = %v, %q; want %v, %q", ok, reason, tc.wantReady, tc.wantReason)
			}
			if got := Renewer(r); got != tc.wantRenewer {
				t.Errorf("Renewer = %q; want %q", got, tc.wantRenewer)
			}
		})
	}
}
