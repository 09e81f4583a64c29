package e2e

import (
	"bytes"
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/generated/clientset/versioned"
	"github.com/certapi/certapi/pkg/signer"
	"github.com/certapi/certapi/test/e2e/e2etest"
	"github.com/certapi/certapi/test/framework"
	"github.com/certapi/certapi/test/testhelpers"
)

// injectionTarget creates an annotated ValidatingWebhookConfiguration whose one webhook names a Service
// of ns (nothing serves it: it matches no request) and waits until certapi injected a caBundle into it.
func injectionTarget(t *testing.T, kube kubernetes.Interface, ns string) string {
	t.Helper()
	ignore := admissionregistrationv1.Ignore
	none := admissionregistrationv1.SideEffectClassNone
	name := "certapi-e2e-target-" + ns
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{"certapi.dev/inject-ca-bundle": "true"}},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:         "nothing.certapi.test",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Namespace: ns, Name: "nothing"}},
			Rules: []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{"certapi.test"}, APIVersions: []string{"v1"}, Resources: []string{"nothings"}}}},
			FailurePolicy:           &ignore,
			SideEffects:             &none,
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
	if _, err := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(context.Background(), vwc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	injectedBundle(t, kube, name, func([]byte) bool { return true })
	return name
}

// injectedBundle waits until the caBundle certapi injected into the ValidatingWebhookConfiguration name
// satisfies ok, and returns it.
func injectedBundle(t *testing.T, kube kubernetes.Interface, name string, ok func([]byte) bool) []byte {
	t.Helper()
	var got []byte
	e2etest.Eventually(t, 30*time.Second, "the caBundle injected into "+name, func(ctx context.Context) (bool, error) {
		vwc, err := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		got = vwc.Webhooks[0].ClientConfig.CABundle
		return len(got) > 0 && ok(got), nil
	})
	return got
}

// holdsCA reports whether the PEM bundle holds the CA certificate with serial.
func holdsCA(bundle []byte, serial string) bool {
	certs, err := signer.ParseBundle(bundle)
	if err != nil {
		return false
	}
	for _, c := range certs {
		if signer.FormatSerialNumber(c.SerialNumber) == serial {
			return true
		}
	}
	return false
}

// checkNameConstraints fails t unless every CA certificate in the PEM bundle carries certapi's critical
// name constraints: DNS names under "svc" and "svc.<cluster domain>" only, and no IP address at all.
// A verifier that enforces them (Go's, so kube-apiserver's) then rejects a certificate of these CAs for
// any other name, even one signed by mistake.
func checkNameConstraints(t *testing.T, what string, bundle []byte) {
	t.Helper()
	certs, err := signer.ParseBundle(bundle)
	if err != nil || len(certs) == 0 {
		t.Fatalf("%s: parsing the bundle: %d certificates, %v", what, len(certs), err)
	}
	for _, c := range certs {
		serial := signer.FormatSerialNumber(c.SerialNumber)
		if !c.PermittedDNSDomainsCritical || !slices.Equal(c.PermittedDNSDomains, []string{"svc", "svc." + framework.ClusterDomain}) {
			t.Errorf("%s: CA %s permits DNS names %q (critical %v); want exactly svc and svc.%s, critical",
				what, serial, c.PermittedDNSDomains, c.PermittedDNSDomainsCritical, framework.ClusterDomain)
		}
		var v4, v6 bool
		for _, r := range c.ExcludedIPRanges {
			ones, bits := r.Mask.Size()
			v4 = v4 || (ones == 0 && bits == 32)
			v6 = v6 || (ones == 0 && bits == 128)
		}
		if !v4 || !v6 {
			t.Errorf("%s: CA %s excludes IP ranges %v; want every IPv4 and IPv6 address", what, serial, c.ExcludedIPRanges)
		}
	}
}

// distrust sets spec.distrust.
func distrust(t *testing.T, c versioned.Interface, value string) {
	t.Helper()
	e2etest.UpdateCA(t, c, func(ca *certapiv1alpha1.CertificateAuthority) { ca.Spec.Distrust = value })
}

// TestDistrustIgnoresSecretsNobodyReissues: a labelled Secret that is not certapi's, and one whose
// request was deleted, both holding certificates of the distrusted CA, do not hold the distrust open: the
// distrusted CA leaves every injected bundle and every delivered ca.crt within seconds of the live
// Secrets being re-issued, and the status and an Event name the Secrets left behind.
func TestDistrustIgnoresSecretsNobodyReissues(t *testing.T) {
	ctx := context.Background()
	own := framework.StartT(t, framework.Options{})
	c, kube := testhelpers.Clients(t, own.AdminConfig)
	ns := e2etest.Namespace(t, kube)
	old := e2etest.ActiveSerial(t, own)
	target := injectionTarget(t, kube, ns)
	// The CA certapi serves, and every CA it injects, is name-constrained to the cluster's Services.
	checkNameConstraints(t, "status.caBundle", []byte(e2etest.CAObject(t, c).Status.CABundle))
	checkNameConstraints(t, "the injected caBundle", injectedBundle(t, kube, target, func([]byte) bool { return true }))

	deliveredRequest(t, c, kube, ns, "live")
	deliveredRequest(t, c, kube, ns, "gone")
	if err := c.CertapiV1alpha1().ServingCertRequests(ns).Delete(ctx, "gone", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// Anyone may put certapi's label on a Secret; this one holds a certificate of the soon-distrusted CA.
	live, err := kube.CoreV1().Secrets(ns).Get(ctx, "live-tls", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	foreign := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "foreign", Labels: map[string]string{"certapi.dev/managed": "true"}},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{"tls.crt": live.Data["tls.crt"], "tls.key": live.Data["tls.key"], "ca.crt": live.Data["ca.crt"]},
	}
	if _, err := kube.CoreV1().Secrets(ns).Create(ctx, foreign, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	distrust(t, c, "leaked")
	// The live Secret is re-issued by the new CA...
	e2etest.Eventually(t, 30*time.Second, "the live Secret to be re-issued by the new CA", func(ctx context.Context) (bool, error) {
		s, err := kube.CoreV1().Secrets(ns).Get(ctx, "live-tls", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		active := e2etest.CAObject(t, c).Status.Active.SerialNumber
		return active != old && e2etest.IssuerSerialOf(t, string(s.Data["tls.crt"]), string(s.Data["ca.crt"])) == active, nil
	})
	reissued := time.Now()
	// ...and within seconds the distrusted CA is gone from the CA's bundle, every injected bundle and
	// every delivered ca.crt, although two labelled Secrets still hold its certificates.
	e2etest.Eventually(t, 30*time.Second, "the distrusted CA to leave the CertificateAuthority's bundle", func(context.Context) (bool, error) {
		return !holdsCA([]byte(e2etest.CAObject(t, c).Status.CABundle), old), nil
	})
	afterDistrust := injectedBundle(t, kube, target, func(b []byte) bool { return !holdsCA(b, old) })
	waitSecret(t, kube, ns, "live-tls", func(s *corev1.Secret) bool { return !holdsCA(s.Data["ca.crt"], old) })
	t.Logf("the distrusted CA left every bundle %s after the live Secret was re-issued", time.Since(reissued).Round(time.Millisecond))
	// The CA the distrust made is name-constrained like the first.
	checkNameConstraints(t, "the injected caBundle after the distrust", afterDistrust)

	// The Secrets left behind are untouched, and named in the status and an Event.
	for _, name := range []string{"foreign", "gone-tls"} {
		s, err := kube.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(s.Data["tls.crt"], live.Data["tls.crt"]) && name == "foreign" {
			t.Errorf("certapi wrote the foreign Secret")
		}
		if !holdsCA(s.Data["ca.crt"], old) {
			t.Errorf("certapi re-issued Secret %s, which no request names", name)
		}
	}
	st := e2etest.CAObject(t, c).Status
	if st.Distrust == nil || st.Distrust.Completion != certapiv1alpha1.DistrustCompletionReissued || st.Distrust.CompletedAt == nil {
		t.Fatalf("status.distrust %+v: want completed, Reissued", st.Distrust)
	}
	um := st.Distrust.UnmanagedSecrets
	if um == nil || um.Count != 2 || !strings.Contains(strings.Join(um.Names, ","), ns+"/foreign") || !strings.Contains(strings.Join(um.Names, ","), ns+"/gone-tls") {
		t.Errorf("status.distrust.unmanagedSecrets %+v: want %s/foreign and %s/gone-tls", um, ns, ns)
	}
	waitCAEvents(t, kube, corev1.EventTypeWarning, "Distrust", "DistrustUnmanagedSecrets")
	waitCAEvents(t, kube, corev1.EventTypeNormal, "DropDistrusted")
}

// freezeSecret makes kube-apiserver refuse every update of Secret ns/name, for anyone, with a
// ValidatingAdmissionPolicy, and waits until it does.
func freezeSecret(t *testing.T, kube kubernetes.Interface, ns, name string) {
	t.Helper()
	ctx := context.Background()
	policyName := "certapi-e2e-freeze-" + ns
	fail := admissionregistrationv1.Fail
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: policyName},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionregistrationv1.MatchResources{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}},
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
					ResourceNames: []string{name},
					RuleWithOperations: admissionregistrationv1.RuleWithOperations{
						Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
						Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"secrets"}},
					},
				}},
			},
			Validations: []admissionregistrationv1.Validation{{Expression: "false", Message: "frozen by the e2e test"}},
		},
	}
	if _, err := kube.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: policyName},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: policyName,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}},
	}
	if _, err := kube.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = kube.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(context.Background(), policyName, metav1.DeleteOptions{})
		_ = kube.AdmissionregistrationV1().ValidatingAdmissionPolicies().Delete(context.Background(), policyName, metav1.DeleteOptions{})
	})
	e2etest.Eventually(t, 30*time.Second, "the policy to freeze Secret "+name, func(ctx context.Context) (bool, error) {
		s, err := kube.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		s.Labels["certapi.test/probe"] = "x"
		_, err = kube.CoreV1().Secrets(ns).Update(ctx, s, metav1.UpdateOptions{})
		return err != nil && strings.Contains(err.Error(), "frozen by the e2e test"), nil
	})
}

// TestDistrustDeadlineForcesTheDrop: a Secret certapi delivers but cannot re-issue (a policy refuses
// every update of it) holds a distrust open, and the status says so, until --distrust-deadline: then
// the distrusted CA leaves every bundle regardless, with a Warning Event and a log line.
func TestDistrustDeadlineForcesTheDrop(t *testing.T) {
	own := framework.StartT(t, framework.Options{CertapiArgs: []string{"--distrust-deadline=20s"}})
	c, kube := testhelpers.Clients(t, own.AdminConfig)
	ns := e2etest.Namespace(t, kube)
	old := e2etest.ActiveSerial(t, own)
	target := injectionTarget(t, kube, ns)
	deliveredRequest(t, c, kube, ns, "live")
	deliveredRequest(t, c, kube, ns, "stuck")
	freezeSecret(t, kube, ns, "stuck-tls")

	distrust(t, c, "leaked")
	// Pending: the status says which CA is distrusted, what the distrust waits for, and until when.
	var pending *certapiv1alpha1.CertificateAuthorityStatus
	e2etest.Eventually(t, 15*time.Second, "status.distrust to name the Secret it waits for", func(context.Context) (bool, error) {
		st := e2etest.CAObject(t, c).Status
		d := st.Distrust
		if d == nil || d.CompletedAt != nil || d.PendingSecrets == nil || !slices.Equal(d.PendingSecrets.Names, []string{ns + "/stuck-tls"}) {
			return false, nil
		}
		pending = &st
		return true, nil
	})
	d := pending.Distrust
	if len(d.Distrusted) != 1 || d.Distrusted[0].SerialNumber != old || d.Deadline == nil || d.Deadline.Sub(d.StartedAt.Time) != 20*time.Second {
		t.Errorf("status.distrust %+v: want CA %s distrusted, deadline 20s after the start", d, old)
	}
	var distrusted bool
	for _, cert := range pending.Certificates {
		distrusted = distrusted || (cert.SerialNumber == old && cert.Role == certapiv1alpha1.CARoleRetiring && cert.Distrusted)
	}
	if !distrusted {
		t.Errorf("status.certificates %+v: want %s Retiring and distrusted", pending.Certificates, old)
	}
	if cond := meta.FindStatusCondition(pending.Conditions, certapiv1alpha1.ConditionRotating); cond == nil ||
		cond.Reason != certapiv1alpha1.RotatingReasonDistrusted || !strings.Contains(cond.Message, ns+"/stuck-tls") || !strings.Contains(cond.Message, "deadline") {
		t.Errorf("Rotating condition %+v: want it to say the distrust waits for %s/stuck-tls until the deadline", cond, ns)
	}

	// At the deadline the distrusted CA leaves every bundle, although stuck-tls still holds its certificate.
	e2etest.Eventually(t, 60*time.Second, "the distrusted CA to leave the CertificateAuthority's bundle at the deadline", func(context.Context) (bool, error) {
		return !holdsCA([]byte(e2etest.CAObject(t, c).Status.CABundle), old), nil
	})
	injectedBundle(t, kube, target, func(b []byte) bool { return !holdsCA(b, old) })
	waitSecret(t, kube, ns, "live-tls", func(s *corev1.Secret) bool { return !holdsCA(s.Data["ca.crt"], old) })
	stuck, err := kube.CoreV1().Secrets(ns).Get(context.Background(), "stuck-tls", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := e2etest.IssuerSerialOf(t, string(stuck.Data["tls.crt"]), string(stuck.Data["ca.crt"])); got != old {
		t.Fatalf("stuck-tls was re-issued (by %s): the policy did not hold it back", got)
	}
	d = e2etest.CAObject(t, c).Status.Distrust
	if d == nil || d.Completion != certapiv1alpha1.DistrustCompletionDeadline || d.CompletedAt == nil ||
		d.PendingSecrets == nil || !slices.Equal(d.PendingSecrets.Names, []string{ns + "/stuck-tls"}) {
		t.Errorf("status.distrust %+v: want completed by Deadline, stuck-tls left behind", d)
	}
	if cond := meta.FindStatusCondition(e2etest.CAObject(t, c).Status.Conditions, certapiv1alpha1.ConditionRotating); cond == nil || cond.Status != metav1.ConditionFalse {
		t.Errorf("Rotating condition %+v after the deadline: want False", cond)
	}
	waitCAEvents(t, kube, corev1.EventTypeWarning, "Distrust", "DistrustDeadline")
	// certapi does not compact an etcd it does not own (--etcd-servers): it says what the operator must run.
	e2etest.Eventually(t, 30*time.Second, "the HistoryErased condition to leave the erasure to the operator", func(context.Context) (bool, error) {
		cond := meta.FindStatusCondition(e2etest.CAObject(t, c).Status.Conditions, certapiv1alpha1.ConditionHistoryErased)
		return cond != nil && cond.Status == metav1.ConditionFalse && cond.Reason == certapiv1alpha1.HistoryErasedReasonExternalEtcd &&
			strings.Contains(cond.Message, "etcdctl compact"), nil
	})
	data, err := os.ReadFile(own.Logs()[framework.ProcessCertapi])
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), "WARNING: CA rotation step") || !strings.Contains(string(data), "step=\"DistrustDeadline\"") {
		t.Error("certapi's log has no WARNING line for the distrust deadline")
	}
}
