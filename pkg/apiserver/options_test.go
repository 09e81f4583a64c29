package apiserver

import (
	"testing"

	"github.com/spf13/pflag"
	genericoptions "k8s.io/apiserver/pkg/server/options"

	"github.com/certapi/certapi/pkg/apis/certapi"
)

func TestWatchCacheDefault(t *testing.T) {
	for _, tc := range []struct {
		name          string
		args          []string
		cacheRequests bool
	}{
		{name: "default", cacheRequests: false},
		{name: "cache requests", args: []string{"--watch-cache-sizes=servingcertrequests.certapi.dev#1"}, cacheRequests: true},
		{name: "another list replaces the default", args: []string{"--watch-cache-sizes=certificateauthorities.certapi.dev#0"}, cacheRequests: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := NewOptions()
			fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
			o.AddFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			sizes, err := genericoptions.ParseWatchCacheSizes(o.RecommendedOptions.Etcd.WatchCacheSizes)
			if err != nil {
				t.Fatal(err)
			}
			size, listed := sizes[certapi.Resource("servingcertrequests")]
			if cached := !listed || size > 0; cached != tc.cacheRequests {
				t.Errorf("ServingCertRequests cached = %v, want %v (sizes %v)", cached, tc.cacheRequests, sizes)
			}
			if size, listed := sizes[certapi.Resource("certificateauthorities")]; listed && size <= 0 && tc.name == "default" {
				t.Errorf("CertificateAuthorities not cached by default")
			}
		})
	}
}
