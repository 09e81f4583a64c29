package kubectlcertapi

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cmdutil "k8s.io/kubectl/pkg/cmd/util"
	"k8s.io/kubectl/pkg/util/templates"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/generated/clientset/versioned"
)

// listPageSize is how many ServingCertRequests one list call returns.
const listPageSize = 500

// allNamespaces is the Scope of requests listed cluster-wide.
const allNamespaces = "all namespaces"

type statusOptions struct {
	*rootOptions
	output  string
	nearest int
}

func newStatusCmd(root *rootOptions) *cobra.Command {
	o := &statusOptions{rootOptions: root, nearest: 10}
	cmd := &cobra.Command{
		Use:   "status [-o json|yaml]",
		Short: "Show the CA, the rotation and what it waits for, injection, and the requests nearest expiry",
		Long: templates.LongDesc(`
			Show certapi's state: the replica that leads; the CA certificates in the trust bundle with their
			roles (Active signs, Next waits to sign, Retiring leaves when nothing it signed is valid) and
			lifetimes; where a rotation stands and what its next step waits for; how many objects that opted
			in to caBundle injection hold the current bundle; with certapi's own etcd cluster (etcd.mode
			cluster), its members, the etcd leader, their health and the peer CA, as the replica whose member
			is the etcd leader last wrote them into status.etcd; and the ServingCertRequests whose
			certificates expire first, with the CA that signed each.

			Requests are listed in every namespace, or only in the one -n names.

			With -o json or -o yaml it prints the report as one object. What CertificateAuthority/default
			publishes is in it as the API's own types, under the names of its status fields ("kubectl
			explain certificateauthority.status" describes each): leader (the replica that leads: state
			Elected with its identity, None or Unknown), conditions, certificates, injection, served and
			etcd. The rest the plugin computes: time (when the report was made); rotation (state, the
			Rotating condition's reason; waitingFor, in words; nextRotation; forcedSwitchAt; pending, when
			certapi has not acted on the latest spec yet); counts (injectionPending, the injection targets a
			rotation still waits for; servedFailing, the served slots kube-apiserver's calls would fail for;
			etcdVoters, etcdLearners and etcdHealthy, counted from etcd.members); and requests (scope; error,
			when they could not be listed; total, notReady, notIssued, overdue, secrets, secretsFromActive;
			nearestExpiry, each with namespace, name, ready, notAfter, renewalTime, overdue and signedBy, the
			role of the CA that signed its certificate).`),
		Example: templates.Examples(`
			kubectl certapi status
			kubectl certapi status -n webhooks --requests=20
			kubectl certapi status -o yaml`),
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := validOutput(o.output); err != nil {
				return cmdutil.UsageErrorf(cmd, "%s", err)
			}
			if o.nearest < 0 {
				return cmdutil.UsageErrorf(cmd, "--requests must not be negative, got %d", o.nearest)
			}
			return o.run(cmd.Context())
		},
	}
	cmd.Flags().StringVarP(&o.output, "output", "o", o.output, "Output format: json or yaml. Unset, a table.")
	cmd.Flags().IntVar(&o.nearest, "requests", o.nearest, "How many ServingCertRequests nearest expiry to list.")
	return cmd
}

func (o *statusOptions) run(ctx context.Context) error {
	c, err := o.clients()
	if err != nil {
		return err
	}
	ns, explicit, err := o.namespace()
	if err != nil {
		return err
	}
	scope := allNamespaces
	if !explicit {
		ns = metav1.NamespaceAll
	} else {
		scope = "namespace " + ns
	}
	report, err := readReport(ctx, c, ns, scope, o.nearest)
	if err != nil {
		return err
	}
	if o.output != outputTable {
		return printStructured(o.Out, o.output, report)
	}
	return PrintReport(o.Out, report)
}

// readReport reads what the report needs and builds it.
func readReport(ctx context.Context, c *clients, namespace, scope string, nearest int) (Report, error) {
	ca, err := c.certapi.CertapiV1alpha1().CertificateAuthorities().Get(ctx, certapiv1alpha1.CertificateAuthorityName, metav1.GetOptions{})
	if err != nil {
		return Report{}, err // not wrapped: cmdutil.CheckErr prints the API's errors as kubectl does
	}
	requests, listErr := listRequests(ctx, c.certapi, namespace)
	return BuildReport(ReportInput{
		Now: time.Now(), CA: ca,
		Requests: requests, RequestsError: listErr, Scope: scope, Nearest: nearest,
	}), nil
}

// listRequests lists the ServingCertRequests of namespace (all when empty), a page at a time.
func listRequests(ctx context.Context, c versioned.Interface, namespace string) ([]certapiv1alpha1.ServingCertRequest, error) {
	var all []certapiv1alpha1.ServingCertRequest
	opts := metav1.ListOptions{Limit: listPageSize}
	for {
		list, err := c.CertapiV1alpha1().ServingCertRequests(namespace).List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("listing servingcertrequests: %w", err)
		}
		all = append(all, list.Items...)
		if list.Continue == "" {
			return all, nil
		}
		opts.Continue = list.Continue
	}
}
