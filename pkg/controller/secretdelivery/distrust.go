package secretdelivery

import (
	"crypto/x509"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
)

// Distrust tallies the labelled Secrets for a pending distrust against the Active CA active (see
// tallyDistrust): what the distrust waits for and what it does not. ok is false until the caches have
// synced. It parses nothing (the cache holds each certificate's summary) and is called only while a
// distrust is pending.
func (c *Controller) Distrust(active *x509.Certificate) (tally DistrustTally, ok bool) {
	if c.secretInformer == nil || !c.secretInformer.HasSynced() || !c.requestInformer.HasSynced() {
		return tally, false
	}
	objs := c.secretInformer.GetStore().List()
	secrets := make([]*secretView, 0, len(objs))
	for _, obj := range objs {
		if s, ok := obj.(*secretView); ok {
			secrets = append(secrets, s)
		}
	}
	return tallyDistrust(secrets, func(namespace, name string) *certapiv1alpha1.ServingCertRequest {
		req, err := c.requests.ServingCertRequests(namespace).Get(name)
		if err != nil {
			return nil
		}
		return req
	}, active.SubjectKeyId), true
}
