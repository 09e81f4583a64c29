package e2e

import (
	"context"
	"crypto/elliptic"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/certapi/certapi/pkg/signer/signertest"
	"github.com/certapi/certapi/test/e2e/e2etest"
	"github.com/certapi/certapi/test/framework"
	"github.com/certapi/certapi/test/testhelpers"
)

// Issue #9, hole 8: right after a restart a request was once answered as system:anonymous (403). A replica
// is not ready on /readyz until delegated authentication (the client CA and the request-header CA of
// kube-system/extension-apiserver-authentication) and delegated authorization are usable.

// TestNotReadyUntilDelegatedAuthIsUsable runs certapi with a delegated-auth identity that may do nothing:
// it cannot read the ConfigMap with the CAs (a lookup failure it is told to tolerate) nor send
// SubjectAccessReviews. Every request would be anonymous and refused, and /readyz says so. Once the
// identity gets the documented rights, the client CA loads and authorization answers, but the
// request-header configuration the tolerated lookup never got stays missing: still not ready, and the
// check says to restart.
func TestNotReadyUntilDelegatedAuthIsUsable(t *testing.T) {
	own := framework.StartT(t, framework.Options{SkipCertapi: true})
	_, kube := testhelpers.Clients(t, own.AdminConfig)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin, err := framework.CertapiBinary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const user = "e2e-delegated-auth"
	nobody, err := own.UserConfig(user)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "authready-") // short: the embedded etcd's sockets live in it
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	authKubeconfig := filepath.Join(dir, "auth.kubeconfig")
	e2etest.WriteKubeconfig(t, authKubeconfig, nobody)
	port := e2etest.FreePort(t)
	logPath := filepath.Join(dir, "certapi.log")
	p, err := framework.StartProcess("certapi", logPath, bin, []string{
		"--data-dir=" + filepath.Join(dir, "data"),
		"--bind-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", port),
		"--service-name=" + framework.CertapiServiceName,
		"--service-namespace=" + framework.CertapiNamespace,
		"--kubeconfig=" + own.Kubeconfig,
		"--authentication-kubeconfig=" + authKubeconfig,
		"--authorization-kubeconfig=" + authKubeconfig,
		"--authentication-tolerate-lookup-failure",
		"-v=2",
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop(20 * time.Second) })
	t.Cleanup(func() {
		if t.Failed() {
			data, _ := os.ReadFile(logPath)
			t.Logf("certapi log (%s):\n%s", logPath, e2etest.Tail(string(data), 100))
		}
	})
	admin, err := tls.X509KeyPair(own.AdminConfig.CertData, own.AdminConfig.KeyData)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		InsecureSkipVerify: true, // certapi's own CA, from its own embedded etcd: its trust is not what this tests
		Certificates:       []tls.Certificate{admin},
	}}}
	defer client.CloseIdleConnections()
	get := func(ctx context.Context, path string) (int, string) {
		body, code, err := framework.HTTPGet(ctx, client, fmt.Sprintf("https://127.0.0.1:%d%s", port, path))
		if err != nil {
			return 0, err.Error()
		}
		return code, body
	}

	// Nothing usable: both checks fail, and the log says why.
	e2etest.Eventually(t, 2*time.Minute, "/readyz to fail both delegated auth checks", func(ctx context.Context) (bool, error) {
		if done, _ := p.Exited(); done {
			return false, fmt.Errorf("certapi exited: %v", p.ExitError())
		}
		code, body := get(ctx, "/readyz?verbose")
		if code == http.StatusOK {
			return false, fmt.Errorf("/readyz is 200 while delegated authentication and authorization cannot work:\n%s", body)
		}
		return strings.Contains(body, "[-]certapi-delegated-authentication failed") && strings.Contains(body, "[-]certapi-delegated-authorization failed"), nil
	})
	e2etest.Eventually(t, time.Minute, "the log to say why", func(context.Context) (bool, error) {
		return logContains(t, logPath, "no request-header configuration") && logContains(t, logPath, "a SubjectAccessReview to kube-apiserver failed"), nil
	})

	// The documented rights (artifacts/deploy/base/rbac.yaml).
	subject := rbacv1.Subject{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: user}
	if _, err := kube.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: user},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "system:auth-delegator"},
		Subjects:   []rbacv1.Subject{subject},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.RbacV1().RoleBindings("kube-system").Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: user},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "extension-apiserver-authentication-reader"},
		Subjects:   []rbacv1.Subject{subject},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The client CA loads (the admin's client certificate is recognised, so the single checks answer it)
	// and authorization answers; the request-header configuration stays missing.
	e2etest.Eventually(t, 2*time.Minute, "the client CA to load and authorization to answer", func(ctx context.Context) (bool, error) {
		if code, _ := get(ctx, "/readyz/certapi-delegated-authorization"); code != http.StatusOK {
			return false, nil
		}
		code, body := get(ctx, "/readyz/certapi-delegated-authentication")
		return code == http.StatusInternalServerError && strings.Contains(body, "no request-header configuration") && !strings.Contains(body, "client CA"), nil
	})
	code, body := get(ctx, "/readyz?verbose")
	if code == http.StatusOK || !strings.Contains(body, "[-]certapi-delegated-authentication failed") || !strings.Contains(body, "[+]certapi-delegated-authorization ok") {
		t.Fatalf("/readyz without a request-header configuration: %d\n%s\nwant not ready on authentication only", code, body)
	}
}

// TestRestartsNeverAnswer401Or403 restarts certapi 10 times while four callers with the right to issue (a
// ServiceAccount) call servingcerts through kube-apiserver without pause. Calls may fail while certapi is
// down (kube-apiserver's 503), but none may be answered 401 or 403. Between restarts the test waits as
// users would: for the replica's /readyz, the APIService to be Available, and one more certificate.
// kube-apiserver reaches certapi through an ExternalName, with no readiness gate in between: it sends
// requests as soon as the new process listens, a moment before the CAs of
// kube-system/extension-apiserver-authentication are loaded (before the fix, 18-133 of them in 20 restarts
// were taken for system:anonymous and refused).
func TestRestartsNeverAnswer401Or403(t *testing.T) {
	const restarts, workers = 10, 4
	own := framework.StartT(t, framework.Options{})
	c, kube := testhelpers.Clients(t, own.AdminConfig)
	ns := e2etest.Namespace(t, kube)
	if _, err := c.CertapiV1alpha1().ServingCertRequests(ns).Create(context.Background(), e2etest.Request("restarts", "restarts"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	grantServingCerts(t, kube, ns, "issuer", "restarts")
	issuer, _ := testhelpers.Clients(t, serviceAccountConfigOn(t, own, kube, ns, "issuer"))
	body := e2etest.ServingCert(signertest.CSRPEM(t, signertest.ECKey(t, elliptic.P256())), nil)
	issueOnce := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err := issuer.CertapiV1alpha1().ServingCertRequests(ns).CreateServingCert(ctx, "restarts", body, metav1.CreateOptions{})
		return err
	}
	// Setup only, before any restart: the Role has to reach kube-apiserver's RBAC first.
	e2etest.Eventually(t, time.Minute, "the issuer ServiceAccount to get a certificate", func(context.Context) (bool, error) {
		return issueOnce() == nil, nil
	})

	var (
		mu                  sync.Mutex
		ok, denied, other   int
		deniedErrs, samples []string
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				err := issueOnce()
				mu.Lock()
				switch {
				case err == nil:
					ok++
				case apierrors.IsUnauthorized(err) || apierrors.IsForbidden(err):
					denied++
					deniedErrs = append(deniedErrs, err.Error())
				default:
					other++
					if len(samples) < 3 {
						samples = append(samples, err.Error())
					}
				}
				mu.Unlock()
				if err != nil {
					// Pacing, not synchronisation: while certapi is down kube-apiserver answers at once.
					select {
					case <-stop:
						return
					case <-time.After(10 * time.Millisecond):
					}
				}
			}
		}()
	}
	okCount := func() int {
		mu.Lock()
		defer mu.Unlock()
		return ok
	}
	stopLoad := sync.OnceFunc(func() {
		close(stop)
		wg.Wait()
	})
	defer stopLoad()

	ctx := context.Background()
	for i := range restarts {
		// Graceful, as a rolling update or a node drain stops a replica; then wait for it as users would.
		if err := own.StartCertapi(ctx); err != nil {
			t.Fatalf("restart %d: %v", i+1, err)
		}
		if err := own.WaitAPIServiceAvailable(ctx); err != nil {
			t.Fatalf("restart %d: %v", i+1, err)
		}
		before := okCount()
		e2etest.Eventually(t, time.Minute, fmt.Sprintf("a certificate after restart %d", i+1), func(context.Context) (bool, error) {
			return okCount() > before, nil
		})
	}
	stopLoad()
	t.Logf("%d restarts under load of %d callers: %d certificates, %d answered 401/403, %d other failures (while certapi was down) %q",
		restarts, workers, ok, denied, other, samples)
	if denied > 0 {
		t.Errorf("%d calls of an authorized caller were answered 401 or 403, e.g. %q", denied, deniedErrs[:min(3, len(deniedErrs))])
	}
}
