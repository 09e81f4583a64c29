package servedcert

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/controller/injector"
	"github.com/certapi/certapi/pkg/servedcert"
)

func TestAggregate(t *testing.T) {
	target := injector.ServedTarget{Kind: injector.KindValidatingWebhookConfiguration, Name: "vwc", Slot: "v.example.com",
		Service: servedcert.ServiceRef{Namespace: "tenant", Name: "hook", Port: 443}}
	e := func(addr string, s servedcert.State) *EndpointResult {
		return &EndpointResult{Address: addr, Result: servedcert.Result{State: s, Message: string(s) + " here"}}
	}
	for _, tc := range []struct {
		name      string
		why       string
		endpoints []*EndpointResult
		ok        bool
		want      servedcert.State
		inMessage string
	}{
		{name: "no endpoints", why: "Service tenant/hook has no ready endpoint", ok: true, want: servedcert.NoEndpoints, inMessage: "no ready endpoint"},
		{name: "not all probed", endpoints: []*EndpointResult{e("a:1", servedcert.Verified), nil}, ok: false},
		{name: "nothing probed", ok: false},
		{name: "all verified", endpoints: []*EndpointResult{e("a:1", servedcert.Verified), e("b:1", servedcert.Verified)}, ok: true, want: servedcert.Verified},
		{name: "the worst wins", endpoints: []*EndpointResult{e("a:1", servedcert.Verified), e("b:1", servedcert.Untrusted), e("c:1", servedcert.Unreachable)},
			ok: true, want: servedcert.Untrusted, inMessage: "1 of 3 endpoints Untrusted; b:1: Untrusted here"},
		{name: "unreachable is not untrusted", endpoints: []*EndpointResult{e("a:1", servedcert.Unreachable)}, ok: true, want: servedcert.Unreachable, inMessage: "a:1: Unreachable here"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := Aggregate(target, tc.why, tc.endpoints)
			if ok != tc.ok {
				t.Fatalf("ok %v, want %v", ok, tc.ok)
			}
			if !ok {
				return
			}
			if got.State != tc.want || !strings.Contains(got.Message, tc.inMessage) {
				t.Errorf("got %s %q, want %s with %q", got.State, got.Message, tc.want, tc.inMessage)
			}
		})
	}
}

func TestSummarize(t *testing.T) {
	r := func(name string, s servedcert.State) TargetResult {
		return TargetResult{Target: injector.ServedTarget{Kind: injector.KindAPIService, Name: name}, State: s}
	}
	s := Summarize([]TargetResult{
		r("a", servedcert.Verified), r("b", servedcert.Unreachable), r("c", servedcert.Untrusted),
		r("d", servedcert.ExpiringSoon), r("e", servedcert.Untrusted), r("f", servedcert.Verified),
	}, 3)
	if s.Targets != 6 || s.Counts[servedcert.Verified] != 2 || s.Counts[servedcert.Untrusted] != 2 {
		t.Errorf("counts %d %v", s.Targets, s.Counts)
	}
	var names []string
	for _, w := range s.Worst {
		names = append(names, w.Target.Name)
	}
	if want := []string{"c", "e", "b"}; !slices.Equal(names, want) {
		t.Errorf("worst %v, want %v", names, want)
	}
}

func TestJitter(t *testing.T) {
	for _, r := range []float64{0, 0.5, 0.999} {
		d := jitter(2*time.Minute, r)
		if d < 108*time.Second || d >= 132*time.Second {
			t.Errorf("jitter(2m, %v) = %s, want within [1m48s, 2m12s)", r, d)
		}
	}
}

func TestServedSummary(t *testing.T) {
	r := func(kind injector.Kind, name, slot string, s servedcert.State) TargetResult {
		return TargetResult{Target: injector.ServedTarget{Kind: kind, Name: name, Slot: slot}, State: s}
	}
	got := ServedSummary([]TargetResult{
		r(injector.KindValidatingWebhookConfiguration, "vwc", "a.example.com", servedcert.Verified),
		r(injector.KindValidatingWebhookConfiguration, "vwc", "b.example.com", servedcert.Untrusted),
		r(injector.KindAPIService, "v1.example.com", "", servedcert.Unreachable),
		r(injector.KindCustomResourceDefinition, "things.example.com", "", servedcert.NoEndpoints),
	})
	if got.Targets != 4 || got.Verified != 1 || got.Untrusted != 1 || got.Unreachable != 1 || got.NoEndpoints != 1 || got.NameMismatch != 0 {
		t.Errorf("counts %+v", got)
	}
	want := []string{
		"ValidatingWebhookConfiguration vwc webhook b.example.com: Untrusted",
		"APIService v1.example.com: Unreachable",
		"CustomResourceDefinition things.example.com: NoEndpoints",
	}
	if !slices.Equal(got.WorstTargets, want) {
		t.Errorf("worst targets %q, want %q", got.WorstTargets, want)
	}
	if got.Issuers != nil {
		t.Errorf("issuers %+v of targets with no probed endpoint; want none", got.Issuers)
	}
}

// TestServedIssuers: status.served.issuers counts, for each CA of the bundle, the endpoints presenting a
// certificate it signed, whatever their state; an Untrusted endpoint's issuer is not a CA of the bundle
// and is not counted.
func TestServedIssuers(t *testing.T) {
	hook := injector.ServedTarget{Kind: injector.KindValidatingWebhookConfiguration, Name: "vwc", Slot: "a.example.com"}
	api := injector.ServedTarget{Kind: injector.KindAPIService, Name: "v1.example.com"}
	ep := func(addr, issuer string, s servedcert.State) EndpointResult {
		return EndpointResult{Address: addr, Result: servedcert.Result{State: s, IssuerSerial: issuer}}
	}
	got := ServedSummary([]TargetResult{
		{Target: hook, State: servedcert.NameMismatch, Endpoints: []EndpointResult{
			ep("10.0.0.1:8443", "0a", servedcert.Verified), ep("10.0.0.2:8443", "0b", servedcert.NameMismatch), ep("10.0.0.3:8443", "ff", servedcert.Untrusted)}},
		{Target: api, State: servedcert.Verified, Endpoints: []EndpointResult{ep("10.0.1.1:443", "0a", servedcert.ExpiringSoon)}},
	}).Issuers
	want := []certapiv1alpha1.ServedIssuer{
		{SerialNumber: "0a", Endpoints: 2, Names: []string{"APIService v1.example.com: 10.0.1.1:443", "ValidatingWebhookConfiguration vwc webhook a.example.com: 10.0.0.1:8443"}},
		{SerialNumber: "0b", Endpoints: 1, Names: []string{"ValidatingWebhookConfiguration vwc webhook a.example.com: 10.0.0.2:8443"}},
	}
	if !apiequality.Semantic.DeepEqual(got, want) {
		t.Errorf("issuers %+v; want %+v", got, want)
	}
}

func TestServingCondition(t *testing.T) {
	r := func(name string, s servedcert.State) TargetResult {
		return TargetResult{Target: injector.ServedTarget{Kind: injector.KindValidatingWebhookConfiguration, Name: name, Slot: name + ".example.com",
			Service: servedcert.ServiceRef{Namespace: "tenant", Name: "hook", Port: 443}}, State: s, Message: "10.0.0.1:8443: " + string(s)}
	}
	for _, tc := range []struct {
		name      string
		results   []TargetResult
		status    metav1.ConditionStatus
		reason    string
		inMessage string
	}{
		{"verified", []TargetResult{r("a", servedcert.Verified)}, metav1.ConditionTrue, "Verified", "ValidatingWebhookConfiguration a webhook a.example.com"},
		{"expiring soon still serves", []TargetResult{r("a", servedcert.ExpiringSoon)}, metav1.ConditionTrue, "ExpiringSoon", ""},
		{"the worst of several", []TargetResult{r("a", servedcert.Verified), r("b", servedcert.Untrusted), r("c", servedcert.Unreachable)},
			metav1.ConditionFalse, "Untrusted", "3 objects' webhooks call this Service; the worst: ValidatingWebhookConfiguration b"},
		{"unreachable is unknown, not false", []TargetResult{r("a", servedcert.Unreachable), r("b", servedcert.Verified)}, metav1.ConditionUnknown, "Unreachable", ""},
		{"no endpoints", []TargetResult{r("a", servedcert.NoEndpoints)}, metav1.ConditionFalse, "NoEndpoints", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ServingCondition(tc.results, 3)
			if c.Type != "Serving" || c.Status != tc.status || c.Reason != tc.reason || c.ObservedGeneration != 3 || !strings.Contains(c.Message, tc.inMessage) {
				t.Errorf("got %+v, want %s %s with %q", c, tc.status, tc.reason, tc.inMessage)
			}
		})
	}
}

// TestChangedServices: only a Service whose Serving condition would change (named anew, named no more,
// another worst finding) has its requests written again after a publication.
func TestChangedServices(t *testing.T) {
	svc := func(name string) types.NamespacedName { return types.NamespacedName{Namespace: "tenant", Name: name} }
	res := func(name string, s servedcert.State, msg string) []TargetResult {
		return []TargetResult{{Target: injector.ServedTarget{Kind: injector.KindValidatingWebhookConfiguration, Name: "vwc", Slot: name,
			Service: servedcert.ServiceRef{Namespace: "tenant", Name: name, Port: 443}}, State: s, Message: msg}}
	}
	before := map[types.NamespacedName][]TargetResult{
		svc("same"):    res("same", servedcert.Verified, "10.0.0.1:8443: signed by the CA 0a"),
		svc("worse"):   res("worse", servedcert.Verified, "10.0.0.2:8443: signed by the CA 0a"),
		svc("dropped"): res("dropped", servedcert.Verified, "10.0.0.3:8443: signed by the CA 0a"),
	}
	after := map[types.NamespacedName][]TargetResult{
		svc("same"):  res("same", servedcert.Verified, "10.0.0.1:8443: signed by the CA 0a"),
		svc("worse"): res("worse", servedcert.Untrusted, "10.0.0.2:8443: signed by \"CN=other\""),
		svc("new"):   res("new", servedcert.Verified, "10.0.0.4:8443: signed by the CA 0a"),
	}
	got := changedServices(before, after)
	want := map[types.NamespacedName]bool{svc("worse"): true, svc("dropped"): true, svc("new"): true}
	if !maps.Equal(got, want) {
		t.Errorf("changedServices = %v; want %v", got, want)
	}
	if got := changedServices(after, after); len(got) != 0 {
		t.Errorf("changedServices of the same results = %v; want none", got)
	}
}
