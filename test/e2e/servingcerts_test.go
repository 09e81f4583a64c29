package e2e

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/signer/signertest"
	"github.com/certapi/certapi/test/e2e/e2etest"
	"github.com/certapi/certapi/test/framework"
	"github.com/certapi/certapi/test/testhelpers"
)

// issue creates a ServingCert on the shared control plane, with retries while certapi's leader starts.
func issue(t *testing.T, ns, name string, body *certapiv1alpha1.ServingCert) *certapiv1alpha1.ServingCert {
	t.Helper()
	return issueOn(t, cp, ns, name, body)
}

// issueOn creates a ServingCert through own's kube-apiserver, with retries while certapi's leader starts.
func issueOn(t *testing.T, own *framework.ControlPlane, ns, name string, body *certapiv1alpha1.ServingCert) *certapiv1alpha1.ServingCert {
	t.Helper()
	c, _ := testhelpers.Clients(t, own.AdminConfig)
	var out *certapiv1alpha1.ServingCert
	e2etest.Eventually(t, 60*time.Second, "a certificate from servingcerts", func(ctx context.Context) (bool, error) {
		var err error
		out, err = c.CertapiV1alpha1().ServingCertRequests(ns).CreateServingCert(ctx, name, body, metav1.CreateOptions{})
		if apierrors.IsServiceUnavailable(err) {
			return false, nil
		}
		return err == nil, err
	})
	return out
}

func TestServingCertIsTrustedThroughTheBundle(t *testing.T) {
	ctx := context.Background()
	c, kube := testhelpers.Clients(t, cp.AdminConfig)
	ns := e2etest.Namespace(t, kube)
	req := e2etest.Request("hook", "hook")
	req.Spec.DNSNames = []string{"*.hook." + ns + ".svc"}
	if _, err := c.CertapiV1alpha1().ServingCertRequests(ns).Create(ctx, req, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	key := signertest.ECKey(t, elliptic.P256())
	out := issue(t, ns, "hook", e2etest.ServingCert(signertest.CSRPEM(t, key), nil))

	if out.Status.Certificate == "" || out.Status.CABundle == "" || out.Status.SerialNumber == "" || out.Status.RenewalTime == nil {
		t.Fatalf("incomplete status: %+v", out.Status)
	}
	block, _ := pem.Decode([]byte(out.Status.Certificate))
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM([]byte(out.Status.CABundle)) {
		t.Fatal("caBundle holds no certificate")
	}
	for _, name := range []string{"hook." + ns + ".svc", "hook." + ns + ".svc.cluster.local", "pod-0.hook." + ns + ".svc"} {
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("does not verify for %s: %v", name, err)
		}
	}
	for _, san := range leaf.DNSNames {
		if san == "hook" || san == "hook."+ns || strings.Contains(san, "example.com") || strings.HasPrefix(san, "kubernetes") {
			t.Errorf("unexpected SAN %q (bare, or taken from the CSR)", san)
		}
	}
	if got, want := leaf.NotAfter.Sub(time.Now()), 168*time.Hour; got > want || got < want-time.Hour {
		t.Errorf("lifetime left %s, want about %s", got, want)
	}
	if !out.Status.RenewalTime.After(time.Now()) || !out.Status.RenewalTime.Time.Before(leaf.NotAfter) {
		t.Errorf("renewalTime %s not between now and notAfter %s", out.Status.RenewalTime, leaf.NotAfter)
	}

	// A real TLS server with this certificate is trusted by a client that knows only the caBundle.
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{leaf.Raw}, PrivateKey: key}}})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "hook." + ns + ".svc"},
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "tcp", ln.Addr().String())
		},
	}}
	resp, err := client.Get("https://hook." + ns + ".svc/")
	if err != nil {
		t.Fatalf("TLS client trusting only the caBundle: %v", err)
	}
	resp.Body.Close()

	// The parent's status follows, written by the leader off the request path.
	e2etest.Eventually(t, 30*time.Second, "the request's status to show the certificate", func(ctx context.Context) (bool, error) {
		got, err := c.CertapiV1alpha1().ServingCertRequests(ns).Get(ctx, "hook", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return got.Status.SerialNumber == out.Status.SerialNumber && got.Status.LastIssued != nil, nil
	})

	e2etest.Eventually(t, 30*time.Second, "an Issued Event on the request", func(ctx context.Context) (bool, error) {
		return hasEvent(ctx, t, ns, "hook", "Normal", "Issued", out.Status.SerialNumber), nil
	})

	// The CertificateAuthority shows the CA's public side and which one signs.
	ca, err := c.CertapiV1alpha1().CertificateAuthorities().Get(ctx, "default", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ca.Status.Active == nil || ca.Status.CABundle != out.Status.CABundle {
		t.Errorf("CertificateAuthority status: active %v, bundle matches %v", ca.Status.Active, ca.Status.CABundle == out.Status.CABundle)
	}
}

func TestServingCertDryRunAndDuration(t *testing.T) {
	ctx := context.Background()
	c, kube := testhelpers.Clients(t, cp.AdminConfig)
	ns := e2etest.Namespace(t, kube)
	req := e2etest.Request("short", "short")
	req.Spec.Duration = &metav1.Duration{Duration: 2 * time.Hour}
	if _, err := c.CertapiV1alpha1().ServingCertRequests(ns).Create(ctx, req, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	csr := signertest.CSRPEM(t, signertest.ECKey(t, elliptic.P384()))

	dry, err := c.CertapiV1alpha1().ServingCertRequests(ns).CreateServingCert(ctx, "short", e2etest.ServingCert(csr, nil), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		t.Fatalf("dry-run: %v", err)
	}
	if dry.Status.Certificate != "" {
		t.Fatal("dry-run signed a certificate")
	}

	out := issue(t, ns, "short", e2etest.ServingCert(csr, &metav1.Duration{Duration: time.Hour}))
	block, _ := pem.Decode([]byte(out.Status.Certificate))
	leaf, _ := x509.ParseCertificate(block.Bytes)
	if got := leaf.NotAfter.Sub(time.Now()); got > time.Hour || got < 55*time.Minute {
		t.Errorf("asked for 1h, notAfter is %s away", got)
	}

	_, err = c.CertapiV1alpha1().ServingCertRequests(ns).CreateServingCert(ctx, "short", e2etest.ServingCert(csr, &metav1.Duration{Duration: 3 * time.Hour}), metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.duration") || !strings.Contains(err.Error(), "at most the ServingCertRequest's duration (2h0m0s)") {
		t.Fatalf("duration over the parent's: %v, want 422 naming spec.duration and the parent's 2h", err)
	}
}

func TestServingCertBadInput(t *testing.T) {
	ctx := context.Background()
	c, kube := testhelpers.Clients(t, cp.AdminConfig)
	ns := e2etest.Namespace(t, kube)
	if _, err := c.CertapiV1alpha1().ServingCertRequests(ns).Create(ctx, e2etest.Request("target", "target"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rsa1024, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	_, ed, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	good := signertest.CSRPEM(t, signertest.ECKey(t, elliptic.P256()))
	tampered := func() string {
		block, _ := pem.Decode([]byte(good))
		der := append([]byte(nil), block.Bytes...)
		der[len(der)-3] ^= 0xff // inside the signature
		return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}))
	}()
	accepted := "ECDSA P-256 or P-384"

	cases := []struct {
		name, csr, want string
	}{
		{"malformed PEM", "-----BEGIN CERTIFICATE REQUEST-----\nnot base64!\n-----END CERTIFICATE REQUEST-----\n", "PEM"},
		{"bad signature", tampered, "signature"},
		{"RSA 1024", signertest.CSRPEM(t, rsa1024), accepted},
		{"ECDSA P-521", signertest.CSRPEM(t, signertest.ECKey(t, elliptic.P521())), accepted},
		{"Ed25519", signertest.CSRPEM(t, ed), accepted},
		{"empty", "", "Required value"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.CertapiV1alpha1().ServingCertRequests(ns).CreateServingCert(ctx, "target", e2etest.ServingCert(tc.csr, nil), metav1.CreateOptions{})
			if !apierrors.IsInvalid(err) {
				t.Fatalf("got %v, want 422", err)
			}
			if !strings.Contains(err.Error(), "spec.certificateRequest") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("message %q does not name spec.certificateRequest and say %q", err.Error(), tc.want)
			}
			if strings.Contains(err.Error(), "BEGIN") {
				t.Fatalf("the error echoes the PEM: %q", err.Error())
			}
		})
	}

	t.Run("body over 64 KiB", func(t *testing.T) {
		big := good + strings.Repeat("#", 70<<10)
		_, err := c.CertapiV1alpha1().ServingCertRequests(ns).CreateServingCert(ctx, "target", e2etest.ServingCert(big, nil), metav1.CreateOptions{})
		if !apierrors.IsRequestEntityTooLargeError(err) || !strings.Contains(err.Error(), "at most 65536 bytes") {
			t.Fatalf("got %v, want 413 that says the limit", err)
		}
	})
	t.Run("body over 64 KiB, path with a trailing slash", func(t *testing.T) {
		// The API routes ".../servingcerts/" to the same handler; the cap must not depend on the spelling.
		body, err := json.Marshal(e2etest.ServingCert(good+strings.Repeat("#", 200<<10), nil))
		if err != nil {
			t.Fatal(err)
		}
		hc, err := rest.HTTPClientFor(cp.AdminConfig)
		if err != nil {
			t.Fatal(err)
		}
		url := strings.TrimSuffix(cp.AdminConfig.Host, "/") + "/apis/certapi.dev/v1alpha1/namespaces/" + ns + "/servingcertrequests/target/servingcerts/"
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		answer, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(answer), "at most 65536 bytes") {
			t.Fatalf("got %d %s, want 413 that says the limit", resp.StatusCode, answer)
		}
	})
	t.Run("parent missing", func(t *testing.T) {
		_, err := c.CertapiV1alpha1().ServingCertRequests(ns).CreateServingCert(ctx, "nope", e2etest.ServingCert(good, nil), metav1.CreateOptions{})
		if !apierrors.IsNotFound(err) || !strings.Contains(err.Error(), `servingcertrequests.certapi.dev "nope" not found`) {
			t.Fatalf("got %v, want 404 naming the request", err)
		}
	})
	// Each refusal is a Warning Event on the parent, saying what was wrong.
	e2etest.Eventually(t, 30*time.Second, "a Denied Event on the request", func(ctx context.Context) (bool, error) {
		return hasEvent(ctx, t, ns, "target", "Warning", "Denied", "spec.certificateRequest"), nil
	})
	// Nothing was signed for the parent by any of that.
	got, err := c.CertapiV1alpha1().ServingCertRequests(ns).Get(ctx, "target", metav1.GetOptions{})
	if err != nil || got.Status.SerialNumber != "" {
		t.Fatalf("a refused request changed status: %v %q", err, got.Status.SerialNumber)
	}
}

// hasEvent reports whether an events.k8s.io Event of type and reason regards the request and its note
// contains text.
func hasEvent(ctx context.Context, t *testing.T, ns, name, eventType, reason, text string) bool {
	t.Helper()
	_, kube := testhelpers.Clients(t, cp.AdminConfig)
	evs, err := kube.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return false
	}
	for _, e := range evs.Items {
		if e.Regarding.Kind == "ServingCertRequest" && e.Regarding.Name == name && e.Type == eventType && e.Reason == reason && strings.Contains(e.Note, text) {
			return true
		}
	}
	return false
}

// TestMetrics scrapes certapi's /metrics for the series DESIGN.md promises.
func TestMetrics(t *testing.T) {
	ctx := context.Background()
	c, kube := testhelpers.Clients(t, cp.AdminConfig)
	ns := e2etest.Namespace(t, kube)
	if _, err := c.CertapiV1alpha1().ServingCertRequests(ns).Create(ctx, e2etest.Request("metered", "metered"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	issue(t, ns, "metered", e2etest.ServingCert(signertest.CSRPEM(t, signertest.ECKey(t, elliptic.P256())), nil))
	client, err := cp.CertapiHTTPClient()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`certapi_issuances_total{path="servingcerts",result="issued"}`,
		`certapi_issuance_duration_seconds_bucket{path="servingcerts"`,
		`certapi_certificate_not_after_timestamp_seconds{name="metered",namespace="` + ns + `",renewer="client"}`,
		`certapi_certificate_renewal_timestamp_seconds{name="metered",namespace="` + ns + `",renewer="client"}`,
		`certapi_servingcertrequest_ready{name="metered",namespace="` + ns + `",reason="Issued"} 1`,
		`certapi_ca_not_after_timestamp_seconds{role="Active"}`,
		`certapi_leader{identity=`,
	}
	scrape := func() string {
		resp, err := client.Get(cp.CertapiURL + "/metrics")
		if err != nil {
			return ""
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return string(body)
	}
	e2etest.Eventually(t, 30*time.Second, "certapi's metrics", func(ctx context.Context) (bool, error) {
		body := scrape()
		for _, w := range want {
			if !strings.Contains(body, w) {
				return false, nil
			}
		}
		return true, nil
	})

	// A deleted request's series go away: no stale expiry alert, no unbounded growth.
	if err := c.CertapiV1alpha1().ServingCertRequests(ns).Delete(ctx, "metered", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e2etest.Eventually(t, 30*time.Second, "the deleted request's series to go", func(ctx context.Context) (bool, error) {
		body := scrape()
		return body != "" && !strings.Contains(body, `namespace="`+ns+`"`), nil
	})
}
