package injector

import (
	"testing"

	"k8s.io/apiserver/pkg/server/dynamiccertificates"
)

// staticSource is a BundleSource whose bundle never changes.
type staticSource []byte

func (s staticSource) Bundle() ([]byte, bool) { return s, len(s) > 0 }

func (staticSource) AddListener(dynamiccertificates.Listener) func() { return func() {} }

func TestSummaryAndAllHold(t *testing.T) {
	// Summary and AllHold on hand-made state (the informer-backed parts are covered against kube-apiserver in test/integration/injector).
	bundle := newBundle(t, 1)
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
