package apiserver

import (
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

// TestCAUpstreamOptionsValidate: each mode takes its flags and refuses the others', with a message that
// names what is accepted.
func TestCAUpstreamOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want []string // substrings of the errors; none: valid
	}{
		{name: "the defaults"},
		{name: "by hand", args: []string{"--ca-upstream=Manual"}},
		{name: "by hand with roots and an organization", args: []string{"--ca-upstream=Manual", "--ca-upstream-roots=/r.pem", "--ca-request-organization=Org"}},
		{name: "a mode that does not exist", args: []string{"--ca-upstream=Vault"},
			want: []string{`--ca-upstream "Vault": accepted: None, Manual, CertificateSigningRequest`}},
		{name: "through a signer", args: []string{"--ca-upstream=CertificateSigningRequest", "--ca-upstream-signer-name=clusterissuers.cert-manager.io/org", "--ca-upstream-roots=/r.pem"}},
		{name: "through a signer, with an expiration", args: []string{"--ca-upstream=CertificateSigningRequest", "--ca-upstream-signer-name=example.com/ca",
			"--ca-upstream-roots=/r.pem", "--ca-upstream-expiration=2160h"}},
		{name: "through a signer without its name", args: []string{"--ca-upstream=CertificateSigningRequest", "--ca-upstream-roots=/r.pem"},
			want: []string{"the signerName of a certificates.k8s.io signer is required"}},
		{name: "through a signer whose name is no signerName", args: []string{"--ca-upstream=CertificateSigningRequest", "--ca-upstream-signer-name=just-a-name", "--ca-upstream-roots=/r.pem"},
			want: []string{`--ca-upstream-signer-name "just-a-name"`}},
		{name: "through a signer without roots", args: []string{"--ca-upstream=CertificateSigningRequest", "--ca-upstream-signer-name=example.com/ca"},
			want: []string{"--ca-upstream-roots is required with --ca-upstream=CertificateSigningRequest"}},
		{name: "through a signer, an expiration the API refuses", args: []string{"--ca-upstream=CertificateSigningRequest", "--ca-upstream-signer-name=example.com/ca",
			"--ca-upstream-roots=/r.pem", "--ca-upstream-expiration=5m"}, want: []string{"--ca-upstream-expiration 5m0s: at least 10m0s"}},
		{name: "a signer name by hand", args: []string{"--ca-upstream=Manual", "--ca-upstream-signer-name=example.com/ca"},
			want: []string{"apply only with --ca-upstream=CertificateSigningRequest"}},
		{name: "roots for self-signed CAs", args: []string{"--ca-upstream-roots=/r.pem"},
			want: []string{"apply only with --ca-upstream=Manual or CertificateSigningRequest"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := DefaultCAUpstreamOptions()
			fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
			o.AddFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			errs := o.Validate()
			if len(tc.want) == 0 {
				if len(errs) > 0 {
					t.Fatalf("Validate: %v; want none", errs)
				}
				return
			}
			var all []string
			for _, e := range errs {
				all = append(all, e.Error())
			}
			got := strings.Join(all, "\n")
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("Validate:\n%s\nwant an error containing %q", got, w)
				}
			}
		})
	}
	if got := (&CAUpstreamOptions{Mode: CAUpstreamCSR, SignerName: "example.com/ca", Expiration: time.Hour}).upstreamCSR(); got == nil || got.SignerName != "example.com/ca" || got.Expiration != time.Hour {
		t.Errorf("upstreamCSR: %+v", got)
	}
	if got := (&CAUpstreamOptions{Mode: CAUpstreamManual}).upstreamCSR(); got != nil {
		t.Errorf("upstreamCSR by hand: %+v; want none", got)
	}
}
