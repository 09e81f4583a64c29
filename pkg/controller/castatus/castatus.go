// Package castatus keeps CertificateAuthority/default, the CA's public face, in step with the CA the leader
// signs with: it creates the object on first start and writes its status.
package castatus

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/generated/clientset/versioned"
	"github.com/certapi/certapi/pkg/issuer"
	"github.com/certapi/certapi/pkg/metrics"
	"github.com/certapi/certapi/pkg/signer"
)

// Name is the only CertificateAuthority.
const Name = "default"

// Run writes the CertificateAuthority until ctx ends, retrying with backoff until the write succeeds and
// again every resync period, so a status edited by hand is put back.
func Run(ctx context.Context, client versioned.Interface, auth issuer.Authority) {
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		backoff := wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Steps: 8, Cap: 10 * time.Second}
		_ = wait.ExponentialBackoffWithContext(ctx, backoff, func(ctx context.Context) (bool, error) {
			if err := sync(ctx, client, auth); err != nil {
				klog.FromContext(ctx).Error(err, "Updating CertificateAuthority/default")
				return false, nil
			}
			return true, nil
		})
	}, time.Minute)
}

func sync(ctx context.Context, client versioned.Interface, auth issuer.Authority) error {
	ca, bundle, ok := auth.Signing()
	if !ok {
		return nil
	}
	cas := client.CertapiV1alpha1().CertificateAuthorities()
	obj, err := cas.Get(ctx, Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		obj, err = cas.Create(ctx, &certapiv1alpha1.CertificateAuthority{ObjectMeta: metav1.ObjectMeta{Name: Name}}, metav1.CreateOptions{FieldManager: "certapi"})
	}
	if err != nil {
		return err
	}
	cert := ca.Certificate
	ref := certapiv1alpha1.CertificateAuthorityRef{SerialNumber: signer.FormatSerialNumber(cert.SerialNumber), SubjectKeyID: ca.SubjectKeyID()}
	want := obj.DeepCopy()
	want.Status.CABundle = string(bundle)
	want.Status.Active = &ref
	want.Status.ObservedGeneration = obj.Generation
	want.Status.Certificates = []certapiv1alpha1.CertificateAuthorityCertificate{{
		CertificateAuthorityRef: ref,
		Role:                    certapiv1alpha1.CARoleActive,
		NotBefore:               metav1.NewTime(cert.NotBefore),
		NotAfter:                metav1.NewTime(cert.NotAfter),
	}}
	meta.SetStatusCondition(&want.Status.Conditions, metav1.Condition{
		Type: "Ready", Status: metav1.ConditionTrue, Reason: "Signing", ObservedGeneration: obj.Generation,
		Message: "the Active CA " + ref.SerialNumber + " signs; it expires " + cert.NotAfter.UTC().Format(time.RFC3339),
	})
	if meta.FindStatusCondition(want.Status.Conditions, "Rotating") == nil {
		meta.SetStatusCondition(&want.Status.Conditions, metav1.Condition{
			Type: "Rotating", Status: metav1.ConditionFalse, Reason: "Idle", ObservedGeneration: obj.Generation, Message: "no rotation is running",
		})
	}
	metrics.CANotAfter.WithLabelValues(string(certapiv1alpha1.CARoleActive)).Set(float64(cert.NotAfter.Unix()))
	if equalStatus(obj.Status, want.Status) {
		return nil
	}
	_, err = cas.UpdateStatus(ctx, want, metav1.UpdateOptions{FieldManager: "certapi"})
	return err
}

func equalStatus(a, b certapiv1alpha1.CertificateAuthorityStatus) bool {
	return a.CABundle == b.CABundle && a.Active != nil && b.Active != nil && *a.Active == *b.Active &&
		a.ObservedGeneration == b.ObservedGeneration && len(a.Certificates) == len(b.Certificates) &&
		len(a.Conditions) == len(b.Conditions)
}
