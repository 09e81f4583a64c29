package apiserver

import (
	"testing"

	"github.com/spf13/pflag"
	"k8s.io/apiserver/pkg/features"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
)

func TestListFromCacheSnapshotOffByDefault(t *testing.T) {
	o := NewOptions()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if utilfeature.DefaultFeatureGate.Enabled(features.ListFromCacheSnapshot) {
		t.Errorf("ListFromCacheSnapshot is on by default")
	}
	if err := fs.Parse([]string{"--feature-gates=ListFromCacheSnapshot=true"}); err != nil {
		t.Fatal(err)
	}
	if !utilfeature.DefaultFeatureGate.Enabled(features.ListFromCacheSnapshot) {
		t.Errorf("--feature-gates=ListFromCacheSnapshot=true did not turn it on")
	}
}
