package secretdelivery

import (
	"testing"
	"time"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/signer"
)

// BenchmarkViewSecret is the Secret cache's per-object cost (every Secret on a relist, every update).
func BenchmarkViewSecret(b *testing.B) {
	ca := newTestCA(b, testNow.Add(-time.Hour))
	for _, alg := range []certapiv1alpha1.KeyAlgorithm{certapiv1alpha1.KeyAlgorithmECDSAP256, certapiv1alpha1.KeyAlgorithmRSA4096} {
		req := newRequest("webhook", "webhook-svc", "webhook-tls")
		req.Spec.KeyAlgorithm = alg
		s := deliveredSecret(b, req, ca, signer.EncodeBundle(ca.Certificate), testNow)
		b.Run(string(alg), func(b *testing.B) {
			for b.Loop() {
				_, _ = viewSecret(s)
			}
		})
	}
}

// BenchmarkDecideCurrent is the cost of looking at a request whose Secret is current (every request at
// start-up and after a CA change).
func BenchmarkDecideCurrent(b *testing.B) {
	ca := newTestCA(b, testNow.Add(-time.Hour))
	bundle := signer.EncodeBundle(ca.Certificate)
	req := newRequest("webhook", "webhook-svc", "webhook-tls")
	s := deliveredSecret(b, req, ca, bundle, testNow)
	in := decideInput{Request: req, Secret: viewOf(s), CA: ca.Certificate, Bundle: bundle, ClusterDomain: testDomain, Now: testNow}
	for b.Loop() {
		if d := decide(in); d.Action != actionNone {
			b.Fatalf("%s: %s", d.Action, d.Why)
		}
	}
}
