package apiserver

import (
	"strings"
	"testing"
	"time"

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

func TestDistrustDeadlineFlag(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		want    time.Duration
		invalid bool
	}{
		{args: nil, want: 15 * time.Minute},
		{args: []string{"--distrust-deadline=30s"}, want: 30 * time.Second},
		{args: []string{"--distrust-deadline=5s"}, want: 5 * time.Second},
		{args: []string{"--distrust-deadline=1s"}, want: time.Second, invalid: true},
		{args: []string{"--distrust-deadline=0"}, want: 0, invalid: true},
	} {
		o := NewOptions()
		fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
		o.AddFlags(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		if o.DistrustDeadline != tc.want {
			t.Errorf("%v: DistrustDeadline %s; want %s", tc.args, o.DistrustDeadline, tc.want)
		}
		err := o.Validate()
		if got := err != nil && strings.Contains(err.Error(), "--distrust-deadline"); got != tc.invalid {
			t.Errorf("%v: Validate() = %v; want a --distrust-deadline error: %v", tc.args, err, tc.invalid)
		}
	}
	fss := NewOptions().Flags()
	if f := fss.FlagSet("certapi").Lookup("distrust-deadline"); f == nil || !strings.Contains(f.Usage, "Warning Event") {
		t.Errorf("--help does not explain --distrust-deadline: %+v", f)
	}
}
