package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/cmd/plugin"
	"github.com/certapi/certapi/test/e2e/e2etest"
	"github.com/certapi/certapi/test/testhelpers"
)

// TestKubectlCertapiRenew runs `kubectl certapi renew` through the real kubectl against the shared
// control plane: a named request's Secret gets a new key and certificate at once, a label selector picks
// its requests and skips one without a Secret, a named request without spec.secretName is refused, and
// kubectl completes the command and the names of the requests through kubectl_complete-certapi.
func TestKubectlCertapiRenew(t *testing.T) {
	ctx := context.Background()
	c, kube := testhelpers.Clients(t, cp.AdminConfig)
	ns := e2etest.SecretNamespace(t, kube)
	dir := buildPluginNamed(t, "kubectl-certapi")
	run := newPluginRunner(t, dir).kubectl
	certapi := func(args ...string) pluginRun { t.Helper(); return run(append([]string{"certapi"}, args...)...) }

	// web and api deliver into Secrets (api labelled team=a); lib has no Secret (a servingcerts client).
	for _, r := range []struct {
		name, secret string
		labels       map[string]string
	}{{"web", "web-tls", nil}, {"api", "api-tls", map[string]string{"team": "a"}}, {"lib", "", map[string]string{"team": "a"}}} {
		req := e2etest.Request(r.name, r.name)
		req.Labels = r.labels
		req.Spec.SecretName = r.secret
		if _, err := c.CertapiV1alpha1().ServingCertRequests(ns).Create(ctx, req, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	web := waitSecret(t, kube, ns, "web-tls", nil)
	api := waitSecret(t, kube, ns, "api-tls", nil)

	// renewedFrom waits until Secret name holds a certificate other than old's, for the renewal the
	// request asked for, with a new key that belongs to it, and returns it.
	renewedFrom := func(t *testing.T, old *corev1.Secret, request string) *corev1.Secret {
		t.Helper()
		oldSerial := old.Annotations[certapiv1alpha1.AnnotationSerialNumber]
		s := waitSecret(t, kube, ns, old.Name, func(s *corev1.Secret) bool {
			return s.Annotations[certapiv1alpha1.AnnotationSerialNumber] != oldSerial && s.Annotations[certapiv1alpha1.AnnotationRenewRequestedAt] != ""
		})
		req, err := c.CertapiV1alpha1().ServingCertRequests(ns).Get(ctx, request, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		asked := req.Annotations[certapiv1alpha1.AnnotationRenewRequestedAt]
		if _, err := time.Parse(time.RFC3339Nano, asked); err != nil {
			t.Errorf("the request's %s is %q, want an RFC 3339 time: %v", certapiv1alpha1.AnnotationRenewRequestedAt, asked, err)
		}
		if got := s.Annotations[certapiv1alpha1.AnnotationRenewRequestedAt]; got != asked {
			t.Errorf("Secret %s records the renewal %q, the request asked for %q", s.Name, got, asked)
		}
		if bytes.Equal(s.Data[corev1.TLSPrivateKeyKey], old.Data[corev1.TLSPrivateKeyKey]) {
			t.Errorf("Secret %s kept its key", s.Name)
		}
		if _, err := tls.X509KeyPair(s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey]); err != nil {
			t.Errorf("Secret %s: tls.crt and tls.key do not match: %v", s.Name, err)
		}
		return s
	}

	t.Run("renew NAMESPACE/NAME re-issues the Secret now", func(t *testing.T) {
		out := certapi("renew", ns+"/web").succeeded(t).stdout
		if want := "servingcertrequest.certapi.dev/" + ns + "/web renewal requested\n"; out != want {
			t.Errorf("stdout %q, want %q", out, want)
		}
		web = renewedFrom(t, web, "web")
		waitReady(t, c, ns, "web", metav1.ConditionTrue, "Issued")
	})

	t.Run("a selector renews its requests and skips one without a Secret", func(t *testing.T) {
		res := certapi("renew", "-l", "team=a", "-n", ns).succeeded(t)
		if res.stdout != "servingcertrequest.certapi.dev/api renewal requested\n" {
			t.Errorf("stdout %q", res.stdout)
		}
		if !strings.Contains(res.stderr, "servingcertrequest.certapi.dev/lib skipped: no spec.secretName") {
			t.Errorf("stderr does not say lib was skipped:\n%s", res.stderr)
		}
		api = renewedFrom(t, api, "api")
		// The renewal of web was answered once: its Secret has not changed since (api's renewal, queued
		// after web's sync, is done).
		s, err := kube.CoreV1().Secrets(ns).Get(ctx, "web-tls", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := s.Annotations[certapiv1alpha1.AnnotationSerialNumber], web.Annotations[certapiv1alpha1.AnnotationSerialNumber]; got != want {
			t.Errorf("web-tls was re-issued again (serial %s, renewed to %s)", got, want)
		}
	})

	t.Run("bad input is refused with what is accepted", func(t *testing.T) {
		certapi("renew", "lib", "-n", ns).failedWith(t, "ServingCertRequest "+ns+"/lib has no spec.secretName")
		certapi("renew").failedWith(t, "name at least one ServingCertRequest (NAME or NAMESPACE/NAME), or select them with --all or -l SELECTOR")
		certapi("renew", "web", "--all").failedWith(t, "not both")
		certapi("renew", "web", "-A").failedWith(t, "-A goes with --all or -l")
		certapi("renew", "Web_1", "-n", ns).failedWith(t, `"Web_1": the name "Web_1" is not valid`)
		certapi("renew", "missing", "-n", ns).failedWith(t, `servingcertrequests.certapi.dev "missing" not found`)
		// The annotation is bounded as spec.forceRotation is: certapi's caches keep its value.
		patch := `{"metadata":{"annotations":{"` + certapiv1alpha1.AnnotationRenewRequestedAt + `":"` + strings.Repeat("x", 257) + `"}}}`
		_, err := c.CertapiV1alpha1().ServingCertRequests(ns).Patch(ctx, "web", types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "metadata.annotations[certapi.dev/renew-requested-at]: Too long") {
			t.Errorf("a 257-character %s: %v, want 422 Too long", certapiv1alpha1.AnnotationRenewRequestedAt, err)
		}
	})

	t.Run("kubectl completes renew and the requests' names", func(t *testing.T) {
		script := certapi("completion", "kubectl-plugin").succeeded(t).stdout
		if script != string(plugin.KubectlCompletionScript("kubectl-certapi", "kubectl certapi")) {
			t.Fatalf("completion kubectl-plugin printed:\n%s", script)
		}
		if err := os.WriteFile(filepath.Join(dir, plugin.KubectlCompletionName("kubectl-certapi")), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		choices := func(args ...string) []string {
			t.Helper()
			out := run(append([]string{"__complete", "certapi"}, args...)...).succeeded(t).stdout
			var names []string
			for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
				names = append(names, strings.SplitN(line, "\t", 2)[0])
			}
			return names
		}
		if got := choices("re"); !slices.Contains(got, "renew") {
			t.Errorf("kubectl __complete certapi re: %v, want renew", got)
		}
		// Requests with a Secret; lib has none. The last line is cobra's directive, :4 (no file names).
		if got, want := choices("renew", "-n", ns, ""), []string{"api", "web", ":4"}; !slices.Equal(got, want) {
			t.Errorf("kubectl __complete certapi renew -n %s '': %v, want %v", ns, got, want)
		}
		if got := choices("renew", "--al"); !slices.Contains(got, "--all") || !slices.Contains(got, "--all-namespaces") {
			t.Errorf("kubectl __complete certapi renew --al: %v", got)
		}
		for _, shell := range []string{"bash", "zsh", "fish", "powershell"} {
			if out := certapi("completion", shell).succeeded(t).stdout; !strings.Contains(out, "kubectl-certapi") {
				t.Errorf("completion %s does not complete kubectl-certapi:\n%s", shell, e2etest.Tail(out, 5))
			}
		}
		certapi("completion", "tcsh").failedWith(t, `invalid argument "tcsh"`)
	})
}
