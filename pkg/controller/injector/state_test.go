package injector

import (
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/tools/cache"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/signer/signertest"
)

// staticSource is a BundleSource whose bundle never changes.
type staticSource []byte

func (s staticSource) Bundle() ([]byte, bool) { return s, len(s) > 0 }

func (staticSource) AddListener(dynamiccertificates.Listener) func() { return func() {} }

func TestSummaryAndAllHold(t *testing.T) {
	// Summary and AllHold on hand-made state (the informer-backed parts are covered against kube-apiserver in test/integration/injector).
	bundle := signertest.Bundle(t, 1)
	i := &Injector{objects: map[key]*objState{}, bundleCache: map[digest]canonicalBundle{}}
	i.objects[key{KindAPIService, "b"}] = &objState{state: StateSkipped, reason: ReasonNothingToInject, message: "local"}
	i.objects[key{KindValidatingWebhookConfiguration, "z"}] = &objState{state: StateConflict, reason: ReasonClaimedByAnotherInjector, message: "m"}
	i.source = staticSource(bundle)
	i.objects[key{KindValidatingWebhookConfiguration, "a"}] = &objState{state: StateUpToDate, bundle: i.canonical(bundle).digest}
	i.objects[key{KindValidatingWebhookConfiguration, "old"}] = &objState{state: StateUpToDate, bundle: digestOf([]byte("an earlier bundle"))}
	i.objects[key{KindCustomResourceDefinition, "c"}] = &objState{state: StatePending}
	s := i.Summary()
	if s.Targets != 5 || s.UpToDate != 1 || s.Skipped != 1 || s.Conflicts != 1 || s.Pending != 2 {
		t.Errorf("summary = %+v", s)
	}
	if len(s.Problems) != 2 || s.Problems[0].Name != "z" || s.Problems[1].Kind != KindAPIService {
		t.Errorf("problems = %+v", s.Problems)
	}
	if api := s.InjectionSummary(); api.Targets != 5 || api.Conflicts != 1 {
		t.Errorf("InjectionSummary = %+v", api)
	}
	if i.AllHold(bundle) {
		t.Error("AllHold before the informers synced")
	}
}

// TestSummaryFailedAndReordered: a target whose write was refused for the current bundle counts as
// Failed (named in the API summary), one refused with an earlier bundle as Pending (it is being tried
// again); a target up to date with the same CAs in another order (the switch made Next Active) stays
// up to date, so that status never reads "0 of N" in the second the bundle changes.
func TestSummaryFailedAndReordered(t *testing.T) {
	a, b := signertest.Bundle(t, 1), signertest.Bundle(t, 1)
	ab := append(append([]byte{}, a...), b...)
	ba := append(append([]byte{}, b...), a...)
	i := &Injector{objects: map[key]*objState{}, bundleCache: map[digest]canonicalBundle{}}
	i.source = staticSource(ba)
	cur, prev := i.canonical(ba), i.canonical(ab)
	if cur.digest == prev.digest || cur.certs != prev.certs {
		t.Fatalf("reordered bundles: digests equal %v, certificate sets equal %v", cur.digest == prev.digest, cur.certs == prev.certs)
	}
	other := i.canonical(a)
	i.objects[key{KindConfigMap, "ns/big"}] = &objState{state: StateFailed, reason: ReasonInjectionFailed, message: "too long",
		refused: refusedWrite{resourceVersion: "1", bundle: cur.digest}}
	i.objects[key{KindConfigMap, "ns/big-too"}] = &objState{state: StateFailed, reason: ReasonInjectionFailed, message: "too long",
		refused: refusedWrite{resourceVersion: "1", bundle: prev.digest}}
	i.objects[key{KindValidatingWebhookConfiguration, "reordered"}] = &objState{state: StateUpToDate, bundle: prev.digest, certs: prev.certs}
	i.objects[key{KindValidatingWebhookConfiguration, "current"}] = &objState{state: StateUpToDate, bundle: cur.digest, certs: cur.certs}
	i.objects[key{KindValidatingWebhookConfiguration, "one-ca"}] = &objState{state: StateUpToDate, bundle: other.digest, certs: other.certs}
	s := i.Summary()
	if s.Targets != 5 || s.UpToDate != 2 || s.Failed != 1 || s.Pending != 2 || s.Conflicts != 0 || s.Skipped != 0 {
		t.Errorf("summary = %+v", s)
	}
	api := s.InjectionSummary()
	if api.Failed != 1 || len(api.FailedTargets) != 1 || api.FailedTargets[0] != "ConfigMap ns/big" {
		t.Errorf("InjectionSummary = %+v", api)
	}
	// At most maxNamedFailed names, in order.
	for n := range 12 {
		i.objects[key{KindConfigMap, fmt.Sprintf("many/cm-%02d", n)}] = &objState{state: StateFailed, reason: ReasonInjectionFailed,
			refused: refusedWrite{bundle: cur.digest}}
	}
	api = i.Summary().InjectionSummary()
	if api.Failed != 13 || len(api.FailedTargets) != maxNamedFailed || api.FailedTargets[0] != "ConfigMap many/cm-00" {
		t.Errorf("InjectionSummary = %+v", api)
	}
}

// TestAllHoldFailed: the rotation gate passes over a target refused for good for this bundle and this
// version of the object, and waits for one that changed since (or was refused with another bundle):
// that one is being tried again.
func TestAllHoldFailed(t *testing.T) {
	bundle := signertest.Bundle(t, 1)
	for _, tc := range []struct {
		name      string
		refusedRV string
		otherCA   bool
		want      bool
	}{
		{name: "refused at this version with this bundle: does not hold the gate", refusedRV: "5", want: true},
		{name: "changed since the refusal: tried again, holds the gate", refusedRV: "4", want: false},
		{name: "refused with an earlier bundle: tried again, holds the gate", refusedRV: "5", otherCA: true, want: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			i := &Injector{objects: map[key]*objState{}, bundleCache: map[digest]canonicalBundle{}, source: staticSource(bundle), synced: []cache.InformerSynced{func() bool { return true }}}
			inf := cache.NewSharedIndexInformer(&cache.ListWatch{}, &metav1.PartialObjectMetadata{}, 0, cache.Indexers{})
			i.informers = map[Kind]cache.SharedIndexInformer{KindConfigMap: inf}
			m := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "big", UID: "u", ResourceVersion: "5",
				Annotations: map[string]string{certapiv1alpha1.AnnotationInjectCABundle: "true"}}}
			if err := inf.GetStore().Add(m); err != nil {
				t.Fatal(err)
			}
			d := i.canonical(bundle).digest
			if tc.otherCA {
				d = i.canonical(signertest.Bundle(t, 1)).digest
			}
			obs := &observation{UID: "u", ResourceVersion: tc.refusedRV, Slots: []slot{{Path: "/data/ca.crt"}}}
			i.objects[key{KindConfigMap, "ns/big"}] = &objState{state: StateFailed, obs: obs, refused: refusedWrite{resourceVersion: tc.refusedRV, bundle: d}}
			if got := i.AllHold(bundle); got != tc.want {
				t.Errorf("AllHold = %v, want %v", got, tc.want)
			}
		})
	}
}
