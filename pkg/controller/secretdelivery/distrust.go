package secretdelivery

import (
	"crypto/x509"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
)

// Distrust tallies the labelled Secrets for a pending distrust against the Active CA active (see
// tallyDistrust): what the distrust waits for and what it does not. ok is false until the caches have
// synced (in the labelled-namespaces scope, every opted-in namespace's cache that kube-apiserver does not
// refuse: a namespace certapi may not read holds nothing it could re-issue). It parses nothing (the cache holds each certificate's summary) and is called only while a
// distrust is pending.
func (c *Controller) Distrust(active *x509.Certificate) (tally DistrustTally, ok bool) {
	if c.secrets == nil || !c.requestInformer.HasSynced() {
		return tally, false
	}
	secrets, synced := c.secrets.list()
	if !synced {
		return tally, false
	}
	return tallyDistrust(secrets, func(namespace, name string) *certapiv1alpha1.ServingCertRequest {
		req, err := c.requests.ServingCertRequests(namespace).Get(name)
		if err != nil {
			return nil
		}
		return req
	}, active.SubjectKeyId), true
}
