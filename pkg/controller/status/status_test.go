package status

import (
	"context"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	certapifake "github.com/certapi/certapi/pkg/generated/clientset/versioned/fake"
	certapilisters "github.com/certapi/certapi/pkg/generated/listers/certapi/v1alpha1"
)

// TestWrite: with the request in the cache, a change is one write of the status subresource and no read:
// an update when a certificate was issued (every status field is known), a patch otherwise; with the
// cache empty (a new request it has not seen yet), a read and an update. Either way the status ends the
// same, and the certificate, which the cache never holds, is kept or written.
func TestWrite(t *testing.T) {
	key := types.NamespacedName{Namespace: "ns", Name: "r"}
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	issued := &Issued{Certificate: "CERT", CABundle: "BUNDLE", SerialNumber: "01", NotBefore: now, NotAfter: now.Add(time.Hour),
		RenewalTime: now.Add(40 * time.Minute), IssuedAt: now}
	stored := &certapiv1alpha1.ServingCertRequest{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, Generation: 1, ResourceVersion: "5"}}
	// Issued already: the stored object holds the certificate, the cache (trimmed) does not.
	issuedStored := stored.DeepCopy()
	Apply(issuedStored, issued, nil)
	issuedCached := issuedStored.DeepCopy()
	issuedCached.Status.Certificate, issuedCached.Status.CABundle = "", ""
	for _, tc := range []struct {
		name      string
		stored    *certapiv1alpha1.ServingCertRequest
		cached    *certapiv1alpha1.ServingCertRequest
		pending   *pending
		wantVerbs []string
	}{
		{name: "issued, from the cache", stored: stored, cached: stored, pending: &pending{issued: issued}, wantVerbs: []string{"update"}},
		{name: "issued, not in the cache", stored: stored, pending: &pending{issued: issued}, wantVerbs: []string{"get", "update"}},
		{name: "condition only, from the cache", stored: issuedStored, cached: issuedCached,
			pending:   &pending{ready: &Ready{Status: metav1.ConditionTrue, Reason: ReasonIssued, Message: "still fine", Generation: 1}},
			wantVerbs: []string{"patch"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := certapifake.NewSimpleClientset(tc.stored.DeepCopy())
			indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
			if tc.cached != nil {
				if err := indexer.Add(tc.cached.DeepCopy()); err != nil {
					t.Fatal(err)
				}
			}
			w := New(client, time.Millisecond, 1)
			w.UseCache(certapilisters.NewServingCertRequestLister(indexer))
			client.ClearActions()
			if err := w.write(context.Background(), key, tc.pending); err != nil {
				t.Fatal(err)
			}
			var verbs []string
			for _, a := range client.Actions() {
				verbs = append(verbs, a.GetVerb())
				if a.GetVerb() != "get" && a.GetSubresource() != "status" {
					t.Errorf("%s of subresource %q; want the status subresource", a.GetVerb(), a.GetSubresource())
				}
			}
			if !slices.Equal(verbs, tc.wantVerbs) {
				t.Errorf("requests %v; want %v", verbs, tc.wantVerbs)
			}
			got, err := client.CertapiV1alpha1().ServingCertRequests(key.Namespace).Get(context.Background(), key.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			st := got.Status
			if st.Certificate != "CERT" || st.CABundle != "BUNDLE" || st.SerialNumber != "01" || st.NotAfter == nil || !st.NotAfter.Time.Equal(now.Add(time.Hour)) ||
				st.RenewalTime == nil || !st.RenewalTime.Time.Equal(now.Add(40*time.Minute)) || st.ObservedGeneration != 1 {
				t.Errorf("status %+v does not hold the issued certificate", st)
			}
			if !meta.IsStatusConditionTrue(st.Conditions, certapiv1alpha1.ConditionReady) {
				t.Errorf("conditions %+v; want Ready=True", st.Conditions)
			}
		})
	}
}
