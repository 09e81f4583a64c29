package injector_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/controller/injector"
	"github.com/certapi/certapi/pkg/signer/signertest"
)

// injectionBound is DESIGN.md's "new and changed objects are injected within a second".
const injectionBound = time.Second

// fightLimit is the injector's fight limit (fightLimit in pkg/controller/injector, one of the figures
// DESIGN.md promises): it restores an overwritten caBundle at most this many times within a minute,
// then reports a conflict and leaves the object alone for the cool-down.
const fightLimit = 3

// leftAlone is how long a test watches an object to see that certapi does not write it: longer than
// injectionBound, so a write that was going to happen would have.
const leftAlone = 1500 * time.Millisecond

// certapiEntry returns certapi's managedFields entry of an object, or nil.
func certapiEntry(entries []metav1.ManagedFieldsEntry) *metav1.ManagedFieldsEntry {
	for i := range entries {
		if entries[i].Manager == certapiv1alpha1.FieldManager {
			return &entries[i]
		}
	}
	return nil
}

func TestWebhookConfigurations(t *testing.T) {
	bundle := signertest.Bundle(t, 1)
	e := newEnv(t, bundle)
	e.start(nil)

	vwc := webhookManifest(injector.KindValidatingWebhookConfiguration, "inj-vwc", optIn, "a.example.com", "b.example.com", "url:c.example.com")
	t0 := time.Now()
	e.mustApply(injector.KindValidatingWebhookConfiguration, "inj-vwc", vwc, "owner")
	took := e.waitFor("the bundle in the ValidatingWebhookConfiguration", injectionBound, e.vwcHolds("inj-vwc", bundle))
	t.Logf("ValidatingWebhookConfiguration injected %s after its create returned (%s after it was sent)", took, time.Since(t0))

	mwc := webhookManifest(injector.KindMutatingWebhookConfiguration, "inj-mwc", optIn, "m.example.com", "url:u.example.com")
	t0 = time.Now()
	e.mustApply(injector.KindMutatingWebhookConfiguration, "inj-mwc", mwc, "owner")
	took = e.waitFor("the bundle in the MutatingWebhookConfiguration", injectionBound, func(ctx context.Context) (bool, error) {
		o, err := e.kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "inj-mwc", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return bytes.Equal(o.Webhooks[0].ClientConfig.CABundle, bundle), nil
	})
	t.Logf("MutatingWebhookConfiguration injected %s after its create returned (%s after it was sent)", took, time.Since(t0))

	// url entries untouched.
	o := e.vwc("inj-vwc")
	if cb := o.Webhooks[2].ClientConfig.CABundle; cb != nil {
		t.Errorf("url webhook got a caBundle of %d bytes", len(cb))
	}
	m, err := e.kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(context.Background(), "inj-mwc", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cb := m.Webhooks[1].ClientConfig.CABundle; cb != nil {
		t.Errorf("url webhook of the MutatingWebhookConfiguration got a caBundle of %d bytes", len(cb))
	}

	// managedFields: certapi, an Update, owning the two caBundles and nothing else.
	entry := certapiEntry(o.ManagedFields)
	if entry == nil {
		t.Fatalf("no managedFields entry for %q: %+v", certapiv1alpha1.FieldManager, o.ManagedFields)
	}
	want := `{"f:webhooks":{"k:{\"name\":\"a.example.com\"}":{"f:clientConfig":{"f:caBundle":{}}},"k:{\"name\":\"b.example.com\"}":{"f:clientConfig":{"f:caBundle":{}}}}}`
	if entry.Operation != metav1.ManagedFieldsOperationUpdate || string(entry.FieldsV1.Raw) != want {
		t.Errorf("certapi's managedFields entry: %s %s; want Update %s", entry.Operation, entry.FieldsV1.Raw, want)
	}

	// Re-applying the original manifest (no caBundle) server-side as another manager leaves the caBundle
	// in place, and certapi does not write again.
	mwcWrites := e.writes.patches("/inj-mwc")
	if err := e.apply(injector.KindMutatingWebhookConfiguration, "inj-mwc", mwc, "argocd-controller"); err != nil {
		t.Fatalf("re-applying as argocd-controller: %v", err)
	}
	m, err = e.kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(context.Background(), "inj-mwc", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(m.Webhooks[0].ClientConfig.CABundle, bundle) {
		t.Errorf("re-apply without caBundle dropped it: %d bytes", len(m.Webhooks[0].ClientConfig.CABundle))
	}
	e.never("certapi writes the MutatingWebhookConfiguration again after the re-apply", leftAlone, func(context.Context) (bool, error) {
		return e.writes.patches("/inj-mwc") != mwcWrites, nil
	})

	// The owner, who applies server-side, removes one of the two service webhooks (kubernetes#128102:
	// certapi owns only the caBundle inside the entry, not the entry).
	if err := e.apply(injector.KindValidatingWebhookConfiguration, "inj-vwc",
		webhookManifest(injector.KindValidatingWebhookConfiguration, "inj-vwc", optIn, "b.example.com", "url:c.example.com"), "owner"); err != nil {
		t.Fatalf("the owner cannot remove a webhook entry by server-side apply: %v", err)
	}
	o = e.vwc("inj-vwc")
	if len(o.Webhooks) != 2 || o.Webhooks[0].Name != "b.example.com" || !bytes.Equal(o.Webhooks[0].ClientConfig.CABundle, bundle) {
		t.Errorf("after removing a.example.com: %d webhooks, first %q with a %d-byte caBundle", len(o.Webhooks), o.Webhooks[0].Name, len(o.Webhooks[0].ClientConfig.CABundle))
	}
	e.waitFor("both up to date, and AllHold", injectionBound, func(context.Context) (bool, error) {
		s := e.inj.Summary()
		return s.Targets == 2 && s.UpToDate == 2 && e.inj.AllHold(bundle), nil
	})
}

func TestCustomResourceDefinitions(t *testing.T) {
	bundle := signertest.Bundle(t, 1)
	e := newEnv(t, bundle)
	e.start(nil)
	ctx := context.Background()
	crds := e.ext.ApiextensionsV1().CustomResourceDefinitions()
	holds := func(name string) func(context.Context) (bool, error) {
		return func(ctx context.Context) (bool, error) {
			c, err := crds.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			cv := c.Spec.Conversion
			return cv != nil && cv.Webhook != nil && cv.Webhook.ClientConfig != nil && bytes.Equal(cv.Webhook.ClientConfig.CABundle, bundle), nil
		}
	}

	// Webhook conversion, applied server-side by its owner.
	applied := crdManifest("appliedconvs", optIn, webhookConversion)
	t0 := time.Now()
	e.mustApply(injector.KindCustomResourceDefinition, "appliedconvs.example.com", applied, "owner")
	took := e.waitFor("the bundle in the applied CRD", injectionBound, holds("appliedconvs.example.com"))
	t.Logf("CRD injected %s after its apply returned (%s after it was sent)", took, time.Since(t0))
	// certapi gave up its managedFields entry (the owner applies spec.conversion server-side).
	e.waitFor("certapi's managedFields entry to go", injectionBound, func(ctx context.Context) (bool, error) {
		c, err := crds.Get(ctx, "appliedconvs.example.com", metav1.GetOptions{})
		return err == nil && certapiEntry(c.ManagedFields) == nil, err
	})
	if n := e.writes.patches("/appliedconvs.example.com"); n != 2 {
		t.Errorf("%d writes to the applied CRD; want 2 (the caBundle, then the managedFields entry)", n)
	}
	// Re-applying the original manifest keeps the caBundle.
	if err := e.apply(injector.KindCustomResourceDefinition, "appliedconvs.example.com", applied, "owner"); err != nil {
		t.Fatal(err)
	}
	if ok, _ := holds("appliedconvs.example.com")(ctx); !ok {
		t.Error("re-applying the original manifest dropped the caBundle")
	}

	// Webhook conversion, created by an update-style client (Helm 3, client-side kubectl): certapi keeps
	// its managedFields entry for Argo CD's managedFieldsManagers.
	var created apiextensionsv1.CustomResourceDefinition
	if err := json.Unmarshal([]byte(crdManifest("createdconvs", optIn, webhookConversion)), &created); err != nil {
		t.Fatal(err)
	}
	if _, err := crds.Create(ctx, &created, metav1.CreateOptions{FieldManager: "helm"}); err != nil {
		t.Fatal(err)
	}
	e.cleanup(injector.KindCustomResourceDefinition, "createdconvs.example.com")
	e.waitFor("the bundle in the created CRD", injectionBound, holds("createdconvs.example.com"))
	c, err := crds.Get(ctx, "createdconvs.example.com", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"f:spec":{"f:conversion":{"f:webhook":{"f:clientConfig":{"f:caBundle":{}}}}}}`
	if entry := certapiEntry(c.ManagedFields); entry == nil || entry.Operation != metav1.ManagedFieldsOperationUpdate || string(entry.FieldsV1.Raw) != want {
		t.Errorf("certapi's managedFields entry on the created CRD = %+v; want Update %s", entry, want)
	}

	// No conversion: skipped, never written.
	e.mustApply(injector.KindCustomResourceDefinition, "plains.example.com", crdManifest("plains", optIn, ""), "owner")
	e.waitFor("the CRD without conversion to be skipped", injectionBound, func(context.Context) (bool, error) {
		p := e.problem(injector.KindCustomResourceDefinition, "plains.example.com")
		return p != nil && p.State == injector.StateSkipped && p.Reason == injector.ReasonNothingToInject, nil
	})
	if n := e.writes.patches("/plains.example.com"); n != 0 {
		t.Errorf("%d writes to the CRD without conversion", n)
	}

	// Byte-stable: a Trigger with the same bundle writes nothing.
	before := e.writes.patches(".example.com")
	e.inj.Trigger()
	e.never("certapi rewrites a CRD that holds the bundle", leftAlone, func(context.Context) (bool, error) {
		return e.writes.patches(".example.com") != before, nil
	})

	// The server-side apply owner switches conversion to None (kubernetes#108081/#128102 trap).
	if err := e.apply(injector.KindCustomResourceDefinition, "appliedconvs.example.com", crdManifest("appliedconvs", optIn, `{"strategy":"None"}`), "owner"); err != nil {
		t.Fatalf("the owner cannot switch conversion to None by server-side apply: %v", err)
	}
	c, err = crds.Get(ctx, "appliedconvs.example.com", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Spec.Conversion.Strategy != apiextensionsv1.NoneConverter || c.Spec.Conversion.Webhook != nil {
		t.Errorf("conversion after the switch = %+v", c.Spec.Conversion)
	}
	e.waitFor("the switched CRD to be skipped", injectionBound, func(context.Context) (bool, error) {
		p := e.problem(injector.KindCustomResourceDefinition, "appliedconvs.example.com")
		return p != nil && p.State == injector.StateSkipped, nil
	})
	s := e.inj.Summary()
	if s.Targets != 3 || s.UpToDate != 1 || s.Skipped != 2 || s.Conflicts != 0 {
		t.Errorf("summary = %+v", s)
	}
}

func TestAPIServices(t *testing.T) {
	bundle := signertest.Bundle(t, 1)
	e := newEnv(t, bundle)
	e.start(nil)
	svc := `"service":{"namespace":"ext","name":"ext-api","port":8443}`
	e.mustApply(injector.KindAPIService, "v1.injected.example.com", apiServiceManifest("injected.example.com", optIn, svc), "owner")
	e.mustApply(injector.KindAPIService, "v1.local.example.com", apiServiceManifest("local.example.com", optIn, ""), "owner")
	e.mustApply(injector.KindAPIService, "v1.insecure.example.com", apiServiceManifest("insecure.example.com", optIn, svc+`,"insecureSkipTLSVerify":true`), "owner")

	took := e.waitFor("the bundle in the APIService", injectionBound, func(ctx context.Context) (bool, error) {
		a, err := e.agg.ApiregistrationV1().APIServices().Get(ctx, "v1.injected.example.com", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return bytes.Equal(a.Spec.CABundle, bundle), nil
	})
	t.Logf("APIService injected %s after its apply returned", took)
	a, err := e.agg.ApiregistrationV1().APIServices().Get(context.Background(), "v1.injected.example.com", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if entry := certapiEntry(a.ManagedFields); entry == nil || string(entry.FieldsV1.Raw) != `{"f:spec":{"f:caBundle":{}}}` {
		t.Errorf("certapi's managedFields entry = %+v", entry)
	}
	e.waitFor("local and insecure APIServices skipped", injectionBound, func(context.Context) (bool, error) {
		s := e.inj.Summary()
		return s.Targets == 3 && s.UpToDate == 1 && s.Skipped == 2, nil
	})
	for _, name := range []string{"v1.local.example.com", "v1.insecure.example.com"} {
		if n := e.writes.patches("/" + name); n != 0 {
			t.Errorf("%d writes to %s", n, name)
		}
		if p := e.problem(injector.KindAPIService, name); p == nil || p.Reason != injector.ReasonNothingToInject {
			t.Errorf("%s: problem = %+v", name, p)
		}
	}
}

// overwrite writes another bundle into VWC name's first webhook, as field manager "intruder".
func (e *env) overwrite(name string, other []byte) {
	e.t.Helper()
	b, _ := json.Marshal(other)
	if err := e.patch(injector.KindValidatingWebhookConfiguration, name, "intruder",
		fmt.Sprintf(`[{"op":"replace","path":"/webhooks/0/clientConfig/caBundle","value":%s}]`, b)); err != nil {
		e.t.Fatalf("overwriting: %v", err)
	}
}

func TestDriftAndFight(t *testing.T) {
	bundle, other := signertest.Bundle(t, 1), signertest.Bundle(t, 1)
	e := newEnv(t, bundle)
	e.start(nil)
	e.mustApply(injector.KindValidatingWebhookConfiguration, "fought", webhookManifest(injector.KindValidatingWebhookConfiguration, "fought", optIn, "a.example.com"), "owner")
	e.waitFor("the first injection", injectionBound, e.vwcHolds("fought", bundle))

	// Drift is restored within a second: fightLimit (3) times.
	for n := 1; n <= fightLimit; n++ {
		e.overwrite("fought", other)
		took := e.waitFor(fmt.Sprintf("restoration %d", n), injectionBound, e.vwcHolds("fought", bundle))
		t.Logf("restoration %d took %s", n, took)
	}
	if n := e.writes.patches("/fought"); n != 1+fightLimit {
		t.Errorf("%d writes so far; want %d (the injection and %d restorations)", n, 1+fightLimit, fightLimit)
	}

	// The next overwrite within the minute is a fight: reported, not fought.
	e.overwrite("fought", other)
	e.waitFor("the conflict to be reported", injectionBound, func(context.Context) (bool, error) {
		p := e.problem(injector.KindValidatingWebhookConfiguration, "fought")
		return p != nil && p.State == injector.StateConflict && p.Reason == injector.ReasonCABundleOverwritten, nil
	})
	p := e.problem(injector.KindValidatingWebhookConfiguration, "fought")
	if !strings.Contains(p.Message, `"intruder"`) || !strings.Contains(p.Message, "managedFieldsManagers") {
		t.Errorf("conflict message does not name the writer or the fix: %s", p.Message)
	}
	e.waitFor("a Warning Event about the fight", 5*time.Second, func(ctx context.Context) (bool, error) {
		ev, err := e.warningEvent(ctx, injector.KindValidatingWebhookConfiguration, "fought", injector.ReasonCABundleOverwritten)
		return ev != nil && ev.controller == injector.ReportingController, err
	})
	for range 3 {
		e.overwrite("fought", other) // the intruder goes on
	}
	e.never("certapi fights the intruder", leftAlone, func(ctx context.Context) (bool, error) {
		return e.vwcHolds("fought", bundle)(ctx)
	})
	if n := e.writes.patches("/fought"); n != 1+fightLimit {
		t.Errorf("%d writes to the fought-over object; want %d: certapi fought on", n, 1+fightLimit)
	}
	s := e.inj.Summary()
	if s.Conflicts != 1 || s.UpToDate != 0 {
		t.Errorf("summary = %+v", s)
	}
	if e.inj.AllHold(bundle) != true {
		t.Error("AllHold is false; an object in conflict must not block the rotation gate")
	}

	// Changing an annotation ends the cool-down: certapi looks again and restores.
	if err := e.patch(injector.KindValidatingWebhookConfiguration, "fought", "owner", `{"metadata":{"annotations":{"example.com/retry":"1"}}}`); err != nil {
		t.Fatal(err)
	}
	e.waitFor("the restoration after an annotation change", injectionBound, e.vwcHolds("fought", bundle))
	e.waitFor("the conflict to clear", injectionBound, func(context.Context) (bool, error) {
		return e.problem(injector.KindValidatingWebhookConfiguration, "fought") == nil, nil
	})
}

func TestFightCooldown(t *testing.T) {
	bundle, other := signertest.Bundle(t, 1), signertest.Bundle(t, 1)
	e := newEnv(t, bundle)
	const cooldown = 2 * time.Second
	e.start(func(o *injector.Options) { o.ConflictCooldown = cooldown })
	e.mustApply(injector.KindValidatingWebhookConfiguration, "cooled", webhookManifest(injector.KindValidatingWebhookConfiguration, "cooled", optIn, "a.example.com"), "owner")
	e.waitFor("the first injection", injectionBound, e.vwcHolds("cooled", bundle))
	for n := 1; n <= fightLimit; n++ {
		e.overwrite("cooled", other)
		e.waitFor(fmt.Sprintf("restoration %d", n), injectionBound, e.vwcHolds("cooled", bundle))
	}
	e.overwrite("cooled", other)
	e.waitFor("the conflict", injectionBound, func(context.Context) (bool, error) {
		p := e.problem(injector.KindValidatingWebhookConfiguration, "cooled")
		return p != nil && p.State == injector.StateConflict, nil
	})
	t0 := time.Now()
	took := e.waitFor("the restoration after the cool-down", cooldown+injectionBound, e.vwcHolds("cooled", bundle))
	if took < cooldown/2 {
		t.Errorf("restored %s after the conflict; the cool-down is %s", took, cooldown)
	}
	t.Logf("restored %s after the conflict (cool-down %s)", time.Since(t0), cooldown)
}

func TestAnnotationRemoved(t *testing.T) {
	bundle, other := signertest.Bundle(t, 1), signertest.Bundle(t, 1)
	e := newEnv(t, bundle)
	e.source.quiet = true
	e.start(nil)
	e.mustApply(injector.KindValidatingWebhookConfiguration, "given-up", webhookManifest(injector.KindValidatingWebhookConfiguration, "given-up", optIn, "a.example.com"), "owner")
	e.waitFor("the injection", injectionBound, e.vwcHolds("given-up", bundle))

	if err := e.patch(injector.KindValidatingWebhookConfiguration, "given-up", "owner", fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, certapiv1alpha1.AnnotationInjectCABundle)); err != nil {
		t.Fatal(err)
	}
	e.waitFor("the object to leave the Summary", injectionBound, func(context.Context) (bool, error) {
		return e.inj.Summary().Targets == 0, nil
	})
	if o := e.vwc("given-up"); !bytes.Equal(o.Webhooks[0].ClientConfig.CABundle, bundle) {
		t.Error("removing the annotation removed the caBundle")
	}
	writes := e.writes.patches("/given-up")
	e.overwrite("given-up", other)
	e.source.set(signertest.Bundle(t, 1))
	e.inj.Trigger()
	e.never("certapi writes an object that no longer opts in", leftAlone, func(context.Context) (bool, error) {
		return e.writes.patches("/given-up") != writes, nil
	})
	if o := e.vwc("given-up"); !bytes.Equal(o.Webhooks[0].ClientConfig.CABundle, other) {
		t.Error("the caBundle another writer set was changed")
	}
}

func TestOtherInjectors(t *testing.T) {
	bundle := signertest.Bundle(t, 1)
	e := newEnv(t, bundle)
	e.start(nil)
	certManager := map[string]string{certapiv1alpha1.AnnotationInjectCABundle: "true", "cert-manager.io/inject-ca-from": "webhooks/serving-cert"}
	e.mustApply(injector.KindValidatingWebhookConfiguration, "claimed", webhookManifest(injector.KindValidatingWebhookConfiguration, "claimed", certManager, "a.example.com"), "owner")
	serviceCA := map[string]string{certapiv1alpha1.AnnotationInjectCABundle: "true", "service.beta.openshift.io/inject-cabundle": "true"}
	e.mustApply(injector.KindAPIService, "v1.claimed.example.com", apiServiceManifest("claimed.example.com", serviceCA, `"service":{"namespace":"ext","name":"ext-api"}`), "owner")

	e.waitFor("both refused in the Summary", injectionBound, func(context.Context) (bool, error) {
		s := e.inj.Summary()
		return s.Targets == 2 && s.Conflicts == 2, nil
	})
	for _, c := range []struct {
		kind  injector.Kind
		name  string
		claim string
	}{
		{injector.KindValidatingWebhookConfiguration, "claimed", "cert-manager.io/inject-ca-from"},
		{injector.KindAPIService, "v1.claimed.example.com", "service.beta.openshift.io/inject-cabundle"},
	} {
		p := e.problem(c.kind, c.name)
		if p == nil || p.Reason != injector.ReasonClaimedByAnotherInjector || !strings.Contains(p.Message, c.claim) {
			t.Errorf("%s %s: problem = %+v", c.kind, c.name, p)
		}
		var ev *eventInfo
		e.waitFor("a Warning Event on "+c.name, 5*time.Second, func(ctx context.Context) (bool, error) {
			var err error
			ev, err = e.warningEvent(ctx, c.kind, c.name, injector.ReasonClaimedByAnotherInjector)
			return ev != nil, err
		})
		if !strings.Contains(ev.note, c.claim) || !strings.Contains(ev.note, certapiv1alpha1.AnnotationInjectCABundle) || ev.controller != injector.ReportingController {
			t.Errorf("Event on %s: %+v", c.name, ev)
		}
		if strings.Contains(ev.note, "PRIVATE KEY") || strings.Contains(ev.note, "BEGIN") {
			t.Errorf("Event on %s carries PEM: %s", c.name, ev.note)
		}
	}
	e.never("certapi writes an object another injector claims", leftAlone, func(context.Context) (bool, error) {
		return e.writes.patches("claimed")+e.writes.patches("claimed.example.com") != 0, nil
	})
	if o := e.vwc("claimed"); o.Webhooks[0].ClientConfig.CABundle != nil {
		t.Error("the claimed ValidatingWebhookConfiguration got a caBundle")
	}

	// Once the other claim is gone, certapi injects.
	if err := e.patch(injector.KindValidatingWebhookConfiguration, "claimed", "owner", `{"metadata":{"annotations":{"cert-manager.io/inject-ca-from":null}}}`); err != nil {
		t.Fatal(err)
	}
	e.waitFor("the injection once cert-manager's annotation is gone", injectionBound, e.vwcHolds("claimed", bundle))
}

func TestTriggerAndSummary(t *testing.T) {
	b1 := signertest.Bundle(t, 1)
	e := newEnv(t, b1)
	// Only Trigger re-checks: the Source does not tell of its changes during the test.
	e.source.quiet = true
	e.start(nil)
	svc := `"service":{"namespace":"ext","name":"ext-api"}`
	e.mustApply(injector.KindValidatingWebhookConfiguration, "t-vwc", webhookManifest(injector.KindValidatingWebhookConfiguration, "t-vwc", optIn, "a.example.com", "b.example.com"), "owner")
	e.mustApply(injector.KindMutatingWebhookConfiguration, "t-mwc-url", webhookManifest(injector.KindMutatingWebhookConfiguration, "t-mwc-url", optIn, "url:u.example.com"), "owner")
	e.mustApply(injector.KindCustomResourceDefinition, "triggers.example.com", crdManifest("triggers", optIn, webhookConversion), "owner")
	e.mustApply(injector.KindAPIService, "v1.trigger.example.com", apiServiceManifest("trigger.example.com", optIn, svc), "owner")
	e.mustApply(injector.KindValidatingWebhookConfiguration, "t-foreign", webhookManifest(injector.KindValidatingWebhookConfiguration, "t-foreign",
		map[string]string{certapiv1alpha1.AnnotationInjectCABundle: "true", "cert-manager.io/inject-apiserver-ca": "true"}, "a.example.com"), "owner")
	// Not opted in: not counted, not touched.
	e.mustApply(injector.KindValidatingWebhookConfiguration, "t-other", webhookManifest(injector.KindValidatingWebhookConfiguration, "t-other", nil, "a.example.com"), "owner")

	e.waitFor("every target up to date with b1", 5*time.Second, func(context.Context) (bool, error) {
		s := e.inj.Summary()
		return s.UpToDate == 3 && e.inj.AllHold(b1), nil
	})
	s := e.inj.Summary()
	if s.Targets != 5 || s.UpToDate != 3 || s.Skipped != 1 || s.Conflicts != 1 || s.Pending != 0 || len(s.Problems) != 2 {
		t.Errorf("summary = %+v", s)
	}

	// A rotation's first step: [Active, Next].
	b2 := append(bytes.Clone(b1), signertest.Bundle(t, 1)...)
	if e.inj.AllHold(b2) {
		t.Fatal("AllHold(b2) before b2 was injected")
	}
	e.source.set(b2)
	t0 := time.Now()
	e.inj.Trigger()
	e.waitFor("AllHold(b2) after Trigger", 5*time.Second, func(context.Context) (bool, error) { return e.inj.AllHold(b2), nil })
	t.Logf("every target holds the new bundle %s after Trigger", time.Since(t0))
	if e.inj.AllHold(b1) {
		t.Error("AllHold(b1) after b2 was injected")
	}
	ctx := context.Background()
	if ok, err := e.vwcHolds("t-vwc", b2)(ctx); !ok {
		t.Errorf("t-vwc does not hold b2 (%v)", err)
	}
	c, err := e.ext.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, "triggers.example.com", metav1.GetOptions{})
	if err != nil || !bytes.Equal(c.Spec.Conversion.Webhook.ClientConfig.CABundle, b2) {
		t.Errorf("the CRD does not hold b2 (%v)", err)
	}
	a, err := e.agg.ApiregistrationV1().APIServices().Get(ctx, "v1.trigger.example.com", metav1.GetOptions{})
	if err != nil || !bytes.Equal(a.Spec.CABundle, b2) {
		t.Errorf("the APIService does not hold b2 (%v)", err)
	}
	for _, name := range []string{"t-foreign", "t-other"} {
		if o := e.vwc(name); o.Webhooks[0].ClientConfig.CABundle != nil {
			t.Errorf("%s got a caBundle", name)
		}
	}
	if n := e.writes.patches("/t-mwc-url"); n != 0 {
		t.Errorf("%d writes to the url-only MutatingWebhookConfiguration", n)
	}
	s = e.inj.Summary()
	if s.Targets != 5 || s.UpToDate != 3 || s.Skipped != 1 || s.Conflicts != 1 {
		t.Errorf("summary after the rotation = %+v", s)
	}
}

func TestWaitsForBundle(t *testing.T) {
	e := newEnv(t, nil) // no bundle yet
	e.start(nil)
	e.mustApply(injector.KindValidatingWebhookConfiguration, "early", webhookManifest(injector.KindValidatingWebhookConfiguration, "early", optIn, "a.example.com"), "owner")
	e.waitFor("the target to wait for a bundle", injectionBound, func(context.Context) (bool, error) {
		p := e.problem(injector.KindValidatingWebhookConfiguration, "early")
		return p != nil && p.Reason == injector.ReasonWaitingForBundle, nil
	})
	if e.inj.AllHold(signertest.Bundle(t, 1)) {
		t.Error("AllHold while a target has no bundle")
	}
	// The Source gets a bundle and says so; Run re-checks without a Trigger.
	bundle := signertest.Bundle(t, 1)
	e.source.set(bundle)
	e.waitFor("the injection once the Source has a bundle", 2*injectionBound, e.vwcHolds("early", bundle))
}
