package apiserver

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"k8s.io/apiserver/pkg/features"
	"k8s.io/apiserver/pkg/storage/value"
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
