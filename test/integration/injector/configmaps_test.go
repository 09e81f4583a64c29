package injector_test

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/controller/injector"
	"github.com/certapi/certapi/pkg/signer/signertest"
)

// TestConfigMaps: a ConfigMap annotated certapi.dev/inject-ca-bundle: "true" gets the bundle as PEM in
// data["ca.crt"], written like every other target: within a second, under field manager certapi owning
// only that key, only when it differs, restored after drift, refused when another injector claims it,
// counted in the Summary and in AllHold (the rotation gate), and re-written when the bundle changes.
func TestConfigMaps(t *testing.T) {
	b1 := signertest.Bundle(t, 1)
	e := newEnv(t, b1)
	e.start(nil)
	ctx := context.Background()
	const ns = "inj-configmaps"
	e.namespace(ns)
	cms := e.kube.CoreV1().ConfigMaps(ns)
	holds := func(name string, bundle []byte) func(context.Context) (bool, error) {
		return e.configMapHolds(ns, name, bundle)
	}

	// No data at all, and data with other keys that stay as they are.
	t0 := time.Now()
	e.mustApply(injector.KindConfigMap, ns+"/empty", configMapManifest(ns, "empty", optIn, nil), "owner")
	took := e.waitFor("the bundle in a ConfigMap without data", injectionBound, holds("empty", b1))
	t.Logf("ConfigMap injected %s after its apply returned (%s after it was sent)", took, time.Since(t0))
	e.mustApply(injector.KindConfigMap, ns+"/app", configMapManifest(ns, "app", optIn, map[string]string{"app.yaml": "port: 8443"}), "owner")
	e.waitFor("the bundle in a ConfigMap with other data", injectionBound, holds("app", b1))
	cm, err := cms.Get(ctx, "app", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cm.Data["app.yaml"] != "port: 8443" || len(cm.Data) != 2 {
		t.Errorf("the other data changed: %v", cm.Data)
	}
	entry := certapiEntry(cm.ManagedFields)
	if want := `{"f:data":{"f:ca.crt":{}}}`; entry == nil || entry.Operation != metav1.ManagedFieldsOperationUpdate || string(entry.FieldsV1.Raw) != want {
		t.Errorf("certapi's managedFields entry = %+v; want an Update owning %s", entry, want)
	}

	// Skipped, not opted in, claimed: never written.
	immutable := `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"namespace":"` + ns + `","name":"frozen","annotations":{"certapi.dev/inject-ca-bundle":"true"}},"immutable":true}`
	e.mustApply(injector.KindConfigMap, ns+"/frozen", immutable, "owner")
	e.mustApply(injector.KindConfigMap, ns+"/other", configMapManifest(ns, "other", nil, map[string]string{"x": "y"}), "owner")
	claimed := map[string]string{certapiv1alpha1.AnnotationInjectCABundle: "true", "service.beta.openshift.io/inject-cabundle": "true"}
	e.mustApply(injector.KindConfigMap, ns+"/claimed", configMapManifest(ns, "claimed", claimed, nil), "owner")
	e.waitFor("the Summary to count the ConfigMaps", injectionBound, func(context.Context) (bool, error) {
		s := e.inj.Summary()
		return s.Targets == 4 && s.UpToDate == 2 && s.Skipped == 1 && s.Conflicts == 1 && e.inj.AllHold(b1), nil
	})
	if p := e.problem(injector.KindConfigMap, ns+"/frozen"); p == nil || p.Reason != injector.ReasonNothingToInject || !strings.Contains(p.Message, "immutable") {
		t.Errorf("immutable ConfigMap: problem = %+v", p)
	}
	var ev *eventInfo
	e.waitFor("a Warning Event on the claimed ConfigMap, in its namespace", 5*time.Second, func(ctx context.Context) (bool, error) {
		var err error
		ev, err = e.warningEvent(ctx, injector.KindConfigMap, ns+"/claimed", injector.ReasonClaimedByAnotherInjector)
		return ev != nil, err
	})
	if !strings.Contains(ev.note, "service.beta.openshift.io/inject-cabundle") || ev.apiVersion != "v1" {
		t.Errorf("Event = %+v", ev)
	}
	for _, name := range []string{"frozen", "other", "claimed"} {
		if n := e.writes.patches("/configmaps/" + name); n != 0 {
			t.Errorf("%d writes to ConfigMap %s", n, name)
		}
	}

	// Written only when it differs: a change to another key does not make certapi write.
	writes := e.writes.patches("/configmaps/app")
	if err := e.patch(injector.KindConfigMap, ns+"/app", "owner", `{"data":{"app.yaml":"port: 9443"}}`); err != nil {
		t.Fatal(err)
	}
	e.never("certapi writes the ConfigMap after a change to another key", leftAlone, func(context.Context) (bool, error) {
		return e.writes.patches("/configmaps/app") != writes, nil
	})

	// Drift is put back.
	if err := e.patch(injector.KindConfigMap, ns+"/app", "intruder", `{"data":{"ca.crt":"not a bundle"}}`); err != nil {
		t.Fatal(err)
	}
	e.waitFor("the overwritten ca.crt restored", injectionBound, holds("app", b1))

	// A new bundle (a rotation's [Active, Next]) reaches both, and the gate follows.
	b2 := append(append([]byte(nil), b1...), signertest.Bundle(t, 1)...)
	if e.inj.AllHold(b2) {
		t.Fatal("AllHold(b2) before b2 was injected")
	}
	t0 = time.Now()
	e.source.set(b2)
	e.waitFor("AllHold(b2)", 5*time.Second, func(context.Context) (bool, error) { return e.inj.AllHold(b2), nil })
	t.Logf("both ConfigMaps hold the new bundle %s after the Source changed", time.Since(t0))
	for _, name := range []string{"empty", "app"} {
		if ok, err := holds(name, b2)(ctx); !ok {
			t.Errorf("ConfigMap %s does not hold the new bundle (%v)", name, err)
		}
	}

	// Removing the annotation stops management and leaves ca.crt in place.
	if err := e.patch(injector.KindConfigMap, ns+"/empty", "owner", `{"metadata":{"annotations":{"certapi.dev/inject-ca-bundle":null}}}`); err != nil {
		t.Fatal(err)
	}
	e.waitFor("the ConfigMap forgotten", injectionBound, func(context.Context) (bool, error) { return e.inj.Summary().Targets == 3, nil })
	cm, err = cms.Get(ctx, "empty", metav1.GetOptions{})
	if err != nil || cm.Data[injector.ConfigMapKey] != string(b2) {
		t.Errorf("ca.crt after opting out: %v", err)
	}
}
