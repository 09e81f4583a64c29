package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"log"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	admissionv1 "k8s.io/api/admission/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/certapi/certapi/pkg/servingcert"
	"github.com/certapi/certapi/test/e2e/e2etest"
	"github.com/certapi/certapi/test/framework"
	"github.com/certapi/certapi/test/testhelpers"
)

// The operator library (pkg/servingcert) against the real stack: a webhook-style HTTPS server whose
// certificate comes from certapi through kube-apiserver, held only in memory.

// TestLibraryServesFromMemoryWithLeastPrivilege: a server started before its certificate exists fails
// handshakes without exiting, then serves a certificate that a client trusting only CABundle accepts for
// <svc>.<ns>.svc. The ServiceAccount holds only the documented Role (create on its own request's
// servingcerts); the refused CA watch is reported once and does not get in the way.
func TestLibraryServesFromMemoryWithLeastPrivilege(t *testing.T) {
	ctx := context.Background()
	admin, kube := testhelpers.Clients(t, cp.AdminConfig)
	ns := e2etest.Namespace(t, kube)
	if _, err := admin.CertapiV1alpha1().ServingCertRequests(ns).Create(ctx, e2etest.Request("hook", "hook"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	saConfig := serviceAccountConfig(t, kube, ns, "webhook")
	grantServingCerts(t, kube, ns, "webhook", "hook")

	logs := newLogRecorder(t)
	src, err := servingcert.New(servingcert.Options{
		RestConfig: saConfig, Namespace: ns, Name: "hook", Logger: logs.logger(),
		InitialBackoff: 200 * time.Millisecond, MaxBackoff: 2 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	serverLog := &lockedBuffer{}
	addr := startWebhookServer(t, src, serverLog)
	serverName := "hook." + ns + ".svc"

	// Before Start: the handshake fails, the server keeps running and says why.
	if _, err := probeWebhook(ctx, addr, nil, serverName); err == nil {
		t.Fatal("a handshake succeeded before any certificate was issued")
	}
	e2etest.Eventually(t, 10*time.Second, "the server to log why the handshake failed", func(context.Context) (bool, error) {
		return strings.Contains(serverLog.String(), "no serving certificate issued yet"), nil
	})

	begin := time.Now()
	runSource(t, src)
	waitCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := src.WaitReady(waitCtx); err != nil {
		t.Fatal(err)
	}
	t.Logf("first certificate after %s", time.Since(begin).Round(time.Millisecond))

	leaf, err := probeWebhook(ctx, addr, src.CABundle(), serverName)
	if err != nil {
		t.Fatalf("client trusting only CABundle: %v", err)
	}
	if !leaf.NotAfter.Equal(src.NotAfter()) {
		t.Errorf("served notAfter %s, Source.NotAfter %s", leaf.NotAfter, src.NotAfter())
	}
	if _, err := probeWebhook(ctx, addr, src.CABundle(), "other."+ns+".svc"); err == nil {
		t.Error("the certificate was accepted for another Service's name")
	}
	ca, err := admin.CertapiV1alpha1().CertificateAuthorities().Get(ctx, "default", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if string(src.CABundle()) != ca.Status.CABundle {
		t.Error("CABundle differs from CertificateAuthority/default status.caBundle")
	}
	if err := src.Checker()(nil); err != nil || !src.Ready() {
		t.Errorf("Ready %v, Checker %v", src.Ready(), err)
	}
	e2etest.Eventually(t, 30*time.Second, "the refused CA watch to be reported", func(context.Context) (bool, error) {
		return logs.count("Not allowed to watch CertificateAuthority/default") == 1, nil
	})
	if strings.Contains(logs.String(), "PRIVATE KEY") {
		t.Error("key material in the log")
	}
}

// TestLibraryRenewsWithoutRestartUnderHandshakes: with renewal due about 3s after each issuance, the Source
// renews several times in one process while a client handshakes every 100ms, trusting only CABundle and
// checking each peer certificate's chain and validity; no handshake fails. The ServiceAccount holds the
// documented Role and ClusterRole, so the CA watch runs too.
func TestLibraryRenewsWithoutRestartUnderHandshakes(t *testing.T) {
	ctx := context.Background()
	admin, kube := testhelpers.Clients(t, cp.AdminConfig)
	ns := e2etest.Namespace(t, kube)
	req := e2etest.Request("renew", "renew")
	req.Spec.Duration = &metav1.Duration{Duration: time.Hour}
	req.Spec.RenewBefore = &metav1.Duration{Duration: 59*time.Minute + 57*time.Second}
	if _, err := admin.CertapiV1alpha1().ServingCertRequests(ns).Create(ctx, req, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	saConfig := serviceAccountConfig(t, kube, ns, "webhook")
	grantServingCerts(t, kube, ns, "webhook", "renew")
	grantCAReader(t, kube, ns, "webhook")

	logs := newLogRecorder(t)
	src, err := servingcert.New(servingcert.Options{
		RestConfig: saConfig, Namespace: ns, Name: "renew", Logger: logs.logger(),
		InitialBackoff: 200 * time.Millisecond, MaxBackoff: 2 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	addr := startWebhookServer(t, src, nil)
	runSource(t, src)
	waitCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := src.WaitReady(waitCtx); err != nil {
		t.Fatal(err)
	}

	loop := startHandshakeLoop(t, src, addr, "renew."+ns+".svc")
	begin := time.Now()
	e2etest.Eventually(t, 60*time.Second, "four distinct certificates seen by the client", func(context.Context) (bool, error) {
		return loop.distinct() >= 4, nil
	})
	st := loop.finish()
	t.Logf("%d handshakes, %d distinct serials in %s", st.ok, len(st.serials), time.Since(begin).Round(time.Millisecond))
	if len(st.failures) != 0 {
		t.Fatalf("%d of %d handshakes failed; first: %s", len(st.failures), st.ok+len(st.failures), st.failures[0])
	}
	if st.notReady != 0 {
		t.Fatalf("Ready was false %d times while renewing", st.notReady)
	}
	if n := logs.count("Issued a serving certificate"); n < 4 {
		t.Errorf("%d issuances logged, want at least 4", n)
	}
	if n := logs.count("Not allowed to watch CertificateAuthority/default"); n != 0 {
		t.Errorf("the CA watch was refused with the documented ClusterRole")
	}
	if n := logs.count("Renewing the serving certificate failed"); n != 0 {
		t.Errorf("%d failed renewals logged while certapi was up", n)
	}
}

// TestLibraryKeepsServingWhileCertapiIsDown: on a control plane of its own, certapi is stopped while the
// Source renews every few seconds. The Source keeps serving its still-valid certificate (every handshake
// succeeds, Ready stays true), logs each failed attempt with the time left, and renews again once certapi
// is back.
func TestLibraryKeepsServingWhileCertapiIsDown(t *testing.T) {
	own := framework.StartT(t, framework.Options{})
	ctx := context.Background()
	admin, kube := testhelpers.Clients(t, own.AdminConfig)
	ns := e2etest.Namespace(t, kube)
	req := e2etest.Request("outage", "outage")
	req.Spec.Duration = &metav1.Duration{Duration: time.Hour}
	req.Spec.RenewBefore = &metav1.Duration{Duration: 59*time.Minute + 57*time.Second}
	if _, err := admin.CertapiV1alpha1().ServingCertRequests(ns).Create(ctx, req, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	logs := newLogRecorder(t)
	src, err := servingcert.New(servingcert.Options{
		RestConfig: own.AdminConfig, Namespace: ns, Name: "outage", Logger: logs.logger(),
		InitialBackoff: 500 * time.Millisecond, MaxBackoff: 3 * time.Second, RequestTimeout: 5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	addr := startWebhookServer(t, src, nil)
	runSource(t, src)
	waitCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := src.WaitReady(waitCtx); err != nil {
		t.Fatal(err)
	}
	loop := startHandshakeLoop(t, src, addr, "outage."+ns+".svc")
	e2etest.Eventually(t, 60*time.Second, "a renewal before the outage", func(context.Context) (bool, error) {
		return loop.distinct() >= 2, nil
	})

	stopped := time.Now()
	if err := own.StopCertapi(); err != nil {
		t.Fatal(err)
	}
	beforeOutage := loop.distinct()
	e2etest.Eventually(t, 60*time.Second, "three failed renewals logged", func(context.Context) (bool, error) {
		return logs.count("Renewing the serving certificate failed") >= 3, nil
	})
	for _, line := range logs.matching("Renewing the serving certificate failed") {
		if !strings.Contains(line, `"timeLeft"`) || !strings.Contains(line, `"retryIn"`) {
			t.Fatalf("failure log without timeLeft or retryIn: %s", line)
		}
	}
	if !src.Ready() {
		t.Fatal("not Ready during the outage with a valid certificate")
	}
	outage := time.Since(stopped)

	startCtx, cancelStart := context.WithTimeout(ctx, 2*time.Minute)
	defer cancelStart()
	if err := own.StartCertapi(startCtx); err != nil {
		t.Fatal(err)
	}
	if err := own.WaitAPIServiceAvailable(startCtx); err != nil {
		t.Fatal(err)
	}
	e2etest.Eventually(t, 60*time.Second, "a renewal after certapi is back", func(context.Context) (bool, error) {
		return loop.distinct() > beforeOutage, nil
	})
	st := loop.finish()
	t.Logf("outage of %s (%d failed attempts logged); %d handshakes, %d distinct serials", outage.Round(time.Millisecond),
		logs.count("Renewing the serving certificate failed"), st.ok, len(st.serials))
	if len(st.failures) != 0 {
		t.Fatalf("%d of %d handshakes failed; first: %s", len(st.failures), st.ok+len(st.failures), st.failures[0])
	}
	if st.notReady != 0 {
		t.Fatalf("Ready was false %d times, with a valid certificate", st.notReady)
	}
	if logs.count("Issuance works again") == 0 {
		t.Error("the recovery was not logged")
	}
}

// grantServingCerts lets ServiceAccount sa issue for request name only: the Role the package documents.
func grantServingCerts(t *testing.T, kube kubernetes.Interface, ns, sa, name string) {
	t.Helper()
	grant(t, kube, ns, sa+"-serving-cert", rbacv1.Subject{Kind: "ServiceAccount", Name: sa, Namespace: ns},
		rbacv1.PolicyRule{APIGroups: []string{"certapi.dev"}, Resources: []string{"servingcertrequests/servingcerts"}, Verbs: []string{"create"}, ResourceNames: []string{name}})
}

// grantCAReader binds the documented ClusterRole (watch on certificateauthorities/default) to sa and
// waits until kube-apiserver's RBAC allows it, asking kube-apiserver directly so that certapi's
// authorization cache holds no early refusal.
func grantCAReader(t *testing.T, kube kubernetes.Interface, ns, sa string) {
	t.Helper()
	ctx := context.Background()
	name := "e2e-ca-reader-" + ns
	if _, err := kube.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"certapi.dev"}, Resources: []string{"certificateauthorities"},
			ResourceNames: []string{"default"}, Verbs: []string{"watch"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kube.RbacV1().ClusterRoles().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	if _, err := kube.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: ns}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	user := "system:serviceaccount:" + ns + ":" + sa
	e2etest.Eventually(t, 30*time.Second, "the CA reader ClusterRole to take effect", func(ctx context.Context) (bool, error) {
		r, err := kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: user, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Group: "certapi.dev", Resource: "certificateauthorities", Name: "default", Verb: "watch"},
		}}, metav1.CreateOptions{})
		return err == nil && r.Status.Allowed, err
	})
}

// runSource runs src until the test ends.
func runSource(t *testing.T, src *servingcert.Source) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := src.Start(ctx); err != nil {
			t.Errorf("Start: %v", err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// startWebhookServer serves a validating admission endpoint on 127.0.0.1 with src.TLSConfig() and no
// certificate file, until the test ends; the server's own error log goes to errLog when set.
func startWebhookServer(t *testing.T, src *servingcert.Source, errLog *lockedBuffer) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /validate", func(w http.ResponseWriter, r *http.Request) {
		var review admissionv1.AdmissionReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
			http.Error(w, "expected an AdmissionReview", http.StatusBadRequest)
			return
		}
		review.Response = &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
		review.Request = nil
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(&review)
	})
	srv := &http.Server{Handler: mux, TLSConfig: src.TLSConfig(), ReadHeaderTimeout: 10 * time.Second}
	if errLog != nil {
		srv.ErrorLog = log.New(errLog, "", 0)
	}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// probeWebhook sends one AdmissionReview over a new TLS connection to addr, as kube-apiserver would:
// trusting only bundle, checking serverName. It returns the peer certificate, checked once more against
// the bundle and the current time.
func probeWebhook(ctx context.Context, addr string, bundle []byte, serverName string) (*x509.Certificate, error) {
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(bundle)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: roots, ServerName: serverName, MinVersion: tls.VersionTLS12},
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		},
	}}
	defer client.CloseIdleConnections()
	body, _ := json.Marshal(&admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request:  &admissionv1.AdmissionRequest{UID: "1"},
	})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+serverName+"/validate", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var review admissionv1.AdmissionReview
	if err := json.NewDecoder(resp.Body).Decode(&review); err != nil || resp.StatusCode != http.StatusOK || review.Response == nil || !review.Response.Allowed {
		return nil, fmt.Errorf("webhook answered HTTP %d (%v)", resp.StatusCode, err)
	}
	leaf := resp.TLS.PeerCertificates[0]
	inter := x509.NewCertPool()
	for _, c := range resp.TLS.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	now := time.Now()
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, DNSName: serverName, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		return nil, fmt.Errorf("peer certificate %x: %w", leaf.SerialNumber, err)
	}
	if now.Before(leaf.NotBefore) || !now.Before(leaf.NotAfter) {
		return nil, fmt.Errorf("peer certificate %x not valid now (%s to %s)", leaf.SerialNumber, leaf.NotBefore, leaf.NotAfter)
	}
	return leaf, nil
}

// handshakeLoop probes a webhook every 100ms and records what it sees.
type handshakeLoop struct {
	stop chan struct{}
	done chan struct{}

	mu    sync.Mutex
	stats handshakeStats
}

type handshakeStats struct {
	ok       int
	failures []string
	notReady int      // ticks at which Source.Ready was false
	serials  []string // distinct, in the order seen
}

func startHandshakeLoop(t *testing.T, src *servingcert.Source, addr, serverName string) *handshakeLoop {
	t.Helper()
	l := &handshakeLoop{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-l.stop:
				return
			case <-tick.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			leaf, err := probeWebhook(ctx, addr, src.CABundle(), serverName)
			cancel()
			ready := src.Ready()
			l.mu.Lock()
			if err != nil {
				l.stats.failures = append(l.stats.failures, time.Now().Format(time.RFC3339Nano)+": "+err.Error())
			} else {
				l.stats.ok++
				serial := fmt.Sprintf("%x", leaf.SerialNumber)
				if n := len(l.stats.serials); n == 0 || l.stats.serials[n-1] != serial {
					l.stats.serials = append(l.stats.serials, serial)
				}
			}
			if !ready {
				l.stats.notReady++
			}
			l.mu.Unlock()
		}
	}()
	t.Cleanup(func() { l.finish() })
	return l
}

func (l *handshakeLoop) distinct() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	seen := map[string]bool{}
	for _, s := range l.stats.serials {
		seen[s] = true
	}
	return len(seen)
}

// finish stops the loop (once) and returns what it saw.
func (l *handshakeLoop) finish() handshakeStats {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stats
}

// logRecorder keeps a Source's log lines (verbosity 2) and prints them when the test fails.
type logRecorder struct {
	mu    sync.Mutex
	lines []string
}

func newLogRecorder(t *testing.T) *logRecorder {
	r := &logRecorder{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("log of the Source:\n%s", r.String())
		}
	})
	return r
}

func (r *logRecorder) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		r.mu.Lock()
		r.lines = append(r.lines, time.Now().Format("15:04:05.000 ")+prefix+" "+args)
		r.mu.Unlock()
	}, funcr.Options{Verbosity: 2})
}

func (r *logRecorder) matching(substr string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, l := range r.lines {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return out
}

func (r *logRecorder) count(substr string) int { return len(r.matching(substr)) }

func (r *logRecorder) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.lines, "\n")
}

// lockedBuffer is an io.Writer safe for concurrent use.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
