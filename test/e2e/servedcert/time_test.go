package servedcert

import (
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/certapi/certapi/pkg/signer"
	"github.com/certapi/certapi/pkg/signer/signertest"
	"github.com/certapi/certapi/test/e2e/e2etest"
	"github.com/certapi/certapi/test/testhelpers"
)

// TestServedTimeAndHandshake: the states a trusted server reaches with time, and one that does not speak
// TLS, each reported in a Warning Event on its webhook. The webhooks keep a CA of another tool
// (certapi.dev/keep-foreign-ca), whose certificates the test can make for any period: one expired an hour
// ago (Expired, which kube-apiserver refuses), one with an hour left of 24 (ExpiringSoon: under a sixth
// of its life, its server missed its renewal), and a port that answers plain HTTP (HandshakeFailed).
func TestServedTimeAndHandshake(t *testing.T) {
	_, kube := testhelpers.Clients(t, cp.AdminConfig)
	ns := e2etest.Namespace(t, kube)
	now := time.Now()
	// Made before the leaves it signs, as a CA is.
	foreign, err := signer.NewCA(signer.CAOptions{ClusterDomain: signertest.ClusterDomain, CommonName: "other-tool-webhook-ca", Now: now.Add(-48 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	expired := testhelpers.ServeTLS(t, host, testhelpers.CertFromCAValid(t, foreign, ns, "expired", now.Add(-25*time.Hour), now.Add(-time.Hour)))
	expiring := testhelpers.ServeTLS(t, host, testhelpers.CertFromCAValid(t, foreign, ns, "expiring", now.Add(-23*time.Hour), now.Add(time.Hour)))
	plain, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.NotFoundHandler(), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(plain) }()
	t.Cleanup(func() { _ = srv.Close() })

	keep := testhelpers.KeepForeignCA(signer.EncodeBundle(foreign.Certificate))
	cases := []struct{ svc, addr, state, inNote string }{
		{"expired", expired.Addr, "Expired", "expired at"},
		{"expiring", expiring.Addr, "ExpiringSoon", "expires at"},
		{"plainhttp", plain.Addr().String(), "HandshakeFailed", "does not speak TLS"},
	}
	names := map[string]string{}
	for _, c := range cases {
		testhelpers.SelectorlessService(t, kube, ns, c.svc, c.addr, true)
		names[c.svc] = testhelpers.InjectedWebhook(t, kube, ns, c.svc, webhookDomain, keep)
	}
	for _, c := range cases {
		note := waitFor(t, kube, names[c.svc], c.state, 60*time.Second)
		if !strings.Contains(note, c.inNote) {
			t.Errorf("%s: the Event says %q; want it to say %q", c.svc, note, c.inNote)
		}
		t.Logf("%s: %s: %s", c.svc, c.state, note)
	}
}
