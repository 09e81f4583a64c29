package injector_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/certapi/certapi/pkg/controller/injector"
	"github.com/certapi/certapi/pkg/signer/signertest"
)

// configMapLimit is kube-apiserver's limit on the data of a ConfigMap (corev1 validation's
// MaxSecretSize): a write that takes it past this is refused with "Too long".
const configMapLimit = 1 << 20

// TestRefusedWriteDoesNotHoldTheGate: a tenant's annotated ConfigMap so close to 1 MiB that the bundle
// can never fit is refused by kube-apiserver (422, "Too long"). The injector marks it Failed after that
// one refusal, names it in the Summary with the API's reason, records a Warning Event on it, and the
// rotation gate (AllHold) no longer waits for it, while the other targets still take every bundle. It
// is not retried on a timer: a new bundle tries it once more, and so does a change of the object, which
// (once the tenant has made room) brings the bundle in. Before, it stayed Pending and AllHold stayed
// false until the CA's forced-switch deadline.
func TestRefusedWriteDoesNotHoldTheGate(t *testing.T) {
	b1 := signertest.Bundle(t, 1)
	e := newEnv(t, b1)
	e.start(nil)
	ctx := context.Background()
	const ns = "inj-failed"
	e.namespace(ns)
	cms := e.kube.CoreV1().ConfigMaps(ns)
	holds := func(name string, bundle []byte) func(context.Context) (bool, error) {
		return e.configMapHolds(ns, name, bundle)
	}

	e.mustApply(injector.KindConfigMap, ns+"/small", configMapManifest(ns, "small", optIn, nil), "owner")
	e.waitFor("the bundle in an ordinary ConfigMap", injectionBound, holds("small", b1))
	big := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "big", Namespace: ns, Annotations: optIn},
		Data:       map[string]string{"blob": strings.Repeat("x", configMapLimit-64)},
	}
	if _, err := cms.Create(ctx, big, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.cleanup(injector.KindConfigMap, ns+"/big")

	e.waitFor("the big ConfigMap to be Failed, not holding the gate", 5*time.Second, func(context.Context) (bool, error) {
		s := e.inj.Summary()
		return s.Targets == 2 && s.UpToDate == 1 && s.Failed == 1 && s.Pending == 0 && e.inj.AllHold(b1), nil
	})
	p := e.problem(injector.KindConfigMap, ns+"/big")
	if p == nil || p.State != injector.StateFailed || p.Reason != injector.ReasonInjectionFailed ||
		!strings.Contains(p.Message, "(Invalid)") || !strings.Contains(p.Message, "1048576") {
		t.Errorf("problem = %+v", p)
	}
	if api := e.inj.Summary().InjectionSummary(); api.Failed != 1 || len(api.FailedTargets) != 1 || api.FailedTargets[0] != "ConfigMap "+ns+"/big" {
		t.Errorf("InjectionSummary = %+v", api)
	}
	var ev *eventInfo
	e.waitFor("a Warning Event InjectionFailed on the big ConfigMap", 5*time.Second, func(ctx context.Context) (bool, error) {
		var err error
		ev, err = e.warningEvent(ctx, injector.KindConfigMap, ns+"/big", injector.ReasonInjectionFailed)
		return ev != nil, err
	})
	if !strings.Contains(ev.note, "Invalid") || strings.Contains(ev.note, "BEGIN CERTIFICATE") || ev.controller != injector.ReportingController {
		t.Errorf("Event = %+v", ev)
	}
	// One refusal, and no retry on a timer (the queue's backoff would retry within a second).
	tries := e.writes.attempts("/configmaps/big")
	if tries != 1 {
		t.Errorf("%d write attempts to the big ConfigMap; want 1", tries)
	}
	e.never("another write attempt to the unchanged big ConfigMap", 2*time.Second, func(context.Context) (bool, error) {
		return e.writes.attempts("/configmaps/big") != tries, nil
	})

	// A new bundle (a rotation publishing Next) is tried once on it, and the gate passes over it again.
	b2 := signertest.Bundle(t, 2)
	e.source.set(b2)
	e.waitFor("the new bundle everywhere it fits, the big ConfigMap Failed again", 5*time.Second, func(ctx context.Context) (bool, error) {
		ok, err := holds("small", b2)(ctx)
		s := e.inj.Summary()
		return ok && err == nil && s.Failed == 1 && s.UpToDate == 1 && e.inj.AllHold(b2), nil
	})
	if n := e.writes.attempts("/configmaps/big"); n != tries+1 {
		t.Errorf("%d write attempts to the big ConfigMap after a new bundle; want %d", n, tries+1)
	}

	// The tenant makes room: the change brings it back, and the bundle goes in.
	if err := e.patch(injector.KindConfigMap, ns+"/big", "owner", `{"data":{"blob":"small now"}}`); err != nil {
		t.Fatal(err)
	}
	e.waitFor("the bundle in the shrunk ConfigMap", injectionBound, holds("big", b2))
	e.waitFor("the Summary to count it up to date", injectionBound, func(context.Context) (bool, error) {
		s := e.inj.Summary()
		return s.Failed == 0 && s.UpToDate == 2 && e.inj.AllHold(b2), nil
	})
}

// TestKubeRootCAConfigMapIsNotFoughtOver: a namespace's kube-root-ca.crt belongs to
// kube-controller-manager's root CA publisher, which rewrites its ca.crt with the cluster's root CA.
// Annotated, it is counted as a conflict with reason ManagedByKubernetes and a Warning Event, never
// written, and does not hold the gate. Before, certapi and kube-controller-manager overwrote each other.
func TestKubeRootCAConfigMapIsNotFoughtOver(t *testing.T) {
	b1 := signertest.Bundle(t, 1)
	e := newEnv(t, b1)
	e.start(nil)
	const ns = "inj-kube-root-ca"
	e.namespace(ns)
	// No kube-controller-manager runs here: the test makes the publisher's ConfigMap itself.
	root := map[string]string{injector.ConfigMapKey: string(signertest.Bundle(t, 1))}
	e.mustApply(injector.KindConfigMap, ns+"/kube-root-ca.crt", configMapManifest(ns, "kube-root-ca.crt", optIn, root), "kube-controller-manager")
	e.waitFor("kube-root-ca.crt counted as a conflict", 5*time.Second, func(context.Context) (bool, error) {
		s := e.inj.Summary()
		return s.Targets == 1 && s.Conflicts == 1 && e.inj.AllHold(b1), nil
	})
	if p := e.problem(injector.KindConfigMap, ns+"/kube-root-ca.crt"); p == nil || p.Reason != injector.ReasonManagedByKubernetes ||
		!strings.Contains(p.Message, "kube-controller-manager") {
		t.Errorf("problem = %+v", p)
	}
	e.waitFor("a Warning Event on kube-root-ca.crt", 5*time.Second, func(ctx context.Context) (bool, error) {
		ev, err := e.warningEvent(ctx, injector.KindConfigMap, ns+"/kube-root-ca.crt", injector.ReasonManagedByKubernetes)
		return ev != nil, err
	})
	if n := e.writes.attempts("/configmaps/kube-root-ca.crt"); n != 0 {
		t.Errorf("%d write attempts to kube-root-ca.crt", n)
	}
}
