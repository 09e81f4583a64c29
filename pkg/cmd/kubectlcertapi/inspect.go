package kubectlcertapi

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/printers"
	cmdutil "k8s.io/kubectl/pkg/cmd/util"
	"k8s.io/kubectl/pkg/util/templates"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/signer"
)

// SecretInspection is what `kubectl certapi inspect secret` reports; -o json|yaml prints it as is.
// It never holds key material: of tls.key only whether it matches tls.crt.
type SecretInspection struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Type      string `json:"type"`
	// Request is the ServingCertRequest the Secret is annotated for (certapi.dev/servingcertrequest).
	Request string `json:"servingCertRequest,omitempty"`
	// Managed says certapi wrote the Secret (label certapi.dev/managed=true).
	Managed bool `json:"managed"`
	// Certificate is the first certificate of tls.crt; ChainLength counts them all.
	Certificate *CertificateInfo `json:"certificate,omitempty"`
	ChainLength int              `json:"chainLength"`
	// RenewalTime is when certapi renews it (annotation certapi.dev/renewal-time).
	RenewalTime *time.Time `json:"renewalTime,omitempty"`
	// SignedBy is the role of the bundle's CA that signed the certificate, or "unknown".
	SignedBy string `json:"signedBy"`
	// KeyMatches says tls.key is the private key of the certificate.
	KeyMatches bool `json:"keyMatches"`
	// CABundleCurrent says ca.crt is exactly the current trust bundle.
	CABundleCurrent bool `json:"caBundleCurrent"`
	// Verified says the chain verifies, for server authentication now, against the current trust bundle
	// (CertificateAuthority/default status.caBundle); VerifyError says why not.
	Verified    bool   `json:"verified"`
	VerifyError string `json:"verifyError,omitempty"`
	// Problems lists what is wrong, in words; empty when nothing is.
	Problems []string `json:"problems"`
}

// CertificateInfo describes one certificate.
type CertificateInfo struct {
	Subject      string    `json:"subject"`
	Issuer       string    `json:"issuer"`
	SerialNumber string    `json:"serialNumber"`
	DNSNames     []string  `json:"dnsNames,omitempty"`
	IPAddresses  []string  `json:"ipAddresses,omitempty"`
	NotBefore    time.Time `json:"notBefore"`
	NotAfter     time.Time `json:"notAfter"`
	KeyAlgorithm string    `json:"keyAlgorithm"`
}

// InspectSecret examines a Secret against the current trust bundle and the CAs' roles (subject key ID
// to role, from CertificateAuthority/default). bundleErr, when set, says why the bundle is unknown.
func InspectSecret(s *corev1.Secret, bundle []byte, roles map[string]string, bundleErr error, now time.Time) SecretInspection {
	r := SecretInspection{Namespace: s.Namespace, Name: s.Name, Type: string(s.Type), SignedBy: "unknown", Problems: []string{},
		Request: s.Annotations[certapiv1alpha1.AnnotationServingCertRequest], Managed: s.Labels[certapiv1alpha1.LabelManaged] == "true"}
	problem := func(format string, args ...any) { r.Problems = append(r.Problems, fmt.Sprintf(format, args...)) }
	if s.Type != corev1.SecretTypeTLS {
		problem("the Secret's type is %q, not %s", s.Type, corev1.SecretTypeTLS)
	}
	if r.Request == "" {
		problem("no %s annotation: certapi does not deliver into this Secret", certapiv1alpha1.AnnotationServingCertRequest)
	}
	if rt, ok := s.Annotations[certapiv1alpha1.AnnotationRenewalTime]; ok {
		if t, err := time.Parse(time.RFC3339, rt); err == nil {
			r.RenewalTime = &t
		} else {
			problem("annotation %s is not an RFC 3339 time", certapiv1alpha1.AnnotationRenewalTime)
		}
	}

	certPEM := s.Data[corev1.TLSCertKey]
	chain, err := parseCertificates(certPEM)
	switch {
	case len(certPEM) == 0:
		problem("no %s", corev1.TLSCertKey)
	case err != nil:
		problem("%s: %v", corev1.TLSCertKey, err)
	}
	if len(chain) == 0 {
		return r
	}
	leaf := chain[0]
	r.ChainLength = len(chain)
	r.Certificate = certificateInfo(leaf)
	if role, ok := roles[signer.FormatKeyID(leaf.AuthorityKeyId)]; ok && len(leaf.AuthorityKeyId) > 0 {
		r.SignedBy = role
	} else if bundleErr == nil {
		problem("no CA in the current bundle signed it (authority key ID %s)", signer.FormatKeyID(leaf.AuthorityKeyId))
	}
	switch {
	case !now.Before(leaf.NotAfter):
		problem("the certificate expired at %s", formatTime(leaf.NotAfter))
	case now.Before(leaf.NotBefore):
		problem("the certificate is not valid before %s", formatTime(leaf.NotBefore))
	case r.RenewalTime != nil && !now.Before(*r.RenewalTime):
		problem("renewal was due at %s and has not happened: is certapi's leader running? (`kubectl certapi check`)", formatTime(*r.RenewalTime))
	}

	keyPEM := s.Data[corev1.TLSPrivateKeyKey]
	if len(keyPEM) == 0 {
		problem("no %s", corev1.TLSPrivateKeyKey)
	} else if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
		// crypto/tls's messages say what is wrong without echoing the key.
		problem("%s does not go with %s: %v", corev1.TLSPrivateKeyKey, corev1.TLSCertKey, err)
	} else {
		r.KeyMatches = true
	}

	if bundleErr != nil {
		r.VerifyError = "the current trust bundle could not be read: " + bundleErr.Error()
		problem("%s", r.VerifyError)
		return r
	}
	caCrt := s.Data[certapiv1alpha1.SecretKeyCABundle]
	r.CABundleCurrent = len(caCrt) > 0 && bytes.Equal(bytes.TrimSpace(caCrt), bytes.TrimSpace(bundle))
	if !r.CABundleCurrent {
		if len(caCrt) == 0 {
			problem("no %s", certapiv1alpha1.SecretKeyCABundle)
		} else {
			problem("%s is not the current trust bundle (certapi updates it; a rotation or distrust may be under way)", certapiv1alpha1.SecretKeyCABundle)
		}
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(bundle) {
		r.VerifyError = "the current trust bundle holds no certificate"
		problem("%s", r.VerifyError)
		return r
	}
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		r.VerifyError = err.Error()
		problem("the certificate does not verify against the current trust bundle: %v", err)
	} else {
		r.Verified = true
	}
	return r
}

// parseCertificates parses every CERTIFICATE block of data.
func parseCertificates(data []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return certs, fmt.Errorf("certificate %d: %w", len(certs)+1, err)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, fmt.Errorf("no PEM CERTIFICATE block")
	}
	return certs, nil
}

func certificateInfo(c *x509.Certificate) *CertificateInfo {
	info := &CertificateInfo{
		Subject: c.Subject.String(), Issuer: c.Issuer.String(), SerialNumber: signer.FormatSerialNumber(c.SerialNumber),
		DNSNames: c.DNSNames, NotBefore: c.NotBefore, NotAfter: c.NotAfter, KeyAlgorithm: keyAlgorithm(c.PublicKey),
	}
	for _, ip := range c.IPAddresses {
		info.IPAddresses = append(info.IPAddresses, ip.String())
	}
	return info
}

func keyAlgorithm(pub any) string {
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		return "ECDSA " + k.Curve.Params().Name
	case *rsa.PublicKey:
		return fmt.Sprintf("RSA %d", k.N.BitLen())
	case ed25519.PublicKey:
		return "Ed25519"
	}
	return fmt.Sprintf("%T", pub)
}

// PrintInspection writes an inspection for people.
func PrintInspection(out io.Writer, r SecretInspection, now time.Time) error {
	w := printers.GetNewTabWriter(out)
	row := func(k, format string, args ...any) { fmt.Fprintf(w, "%s:\t%s\n", k, fmt.Sprintf(format, args...)) }
	row("Secret", "%s/%s (%s)", r.Namespace, r.Name, r.Type)
	switch {
	case r.Request != "" && r.Managed:
		row("Delivered by", "ServingCertRequest %s/%s", r.Namespace, r.Request)
	case r.Request != "":
		row("Delivered by", "ServingCertRequest %s/%s (not yet written by certapi)", r.Namespace, r.Request)
	default:
		row("Delivered by", "<none>")
	}
	if c := r.Certificate; c != nil {
		row("Subject", "%s", orNone(c.Subject))
		row("DNS names", "%s", orNone(strings.Join(c.DNSNames, ", ")))
		if len(c.IPAddresses) > 0 {
			row("IP addresses", "%s", strings.Join(c.IPAddresses, ", "))
		}
		row("Issuer", "%s", orNone(c.Issuer))
		row("Signed by", "%s CA", r.SignedBy)
		row("Serial number", "%s", c.SerialNumber)
		row("Key", "%s, %s", c.KeyAlgorithm, map[bool]string{true: "tls.key matches", false: "tls.key does NOT match"}[r.KeyMatches])
		row("Valid", "%s to %s (%s left)", formatTime(c.NotBefore), formatTime(c.NotAfter), timeLeft(now, c.NotAfter))
		if r.RenewalTime != nil {
			row("Renewal time", "%s (in %s)", formatTime(*r.RenewalTime), timeLeft(now, *r.RenewalTime))
		}
		if r.ChainLength > 1 {
			row("Chain", "%d certificates", r.ChainLength)
		}
	}
	row("ca.crt", "%s", map[bool]string{true: "the current trust bundle", false: "NOT the current trust bundle"}[r.CABundleCurrent])
	if r.Verified {
		row("Verifies", "yes, against the current trust bundle (CertificateAuthority/default status.caBundle)")
	} else {
		row("Verifies", "NO: %s", orNone(r.VerifyError))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if len(r.Problems) == 0 {
		_, err := fmt.Fprintln(out, "No problems found.")
		return err
	}
	_, err := fmt.Fprintf(out, "Problems:\n%s", indent(strings.Join(r.Problems, "\n"), "  - "))
	return err
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

type inspectOptions struct {
	*rootOptions
	output string
	served inspectServedOptions
}

func newInspectCmd(root *rootOptions) *cobra.Command {
	o := &inspectOptions{rootOptions: root, served: inspectServedOptions{timeout: 5 * time.Second}}
	cmd := &cobra.Command{
		Use:   "inspect (TYPE/NAME | TYPE NAME | secret NAME) [--direct] [-o json|yaml]",
		Short: "Show what a webhook, CRD conversion webhook or APIService serves, or what a delivered Secret holds",
		Long: templates.LongDesc(`
			Show, for one ValidatingWebhookConfiguration, MutatingWebhookConfiguration,
			CustomResourceDefinition (its conversion webhook) or APIService, what every ready endpoint of
			each Service it calls presents, judged as kube-apiserver would judge it: for each caBundle slot
			that names a Service (each webhook of a webhook configuration), the Service is resolved
			exactly as certapi's served certificate check resolves it (the Service port the reference
			names, 443 by default, then every ready endpoint of its EndpointSlices on that port's target
			port), and inspect does a TLS handshake with each endpoint with the server name kube-apiserver
			checks, <service>.<namespace>.svc. No request byte is sent: the webhook's handler never runs.

			For each endpoint it prints every certificate of the presented chain (subject, issuer, serial,
			SANs, validity) and the state certapi's check would give it, verified against the caBundle the
			object holds now (read from the object, not certapi's current bundle): Verified, ExpiringSoon,
			Untrusted, NameMismatch, Expired, HandshakeFailed or Unreachable, with the CA of the bundle that
			verified it, or why none did. Then certapi's own last view of the slot: its entry in
			status.served of CertificateAuthority/default and the Serving condition of the
			ServingCertRequest of the Service. No key material is read or printed.

			How endpoints are reached: by default through kube-apiserver's pods/portforward subresource to
			the Pod the EndpointSlice names (its targetRef), as kubectl port-forward does, so it works from
			anywhere kube-apiserver can be reached; it needs create on pods/portforward in the Service's
			namespace. An endpoint without a Pod is reported NotInspected. With --direct, inspect dials
			each endpoint's address itself: run it in the cluster or on a node, or for endpoints that are
			not Pods.

			TYPE is validatingwebhookconfiguration (vwc), mutatingwebhookconfiguration (mwc),
			customresourcedefinition (crd) or apiservice, singular or plural, optionally with its API
			group. "inspect secret NAME" explains a Secret certapi delivers (see "inspect secret --help").

			-o json|yaml prints the report as a structure (docs/served-certificates.md describes it);
			its fields are only ever added to.`),
		Example: templates.Examples(`
			# What each endpoint of each webhook of a ValidatingWebhookConfiguration presents
			kubectl certapi inspect validatingwebhookconfiguration/my-webhook

			# A CRD's conversion webhook, dialling the endpoints directly (in the cluster or on a node)
			kubectl certapi inspect crd/widgets.example.com --direct

			# An APIService, as JSON
			kubectl certapi inspect apiservice/v1beta1.metrics.example.com -o json

			# What a delivered Secret holds
			kubectl certapi inspect secret my-webhook-tls -n webhooks`),
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			t, err := ParseInspectTarget(args)
			if err != nil {
				return cmdutil.UsageErrorf(cmd, "%s", err)
			}
			if err := validOutput(o.output); err != nil {
				return cmdutil.UsageErrorf(cmd, "%s", err)
			}
			if err := positive("timeout", o.served.timeout); err != nil {
				return cmdutil.UsageErrorf(cmd, "%s", err)
			}
			if t.Kind == kindSecret {
				return o.run(cmd.Context(), t.Name)
			}
			return o.runServed(cmd.Context(), t)
		},
	}
	cmd.Flags().StringVarP(&o.output, "output", "o", o.output, "Output format: json or yaml. Unset, for people.")
	cmd.Flags().BoolVar(&o.served.direct, "direct", o.served.direct,
		"Dial each endpoint's address from this machine instead of through kube-apiserver's pods/portforward.")
	cmd.Flags().DurationVar(&o.served.timeout, "timeout", o.served.timeout, "How long to wait for each endpoint: the connection (or tunnel) and the TLS handshake.")
	secret := &cobra.Command{
		Use:   "secret NAME [-o json|yaml]",
		Short: "Explain a Secret certapi delivers: names, issuer, validity, renewal, and whether it verifies",
		Long: templates.LongDesc(`
			Explain a kubernetes.io/tls Secret that certapi delivers into (spec.secretName of a
			ServingCertRequest): the certificate's subject, DNS names, issuer and the role of the CA that
			signed it, serial number, key algorithm and whether tls.key matches, validity and renewal time,
			whether ca.crt is the current trust bundle, and whether the certificate verifies for server
			authentication against the current bundle (CertificateAuthority/default status.caBundle).
			Problems are listed at the end; tls.key is never printed.`),
		Example: templates.Examples(`
			kubectl certapi inspect secret my-webhook-tls -n webhooks
			kubectl certapi inspect secret my-webhook-tls -n webhooks -o json`),
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return cmdutil.UsageErrorf(cmd, "exactly one NAME is required, got %d", len(args))
			}
			if err := validOutput(o.output); err != nil {
				return cmdutil.UsageErrorf(cmd, "%s", err)
			}
			return o.run(cmd.Context(), args[0])
		},
	}
	secret.Flags().StringVarP(&o.output, "output", "o", o.output, "Output format: json or yaml. Unset, for people.")
	cmd.AddCommand(secret)
	return cmd
}

// runServed inspects what a webhook configuration's, CRD's or APIService's endpoints serve.
func (o *inspectOptions) runServed(ctx context.Context, t InspectTarget) error {
	c, err := o.clients()
	if err != nil {
		return err
	}
	r, err := inspectServed(ctx, c, t, o.served)
	if err != nil {
		return err
	}
	if o.output != outputTable {
		return printStructured(o.Out, o.output, r)
	}
	return PrintServedInspection(o.Out, r)
}

func (o *inspectOptions) run(ctx context.Context, name string) error {
	c, err := o.clients()
	if err != nil {
		return err
	}
	ns, _, err := o.namespace()
	if err != nil {
		return err
	}
	s, err := c.kube.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	var bundle []byte
	roles := map[string]string{}
	ca, bundleErr := c.certapi.CertapiV1alpha1().CertificateAuthorities().Get(ctx, certapiv1alpha1.CertificateAuthorityName, metav1.GetOptions{})
	if bundleErr == nil {
		bundle, roles = []byte(ca.Status.CABundle), caRoles(ca)
	}
	now := time.Now()
	r := InspectSecret(s, bundle, roles, bundleErr, now)
	if o.output != outputTable {
		return printStructured(o.Out, o.output, r)
	}
	return PrintInspection(o.Out, r, now)
}
