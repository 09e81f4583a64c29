package secretdelivery

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/controller/status"
)

// markCurrent sets Ready=True when the Secret holds a current certificate and the request does not say
// so yet (after a conflict was resolved, or when a new leader takes over a request it never wrote).
func (c *Controller) markCurrent(req *certapiv1alpha1.ServingCertRequest, d decision) {
	c.forgetConflict(keyOf(req))
	cond := readyCondition(req)
	if cond != nil && cond.Status == metav1.ConditionTrue && cond.Reason == status.ReasonIssued && cond.ObservedGeneration == req.Generation {
		return
	}
	c.status.SetReady(keyOf(req), status.Ready{
		Status: metav1.ConditionTrue,
		Reason: status.ReasonIssued,
		Message: fmt.Sprintf("Secret %q holds certificate %s, valid until %s, renewal at %s",
			req.Spec.SecretName, d.Serial, formatTime(d.NotAfter), formatTime(d.RenewAt)),
		Generation: req.Generation,
	})
}

// reportConflict sets Ready=False with reason SecretConflict and records a Warning Event, once per
// distinct message: the retries that follow do not repeat it.
func (c *Controller) reportConflict(req *certapiv1alpha1.ServingCertRequest, secret *secretView, msg string) {
	c.reportNotDelivering(req, secret, status.ReasonSecretConflict, msg)
}

// reportNotDelivering sets Ready=False with reason (SecretConflict, NamespaceNotOptedIn,
// SecretAccessForbidden) and msg, and records a Warning Event, once per distinct message: the retries
// that follow do not repeat it.
func (c *Controller) reportNotDelivering(req *certapiv1alpha1.ServingCertRequest, secret *secretView, reason, msg string) {
	key := keyOf(req)
	msg = truncateNote(msg)
	c.mu.Lock()
	same := c.reported[key] == msg
	c.reported[key] = msg
	c.mu.Unlock()
	cond := readyCondition(req)
	if same && cond != nil && cond.Reason == reason && cond.Message == msg && cond.ObservedGeneration == req.Generation {
		return
	}
	c.status.SetReady(key, status.Ready{
		Status:     metav1.ConditionFalse,
		Reason:     reason,
		Message:    msg,
		Generation: req.Generation,
	})
	if !same {
		c.recorder.Eventf(regarding(req), related(secret), corev1.EventTypeWarning, reason, "DeliverCertificate", "%s", msg)
	}
}

// clearStaleConflict replaces a SecretConflict, NamespaceNotOptedIn or SecretAccessForbidden condition
// on a request whose spec.secretName was removed: there is no Secret to deliver any more.
func (c *Controller) clearStaleConflict(req *certapiv1alpha1.ServingCertRequest) {
	c.forgetConflict(keyOf(req))
	cond := readyCondition(req)
	if cond == nil || !notDelivering(cond.Reason) {
		return
	}
	ready := status.Ready{
		Status:     metav1.ConditionFalse,
		Reason:     status.ReasonPending,
		Message:    "spec.secretName is unset; no certificate has been issued through the servingcerts subresource yet",
		Generation: req.Generation,
	}
	if na := req.Status.NotAfter; req.Status.SerialNumber != "" && na != nil && c.clock.Now().Before(na.Time) {
		ready = status.Ready{
			Status:     metav1.ConditionTrue,
			Reason:     status.ReasonIssued,
			Message:    fmt.Sprintf("spec.secretName is unset; certificate %s was issued, valid until %s", req.Status.SerialNumber, formatTime(na.Time)),
			Generation: req.Generation,
		}
	}
	c.status.SetReady(keyOf(req), ready)
}

// forgetConflict drops the conflict remembered for key, that its Secret must be read first, and the
// watch of that Secret.
func (c *Controller) forgetConflict(key types.NamespacedName) {
	c.mu.Lock()
	delete(c.reported, key)
	delete(c.readFirst, key)
	c.mu.Unlock()
	c.conflicts.release(key)
}

func readyCondition(req *certapiv1alpha1.ServingCertRequest) *metav1.Condition {
	return meta.FindStatusCondition(req.Status.Conditions, certapiv1alpha1.ConditionReady)
}

func readyReason(req *certapiv1alpha1.ServingCertRequest) string {
	if cond := readyCondition(req); cond != nil {
		return cond.Reason
	}
	return ""
}

// regarding is the object an Event is about: the request, with its kind set so that any recorder's
// scheme can make a reference to it (informer objects carry no TypeMeta).
func regarding(req *certapiv1alpha1.ServingCertRequest) *certapiv1alpha1.ServingCertRequest {
	return &certapiv1alpha1.ServingCertRequest{
		TypeMeta: metav1.TypeMeta{APIVersion: certapiv1alpha1.SchemeGroupVersion.String(), Kind: "ServingCertRequest"},
		ObjectMeta: metav1.ObjectMeta{
			Namespace:       req.Namespace,
			Name:            req.Name,
			UID:             req.UID,
			ResourceVersion: req.ResourceVersion,
		},
	}
}

// related is the Secret an Event also concerns, by reference only: never its data. nil when there is
// no Secret (an untyped nil: a typed nil pointer would make the recorder panic).
func related(s *secretView) runtime.Object {
	if s == nil {
		return nil
	}
	return secretRef(&s.ObjectMeta)
}

// secretRef is a reference to the Secret m describes, for an Event.
func secretRef(m *metav1.ObjectMeta) runtime.Object {
	return &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Namespace: m.Namespace, Name: m.Name, UID: m.UID},
	}
}

func formatTime(t time.Time) string {
	return t.UTC().Format(time.RFC3339)
}
