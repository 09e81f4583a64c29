package e2etest

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/generated/clientset/versioned"
	"github.com/certapi/certapi/pkg/signer"
)

// PendingRequest waits for CertificateAuthority/default to publish a pending CA certificate request made
// for reason, with its AwaitingSignature condition, and returns it.
func PendingRequest(t testing.TB, c versioned.Interface, reason signer.PendingReason) *certapiv1alpha1.CertificateAuthorityPendingRequest {
	t.Helper()
	var p *certapiv1alpha1.CertificateAuthorityPendingRequest
	Eventually(t, 30*time.Second, "a pending CA certificate request ("+string(reason)+") in status", func(context.Context) (bool, error) {
		ca := CAObject(t, c)
		p = ca.Status.PendingRequest
		cond := meta.FindStatusCondition(ca.Status.Conditions, certapiv1alpha1.ConditionAwaitingSignature)
		return p != nil && p.Reason == string(reason) && cond != nil && cond.Status == metav1.ConditionTrue && cond.Reason == string(reason), nil
	})
	return p
}
