package servedcert

import (
	"context"
	"fmt"
	"slices"
	"strings"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/servedcert"
)

// ServedSummary is results as CertificateAuthority status.served: targets counted by state, and the
// worst ones named.
func ServedSummary(results []TargetResult) *certapiv1alpha1.ServedSummary {
	s := Summarize(results, maxWorst)
	out := &certapiv1alpha1.ServedSummary{Targets: int32(s.Targets)}
	for state, n := range s.Counts {
		switch state {
		case servedcert.Verified:
			out.Verified = int32(n)
		case servedcert.ExpiringSoon:
			out.ExpiringSoon = int32(n)
		case servedcert.Untrusted:
			out.Untrusted = int32(n)
		case servedcert.NameMismatch:
			out.NameMismatch = int32(n)
		case servedcert.Expired:
			out.Expired = int32(n)
		case servedcert.HandshakeFailed:
			out.HandshakeFailed = int32(n)
		case servedcert.Unreachable:
			out.Unreachable = int32(n)
		case servedcert.NoEndpoints:
			out.NoEndpoints = int32(n)
		}
	}
	for _, w := range s.Worst {
		out.WorstTargets = append(out.WorstTargets, SlotName(w.Target)+": "+string(w.State))
	}
	out.Issuers = issuers(results)
	return out
}

// issuers counts, for each CA of the bundle that verified what an endpoint presents, the endpoints
// presenting its certificates, naming the first maxWorst of them; in order of serial.
func issuers(results []TargetResult) []certapiv1alpha1.ServedIssuer {
	by := map[string][]string{}
	for _, r := range results {
		for _, e := range r.Endpoints {
			if e.IssuerSerial == "" || e.State == servedcert.Untrusted {
				continue // not a CA of the bundle
			}
			by[e.IssuerSerial] = append(by[e.IssuerSerial], EndpointName(r.Target, e.Address))
		}
	}
	out := make([]certapiv1alpha1.ServedIssuer, 0, len(by))
	for serial, names := range by {
		slices.Sort(names)
		out = append(out, certapiv1alpha1.ServedIssuer{SerialNumber: serial, Endpoints: int32(len(names)), Names: names[:min(len(names), maxWorst)]})
	}
	slices.SortFunc(out, func(a, b certapiv1alpha1.ServedIssuer) int { return strings.Compare(a.SerialNumber, b.SerialNumber) })
	if len(out) == 0 {
		return nil
	}
	return out
}

// writeStatus writes status.served of CertificateAuthority/default from the published results, when it
// differs. Only that field is changed, on the informer's copy and guarded by its resourceVersion: the
// rotation writes the rest of the status the same way, and a conflict is read again and retried.
func (c *Controller) writeStatus(ctx context.Context) error {
	c.mu.Lock()
	want := c.summary
	c.mu.Unlock()
	if want == nil {
		return nil
	}
	obj, err := c.caLister.Get(certapiv1alpha1.CertificateAuthorityName)
	if err != nil {
		return fmt.Errorf("reading CertificateAuthority/%s to write status.served: %w", certapiv1alpha1.CertificateAuthorityName, err)
	}
	if apiequality.Semantic.DeepEqual(obj.Status.Served, want) {
		return nil
	}
	obj = obj.DeepCopy()
	obj.Status.Served = want
	if _, err := c.o.Context.Certapi.CertapiV1alpha1().CertificateAuthorities().UpdateStatus(ctx, obj, metav1.UpdateOptions{FieldManager: certapiv1alpha1.FieldManager}); err != nil {
		return fmt.Errorf("writing CertificateAuthority/%s status.served: %w", certapiv1alpha1.CertificateAuthorityName, err)
	}
	return nil
}
