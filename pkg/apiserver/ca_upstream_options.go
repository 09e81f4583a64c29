package apiserver

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/certapi/certapi/pkg/controller/leader"
	"github.com/certapi/certapi/pkg/controller/upstreamcsr"
	"github.com/certapi/certapi/pkg/issuer"
	"github.com/certapi/certapi/pkg/signer"
)

// The values of --ca-upstream.
const (
	// CAUpstreamNone: certapi makes self-signed CAs (the default).
	CAUpstreamNone = "None"
	// CAUpstreamManual: certapi's CA is an intermediate of an organisation's CA, which signs each CA
	// certificate request by hand; the signed certificate comes back through the
	// certificateauthorities/import subresource (kubectl certapi ca import).
	CAUpstreamManual = "Manual"
	// CAUpstreamCSR: as Manual, but certapi asks for each CA certificate through a certificates.k8s.io/v1
	// CertificateSigningRequest for --ca-upstream-signer-name, and imports what that signer issues once
	// someone approved the request (package upstreamcsr).
	CAUpstreamCSR = "CertificateSigningRequest"
)

// CAUpstreamOptions say whose CA certapi's CA is (docs/ca-custody.md). They are flags, not fields of
// CertificateAuthority's spec: who may choose the anchor of every bundle in the cluster, the roots an
// import is checked against and whether wider name constraints are accepted, is whoever installs
// certapi (the chart's values, reviewed like the rest of the install), not whoever may write the
// CertificateAuthority; the roots are a file mounted from a ConfigMap like any trust store; and the
// HSM custody to come needs per-pod settings (a PKCS#11 module, a PIN file) that could only be flags.
// Every replica gets the same flags from the one Deployment or StatefulSet; only the leader acts on them.
type CAUpstreamOptions struct {
	// Mode is --ca-upstream: None, Manual or CertificateSigningRequest.
	Mode string
	// SignerName is --ca-upstream-signer-name (CertificateSigningRequest only).
	SignerName string
	// Expiration is --ca-upstream-expiration (CertificateSigningRequest only).
	Expiration time.Duration
	// BundleAnchor is --ca-bundle-anchor: Root or Intermediate (signer.BundleAnchor).
	BundleAnchor string
	// RootsFile is --ca-upstream-roots: a PEM file of the organisation's roots imports must chain to.
	RootsFile string
	// MinRemaining is --ca-import-min-remaining.
	MinRemaining time.Duration
	// AcceptWiderConstraints is --ca-import-accept-wider-constraints.
	AcceptWiderConstraints bool
	// Organization is --ca-request-organization.
	Organization string
}

// DefaultCAUpstreamOptions are self-signed CAs, bundles of the root for intermediates.
func DefaultCAUpstreamOptions() CAUpstreamOptions {
	return CAUpstreamOptions{Mode: CAUpstreamNone, BundleAnchor: string(signer.DefaultBundleAnchor), MinRemaining: signer.DefaultMinRemaining}
}

// AddFlags adds the CA custody flags to fs.
func (o *CAUpstreamOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Mode, "ca-upstream", o.Mode,
		"Whose CA certapi's CA is. None: certapi makes self-signed CAs. Manual: certapi's CA is an intermediate of an organisation's CA: "+
			"certapi makes each CA key and a certificate request (CertificateAuthority status.pendingRequest; kubectl certapi ca request), "+
			"and takes the signed certificate back through the certificateauthorities/import subresource (kubectl certapi ca import). "+
			"CertificateSigningRequest: as Manual, but certapi also asks for each CA certificate through a certificates.k8s.io/v1 CertificateSigningRequest "+
			"for --ca-upstream-signer-name, and imports the certificate that signer issues once someone approved the request (certapi never approves). "+
			"Until the first import certapi signs with a self-signed CA of its own. Requests are made at the rotation's due point "+
			"(a third of the Active CA's chain life left), so there is time to sign them; see docs/ca-custody.md.")
	fs.StringVar(&o.SignerName, "ca-upstream-signer-name", o.SignerName,
		"With --ca-upstream=CertificateSigningRequest, the signerName certapi's CertificateSigningRequests ask (required), e.g. "+
			"clusterissuers.cert-manager.io/org-intermediate for cert-manager's CA issuer. The signer must issue CA certificates (cert-manager reads "+
			"the request's experimental.cert-manager.io/request-is-ca annotation, which certapi sets).")
	fs.DurationVar(&o.Expiration, "ca-upstream-expiration", o.Expiration,
		"With --ca-upstream=CertificateSigningRequest, the validity certapi asks of the signer for each CA certificate (spec.expirationSeconds; "+
			"at least 10m; the signer may give less). 0: the signer's default.")
	fs.StringVar(&o.BundleAnchor, "ca-bundle-anchor", o.BundleAnchor,
		"For a CA an organisation's CA signed, the certificate injected bundles carry as the trust anchor: Root (the organisation's root: "+
			"a rotation changes no bundle, but clients then trust whatever else that root signs for the names they ask, and distrust cannot "+
			"remove a leaked certapi intermediate from trust) or Intermediate (certapi's own CA certificate, as for self-signed CAs: "+
			"rotation and distrust work as usual; clients must accept a trust anchor that is not self-signed). Self-signed CAs are always in the bundle as themselves.")
	fs.StringVar(&o.RootsFile, "ca-upstream-roots", o.RootsFile,
		"PEM file of the organisation's root certificates: an imported CA certificate's chain must lead to one of them. Empty: the chain given "+
			"with the import must end with a self-signed root, which whoever may import vouches for. Read at start.")
	fs.DurationVar(&o.MinRemaining, "ca-import-min-remaining", o.MinRemaining,
		"The least time an imported CA certificate and every certificate of its chain must still be valid; shorter ones are refused.")
	fs.BoolVar(&o.AcceptWiderConstraints, "ca-import-accept-wider-constraints", o.AcceptWiderConstraints,
		"Import a CA certificate whose name constraints are missing or wider than certapi's own (only <name>.svc and <name>.svc.<cluster-domain>), "+
			"with a warning for each, instead of refusing it. A leaked certapi key could then sign for any name the constraints allow.")
	fs.StringVar(&o.Organization, "ca-request-organization", o.Organization,
		"Subject organization (O) of certapi's CA certificate requests, for signing policies that require one.")
}

// Validate says what is wrong with the flags.
func (o *CAUpstreamOptions) Validate() []error {
	var errs []error
	switch o.Mode {
	case CAUpstreamNone, CAUpstreamManual, CAUpstreamCSR:
	default:
		errs = append(errs, fmt.Errorf("--ca-upstream %q: accepted: %s, %s, %s", o.Mode, CAUpstreamNone, CAUpstreamManual, CAUpstreamCSR))
	}
	if o.Mode == CAUpstreamCSR {
		if msgs := validation.IsQualifiedName(o.SignerName); o.SignerName == "" || len(msgs) > 0 || !strings.Contains(o.SignerName, "/") {
			errs = append(errs, fmt.Errorf("--ca-upstream-signer-name %q: with --ca-upstream=%s, the signerName of a certificates.k8s.io signer is required: "+
				"a domain, a slash and a name, e.g. clusterissuers.cert-manager.io/org-intermediate", o.SignerName, CAUpstreamCSR))
		}
		if o.RootsFile == "" {
			// A signer's issued chain is only as good as the anchor it is checked against; the chain a
			// signer returns cannot vouch for itself.
			errs = append(errs, fmt.Errorf("--ca-upstream-roots is required with --ca-upstream=%s: certapi imports a certificate only if its chain leads to a root the installer chose", CAUpstreamCSR))
		}
		if o.Expiration != 0 && o.Expiration < upstreamcsr.MinExpiration {
			errs = append(errs, fmt.Errorf("--ca-upstream-expiration %s: at least %s (the certificates.k8s.io API's least), or 0 for the signer's default", o.Expiration, upstreamcsr.MinExpiration))
		}
	} else if o.SignerName != "" || o.Expiration != 0 {
		errs = append(errs, fmt.Errorf("--ca-upstream-signer-name and --ca-upstream-expiration apply only with --ca-upstream=%s", CAUpstreamCSR))
	}
	if _, err := signer.ParseBundleAnchor(o.BundleAnchor); err != nil {
		errs = append(errs, fmt.Errorf("--ca-bundle-anchor: %w", err))
	}
	if o.MinRemaining < 0 {
		errs = append(errs, fmt.Errorf("--ca-import-min-remaining %s: must not be negative", o.MinRemaining))
	}
	if o.Mode == CAUpstreamNone && (o.RootsFile != "" || o.AcceptWiderConstraints || o.Organization != "") {
		errs = append(errs, fmt.Errorf("--ca-upstream-roots, --ca-import-accept-wider-constraints and --ca-request-organization apply only with --ca-upstream=%s or %s", CAUpstreamManual, CAUpstreamCSR))
	}
	return errs
}

// upstreamCSR is the leader's CertificateSigningRequest configuration, nil unless
// --ca-upstream=CertificateSigningRequest.
func (o *CAUpstreamOptions) upstreamCSR() *leader.UpstreamCSR {
	if o.Mode != CAUpstreamCSR {
		return nil
	}
	return &leader.UpstreamCSR{SignerName: o.SignerName, Expiration: o.Expiration}
}

// issuerUpstream returns the issuer's Upstream configuration (nil for self-signed CAs) and bundle anchor,
// reading the roots file.
func (o *CAUpstreamOptions) issuerUpstream() (*issuer.Upstream, signer.BundleAnchor, error) {
	anchor, err := signer.ParseBundleAnchor(o.BundleAnchor)
	if err != nil {
		return nil, "", fmt.Errorf("--ca-bundle-anchor: %w", err)
	}
	if o.Mode == CAUpstreamNone {
		return nil, anchor, nil
	}
	up := &issuer.Upstream{MinRemaining: o.MinRemaining, AcceptWiderConstraints: o.AcceptWiderConstraints, Organization: o.Organization}
	if o.RootsFile != "" {
		roots, err := os.ReadFile(o.RootsFile)
		if err != nil {
			return nil, "", fmt.Errorf("--ca-upstream-roots: %w", err)
		}
		if _, err := signer.ParseBundle(roots); err != nil {
			return nil, "", fmt.Errorf("--ca-upstream-roots %s: %w", o.RootsFile, err)
		}
		up.RootsPEM = roots
	}
	return up, anchor, nil
}
