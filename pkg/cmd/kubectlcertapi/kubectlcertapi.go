// Package kubectlcertapi is the command behind the kubectl plugin kubectl-certapi, which kubectl runs for
// `kubectl certapi ...`: day-2 work on certapi for cluster admins. `status` shows the CA, the rotation and
// what it waits for, the injection summary and the requests nearest expiry; `rotate` and `distrust` start
// a CA rotation and follow it; `inspect` shows what a webhook configuration's, CRD's or APIService's
// endpoints serve against the caBundle it holds, and `inspect secret` explains a delivered Secret; `check`
// says whether certapi serves; `migrate` prints the cut-over from cert-manager for the cluster; `renew`
// re-issues a request's Secret now; `completion` prints shell completion scripts. It is built on k8s.io/cli-runtime, so the kubeconfig, context and namespace flags behave as
// kubectl's, and it reports errors as kubectl does (k8s.io/kubectl's cmdutil.CheckErr).
package kubectlcertapi

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	aggregatorclient "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"
	cmdutil "k8s.io/kubectl/pkg/cmd/util"
	"k8s.io/kubectl/pkg/util/templates"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/cmd/internal/help"
	"github.com/certapi/certapi/pkg/generated/clientset/versioned"
)

// Names of certapi's objects this command reads and writes.
const (
	// caResource is how kubectl names the CertificateAuthority in its output.
	caResource = "certificateauthority.certapi.dev/" + certapiv1alpha1.CertificateAuthorityName
	// apiServiceName is the APIService that registers certapi with kube-apiserver.
	apiServiceName = certapiv1alpha1.APIServiceName
	// groupVersion is certapi's API.
	groupVersion = certapiv1alpha1.APIVersion
)

// FieldManager is the field manager of the writes `rotate`, `distrust` and `renew` make.
const FieldManager = "kubectl-certapi"

var rootLong = templates.LongDesc(`
	Operate certapi, the cluster's certificate authority for webhooks and extension API servers.

	kubectl runs this plugin when kubectl-certapi is on PATH, and passes it the arguments after
	"kubectl certapi": put every flag, --kubeconfig, --context and -n included, after "certapi".
	It can also be run directly as kubectl-certapi.`)

var rootExample = templates.Examples(`
	# The CA, the rotation and what it waits for, injection, and the requests nearest expiry
	kubectl certapi status

	# Is certapi serving? Exit status 0 only when it is; wait up to two minutes for it
	kubectl certapi check --wait --timeout=2m

	# Rotate the CA with trust overlap and follow it until the new CA signs
	kubectl certapi rotate --wait

	# What each endpoint of a webhook presents, and whether the webhook's caBundle verifies it
	kubectl certapi inspect validatingwebhookconfiguration/my-webhook

	# What a delivered Secret holds, and whether it verifies against the current bundle
	kubectl certapi inspect secret my-webhook-tls -n webhooks

	# The cut-over from cert-manager for this cluster, as commands (changes nothing)
	kubectl certapi migrate

	# Re-issue the certificate in a ServingCertRequest's Secret now
	kubectl certapi renew webhooks/my-webhook`)

// rootOptions are the flags every subcommand shares.
type rootOptions struct {
	configFlags *genericclioptions.ConfigFlags
	genericiooptions.IOStreams
}

// clients are the API clients the subcommands use.
type clients struct {
	certapi    versioned.Interface
	kube       kubernetes.Interface
	aggregator aggregatorclient.Interface
	extensions apiextensionsclient.Interface
	// config is what they were made from, for the pods/portforward tunnels of `inspect`.
	config *rest.Config
}

// clients makes the clients from the kubeconfig flags, with API warnings printed as kubectl does.
func (o *rootOptions) clients() (*clients, error) {
	config, err := o.configFlags.ToRESTConfig()
	if err != nil {
		return nil, err
	}
	config = rest.CopyConfig(config)
	config.WarningHandler = rest.NewWarningWriter(o.ErrOut, rest.WarningWriterOptions{
		Deduplicate: true,
		Color:       printers.AllowsColorOutput(o.ErrOut),
	})
	c := &clients{config: config}
	if c.certapi, err = versioned.NewForConfig(config); err != nil {
		return nil, fmt.Errorf("making a certapi client: %w", err)
	}
	if c.kube, err = kubernetes.NewForConfig(config); err != nil {
		return nil, fmt.Errorf("making a Kubernetes client: %w", err)
	}
	if c.aggregator, err = aggregatorclient.NewForConfig(config); err != nil {
		return nil, fmt.Errorf("making an APIService client: %w", err)
	}
	if c.extensions, err = apiextensionsclient.NewForConfig(config); err != nil {
		return nil, fmt.Errorf("making a CustomResourceDefinition client: %w", err)
	}
	return c, nil
}

// namespace returns the namespace of -n or the kubeconfig's context, and whether -n gave it.
func (o *rootOptions) namespace() (string, bool, error) {
	ns, explicit, err := o.configFlags.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return "", false, fmt.Errorf("reading the namespace from the kubeconfig: %w", err)
	}
	return ns, explicit, nil
}

// NewCmd returns the command `kubectl certapi` with its subcommands. Run it through
// k8s.io/component-base/cli.RunNoErrOutput and pass its error to cmdutil.CheckErr, as kubectl does.
func NewCmd(streams genericiooptions.IOStreams) *cobra.Command {
	o := &rootOptions{configFlags: genericclioptions.NewConfigFlags(true).WithWarningPrinter(streams), IOStreams: streams}
	cmd := &cobra.Command{
		Use:     "kubectl-certapi",
		Short:   "Operate certapi: CA status, rotation, distrust, served certificate and Secret inspection, health check, migration plan",
		Long:    rootLong,
		Example: rootExample,
		Annotations: map[string]string{
			cobra.CommandDisplayNameAnnotation: "kubectl certapi",
		},
		SilenceUsage: true,
		// Not runnable itself: without a command it prints its help, with an unknown one it fails.
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
	}
	cmd.SetOut(streams.Out)
	cmd.SetErr(streams.ErrOut)
	cmd.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return cmdutil.UsageErrorf(c, "%s", err)
	})
	conn := pflag.NewFlagSet("kubeconfig", pflag.ContinueOnError)
	o.configFlags.AddFlags(conn)
	cmd.PersistentFlags().AddFlagSet(conn)

	own := map[*cobra.Command]*pflag.FlagSet{}
	for _, sub := range []*cobra.Command{newStatusCmd(o), newCheckCmd(o), newRotateCmd(o), newDistrustCmd(o), newInspectCmd(o), newMigrateCmd(o), newRenewCmd(o), newSnapshotCmd(o), newCACmd(o), newCompletionCmd(o)} {
		addSub(cmd, sub, own)
	}
	help.SetUsage(cmd, func(c *cobra.Command) []help.FlagGroup {
		var groups []help.FlagGroup
		if fs := own[c]; fs != nil {
			groups = append(groups, help.FlagGroup{Title: "Options", Flags: fs})
		}
		return append(groups, help.FlagGroup{Title: "Kubeconfig and connection options (as kubectl's)", Flags: conn})
	})
	return cmd
}

// addSub adds sub (and, recursively, its subcommands) to parent, noting each one's own flags for --help.
func addSub(parent, sub *cobra.Command, own map[*cobra.Command]*pflag.FlagSet) {
	parent.AddCommand(sub)
	if sub.HasLocalFlags() {
		own[sub] = sub.LocalNonPersistentFlags()
	}
	sub.SilenceUsage = true
	sub.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return cmdutil.UsageErrorf(c, "%s", err)
	})
	for _, c := range sub.Commands() {
		if c.HasLocalFlags() {
			own[c] = c.LocalNonPersistentFlags()
		}
		c.SilenceUsage = true
	}
}

// errNoLeaderField says that the server publishes no status.leader: certapi is older than this plugin.
var errNoLeaderField = errors.New(caResource + " has no status.leader: certapi is older than this plugin " +
	"(upgrade certapi, or use the kubectl-certapi of certapi's version)")

// leaderIdentity returns the replica that leads, from status.leader of ca (which the replica that
// answered fills at each read from the leader election), or an error that says why none is known:
// none leads, the election could not be read, or certapi is older than this plugin. A pure function.
func leaderIdentity(ca *certapiv1alpha1.CertificateAuthority) (string, error) {
	l := ca.Status.Leader
	switch {
	case l == nil:
		return "", errNoLeaderField
	case l.State == certapiv1alpha1.LeaderStateElected && l.Identity != "":
		return l.Identity, nil
	case l.State == certapiv1alpha1.LeaderStateNone:
		return "", errors.New("no certapi replica leads: nothing is signed, delivered or injected until one does (are the replicas running and is their etcd healthy?)")
	case l.State == certapiv1alpha1.LeaderStateUnknown:
		return "", errors.New("certapi could not read its leader election: is its etcd healthy?")
	}
	return "", fmt.Errorf("%s has status.leader state %q, identity %q, which this plugin does not read (it knows Elected with an identity, None and Unknown): is certapi newer than this plugin?",
		caResource, l.State, l.Identity)
}

// positive checks that the duration flag name is greater than zero.
func positive(name string, d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("--%s must be greater than zero, got %s", name, d)
	}
	return nil
}
