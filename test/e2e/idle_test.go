package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/test/e2e/e2etest"
	"github.com/certapi/certapi/test/framework"
	"github.com/certapi/certapi/test/testhelpers"
)

// idleWindow is how long an idle certapi is watched for API calls: the minute the docs' figure speaks of.
const idleWindow = time.Minute

// TestIdleMakesNoAPICalls: once certapi has done its work (a request delivered into a Secret, a webhook
// configuration injected, its own APIService injected and its serving certificate issued) and reported
// a request in conflict with a Secret that is not its own, it makes no request at all to kube-apiserver
// or to itself for idleWindow: every loop waits for a pushed change or a timer, none polls (the conflict
// is woken by a watch of that Secret, which the test then hands over). The figure is certapi's own rest_client_requests_total, summed over hosts,
// codes and methods.
func TestIdleMakesNoAPICalls(t *testing.T) {
	// -v=6 logs every request certapi makes, so a failure shows which one it was.
	own := framework.StartT(t, framework.Options{CertapiArgs: []string{"-v=6"}})
	ctx := context.Background()
	c, kube := testhelpers.Clients(t, own.AdminConfig)
	ns := e2etest.SecretNamespace(t, kube)
	req := e2etest.Request("idle", "idle")
	req.Spec.SecretName = "idle-tls"
	if _, err := c.CertapiV1alpha1().ServingCertRequests(ns).Create(ctx, req, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A Secret certapi did not write, and a request that names it: a conflict until it is handed over.
	foreign := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "taken-tls"}, Type: corev1.SecretTypeOpaque, Data: map[string][]byte{"x": []byte("y")}}
	if _, err := kube.CoreV1().Secrets(ns).Create(ctx, foreign, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	taken := e2etest.Request("taken", "taken")
	taken.Spec.SecretName = "taken-tls"
	if _, err := c.CertapiV1alpha1().ServingCertRequests(ns).Create(ctx, taken, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	side := admissionregistrationv1.SideEffectClassNone
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "idle-", Annotations: map[string]string{"certapi.dev/inject-ca-bundle": "true"}},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    "idle.certapi.test",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Namespace: ns, Name: "idle"}},
			SideEffects:             &side,
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
	created, err := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, vwc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(context.Background(), created.Name, metav1.DeleteOptions{})
	})
	e2etest.Eventually(t, 60*time.Second, "the Secret delivered and the webhook configuration injected", func(ctx context.Context) (bool, error) {
		s, err := kube.CoreV1().Secrets(ns).Get(ctx, "idle-tls", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		w, err := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, created.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if len(s.Data["tls.crt"]) == 0 || len(w.Webhooks[0].ClientConfig.CABundle) == 0 {
			return false, nil
		}
		r, err := c.CertapiV1alpha1().ServingCertRequests(ns).Get(ctx, "taken", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		cond := meta.FindStatusCondition(r.Status.Conditions, certapiv1alpha1.ConditionReady)
		return cond != nil && cond.Reason == "SecretConflict", nil
	})

	// Settled: the count stops moving (the status writes and Events of the work above have gone out).
	var before float64
	e2etest.Eventually(t, 30*time.Second, "certapi's API calls to settle", func(ctx context.Context) (bool, error) {
		n, err := restClientRequests(ctx, own)
		if err != nil {
			return false, err
		}
		settled := n == before
		before = n
		if settled {
			return true, nil
		}
		// Sample again a second later.
		t := time.NewTimer(time.Second)
		defer t.Stop()
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		return false, nil
	})

	// Idle: any request in the window fails the test. A review's call and the review's own count are two
	// counters, not read at once: a scrape between them shows a call the next scrape takes back, so a
	// count fails the test when two scrapes in a row show it.
	moved := false // the last scrape showed a call
	err = wait.PollUntilContextTimeout(ctx, time.Second, idleWindow, false, func(ctx context.Context) (bool, error) {
		n, err := restClientRequests(ctx, own)
		if err != nil {
			return false, err
		}
		if n != before && moved {
			return false, fmt.Errorf("certapi made %v API calls while idle", n-before)
		}
		moved = n != before
		return false, nil
	})
	if !wait.Interrupted(err) && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatal(err)
	}
	t.Logf("certapi made no API call of its own in %s of idleness (the count stayed at %v)", idleWindow, before)

	// Deleted by its owner, the Secret is made by certapi at once: the watch of it woke the request.
	handed, err := kube.CoreV1().Secrets(ns).Get(ctx, "taken-tls", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := kube.CoreV1().Secrets(ns).Delete(ctx, "taken-tls", metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &handed.UID}}); err != nil {
		t.Fatal(err)
	}
	e2etest.Eventually(t, 30*time.Second, "the Secret of the request that was in conflict", func(ctx context.Context) (bool, error) {
		s, err := kube.CoreV1().Secrets(ns).Get(ctx, "taken-tls", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		return len(s.Data["tls.crt"]) > 0, nil
	})
}

// restClientRequests is the number of API calls certapi made of its own accord: its
// rest_client_requests_total summed over every label, less the TokenReviews and SubjectAccessReviews it
// made to authenticate and authorize requests made to it (apiserver_delegated_authn_request_total and
// apiserver_delegated_authz_request_total). Those answer callers, not certapi: kube-apiserver fetches
// certapi's OpenAPI every minute, and the test scrapes /metrics, each reviewed whenever the review
// cache has expired.
func restClientRequests(ctx context.Context, own *framework.ControlPlane) (float64, error) {
	client, err := own.CertapiHTTPClient()
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, own.CertapiURL+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("scraping certapi's /metrics: %w", err)
	}
	defer resp.Body.Close()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		sign := 0.0
		switch {
		case strings.HasPrefix(line, "rest_client_requests_total{"):
			sign = 1
		case strings.HasPrefix(line, "apiserver_delegated_authn_request_total"), strings.HasPrefix(line, "apiserver_delegated_authz_request_total"):
			sign = -1
		default:
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			return 0, fmt.Errorf("parsing %q: %w", line, err)
		}
		sum += sign * v
	}
	return sum, sc.Err()
}
