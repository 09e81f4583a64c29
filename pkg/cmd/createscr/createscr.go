// Package createscr is the command behind the kubectl plugin kubectl-create-servingcertrequest, which
// kubectl runs for `kubectl create servingcertrequest NAME --service=SVC`. It is built on
// k8s.io/cli-runtime, so the kubeconfig, context, namespace and output flags behave as kubectl's, and it
// reports errors as kubectl does (k8s.io/kubectl's cmdutil.CheckErr).
package createscr

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	cmdutil "k8s.io/kubectl/pkg/cmd/util"
	"k8s.io/kubectl/pkg/util/templates"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/cmd/internal/help"
	"github.com/certapi/certapi/pkg/generated/clientset/versioned"
	"github.com/certapi/certapi/pkg/generated/clientset/versioned/scheme"
)

// resourceName is how kubectl names the resource in its output: <resource>.<group>.
const resourceName = "servingcertrequest.certapi.dev"

// DefaultTimeout is how long --wait waits unless --timeout says otherwise.
const DefaultTimeout = 60 * time.Second

// DefaultFieldManager is the field manager the request is created with, as `kubectl create` uses.
const DefaultFieldManager = "kubectl-create"

var (
	long = templates.LongDesc(`
		Create a ServingCertRequest: ask certapi for TLS serving certificates for the Service --service in
		the namespace, signed by the cluster's CA.

		Every certificate carries the names SVC.NAMESPACE.svc and SVC.NAMESPACE.svc.CLUSTER_DOMAIN.
		--dns-name adds names of the same namespace: NAME.NAMESPACE.svc[.CLUSTER_DOMAIN], or
		*.SVC.NAMESPACE.svc[.CLUSTER_DOMAIN] for the pods of a headless Service. With --secret, certapi
		delivers tls.crt, tls.key and ca.crt into that kubernetes.io/tls Secret and keeps it renewed;
		without it, a workload gets its certificates through the request's servingcerts subresource (for
		example with the Go package github.com/certapi/certapi/pkg/servingcert). With --service-account,
		kubelet gives the pods of that ServiceAccount the certificate in a podCertificate projected volume
		(signerName certapi.dev/serving, userAnnotations certapi.dev/servingcertrequest: NAME).

		The server checks the request and rejects it with a message that names the field; only
		--key-algorithm is checked before anything is sent.

		kubectl runs this plugin when kubectl-create-servingcertrequest is on PATH, and passes it only the
		arguments after "kubectl create servingcertrequest": put every flag, --kubeconfig, --context and
		-n included, after "servingcertrequest" (kubectl refuses flags before a plugin's name). The plugin
		can also be run directly as kubectl-create-servingcertrequest.`)

	example = templates.Examples(`
		# Ask for certificates for the Service my-webhook in the current namespace
		kubectl create servingcertrequest my-webhook --service=my-webhook

		# Have them delivered into the Secret my-webhook-tls, and return once the Secret holds one
		kubectl create servingcertrequest my-webhook -n webhooks --service=my-webhook --secret=my-webhook-tls --wait

		# Add the names of a headless Service's pods; a 30-day lifetime, renewed 10 days before expiry, RSA keys
		kubectl create servingcertrequest db -n data --service=db --dns-name='*.db.data.svc' --duration=720h --renew-before=240h --key-algorithm=RSA3072 --secret=db-tls

		# Let kubelet give the pods of the ServiceAccount my-webhook the certificate in a podCertificate volume
		kubectl create servingcertrequest my-webhook -n webhooks --service=my-webhook --service-account=my-webhook

		# Print the bash completion script of the plugin run directly (also zsh, fish, powershell)
		kubectl-create-servingcertrequest completion bash

		# Print the object without sending it, to keep in a manifest
		kubectl create servingcertrequest my-webhook --service=my-webhook --dry-run=client -o yaml

		# Let the server check and default the request without storing it
		kubectl create servingcertrequest my-webhook --service=my-webhook --dry-run=server -o yaml`)
)

// Options holds the command's flags and what Complete derives from them.
type Options struct {
	// ConfigFlags are kubectl's kubeconfig and connection flags.
	ConfigFlags *genericclioptions.ConfigFlags
	// PrintFlags are kubectl's -o flags.
	PrintFlags *genericclioptions.PrintFlags
	genericiooptions.IOStreams

	// RequestParams are the command's argument (Name) and the flags that make up the request:
	// --service, --dns-name, --duration, --renew-before, --key-algorithm, --secret and --service-account.
	// Its Namespace stays empty: Complete sets Options.Namespace, which request writes into the object
	// when -n was given.
	RequestParams
	// FieldManager is --field-manager.
	FieldManager string
	// Wait is --wait.
	Wait bool
	// Timeout is --timeout, the limit of --wait.
	Timeout time.Duration

	// DryRunStrategy is --dry-run, set by Complete.
	DryRunStrategy cmdutil.DryRunStrategy
	// Namespace is the namespace of the request, set by Complete from -n or the kubeconfig.
	Namespace string
	// EnforceNamespace says Namespace was given explicitly (-n), so it is written into the object.
	EnforceNamespace bool

	timeoutSet bool
	outputSet  bool
	printer    printers.ResourcePrinter
}

// NewOptions returns Options with the defaults of the flags.
func NewOptions(streams genericiooptions.IOStreams) *Options {
	return &Options{
		ConfigFlags:  genericclioptions.NewConfigFlags(true).WithWarningPrinter(streams),
		PrintFlags:   genericclioptions.NewPrintFlags("created").WithTypeSetter(scheme.Scheme),
		IOStreams:    streams,
		FieldManager: DefaultFieldManager,
		Timeout:      DefaultTimeout,
	}
}

// NewCmd returns the command `kubectl create servingcertrequest`. Run it through
// k8s.io/component-base/cli.RunNoErrOutput and pass its error to cmdutil.CheckErr, as kubectl does.
func NewCmd(streams genericiooptions.IOStreams) *cobra.Command {
	o := NewOptions(streams)
	cmd := &cobra.Command{
		Use:     "kubectl-create-servingcertrequest NAME --service=SVC",
		Short:   "Create a ServingCertRequest: TLS serving certificates for a Service, from the cluster's CA",
		Long:    long,
		Example: example,
		Annotations: map[string]string{
			cobra.CommandDisplayNameAnnotation: "kubectl create servingcertrequest",
		},
		Args:         cobra.ArbitraryArgs, // checked in Complete, with kubectl's message
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 2 && args[0] == "completion" {
				return completion(cmd, args[1])
			}
			if !cmd.Flags().Changed("service") {
				return fmt.Errorf(`required flag(s) "service" not set`)
			}
			if err := o.Complete(cmd, args); err != nil {
				return err
			}
			if err := o.Validate(); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
	}
	cmd.SetOut(streams.Out)
	cmd.SetErr(streams.ErrOut)
	cmd.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return cmdutil.UsageErrorf(c, "%s", err)
	})

	own := pflag.NewFlagSet("options", pflag.ContinueOnError)
	own.StringVar(&o.Service, "service", o.Service,
		"Name of the Service, in the request's namespace, that serves with the certificates (spec.serviceName). Required.")
	own.StringSliceVar(&o.DNSNames, "dns-name", o.DNSNames,
		"Extra DNS name for the certificates (spec.dnsNames): NAME.NAMESPACE.svc[.CLUSTER_DOMAIN] of this namespace, or *.SVC.NAMESPACE.svc[.CLUSTER_DOMAIN]. Repeat the flag, or separate names with commas, for more than one. The server stores them in lower case without a trailing dot.")
	own.DurationVar(&o.Duration, "duration", o.Duration,
		"Lifetime of each certificate (spec.duration), like 720h: from 1h to 2160h. Unset, the server uses 168h.")
	own.DurationVar(&o.RenewBefore, "renew-before", o.RenewBefore,
		"How long before expiry a certificate is renewed (spec.renewBefore), less than --duration. Unset, renewal is due at two thirds of the lifetime.")
	own.StringVar(&o.KeyAlgorithm, "key-algorithm", o.KeyAlgorithm,
		"Private key certapi generates for --secret (spec.keyAlgorithm), one of "+keyAlgorithmList()+" (any case). Unset, the server uses ECDSAP256.")
	own.StringVar(&o.SecretName, "secret", o.SecretName,
		"kubernetes.io/tls Secret in the request's namespace that certapi creates and keeps renewed with tls.crt, tls.key and ca.crt (spec.secretName). Needs permission to create Secrets there.")
	own.StringSliceVar(&o.ServiceAccountNames, "service-account", o.ServiceAccountNames,
		"ServiceAccount, in the request's namespace, whose pods may get the certificate from kubelet through a podCertificate projected volume with signerName certapi.dev/serving (spec.serviceAccountNames). Repeat the flag, or separate names with commas, for more than one.")
	own.BoolVar(&o.Wait, "wait", o.Wait,
		"After creating the request, watch it until its Ready condition is True (with --secret: until the Secret holds a current certificate), then print it. Not with --dry-run.")
	own.DurationVar(&o.Timeout, "timeout", o.Timeout,
		"How long --wait waits. On timeout the command fails and says what the request's Ready condition says; the request stays.")
	own.StringVar(&o.FieldManager, "field-manager", o.FieldManager, "Name of the manager used to track field ownership.")
	own.String("dry-run", "none",
		`Must be "none", "server", or "client". If client strategy, only print the object that would be sent, without sending it. If server strategy, submit server-side request without persisting the resource.`)
	own.Lookup("dry-run").NoOptDefVal = "unchanged" // as kubectl's: a bare --dry-run means client, with a warning
	cmd.Flags().AddFlagSet(own)
	o.PrintFlags.AddFlags(cmd)
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if own.Lookup(f.Name) == nil {
			own.AddFlag(f) // the -o flags belong with the command's own options in --help
		}
	})
	// cobra's own completion subcommand would take a request named "completion" for itself
	// (`kubectl create servingcertrequest completion --service=web` failed on an unknown flag), and its
	// required-flag check would refuse `completion bash` for want of --service: RunE tells the two
	// apart by their arguments instead (a request has one NAME, completion a NAME and a shell).
	cmd.CompletionOptions.DisableDefaultCmd = true

	conn := pflag.NewFlagSet("kubeconfig", pflag.ContinueOnError)
	o.ConfigFlags.AddFlags(conn)
	cmd.PersistentFlags().AddFlagSet(conn)

	help.SetUsage(cmd, func(*cobra.Command) []help.FlagGroup {
		return []help.FlagGroup{
			{Title: "Options", Flags: own},
			{Title: "Kubeconfig and connection options (as kubectl's)", Flags: conn},
		}
	})
	return cmd
}

// Complete reads the argument and the flags that need the command or the kubeconfig.
func (o *Options) Complete(cmd *cobra.Command, args []string) error {
	if len(args) != 1 {
		return cmdutil.UsageErrorf(cmd, "exactly one NAME is required, got %d", len(args))
	}
	o.Name = args[0]
	o.timeoutSet = cmd.Flags().Changed("timeout")
	o.outputSet = o.PrintFlags.OutputFormat != nil && *o.PrintFlags.OutputFormat != ""

	var err error
	o.DryRunStrategy, err = cmdutil.GetDryRunStrategy(cmd)
	if err != nil {
		return err
	}
	o.Namespace, o.EnforceNamespace, err = o.ConfigFlags.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		// A client dry run needs no cluster: without any kubeconfig it prints the object with no namespace.
		if o.DryRunStrategy != cmdutil.DryRunClient || !clientcmd.IsEmptyConfig(err) {
			return fmt.Errorf("reading the namespace from the kubeconfig: %w", err)
		}
		o.Namespace, o.EnforceNamespace = "", false
	}

	cmdutil.PrintFlagsWithDryRunStrategy(o.PrintFlags, o.DryRunStrategy)
	o.printer, err = o.PrintFlags.ToPrinter()
	if err != nil {
		return err
	}
	return nil
}

// Validate checks the flags against each other; the object itself is checked by NewServingCertRequest.
func (o *Options) Validate() error {
	if o.Wait && o.DryRunStrategy != cmdutil.DryRunNone {
		return errors.New("--wait cannot be used with --dry-run: nothing is stored to wait for")
	}
	if o.timeoutSet && !o.Wait {
		return errors.New("--timeout is the limit of --wait; add --wait")
	}
	if o.Timeout <= 0 {
		return fmt.Errorf("--timeout must be greater than zero, got %s", o.Timeout)
	}
	_, err := o.request()
	return err
}

// request builds the object from the options.
func (o *Options) request() (*certapiv1alpha1.ServingCertRequest, error) {
	p := o.RequestParams
	p.Namespace = ""
	if o.EnforceNamespace {
		p.Namespace = o.Namespace
	}
	return NewServingCertRequest(p)
}

// Run creates the request (or prints it, for a client dry run), waits for it with --wait, and prints
// the result.
func (o *Options) Run(ctx context.Context) error {
	obj, err := o.request()
	if err != nil {
		return err
	}
	if o.DryRunStrategy == cmdutil.DryRunClient {
		return o.print(obj)
	}

	config, err := o.ConfigFlags.ToRESTConfig()
	if err != nil {
		return err
	}
	config = rest.CopyConfig(config)
	config.WarningHandler = rest.NewWarningWriter(o.ErrOut, rest.WarningWriterOptions{
		Deduplicate: true,
		Color:       printers.AllowsColorOutput(o.ErrOut),
	})
	client, err := versioned.NewForConfig(config)
	if err != nil {
		return fmt.Errorf("making a certapi client: %w", err)
	}
	scrs := client.CertapiV1alpha1().ServingCertRequests(o.Namespace)

	opts := metav1.CreateOptions{FieldManager: o.FieldManager}
	if o.DryRunStrategy == cmdutil.DryRunServer {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	created, err := scrs.Create(ctx, obj, opts)
	if err != nil {
		// Not wrapped: cmdutil.CheckErr recognises the API's errors by their type, and prints an Invalid
		// one as kubectl does, with every field the server named.
		return err
	}
	if !o.Wait {
		return o.print(created)
	}

	if !o.outputSet {
		if err := o.print(created); err != nil {
			return err
		}
	}
	ready, err := waitForReady(ctx, scrs, o.Namespace, created.Name, o.Timeout)
	if err != nil {
		return err
	}
	if o.outputSet {
		return o.print(ready)
	}
	met := printers.NewTypeSetter(scheme.Scheme).ToPrinter(&printers.NamePrinter{Operation: "condition met"})
	return met.PrintObj(ready, o.Out)
}

// print writes obj with the printer of the -o flags.
func (o *Options) print(obj *certapiv1alpha1.ServingCertRequest) error {
	if err := o.printer.PrintObj(obj, o.Out); err != nil {
		return fmt.Errorf("printing %s/%s: %w", resourceName, obj.Name, err)
	}
	return nil
}

// completion prints the completion script of shell for this binary, run directly as
// kubectl-create-servingcertrequest: kubectl completes plugins only at its top level.
func completion(cmd *cobra.Command, shell string) error {
	out := cmd.OutOrStdout()
	switch shell {
	case "bash":
		return cmd.Root().GenBashCompletionV2(out, true)
	case "zsh":
		return cmd.Root().GenZshCompletion(out)
	case "fish":
		return cmd.Root().GenFishCompletion(out, true)
	case "powershell":
		return cmd.Root().GenPowerShellCompletionWithDesc(out)
	}
	return cmdutil.UsageErrorf(cmd, "completion: unknown shell %q: want bash, zsh, fish or powershell", shell)
}
