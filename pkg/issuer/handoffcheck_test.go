package issuer

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestAllowedBy(t *testing.T) {
	stored := Request{
		Namespace:   "team-a",
		Name:        "webhook",
		ServiceName: "webhook",
		DNSNames:    []string{"a.team-a.svc", "b.team-a.svc"},
		Duration:    168 * time.Hour,
		RenewBefore: time.Hour,
		Path:        PathServingCerts,
	}
	handed := func(change func(*Request)) Request {
		r := stored
		r.DNSNames = append([]string(nil), stored.DNSNames...)
		r.PublicKeyPKIX = []byte("key")
		change(&r)
		return r
	}
	for _, tc := range []struct {
		name    string
		req     Request
		refused string // a part of the reason; empty when allowed
	}{
		{name: "what is stored", req: handed(func(*Request) {})},
		{name: "a shorter duration", req: handed(func(r *Request) { r.Duration = time.Hour })},
		{name: "the DNS names in another order", req: handed(func(r *Request) { r.DNSNames = []string{"b.team-a.svc", "a.team-a.svc"} })},
		{name: "another namespace", req: handed(func(r *Request) { r.Namespace = "kube-system" }), refused: "is not the stored request"},
		{name: "another request", req: handed(func(r *Request) { r.Name = "other" }), refused: "is not the stored request"},
		{name: "another Service", req: handed(func(r *Request) { r.ServiceName = "kubernetes" }), refused: `names Service "kubernetes"`},
		{name: "an extra DNS name", req: handed(func(r *Request) { r.DNSNames = append(r.DNSNames, "c.team-a.svc") }), refused: "asks for DNS names"},
		{name: "a DNS name fewer", req: handed(func(r *Request) { r.DNSNames = r.DNSNames[:1] }), refused: "asks for DNS names"},
		{name: "a longer duration", req: handed(func(r *Request) { r.Duration = 2160 * time.Hour }), refused: "at most 168h0m0s"},
		{name: "no duration", req: handed(func(r *Request) { r.Duration = 0 }), refused: "a duration of 0s"},
		{name: "another renewBefore", req: handed(func(r *Request) { r.RenewBefore = 0 }), refused: "renewBefore"},
		{name: "the Secret path", req: handed(func(r *Request) { r.Path = PathSecret }), refused: `path "secret"`},
		{name: "the PodCertificateRequest path", req: handed(func(r *Request) { r.Path = PathPCR }), refused: `path "pcr"`},
		{name: "a lifetime cap", req: handed(func(r *Request) { r.MaxLifetime = time.Hour }), refused: "lifetime cap"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.req.AllowedBy(stored)
			if tc.refused == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrHandoffRefused) || !strings.Contains(err.Error(), tc.refused) {
				t.Fatalf("got %v, want ErrHandoffRefused naming %q", err, tc.refused)
			}
		})
	}
}
