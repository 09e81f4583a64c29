package secretdelivery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/controller/status"
	"github.com/certapi/certapi/pkg/issuer"
	"github.com/certapi/certapi/pkg/metrics"
	"github.com/certapi/certapi/pkg/signer"
)

// maxNoteLength bounds the text of an Event (events.k8s.io allows 1 KiB).
const maxNoteLength = 1000

// errExists says that a create found the Secret a new request took for absent (see mayAssumeAbsent).
var errExists = errors.New("the Secret taken for absent exists")

// issued is a certificate just signed for a request, with its key, before it is written.
type issued struct {
	*issuer.Result
	keyPEM []byte
}

// issue generates a key of the request's algorithm and has the Authority sign a certificate for its
// Service, through the one issuance policy every path uses.
func (c *Controller) issue(req *certapiv1alpha1.ServingCertRequest) (*issued, error) {
	alg := req.Spec.KeyAlgorithm
	if alg == "" {
		alg = certapiv1alpha1.KeyAlgorithmECDSAP256
	}
	key, err := signer.GenerateKey(signer.KeyAlgorithm(alg))
	if err != nil {
		return nil, fmt.Errorf("generating the key for ServingCertRequest %s/%s: %w", req.Namespace, req.Name, err)
	}
	sign := issuer.RequestFor(req.Namespace, req.Name, &req.Spec)
	sign.PublicKey = key.Public()
	sign.Path = issuer.PathSecret
	res, err := c.authority.Sign(sign)
	if err != nil {
		return nil, fmt.Errorf("ServingCertRequest %s/%s: %w", req.Namespace, req.Name, err)
	}
	keyPEM, err := signer.EncodeKeyPEM(key)
	if err != nil {
		return nil, fmt.Errorf("ServingCertRequest %s/%s: %w", req.Namespace, req.Name, err)
	}
	return &issued{Result: res, keyPEM: keyPEM}, nil
}

// deliver issues a certificate for req and writes it into the request's Secret: a create when secret is
// nil, otherwise a patch guarded by the resourceVersion decide saw. Then it reports the delivery (status,
// Event, OnIssued) and returns the renewal time.
func (c *Controller) deliver(ctx context.Context, req *certapiv1alpha1.ServingCertRequest, secret *secretView,
	now time.Time, d decision) (time.Time, error) {
	key := keyOf(req)
	logger := klog.FromContext(ctx)
	cert, err := c.issue(req)
	if errors.Is(err, issuer.ErrNotLeading) {
		return time.Time{}, err // the term is ending
	}
	if err != nil {
		c.reportDenied(req, secret, err)
		return time.Time{}, err
	}
	written, err := c.write(ctx, req, secret, cert)
	if secret == nil && apierrors.IsAlreadyExists(err) && c.mustReadFirst(key) {
		return time.Time{}, errExists // taken for absent without a read, it exists: read it and decide again
	}
	if apierrors.IsForbidden(err) {
		// Reported as such, and retried with the queue's backoff (up to errorBackoffMax), not at once.
		c.reportNotDelivering(req, secret, status.ReasonSecretAccessForbidden, c.policy.Forbidden(req.Namespace, apiMessage(err)))
		return time.Time{}, err
	}
	if err != nil {
		if !apierrors.IsConflict(err) && !apierrors.IsAlreadyExists(err) && !apierrors.IsNotFound(err) {
			c.reportWriteFailure(req, secret, d, err, now)
		}
		return time.Time{}, err
	}

	metrics.Issuances.WithLabelValues(issuer.PathSecret, "issued").Inc()
	c.forgetConflict(key)
	c.status.RecordIssued(key, status.Issued{
		Certificate:  cert.CertificatePEM,
		CABundle:     cert.CABundle,
		SerialNumber: cert.SerialNumber,
		NotBefore:    cert.NotBefore,
		NotAfter:     cert.NotAfter,
		RenewalTime:  cert.RenewalTime,
		IssuedAt:     now,
	})
	c.status.SetReady(key, status.Ready{
		Status: metav1.ConditionTrue,
		Reason: status.ReasonIssued,
		Message: fmt.Sprintf("Secret %q holds certificate %s, valid until %s, renewal at %s",
			req.Spec.SecretName, cert.SerialNumber, formatTime(cert.NotAfter), formatTime(cert.RenewalTime)),
		Generation: req.Generation,
	})
	reason, action, verb := "Issued", "IssueCertificate", "Issued certificate into"
	if d.Renewal {
		reason, action, verb = "Renewed", "RenewCertificate", "Renewed certificate in"
	}
	c.recorder.Eventf(regarding(req), secretRef(&written.ObjectMeta), corev1.EventTypeNormal, reason, action, "%s",
		truncateNote(fmt.Sprintf("%s Secret %q: serial %s, valid until %s, renewal at %s (%s)",
			verb, req.Spec.SecretName, cert.SerialNumber, formatTime(cert.NotAfter), formatTime(cert.RenewalTime), d.Why)))
	logger.V(2).Info(reason+" certificate", "request", key, "secret", req.Spec.SecretName,
		"serial", cert.SerialNumber, "notAfter", cert.NotAfter, "renewalTime", cert.RenewalTime, "why", d.Why)
	return cert.RenewalTime, nil
}

// desiredSecret is the Secret certapi writes for req with cert: type kubernetes.io/tls, tls.crt, tls.key
// and ca.crt, the managed label and the annotations that describe the certificate.
func desiredSecret(req *certapiv1alpha1.ServingCertRequest, cert *issued) *corev1.Secret {
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: req.Namespace,
			Name:      req.Spec.SecretName,
			Labels:    map[string]string{certapiv1alpha1.LabelManaged: "true"},
			Annotations: map[string]string{
				certapiv1alpha1.AnnotationServingCertRequest:    req.Name,
				certapiv1alpha1.AnnotationServingCertRequestUID: string(req.UID),
				certapiv1alpha1.AnnotationSerialNumber:          cert.SerialNumber,
				certapiv1alpha1.AnnotationNotAfter:              formatTime(cert.NotAfter),
				certapiv1alpha1.AnnotationRenewalTime:           formatTime(cert.RenewalTime),
				certapiv1alpha1.AnnotationGeneration:            strconv.FormatInt(req.Generation, 10),
			},
		},
		Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{
			corev1.TLSCertKey:                 []byte(cert.CertificatePEM),
			corev1.TLSPrivateKeyKey:           cert.keyPEM,
			certapiv1alpha1.SecretKeyCABundle: []byte(cert.CABundle),
		},
	}
	if asked := req.Annotations[certapiv1alpha1.AnnotationRenewRequestedAt]; asked != "" {
		// The renewal this certificate answers: decide re-issues only for a value the Secret does not hold.
		s.Annotations[certapiv1alpha1.AnnotationRenewRequestedAt] = asked
	}
	return s
}

// write creates or patches the Secret with cert. It returns the Secret written, for its reference.
func (c *Controller) write(ctx context.Context, req *certapiv1alpha1.ServingCertRequest, secret *secretView,
	cert *issued) (*corev1.Secret, error) {
	secrets := c.kube.CoreV1().Secrets(req.Namespace)
	want := desiredSecret(req, cert)

	if secret == nil {
		// A create is atomic: if anyone (another request, a Helm chart) made the Secret meanwhile, it fails
		// with AlreadyExists and the retry sees that Secret.
		created, err := secrets.Create(ctx, want, metav1.CreateOptions{FieldManager: certapiv1alpha1.FieldManager})
		if err != nil {
			return nil, fmt.Errorf("creating Secret %s/%s: %w", want.Namespace, want.Name, err)
		}
		return created, nil
	}

	// A JSON merge patch of only certapi's keys, label and annotations, carrying the resourceVersion
	// decide saw: kube-apiserver refuses it (409) if the Secret changed since, for example if it was
	// handed to another request. Other data keys, labels and annotations (a Helm chart's) stay.
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{
			"resourceVersion": secret.ResourceVersion,
			"labels":          want.Labels,
			"annotations":     want.Annotations,
		},
		"data": want.Data,
	})
	if err != nil {
		return nil, fmt.Errorf("encoding the patch of Secret %s/%s: %w", want.Namespace, want.Name, err)
	}
	patched, err := secrets.Patch(ctx, want.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: certapiv1alpha1.FieldManager})
	if err != nil {
		return nil, fmt.Errorf("patching Secret %s/%s: %w", want.Namespace, want.Name, err)
	}
	return patched, nil
}

// recordUID adds the request's UID to a Secret that holds its current certificate but was written
// before certapi recorded UIDs (or handed over by name): a patch of that one annotation, guarded by the
// resourceVersion decide saw. Nothing else changes; the certificate is not re-issued.
func (c *Controller) recordUID(ctx context.Context, req *certapiv1alpha1.ServingCertRequest, secret *secretView) error {
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{
			"resourceVersion": secret.ResourceVersion,
			"annotations":     map[string]string{certapiv1alpha1.AnnotationServingCertRequestUID: string(req.UID)},
		},
	})
	if err != nil {
		return fmt.Errorf("encoding the patch of Secret %s/%s: %w", secret.Namespace, secret.Name, err)
	}
	if _, err := c.kube.CoreV1().Secrets(secret.Namespace).Patch(ctx, secret.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: certapiv1alpha1.FieldManager}); err != nil {
		return fmt.Errorf("recording the request's UID on Secret %s/%s: %w", secret.Namespace, secret.Name, err)
	}
	klog.FromContext(ctx).V(2).Info("Recorded the request's UID on its Secret", "request", keyOf(req), "secret", secret.Name)
	return nil
}

// reportDenied reports that certapi cannot sign for the request (its names are outside what the CA may
// sign, the CA has expired, ...): Ready=False, reason Denied, and a Warning Event once per message.
func (c *Controller) reportDenied(req *certapiv1alpha1.ServingCertRequest, secret *secretView, err error) {
	key := keyOf(req)
	msg := truncateNote(fmt.Sprintf("cannot issue a certificate for Secret %q: %v", req.Spec.SecretName, err))
	c.mu.Lock()
	same := c.reported[key] == msg
	c.reported[key] = msg
	c.mu.Unlock()
	c.status.SetReady(key, status.Ready{Status: metav1.ConditionFalse, Reason: status.ReasonDenied, Message: msg, Generation: req.Generation})
	if !same {
		c.recorder.Eventf(regarding(req), related(secret), corev1.EventTypeWarning, status.ReasonDenied, "IssueCertificate", "%s", msg)
	}
}

// reportWriteFailure reports a Secret write that failed (RBAC, a terminating namespace, an unreachable
// kube-apiserver...). While the certificate already in the Secret is valid the request stays Ready with
// reason Renewing; otherwise it is not Ready (Pending).
func (c *Controller) reportWriteFailure(req *certapiv1alpha1.ServingCertRequest, secret *secretView, d decision, err error, now time.Time) {
	ready := status.Ready{
		Status:     metav1.ConditionFalse,
		Reason:     status.ReasonPending,
		Message:    truncateNote(fmt.Sprintf("delivering a certificate into Secret %q failed, retrying: %v", req.Spec.SecretName, err)),
		Generation: req.Generation,
	}
	if d.Renewal && secret != nil {
		if notAfter, perr := time.Parse(time.RFC3339, secret.Annotations[certapiv1alpha1.AnnotationNotAfter]); perr == nil && now.Before(notAfter) {
			ready.Status = metav1.ConditionTrue
			ready.Reason = status.ReasonRenewing
			ready.Message = truncateNote(fmt.Sprintf("renewing the certificate in Secret %q (%s) failed, retrying; the current one is valid until %s: %v",
				req.Spec.SecretName, d.Why, formatTime(notAfter), err))
		}
	}
	c.status.SetReady(keyOf(req), ready)
}

func truncateNote(s string) string {
	if len(s) <= maxNoteLength {
		return s
	}
	return s[:maxNoteLength-3] + "..."
}
