package apiserver

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apiserver/pkg/admission/plugin/resourcequota"
	"k8s.io/apiserver/pkg/features"
	"k8s.io/apiserver/pkg/storage/value"
	utilfeature "k8s.io/apiserver/pkg/util/feature"

	"github.com/certapi/certapi/pkg/admission/requestquota"
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
	if utilfeature.DefaultFeatureGate.Enabled(features.SizeBasedListCostEstimate) {
		t.Errorf("SizeBasedListCostEstimate is on by default")
	}
	if err := o.Validate(); err != nil && strings.Contains(err.Error(), "feature gate") {
		t.Errorf("setting the defaults failed: %v", err)
	}
	if f := fs.Lookup("feature-gates"); f == nil || !strings.Contains(f.Usage, "ListFromCacheSnapshot=true|false (BETA - default=false)") {
		t.Errorf("--help does not show certapi's default of ListFromCacheSnapshot")
	}
	if err := fs.Parse([]string{"--feature-gates=ListFromCacheSnapshot=true"}); err != nil {
		t.Fatal(err)
	}
	if !utilfeature.DefaultFeatureGate.Enabled(features.ListFromCacheSnapshot) {
		t.Errorf("--feature-gates=ListFromCacheSnapshot=true did not turn it on")
	}
}

func TestProfilingOffByDefault(t *testing.T) {
	o := NewOptions()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if o.RecommendedOptions.Features.EnableProfiling {
		t.Error("profiling is on by default")
	}
	if o.RequireEncryptedCAKeys {
		t.Error("--require-encrypted-ca-keys is on by default; the deploy manifests turn it on")
	}
	if err := fs.Parse([]string{"--profiling", "--require-encrypted-ca-keys"}); err != nil {
		t.Fatal(err)
	}
	if !o.RecommendedOptions.Features.EnableProfiling || !o.RequireEncryptedCAKeys {
		t.Error("--profiling --require-encrypted-ca-keys did not turn them on")
	}
}

// TestKeyCustodyFlagsOffByDefault: loading an unencrypted CA record while encryption is configured, and
// keeping CAs read back from published bundles, are each opt-in for the start that needs them.
func TestKeyCustodyFlagsOffByDefault(t *testing.T) {
	for _, tc := range []struct {
		flag string
		on   func(*Options) bool
	}{
		{"--allow-unencrypted-ca-record", func(o *Options) bool { return o.AllowUnencryptedCARecord }},
		{"--keep-published-cas", func(o *Options) bool { return o.KeepPublishedCAs }},
	} {
		t.Run(tc.flag, func(t *testing.T) {
			o := NewOptions()
			fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
			o.AddFlags(fs)
			if err := fs.Parse(nil); err != nil {
				t.Fatal(err)
			}
			if tc.on(o) {
				t.Fatalf("%s is on by default", tc.flag)
			}
			if err := fs.Parse([]string{tc.flag}); err != nil {
				t.Fatal(err)
			}
			if !tc.on(o) {
				t.Fatalf("%s did not turn it on", tc.flag)
			}
		})
	}
}

// prefixTransformer writes a fixed prefix before the data, as encrypting providers write theirs.
type prefixTransformer struct{ prefix string }

func (p prefixTransformer) TransformFromStorage(_ context.Context, data []byte, _ value.Context) ([]byte, bool, error) {
	return bytes.TrimPrefix(data, []byte(p.prefix)), false, nil
}

func (p prefixTransformer) TransformToStorage(_ context.Context, data []byte, _ value.Context) ([]byte, error) {
	return append([]byte(p.prefix), data...), nil
}

func TestCAKeysUnencrypted(t *testing.T) {
	cases := []struct {
		name string
		t    value.Transformer
		want string // "" when encrypted
	}{
		{"no encryption configuration", nil, "no --encryption-provider-config"},
		{"not listed, or identity first", prefixTransformer{""}, "does not list the resource, or lists the identity provider first"},
		{"secretbox", prefixTransformer{"k8s:enc:secretbox:v1:key1:"}, ""},
		{"KMS v2", prefixTransformer{"k8s:enc:kms:v2:plugin:"}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := caKeysUnencrypted(tc.t)
			if err != nil {
				t.Fatal(err)
			}
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
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

func TestGCHeadroomFlag(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		want    int64
		invalid bool
	}{
		{args: nil, want: 16 << 20},
		{args: []string{"--gc-headroom=64Mi"}, want: 64 << 20},
		{args: []string{"--gc-headroom=0"}, want: 0},
		{args: []string{"--gc-headroom=-1Mi"}, want: -1 << 20, invalid: true},
	} {
		o := NewOptions()
		fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
		o.AddFlags(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		if got := o.GCHeadroom.Value(); got != tc.want {
			t.Errorf("%v: GCHeadroom %d; want %d", tc.args, got, tc.want)
		}
		err := o.Validate()
		if got := err != nil && strings.Contains(err.Error(), "--gc-headroom"); got != tc.invalid {
			t.Errorf("%v: Validate() = %v; want a --gc-headroom error: %v", tc.args, err, tc.invalid)
		}
	}
	fss := NewOptions().Flags()
	if f := fss.FlagSet("certapi").Lookup("gc-headroom"); f == nil || !strings.Contains(f.Usage, "GOGC") {
		t.Errorf("--help does not explain --gc-headroom: %+v", f)
	}
}

func TestShutdownFlags(t *testing.T) {
	for _, tc := range []struct {
		args      []string
		wantDelay time.Duration
		wantHTTP2 bool
		invalid   bool
	}{
		{args: nil, wantDelay: 5 * time.Second},
		{args: []string{"--shutdown-delay-duration=0s"}, wantDelay: 0},
		{args: []string{"--shutdown-delay-duration=20s", "--disable-http2-serving=false"}, wantDelay: 20 * time.Second, wantHTTP2: true},
		{args: []string{"--shutdown-delay-duration=-1s"}, wantDelay: -time.Second, invalid: true},
		{args: []string{"--shutdown-delay-duration=6m"}, wantDelay: 6 * time.Minute, invalid: true},
	} {
		o := NewOptions()
		fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
		o.AddFlags(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		if o.ShutdownDelay != tc.wantDelay {
			t.Errorf("%v: ShutdownDelay %s; want %s", tc.args, o.ShutdownDelay, tc.wantDelay)
		}
		if http2 := !o.RecommendedOptions.SecureServing.DisableHTTP2Serving; http2 != tc.wantHTTP2 {
			t.Errorf("%v: HTTP/2 served: %v; want %v", tc.args, http2, tc.wantHTTP2)
		}
		err := o.Validate()
		if got := err != nil && strings.Contains(err.Error(), "--shutdown-delay-duration"); got != tc.invalid {
			t.Errorf("%v: Validate() = %v; want a --shutdown-delay-duration error: %v", tc.args, err, tc.invalid)
		}
	}
}

// TestTenantBoundsInTheAdmissionChain: the per-namespace default and ResourceQuota are in certapi's
// admission chain, on by default and after every other plugin; the flag takes 0 (off) and refuses less.
func TestTenantBoundsInTheAdmissionChain(t *testing.T) {
	o := NewOptions()
	order := o.RecommendedOptions.Admission.RecommendedPluginOrder
	if n := len(order); n < 2 || order[n-2] != requestquota.PluginName || order[n-1] != resourcequota.PluginName {
		t.Errorf("plugin order %v; want %s then %s last", order, requestquota.PluginName, resourcequota.PluginName)
	}
	for _, p := range []string{requestquota.PluginName, resourcequota.PluginName} {
		if o.RecommendedOptions.Admission.DefaultOffPlugins.Has(p) {
			t.Errorf("%s is off by default", p)
		}
	}
	cases := []struct {
		args    []string
		want    int
		invalid bool
	}{
		{want: requestquota.DefaultMaxPerNamespace},
		{args: []string{"--max-servingcertrequests-per-namespace=0"}, want: 0},
		{args: []string{"--max-servingcertrequests-per-namespace=5000"}, want: 5000},
		{args: []string{"--max-servingcertrequests-per-namespace=-1"}, want: -1, invalid: true},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			o := NewOptions()
			fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
			o.AddFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			if o.MaxRequestsPerNamespace != tc.want {
				t.Errorf("limit %d, want %d", o.MaxRequestsPerNamespace, tc.want)
			}
			err := o.Validate()
			if got := err != nil && strings.Contains(err.Error(), "--max-servingcertrequests-per-namespace"); got != tc.invalid {
				t.Errorf("Validate: %v; want an error about the flag: %v", err, tc.invalid)
			}
		})
	}
}

// TestValidateGathersEverySubOption: one Validate reports, at once, an error of certapi's own flags and
// one of each group of flags, each group validated by its own Validate.
func TestValidateGathersEverySubOption(t *testing.T) {
	o := NewOptions()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	o.AddFlags(fs)
	args := []string{
		"--service-name=Not_A_Label",              // certapi's own
		"--kube-api-burst=0",                      // leader loops
		"--snapshot-retention=0",                  // snapshots
		"--etcd-peer-service=certapi-etcd.ns.svc", // embedded etcd cluster
		"--etcd-member-name=certapi",
		"--storage-media-type=application/bogus",      // generic etcd
		"--secure-port=70000",                         // secure serving
		"--audit-log-path=-", "--audit-log-maxage=-1", // auditing
		"--authentication-token-webhook-cache-ttl=10s", // a valid one among them
	}
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	err := o.Validate()
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"--service-name", "--kube-api-burst", "--snapshot-retention", "--etcd-member-name", "--storage-media-type", "--secure-port", "--audit-log-maxage"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate does not report %s: %v", want, err)
		}
	}
	if strings.Contains(err.Error(), "--etcd-servers") {
		t.Errorf("Validate asks for --etcd-servers, which the embedded etcd stands for: %v", err)
	}
	if o.Validate(); len(o.RecommendedOptions.Etcd.StorageConfig.Transport.ServerList) != 0 {
		t.Errorf("Validate set --etcd-servers to %v; the embedded etcd fills them only once it runs", o.RecommendedOptions.Etcd.StorageConfig.Transport.ServerList)
	}
}
