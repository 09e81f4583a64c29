package apiserver

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/certapi/certapi/pkg/issuer"
	"github.com/certapi/certapi/pkg/keyplugin"
)

// CAKeyOptions say where certapi's CA keys are made and kept: in memory and in the CA record (the
// default), or inside an HSM, through a key plugin that certapi reaches on a Unix socket
// (certapi-kms-pkcs11 --ca-key-socket, beside certapi in its pod). certapi is a static binary that
// cannot load a PKCS#11 module; the plugin does, and the key never leaves the token.
type CAKeyOptions struct {
	// Plugin is --ca-key-plugin: the plugin's Unix socket, empty for keys in memory.
	Plugin string
	// Timeout is --ca-key-plugin-timeout.
	Timeout time.Duration
}

// DefaultCAKeyOptions keep the CA keys in memory and in the CA record.
func DefaultCAKeyOptions() CAKeyOptions {
	return CAKeyOptions{Timeout: 5 * time.Second}
}

// AddFlags adds the CA key flags to fs.
func (o *CAKeyOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Plugin, "ca-key-plugin", o.Plugin,
		"Unix socket (a path, or unix:///path) of the key plugin that holds certapi's CA keys in an HSM (certapi-kms-pkcs11 --ca-key-socket, "+
			"which loads the HSM's PKCS#11 module). Every new CA key (first CA, rotation, intermediate request) is then made and used inside the "+
			"token and never exists in certapi's memory or etcd: the CA record keeps the key's reference only, and a key no CA needs is destroyed "+
			"in the token. While the token cannot sign, issuance is answered 503 with Retry-After; certapi never falls back to another key. "+
			"CAs whose keys are in the record (made before this was set) sign until a rotation replaces them (kubectl certapi rotate). "+
			"Every replica that may lead needs its own plugin reaching the same token. Empty: CA keys are made in memory and kept in the CA record "+
			"(encrypted at rest with --encryption-provider-config). See docs/ca-custody.md.")
	fs.DurationVar(&o.Timeout, "ca-key-plugin-timeout", o.Timeout,
		"How long one signature through --ca-key-plugin may take before the call fails as unavailable (503).")
}

// Validate says what is wrong with the flags.
func (o *CAKeyOptions) Validate() []error {
	var errs []error
	if o.Plugin != "" {
		path := strings.TrimPrefix(o.Plugin, "unix://")
		if !strings.HasPrefix(path, "/") {
			errs = append(errs, fmt.Errorf("--ca-key-plugin %q: an absolute path of a Unix socket, or unix:///path", o.Plugin))
		}
	}
	if o.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("--ca-key-plugin-timeout %s: must be positive", o.Timeout))
	}
	return errs
}

// issuerKeys is the issuer's CAKeys: nil without --ca-key-plugin.
func (o *CAKeyOptions) issuerKeys() issuer.CAKeys {
	if o.Plugin == "" {
		return nil
	}
	return pluginKeys{keyplugin.NewClient(o.Plugin, o.Timeout)}
}

// pluginKeys is a key plugin's client as the issuer uses it.
type pluginKeys struct{ *keyplugin.Client }

// List returns the keys whose label starts with prefix, references by label.
func (k pluginKeys) List(ctx context.Context, prefix string) (map[string]string, error) {
	infos, err := k.Client.List(ctx, prefix)
	if err != nil {
		return nil, err
	}
	refs := make(map[string]string, len(infos))
	for _, in := range infos {
		refs[in.Ref] = in.Label
	}
	return refs, nil
}
