package servingcertrequest

import (
	"context"
	"slices"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/certapi/certapi/pkg/apis/certapi"
)

// fakeGetter answers reads from the watch cache (resourceVersion "0") and from etcd ("") each from a
// store of its own, and records the resourceVersion of every read.
type fakeGetter struct {
	cache, etcd map[string]*certapi.ServingCertRequest
	reads       []string
}

func (g *fakeGetter) Get(_ context.Context, name string, opts *metav1.GetOptions) (runtime.Object, error) {
	g.reads = append(g.reads, opts.ResourceVersion)
	from := g.etcd
	if opts.ResourceVersion == "0" {
		from = g.cache
	}
	if r, ok := from[name]; ok {
		return r, nil
	}
	return nil, apierrors.NewNotFound(certapi.Resource("servingcertrequests"), name)
}

// TestParentReadsTheCacheFirst: the parent comes from the watch cache without a read of etcd; one the
// cache does not hold yet (just created) is read from etcd; one that exists nowhere is NotFound.
func TestParentReadsTheCacheFirst(t *testing.T) {
	cached := &certapi.ServingCertRequest{ObjectMeta: metav1.ObjectMeta{Name: "cached", ResourceVersion: "1"}}
	fresh := &certapi.ServingCertRequest{ObjectMeta: metav1.ObjectMeta{Name: "fresh", ResourceVersion: "2"}}
	for _, tc := range []struct {
		name      string
		want      *certapi.ServingCertRequest
		wantReads []string
		notFound  bool
	}{
		{name: "cached", want: cached, wantReads: []string{"0"}},
		{name: "fresh", want: fresh, wantReads: []string{"0", ""}},
		{name: "missing", notFound: true, wantReads: []string{"0", ""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := &fakeGetter{
				cache: map[string]*certapi.ServingCertRequest{"cached": cached},
				etcd:  map[string]*certapi.ServingCertRequest{"cached": cached, "fresh": fresh},
			}
			r := NewServingCertsREST(g, nil, 0, nil)
			got, err := r.parent(context.Background(), tc.name)
			switch {
			case tc.notFound && !apierrors.IsNotFound(err):
				t.Errorf("error %v; want NotFound", err)
			case !tc.notFound && err != nil:
				t.Errorf("error %v", err)
			case !tc.notFound && got != tc.want:
				t.Errorf("got %v; want %v", got, tc.want)
			}
			if !slices.Equal(g.reads, tc.wantReads) {
				t.Errorf("reads at resourceVersion %q; want %q", g.reads, tc.wantReads)
			}
		})
	}
}
