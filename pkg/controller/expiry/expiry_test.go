package expiry

import (
	"reflect"
	"sort"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/metrics"
)

func TestReadinessAndRenewer(t *testing.T) {
	ready := func(status metav1.ConditionStatus, reason string) []metav1.Condition {
		return []metav1.Condition{{Type: certapiv1alpha1.ConditionReady, Status: status, Reason: reason}}
	}
	for _, tc := range []struct {
		name        string
		secretName  string
		conditions  []metav1.Condition
		wantReady   bool
		wantReason  string
		wantRenewer string
	}{
		{name: "new servingcerts request, never called", wantRenewer: metrics.RenewerClient},
		{name: "issued through servingcerts", conditions: ready(metav1.ConditionTrue, "Issued"), wantReady: true, wantReason: "Issued", wantRenewer: metrics.RenewerClient},
		{name: "Secret pending", secretName: "tls", conditions: ready(metav1.ConditionFalse, "Pending"), wantReason: "Pending", wantRenewer: metrics.RenewerCertapi},
		{name: "Secret conflict", secretName: "tls", conditions: ready(metav1.ConditionFalse, "SecretConflict"), wantReason: "SecretConflict", wantRenewer: metrics.RenewerCertapi},
		{name: "Secret renewing, still valid", secretName: "tls", conditions: ready(metav1.ConditionTrue, "Renewing"), wantReady: true, wantReason: "Renewing", wantRenewer: metrics.RenewerCertapi},
		{name: "other conditions only", conditions: []metav1.Condition{{Type: "Other", Status: metav1.ConditionTrue, Reason: "X"}}, wantRenewer: metrics.RenewerClient},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &certapiv1alpha1.ServingCertRequest{
				Spec:   certapiv1alpha1.ServingCertRequestSpec{ServiceName: "web", SecretName: tc.secretName},
				Status: certapiv1alpha1.ServingCertRequestStatus{Conditions: tc.conditions},
			}
			if ok, reason := Readiness(r); ok != tc.wantReady || reason != tc.wantReason {
				t.Errorf("Readiness = %v, %q; want %v, %q", ok, reason, tc.wantReady, tc.wantReason)
			}
			if got := Renewer(r); got != tc.wantRenewer {
				t.Errorf("Renewer = %q; want %q", got, tc.wantRenewer)
			}
		})
	}
}

// TestSourceSeries checks what the term's Source reports at a scrape for what its informer holds: a
// ready request with its certificate, one not ready with its reason, one with no condition yet, nothing
// for a deleted request, and nothing before the informer synced.
func TestSourceSeries(t *testing.T) {
	notAfter, renewal := metav1.Unix(5000, 0), metav1.Unix(4000, 0)
	request := func(name, secretName string, conditions ...metav1.Condition) *certapiv1alpha1.ServingCertRequest {
		return &certapiv1alpha1.ServingCertRequest{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
			Spec:       certapiv1alpha1.ServingCertRequestSpec{ServiceName: name, SecretName: secretName},
			Status:     certapiv1alpha1.ServingCertRequestStatus{Conditions: conditions},
		}
	}
	ready := request("ready", "tls", metav1.Condition{Type: certapiv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Issued"})
	ready.Status.NotAfter, ready.Status.RenewalTime = &notAfter, &renewal
	conflict := request("conflict", "tls", metav1.Condition{Type: certapiv1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: "SecretConflict"})
	fresh := request("fresh", "")
	for _, tc := range []struct {
		name    string
		objects []*certapiv1alpha1.ServingCertRequest
		deleted []*certapiv1alpha1.ServingCertRequest
		synced  bool
		want    []metrics.Request
	}{
		{
			name: "ready, not ready with reason, no condition yet", synced: true,
			objects: []*certapiv1alpha1.ServingCertRequest{ready, conflict, fresh},
			want: []metrics.Request{
				{Namespace: "ns", Name: "conflict", Reason: "SecretConflict"},
				{Namespace: "ns", Name: "fresh"},
				{Namespace: "ns", Name: "ready", Ready: true, Reason: "Issued", Certificate: true, Renewer: metrics.RenewerCertapi, NotAfter: notAfter.Time, Renewal: renewal.Time},
			},
		},
		{
			name: "deleted request", synced: true,
			objects: []*certapiv1alpha1.ServingCertRequest{ready, conflict},
			deleted: []*certapiv1alpha1.ServingCertRequest{ready},
			want:    []metrics.Request{{Namespace: "ns", Name: "conflict", Reason: "SecretConflict"}},
		},
		{
			name:    "informer not synced",
			objects: []*certapiv1alpha1.ServingCertRequest{ready, conflict},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := cache.NewStore(cache.MetaNamespaceKeyFunc)
			for _, r := range tc.objects {
				if err := store.Add(r); err != nil {
					t.Fatal(err)
				}
			}
			for _, r := range tc.deleted {
				if err := store.Delete(r); err != nil {
					t.Fatal(err)
				}
			}
			s := &Source{store: store, synced: func() bool { return tc.synced }}
			var got []metrics.Request
			s.EachRequest(func(r metrics.Request) { got = append(got, r) })
			sort.Slice(got, func(i, j int) bool { return got[i].Name < got[j].Name })
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("EachRequest reported\n%+v\nwant\n%+v", got, tc.want)
			}
		})
	}
}
