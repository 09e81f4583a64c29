package rotation

import (
	"context"
	"crypto/x509"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	servedcheck "github.com/certapi/certapi/pkg/controller/servedcert"
	"github.com/certapi/certapi/pkg/servedcert"
	"github.com/certapi/certapi/pkg/signer"
	"github.com/certapi/certapi/pkg/signer/signertest"
)

// servedBy answers Presenting with the endpoints of each CA certificate it holds.
type servedBy map[*x509.Certificate][]servedcheck.PresentedEndpoint

func (s servedBy) Presenting(cas []*x509.Certificate) ([]servedcheck.PresentedEndpoint, bool) {
	var out []servedcheck.PresentedEndpoint
	for ca, eps := range s {
		if slices.ContainsFunc(cas, ca.Equal) {
			out = append(out, eps...)
		}
	}
	return out, true
}

func (servedBy) Expedite([]*x509.Certificate) {}

// TestReportRetired: a Retire step that removes a CA an endpoint still presents a certificate of says so in
// one Warning Event naming the CA and the endpoint; a CA that stays Retiring, or one nobody presents, says
// nothing.
func TestReportRetired(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	active, old, older := signertest.NewCA(t, now, time.Hour), signertest.NewCA(t, now, time.Hour), signertest.NewCA(t, now, time.Hour)
	obj := &certapiv1alpha1.CertificateAuthority{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
	ep := servedcheck.PresentedEndpoint{Name: "ValidatingWebhookConfiguration v webhook v.example.com: 10.0.0.7:8443", State: servedcert.Expired}
	before := signer.Authorities{Active: active, Retiring: []signer.Retiring{{CA: old.WithoutKey()}, {CA: older.WithoutKey()}}}
	for _, tc := range []struct {
		name   string
		served servedBy
		after  signer.Authorities
		want   []string // fragments of the one Event, none for no Event
	}{
		{
			name: "the retired CA is still served", served: servedBy{older.Certificate: {ep}},
			after: signer.Authorities{Active: active, Retiring: []signer.Retiring{{CA: old.WithoutKey()}}},
			want:  []string{"Warning RetiredWhileServed", signer.FormatSerialNumber(older.Certificate.SerialNumber), "1 served endpoints", ep.Name},
		},
		{
			name: "only a CA still Retiring is served", served: servedBy{old.Certificate: {ep}},
			after: signer.Authorities{Active: active, Retiring: []signer.Retiring{{CA: old.WithoutKey()}}},
		},
		{
			name: "nobody presents the retired CA", served: servedBy{},
			after: signer.Authorities{Active: active},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := events.NewFakeRecorder(10)
			c := &Controller{o: Options{Served: tc.served}, recorder: rec}
			c.reportRetired(context.Background(), obj, before, tc.after)
			var got []string
			for len(rec.Events) > 0 {
				got = append(got, <-rec.Events)
			}
			if len(tc.want) == 0 {
				if len(got) != 0 {
					t.Fatalf("events %q; want none", got)
				}
				return
			}
			if len(got) != 1 {
				t.Fatalf("events %q; want one", got)
			}
			for _, w := range tc.want {
				if !strings.Contains(got[0], w) {
					t.Errorf("event %q; want it to say %q", got[0], w)
				}
			}
		})
	}
}
