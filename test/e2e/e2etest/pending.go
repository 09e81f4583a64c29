package e2etest

import (
	"context"
	"fmt"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

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

// SignCSR approves csr and sets its certificate certPEM, as the organisation's approver and signer would:
// a signer of certapi's CA certificates for a test that plays the organisation.
func SignCSR(ctx context.Context, kube kubernetes.Interface, csr *certificatesv1.CertificateSigningRequest, certPEM []byte) error {
	csrs := kube.CertificatesV1().CertificateSigningRequests()
	csr = csr.DeepCopy()
	csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "OrgApproved", Message: "approved by the test"})
	approved, err := csrs.UpdateApproval(ctx, csr.Name, csr, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("approving CertificateSigningRequest %s: %w", csr.Name, err)
	}
	approved.Status.Certificate = certPEM
	if _, err := csrs.UpdateStatus(ctx, approved, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("signing CertificateSigningRequest %s: %w", csr.Name, err)
	}
	return nil
}
