package kubectlcertapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cmdutil "k8s.io/kubectl/pkg/cmd/util"
	"k8s.io/kubectl/pkg/util/templates"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
)

// maxImportFile bounds a file `ca import` reads; the server accepts at most 256 KiB per field.
const maxImportFile = 256 << 10

// newCACmd is `kubectl certapi ca`: the CA's custody when certapi is an intermediate of an
// organisation's CA, signed by hand (certapi's --ca-upstream=Manual).
func newCACmd(root *rootOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ca",
		Short: "Sign certapi's CA by an organisation's CA: print the pending certificate request, import the signed certificate",
		Long: templates.LongDesc(`
			With certapi's --ca-upstream=Manual, certapi's CA is an intermediate of an organisation's CA.
			certapi makes each CA key itself and publishes a certificate request for it
			(CertificateAuthority/default status.pendingRequest) well ahead of each rotation;
			"ca request" prints it, the organisation's CA signs it, and "ca import" sends the signed
			certificate and its chain back. See docs/ca-custody.md.`),
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error { return c.Help() },
	}
	cmd.AddCommand(newCARequestCmd(root), newCAImportCmd(root))
	return cmd
}

type caRequestOptions struct {
	*rootOptions
	output string
}

func newCARequestCmd(root *rootOptions) *cobra.Command {
	o := &caRequestOptions{rootOptions: root, output: "pem"}
	cmd := &cobra.Command{
		Use:   "request [-o pem|json]",
		Short: "Print the CA certificate request that waits for the organisation's signature",
		Long: templates.LongDesc(`
			Print the pending CA certificate request of CertificateAuthority/default (status.pendingRequest):
			with -o pem (the default) the PEM request on standard output, and what it waits for on standard
			error; with -o json the whole status.pendingRequest. Fails, saying why, when no request waits.`),
		Example: templates.Examples(`
			kubectl certapi ca request > certapi-ca.csr
			openssl req -in certapi-ca.csr -noout -text
			kubectl certapi ca request -o json`),
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if o.output != "pem" && o.output != "json" {
				return cmdutil.UsageErrorf(c, "--output %q: accepted: pem, json", o.output)
			}
			return o.run(c)
		},
	}
	cmd.Flags().StringVarP(&o.output, "output", "o", o.output, "pem (the request) or json (status.pendingRequest)")
	return cmd
}

func (o *caRequestOptions) run(c *cobra.Command) error {
	cs, err := o.clients()
	if err != nil {
		return err
	}
	ca, err := cs.certapi.CertapiV1alpha1().CertificateAuthorities().Get(c.Context(), certapiv1alpha1.CertificateAuthorityName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading CertificateAuthority/%s: %w", certapiv1alpha1.CertificateAuthorityName, err)
	}
	p := ca.Status.PendingRequest
	if p == nil {
		return errors.New("no CA certificate request waits for a signature: certapi makes one when it runs with --ca-upstream=Manual or CertificateSigningRequest " +
			"and its Active CA is self-signed or due for rotation (see kubectl certapi status)")
	}
	if o.output == "json" {
		b, err := json.MarshalIndent(p, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(o.Out, "%s\n", b)
		return err
	}
	fmt.Fprintf(o.ErrOut, "%s\nThe Active CA's chain expires %s.\n", p.WaitingFor, p.ActiveNotAfter.UTC().Format(time.RFC3339))
	_, err = fmt.Fprint(o.Out, p.Request)
	return err
}

type caImportOptions struct {
	*rootOptions
	certificate, chain string
	dryRun             bool
}

func newCAImportCmd(root *rootOptions) *cobra.Command {
	o := &caImportOptions{rootOptions: root}
	cmd := &cobra.Command{
		Use:   "import --certificate=FILE [--chain=FILE] [--dry-run]",
		Short: "Import the CA certificate the organisation's CA signed for the pending request",
		Long: templates.LongDesc(`
			Send the CA certificate signed for the pending request (and its chain: intermediates, and the
			root unless certapi was given --ca-upstream-roots) to certificateauthorities/default/import.
			certapi checks it against the pending key, its CA constraints, key usages, name constraints,
			validity and every link of the chain, and either lists every problem (nothing is changed) or
			makes it the Next CA, which signs once every trust bundle holds it. Warnings are printed.
			Needs create on certificateauthorities/import. --dry-run checks and changes nothing.`),
		Example: templates.Examples(`
			kubectl certapi ca import --certificate=certapi-ca.crt --chain=org-root.crt
			kubectl certapi ca import --certificate=certapi-ca.crt --chain=org-root.crt --dry-run`),
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if o.certificate == "" {
				return cmdutil.UsageErrorf(c, "--certificate is required: the PEM file of the signed CA certificate")
			}
			return o.run(c)
		},
	}
	cmd.Flags().StringVar(&o.certificate, "certificate", "", "PEM file of the CA certificate the organisation's CA signed (it may be followed by its chain)")
	cmd.Flags().StringVar(&o.chain, "chain", "", "PEM file of the chain above it: intermediates, and the root")
	cmd.Flags().BoolVar(&o.dryRun, "dry-run", false, "check the certificate and change nothing")
	return cmd
}

func readPEMFile(flag, path string) (string, error) {
	if path == "" {
		return "", nil
	}
	st, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("--%s: %w", flag, err)
	}
	if st.Size() > maxImportFile {
		return "", fmt.Errorf("--%s %s: %d bytes; accepted: at most %d (a PEM certificate chain is a few KiB)", flag, path, st.Size(), maxImportFile)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("--%s: %w", flag, err)
	}
	return string(b), nil
}

func (o *caImportOptions) run(c *cobra.Command) error {
	cert, err := readPEMFile("certificate", o.certificate)
	if err != nil {
		return err
	}
	chain, err := readPEMFile("chain", o.chain)
	if err != nil {
		return err
	}
	cs, err := o.clients()
	if err != nil {
		return err
	}
	opts := metav1.CreateOptions{}
	if o.dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	out, err := cs.certapi.CertapiV1alpha1().CertificateAuthorities().Import(c.Context(), certapiv1alpha1.CertificateAuthorityName,
		&certapiv1alpha1.CertificateAuthorityImport{Spec: certapiv1alpha1.CertificateAuthorityImportSpec{Certificate: cert, Chain: chain}}, opts)
	if err != nil {
		return importError(err)
	}
	st := out.Status
	verb := "imported"
	if o.dryRun {
		verb = "would import (dry run)"
	}
	fmt.Fprintf(o.Out, "%s the CA certificate %s (key %s) under %s as the %s CA\n", verb, st.SerialNumber, st.SubjectKeyID, st.Root, st.Role)
	if st.NotAfter != nil && st.ChainNotAfter != nil {
		fmt.Fprintf(o.Out, "valid until %s (with its chain: %s)\n", st.NotAfter.UTC().Format(time.RFC3339), st.ChainNotAfter.UTC().Format(time.RFC3339))
	}
	if !o.dryRun {
		fmt.Fprintln(o.Out, "it signs once every trust bundle holds it and the rotation grace period has passed (kubectl certapi status)")
	}
	for _, w := range st.Warnings {
		fmt.Fprintf(o.Out, "warning: %s\n", w)
	}
	return nil
}

// importError says what a refused import was refused for: every cause of a 422, one a line.
func importError(err error) error {
	var se apierrors.APIStatus
	if !errors.As(err, &se) || se.Status().Details == nil || len(se.Status().Details.Causes) == 0 {
		return err
	}
	var b strings.Builder
	causes := se.Status().Details.Causes
	fmt.Fprintf(&b, "the CA certificate was refused (%d problem", len(causes))
	if len(causes) != 1 {
		b.WriteString("s")
	}
	b.WriteString("; nothing was changed):")
	for _, c := range causes {
		fmt.Fprintf(&b, "\n  %s: %s", c.Type, c.Message)
	}
	return errors.New(b.String())
}
