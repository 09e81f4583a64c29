package requestquota

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/certapi/certapi/pkg/apis/certapi"
)

func TestQuotaResourceName(t *testing.T) {
	if QuotaResourceName != "count/servingcertrequests.certapi.dev" {
		t.Fatalf("QuotaResourceName is %s; the docs and admins' ResourceQuotas say count/servingcertrequests.certapi.dev", QuotaResourceName)
	}
}

func TestDecide(t *testing.T) {
	cases := []struct {
		max, count int
		ok         bool
	}{
		{max: 3, count: 0, ok: true},
		{max: 3, count: 2, ok: true},
		{max: 3, count: 3},
		{max: 3, count: 10},
		{max: 1, count: 1},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%d of %d", tc.count, tc.max), func(t *testing.T) {
			ok, msg := Decide(tc.max, tc.count, "team-a")
			if ok != tc.ok {
				t.Fatalf("ok %v, want %v", ok, tc.ok)
			}
			if !ok {
				for _, want := range []string{fmt.Sprintf("holds %d ServingCertRequests", tc.count), fmt.Sprintf("--max-servingcertrequests-per-namespace=%d", tc.max), "count/servingcertrequests.certapi.dev"} {
					if !strings.Contains(msg, want) {
						t.Errorf("message %q does not say %q", msg, want)
					}
				}
			}
		})
	}
}

func rq(name string, hard ...corev1.ResourceName) *corev1.ResourceQuota {
	q := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name}, Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{}}}
	for _, h := range hard {
		q.Spec.Hard[h] = resource.MustParse("5")
	}
	return q
}

func TestQuotaLimits(t *testing.T) {
	cases := []struct {
		name   string
		quotas []*corev1.ResourceQuota
		want   bool
	}{
		{name: "none"},
		{name: "a quota of other resources", quotas: []*corev1.ResourceQuota{rq("pods", "pods", "count/secrets")}},
		{name: "a quota of ServingCertRequests", quotas: []*corev1.ResourceQuota{rq("pods", "pods"), rq("certs", QuotaResourceName)}, want: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := QuotaLimits(tc.quotas); got != tc.want {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func obj(ns, name string) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
}

func TestCounter(t *testing.T) {
	type step struct {
		do   string // add, delete, admitted, replace, wait
		ns   string
		name string
	}
	cases := []struct {
		name  string
		steps []step
		want  map[string]int
	}{
		{name: "list and watch", steps: []step{{do: "replace", ns: "a", name: "x"}, {do: "add", ns: "a", name: "y"}, {do: "add", ns: "b", name: "x"}, {do: "add", ns: "a", name: "y"}},
			want: map[string]int{"a": 2, "b": 1, "c": 0}},
		{name: "delete", steps: []step{{do: "replace", ns: "a", name: "x"}, {do: "add", ns: "a", name: "y"}, {do: "delete", ns: "a", name: "x"}, {do: "delete", ns: "a", name: "gone"}},
			want: map[string]int{"a": 1}},
		{name: "admitted counts before the watch shows it, once", steps: []step{{do: "replace"}, {do: "admitted", ns: "a", name: "x"}, {do: "admitted", ns: "a", name: "x"}, {do: "admitted", ns: "a", name: "y"}},
			want: map[string]int{"a": 2}},
		{name: "admitted then seen counts once", steps: []step{{do: "replace"}, {do: "admitted", ns: "a", name: "x"}, {do: "add", ns: "a", name: "x"}},
			want: map[string]int{"a": 1}},
		{name: "admitted and never seen stops counting", steps: []step{{do: "replace"}, {do: "admitted", ns: "a", name: "x"}, {do: "wait"}},
			want: map[string]int{"a": 0}},
		{name: "admitted after seen is not counted twice", steps: []step{{do: "replace", ns: "a", name: "x"}, {do: "admitted", ns: "a", name: "x"}},
			want: map[string]int{"a": 1}},
		{name: "a relist starts over", steps: []step{{do: "add", ns: "a", name: "x"}, {do: "add", ns: "a", name: "y"}, {do: "replace", ns: "b", name: "z"}},
			want: map[string]int{"a": 0, "b": 1}},
		{name: "a deletion of unknown final state", steps: []step{{do: "replace", ns: "a", name: "x"}, {do: "tombstone", ns: "a", name: "x"}},
			want: map[string]int{"a": 0}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktesting.NewFakePassiveClock(time.Unix(1700000000, 0))
			c := newCounter(clk)
			for _, s := range tc.steps {
				var err error
				switch s.do {
				case "add":
					err = c.Add(obj(s.ns, s.name))
				case "delete":
					err = c.Delete(obj(s.ns, s.name))
				case "tombstone":
					err = c.Delete(cache.DeletedFinalStateUnknown{Key: s.ns + "/" + s.name, Obj: obj(s.ns, s.name)})
				case "admitted":
					c.Admitted(s.ns, s.name)
				case "replace":
					var objs []any
					if s.name != "" {
						objs = append(objs, obj(s.ns, s.name))
					}
					err = c.Replace(objs, "1")
				case "wait":
					clk.SetTime(clk.Now().Add(pendingTTL + time.Second))
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			for ns, want := range tc.want {
				if got := c.Count(ns); got != want {
					t.Errorf("Count(%s) = %d, want %d", ns, got, want)
				}
			}
		})
	}
}

func TestValidate(t *testing.T) {
	scrs := certapi.Resource("servingcertrequests").WithVersion("")
	attrs := func(op admission.Operation, resource schema.GroupVersionResource, sub string, dryRun bool) admission.Attributes {
		return admission.NewAttributesRecord(&certapi.ServingCertRequest{}, nil, certapi.Kind("ServingCertRequest").WithVersion(""),
			"team-a", "new", resource, sub, op, nil, dryRun, nil)
	}
	cases := []struct {
		name     string
		max      int
		held     int
		quotas   []*corev1.ResourceQuota
		attrs    admission.Attributes
		wantCode int32 // 0: admitted
		counted  bool  // the create counts at once
	}{
		{name: "below the limit", max: 3, held: 2, attrs: attrs(admission.Create, scrs, "", false), counted: true},
		{name: "at the limit", max: 3, held: 3, attrs: attrs(admission.Create, scrs, "", false), wantCode: 403},
		{name: "a dry run below the limit does not count", max: 3, held: 2, attrs: attrs(admission.Create, scrs, "", true)},
		{name: "a dry run at the limit is refused", max: 3, held: 3, attrs: attrs(admission.Create, scrs, "", true), wantCode: 403},
		{name: "off", max: 0, held: 3, attrs: attrs(admission.Create, scrs, "", false)},
		{name: "a ResourceQuota of ServingCertRequests replaces the limit", max: 3, held: 3, quotas: []*corev1.ResourceQuota{rq("certs", QuotaResourceName)}, attrs: attrs(admission.Create, scrs, "", false)},
		{name: "a ResourceQuota of other resources does not", max: 3, held: 3, quotas: []*corev1.ResourceQuota{rq("pods", "pods")}, attrs: attrs(admission.Create, scrs, "", false), wantCode: 403},
		{name: "the servingcerts subresource is not counted", max: 3, held: 3, attrs: attrs(admission.Create, scrs, "servingcerts", false)},
		{name: "an update is not counted", max: 3, held: 3, attrs: attrs(admission.Update, scrs, "", false)},
		{name: "a status write is not counted", max: 3, held: 3, attrs: attrs(admission.Update, scrs, "status", false)},
		{name: "another resource", max: 3, held: 3, attrs: attrs(admission.Create, certapi.Resource("certificateauthorities").WithVersion(""), "", false)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := NewCounter()
			var objs []any
			for i := range tc.held {
				objs = append(objs, obj("team-a", fmt.Sprintf("r%d", i)))
			}
			if err := c.Replace(objs, "1"); err != nil {
				t.Fatal(err)
			}
			idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
			for _, q := range tc.quotas {
				if err := idx.Add(q); err != nil {
					t.Fatal(err)
				}
			}
			p := &Plugin{Handler: admission.NewHandler(admission.Create), max: tc.max, counter: c, quotas: corev1listers.NewResourceQuotaLister(idx), synced: func() bool { return true }}
			if err := p.ValidateInitialization(); err != nil {
				t.Fatal(err)
			}
			err := p.Validate(context.Background(), tc.attrs, nil)
			if tc.wantCode == 0 && err != nil {
				t.Fatalf("refused: %v", err)
			}
			if tc.wantCode != 0 {
				if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "--max-servingcertrequests-per-namespace=3") {
					t.Fatalf("got %v, want a 403 that names the limit", err)
				}
			}
			want := tc.held
			if tc.counted {
				want++
			}
			if got := c.Count("team-a"); got != want {
				t.Errorf("count after: %d, want %d", got, want)
			}
		})
	}
}

func TestValidateBeforeTheFirstList(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // do not wait syncWait
	p := &Plugin{Handler: admission.NewHandler(admission.Create), max: 3, counter: NewCounter(),
		quotas: corev1listers.NewResourceQuotaLister(cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})), synced: func() bool { return false }}
	err := p.Validate(ctx, admission.NewAttributesRecord(&certapi.ServingCertRequest{}, nil, certapi.Kind("ServingCertRequest").WithVersion(""),
		"team-a", "new", certapi.Resource("servingcertrequests").WithVersion(""), "", admission.Create, nil, false, nil), nil)
	if !apierrors.IsTooManyRequests(err) {
		t.Fatalf("got %v, want a 429 to retry", err)
	}
}
