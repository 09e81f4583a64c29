package secretdelivery

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/controller"
	"github.com/certapi/certapi/pkg/controller/status"
)

// sync brings one request's Secret up to date.
func (c *Controller) sync(ctx context.Context, key types.NamespacedName) (controller.Result, error) {
	res, conflict, err := c.syncRequest(ctx, key)
	if conflict {
		// Nothing will push a change of this Secret (see maxConflictWatches): look again with a backoff
		// of the request's own, besides at once on any change to the request.
		res.After = c.conflictBackoff.When(key)
	} else if err == nil {
		c.conflictBackoff.Forget(key)
	}
	return res, err
}

// syncRequest brings one request's Secret up to date; conflict says it is in conflict with a Secret
// whose changes nothing pushes, so that it must be looked at again on a timer.
func (c *Controller) syncRequest(ctx context.Context, key types.NamespacedName) (res controller.Result, conflict bool, err error) {
	res, conflict, err = c.syncOnce(ctx, key)
	if errors.Is(err, errExists) {
		// A new request's Secret, taken for absent, exists (a chart shipped it, or another owner has the
		// name): read it and decide again now, rather than after a retry's backoff.
		res, conflict, err = c.syncOnce(ctx, key)
	}
	return res, conflict, err
}

// syncOnce is one look at a request and its Secret.
func (c *Controller) syncOnce(ctx context.Context, key types.NamespacedName) (res controller.Result, conflict bool, err error) {
	req, err := c.requests.ServingCertRequests(key.Namespace).Get(key.Name)
	if apierrors.IsNotFound(err) {
		c.forgetConflict(key) // deleted: its Secret stays, no longer renewed
		return res, false, nil
	}
	if err != nil {
		return res, false, fmt.Errorf("getting ServingCertRequest %s from the cache: %w", key, err)
	}
	if req.DeletionTimestamp != nil {
		return res, false, nil
	}
	if req.Spec.SecretName == "" {
		c.clearStaleConflict(req)
		return res, false, nil
	}
	access := c.secrets.access(req.Namespace)
	switch decideAccess(access) {
	case accessNotOptedIn:
		c.reportNotDelivering(req, nil, status.ReasonNamespaceNotOptedIn, c.policy.NotOptedIn(req.Namespace))
		return res, false, nil // the namespace's label enqueues it again
	case accessForbidden:
		c.reportNotDelivering(req, nil, status.ReasonSecretAccessForbidden, c.policy.Forbidden(req.Namespace, access.Forbidden))
		return res, false, nil // the namespace's cache, once it syncs, enqueues it again
	case accessWait:
		return res, false, nil // likewise
	}
	ca, bundle, ok := c.authority.Signing()
	if !ok || ca == nil {
		c.waitForSigning(key)
		return res, false, nil
	}
	secret, err := c.getSecret(ctx, req)
	if apierrors.IsForbidden(err) {
		c.reportNotDelivering(req, nil, status.ReasonSecretAccessForbidden, c.policy.Forbidden(req.Namespace, apiMessage(err)))
	}
	if err != nil {
		return res, false, err
	}
	now := c.clock.Now()
	d := decide(decideInput{
		Request:       req,
		Secret:        secret,
		CA:            ca.Certificate,
		Bundle:        bundle,
		ClusterDomain: c.clusterDomain,
		Now:           now,

		RecordedUIDExists: c.recordedUIDExists(req, secret),
	})
	klog.FromContext(ctx).V(4).Info("Decided", "request", key, "secret", req.Spec.SecretName, "action", d.Action, "why", d.Why)
	switch d.Action {
	case actionNone:
		c.markCurrent(req, d)
		return controller.Result{After: d.RenewAt.Sub(now)}, false, nil
	case actionRecordUID:
		if err := c.recordUID(ctx, req, secret); err != nil {
			return res, false, err
		}
		c.markCurrent(req, d)
		return controller.Result{After: d.RenewAt.Sub(now)}, false, nil
	case actionConflict:
		c.reportConflict(req, secret, d.Conflict)
		// A certapi Secret is in the cache, whose events wake the request; any other is watched.
		if c.cachedSecret(secret.Namespace, secret.Name) != nil || c.conflicts.watch(ctx, key, secret) {
			return res, false, nil
		}
		return res, true, nil
	case actionCreate, actionIssue:
		renewAt, err := c.deliver(ctx, req, secret, now, d)
		if err != nil {
			return res, false, err
		}
		return controller.Result{After: renewAt.Sub(now)}, false, nil
	}
	return res, false, nil
}

// getSecret returns the secretView of the Secret req names, or nil when it does not exist. A certapi
// Secret comes from the cache; any other is read directly, since the cache holds only certapi's, except
// for a new request (see mayAssumeAbsent), whose Secret is taken for absent without a read.
func (c *Controller) getSecret(ctx context.Context, req *certapiv1alpha1.ServingCertRequest) (*secretView, error) {
	namespace, name := req.Namespace, req.Spec.SecretName
	if v := c.cachedSecret(namespace, name); v != nil {
		return v, nil
	}
	if c.mayAssumeAbsent(req) {
		return nil, nil
	}
	s, err := c.kube.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("getting Secret %s/%s: %w", namespace, name, err)
	}
	return viewOf(s), nil
}

// mayAssumeAbsent reports whether the Secret of req, not in the cache, may be taken for absent without
// reading it: req has never been issued a certificate nor given a Ready condition (it was just
// created), and no create for it has found a Secret of that name yet. Then the create that follows
// costs no read of kube-apiserver, and a Secret that does exist (a Helm chart's, another owner's) makes
// it fail with AlreadyExists, after which the request's Secret is read before every write. All that
// costs is the certificate signed for that create, which nobody ever sees.
func (c *Controller) mayAssumeAbsent(req *certapiv1alpha1.ServingCertRequest) bool {
	if req.Status.SerialNumber != "" || len(req.Status.Conditions) > 0 {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	_, read := c.readFirst[keyOf(req)]
	_, reported := c.reported[keyOf(req)]
	return !read && !reported
}

// mustReadFirst records that the Secret of key exists although its request took it for absent, and
// reports whether that is news.
func (c *Controller) mustReadFirst(key types.NamespacedName) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.readFirst[key]; ok {
		return false
	}
	c.readFirst[key] = struct{}{}
	return true
}

// cachedSecret returns the cache's view of namespace/name, nil when it holds none.
func (c *Controller) cachedSecret(namespace, name string) *secretView {
	return c.secrets.get(namespace, name)
}

// apiMessage is kube-apiserver's message in err, or err's text.
func apiMessage(err error) string {
	var status apierrors.APIStatus
	if errors.As(err, &status) && status.Status().Message != "" {
		return status.Status().Message
	}
	return err.Error()
}

// recordedUIDExists reports whether the Secret s records the UID of a ServingCertRequest other than req
// that exists in the cache: then s is that request's, whatever name it is annotated with. It lists the
// namespace's requests only when s records a UID that is not req's, which adoption ends.
func (c *Controller) recordedUIDExists(req *certapiv1alpha1.ServingCertRequest, s *secretView) bool {
	if s == nil {
		return false
	}
	uid := s.Annotations[certapiv1alpha1.AnnotationServingCertRequestUID]
	if uid == "" || uid == string(req.UID) {
		return false
	}
	all, err := c.requests.ServingCertRequests(req.Namespace).List(labels.Everything())
	if err != nil {
		return true // cannot tell: leave the Secret alone, as a conflict, until the next look
	}
	for _, r := range all {
		if string(r.UID) == uid {
			return true
		}
	}
	return false
}
