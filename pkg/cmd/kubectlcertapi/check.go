package kubectlcertapi

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/cli-runtime/pkg/printers"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	cmdutil "k8s.io/kubectl/pkg/cmd/util"
	"k8s.io/kubectl/pkg/util/templates"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/signer"
)

// DefaultCheckTimeout is how long check --wait waits unless --timeout says otherwise.
const DefaultCheckTimeout = 2 * time.Minute

// checkInterval is how often check --wait looks again.
const checkInterval = time.Second

// The checks, in the order they are shown.
const (
	checkAPI         = "API served"
	checkAPIService  = "APIService"
	checkLeader      = "leader"
	checkCertificate = "serving certificate"
)

// CheckResult is the outcome of one check.
type CheckResult struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

// CheckInput is what the checks look at; the command reads it through kube-apiserver.
type CheckInput struct {
	// DiscoveryErr is the error of discovering certapi.dev/v1alpha1 through kube-apiserver.
	DiscoveryErr error
	// CA and CAErr are the result of reading CertificateAuthority/default through kube-apiserver, which
	// proxies it to certapi over TLS verified against the APIService's caBundle.
	CA    *certapiv1alpha1.CertificateAuthority
	CAErr error
	// Leader is the CertificateAuthority table's Leader cell; LeaderErr the error reading it.
	Leader    string
	LeaderErr error
	// APIService and APIServiceErr are the result of reading the APIService v1alpha1.certapi.dev.
	APIService    *apiregistrationv1.APIService
	APIServiceErr error
	Now           time.Time
}

// Check evaluates the input: certapi is ready when every result is OK.
func Check(in CheckInput) []CheckResult {
	var out []CheckResult
	add := func(name string, ok bool, format string, args ...any) {
		out = append(out, CheckResult{Name: name, OK: ok, Detail: fmt.Sprintf(format, args...)})
	}

	switch {
	case in.DiscoveryErr != nil:
		add(checkAPI, false, "discovery of %s through kube-apiserver failed: %v", groupVersion, in.DiscoveryErr)
	case in.CAErr != nil:
		add(checkAPI, false, "reading %s through kube-apiserver failed: %v", caResource, in.CAErr)
	default:
		add(checkAPI, true, "kube-apiserver serves %s from certapi (discovery and %s)", groupVersion, caResource)
	}

	svc := in.APIService
	switch {
	case in.APIServiceErr != nil:
		add(checkAPIService, false, "reading APIService %s failed: %v", apiServiceName, in.APIServiceErr)
	default:
		cond := apiServiceCondition(svc, apiregistrationv1.Available)
		switch {
		case cond == nil:
			add(checkAPIService, false, "APIService %s has no Available condition yet", apiServiceName)
		case cond.Status != apiregistrationv1.ConditionTrue:
			add(checkAPIService, false, "APIService %s is not Available: %s: %s", apiServiceName, cond.Reason, cond.Message)
		default:
			add(checkAPIService, true, "APIService %s is Available", apiServiceName)
		}
	}

	switch {
	case in.LeaderErr != nil:
		add(checkLeader, false, "the leader could not be read: %v", in.LeaderErr)
	case in.Leader == "<none>":
		add(checkLeader, false, "no certapi replica leads: nothing is signed, delivered or injected until one does (are the replicas running and is their etcd healthy?)")
	case !leaderKnown(in.Leader):
		add(checkLeader, false, "certapi could not read its leader election (%s): is its etcd healthy?", in.Leader)
	default:
		add(checkLeader, true, "%s leads", in.Leader)
	}

	out = append(out, checkServingCertificate(in))
	return out
}

// checkServingCertificate: kube-apiserver verifies certapi's serving certificate against the APIService's
// caBundle for <service>.<namespace>.svc on every request it proxies, so a successful read through it
// shows that the replica that answered serves a valid certificate of that bundle; this checks the bundle
// is certapi's current one and verification is not switched off.
func checkServingCertificate(in CheckInput) CheckResult {
	res := CheckResult{Name: checkCertificate}
	fail := func(format string, args ...any) CheckResult {
		res.Detail = fmt.Sprintf(format, args...)
		return res
	}
	svc := in.APIService
	switch {
	case in.APIServiceErr != nil || svc == nil:
		return fail("unknown: the APIService could not be read")
	case svc.Spec.InsecureSkipTLSVerify:
		return fail("APIService %s sets insecureSkipTLSVerify: kube-apiserver does not verify certapi's certificate; remove it and annotate the APIService certapi.dev/inject-ca-bundle: \"true\"", apiServiceName)
	case len(svc.Spec.CABundle) == 0:
		return fail("APIService %s has no caBundle: certapi has not injected it (is it annotated certapi.dev/inject-ca-bundle: \"true\"?)", apiServiceName)
	case in.CAErr != nil || in.CA == nil:
		return fail("unknown: %s could not be read through kube-apiserver, which verifies certapi's certificate on the way: %v", caResource, in.CAErr)
	}
	active := certificate(in.CA, certapiv1alpha1.CARoleActive)
	if active == nil {
		return fail("%s names no Active CA yet", caResource)
	}
	if !in.Now.Before(active.NotAfter.Time) {
		return fail("the Active CA %s expired at %s", active.SerialNumber, formatTime(active.NotAfter.Time))
	}
	certs, err := signer.ParseBundle(svc.Spec.CABundle)
	if err != nil {
		return fail("APIService %s caBundle: %v", apiServiceName, err)
	}
	if !bundleHolds(certs, active.SubjectKeyID) {
		return fail("APIService %s caBundle lacks the Active CA %s: certapi has not injected the current bundle yet", apiServiceName, active.SerialNumber)
	}
	res.OK = true
	res.Detail = fmt.Sprintf("kube-apiserver verified certapi's certificate for %s against the APIService's caBundle, which holds the Active CA %s (valid until %s)",
		serviceHost(svc), active.SerialNumber, formatTime(active.NotAfter.Time))
	return res
}

func bundleHolds(certs []*x509.Certificate, subjectKeyID string) bool {
	for _, c := range certs {
		if signer.FormatKeyID(c.SubjectKeyId) == subjectKeyID {
			return true
		}
	}
	return false
}

func serviceHost(svc *apiregistrationv1.APIService) string {
	if s := svc.Spec.Service; s != nil {
		return s.Name + "." + s.Namespace + ".svc"
	}
	return "<no service>"
}

func apiServiceCondition(svc *apiregistrationv1.APIService, t apiregistrationv1.APIServiceConditionType) *apiregistrationv1.APIServiceCondition {
	for i, c := range svc.Status.Conditions {
		if c.Type == t {
			return &svc.Status.Conditions[i]
		}
	}
	return nil
}

// failing returns the names of the checks that failed.
func failing(results []CheckResult) []string {
	var names []string
	for _, r := range results {
		if !r.OK {
			names = append(names, r.Name)
		}
	}
	return names
}

// PrintChecks writes the results as a table.
func PrintChecks(out io.Writer, results []CheckResult) error {
	w := printers.GetNewTabWriter(out)
	fmt.Fprintln(w, "CHECK\tRESULT\tDETAIL")
	for _, r := range results {
		result := "ok"
		if !r.OK {
			result = "FAILED"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\n", r.Name, result, r.Detail)
	}
	return w.Flush()
}

type checkOptions struct {
	*rootOptions
	output  string
	wait    bool
	timeout time.Duration
}

func newCheckCmd(root *rootOptions) *cobra.Command {
	o := &checkOptions{rootOptions: root, timeout: DefaultCheckTimeout}
	cmd := &cobra.Command{
		Use:   "check [--wait]",
		Short: "Exit 0 only when certapi serves: API served, APIService Available, a leader, a valid serving certificate",
		Long: templates.LongDesc(`
			Check that certapi is ready, as kube-apiserver and its clients see it, and exit with status 0
			only when it is:

			* API served: kube-apiserver answers discovery of certapi.dev/v1alpha1 and reads
			  CertificateAuthority/default, both proxied to certapi.
			* APIService: v1alpha1.certapi.dev is Available.
			* leader: a certapi replica leads (signs, delivers Secrets, injects bundles), as certapi reads
			  its leader election at this request.
			* serving certificate: the APIService verifies TLS with a caBundle that holds certapi's Active
			  CA, and kube-apiserver verified certapi's certificate against it for the read above. Each
			  request reaches one replica.

			With --wait, check again every second until every check passes or --timeout.`),
		Example: templates.Examples(`
			kubectl certapi check
			kubectl certapi check --wait --timeout=5m`),
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Flags().Changed("timeout") && !o.wait {
				return cmdutil.UsageErrorf(cmd, "--timeout is the limit of --wait; add --wait")
			}
			if err := validOutput(o.output); err != nil {
				return cmdutil.UsageErrorf(cmd, "%s", err)
			}
			if err := positive("timeout", o.timeout); err != nil {
				return err
			}
			return o.run(cmd.Context())
		},
	}
	cmd.Flags().StringVarP(&o.output, "output", "o", o.output, "Output format: json or yaml. Unset, a table.")
	cmd.Flags().BoolVar(&o.wait, "wait", o.wait, "Check again every second until every check passes, at most --timeout.")
	cmd.Flags().DurationVar(&o.timeout, "timeout", o.timeout, "How long --wait waits.")
	return cmd
}

func (o *checkOptions) run(ctx context.Context) error {
	c, err := o.clients()
	if err != nil {
		return err
	}
	var results []CheckResult
	var lastFailure string
	once := func(ctx context.Context) (bool, error) {
		results = Check(readCheckInput(ctx, c))
		bad := failing(results)
		if o.wait && len(bad) > 0 {
			for _, r := range results {
				if !r.OK && r.Detail != lastFailure {
					lastFailure = r.Detail
					fmt.Fprintf(o.ErrOut, "waiting: %s: %s\n", r.Name, r.Detail)
					break
				}
			}
		}
		return len(bad) == 0, nil
	}
	if o.wait {
		err = wait.PollUntilContextTimeout(ctx, checkInterval, o.timeout, true, once)
		if err != nil && !wait.Interrupted(err) {
			return err
		}
	} else {
		_, _ = once(ctx)
	}
	if o.output != outputTable {
		if err := printStructured(o.Out, o.output, results); err != nil {
			return err
		}
	} else if err := PrintChecks(o.Out, results); err != nil {
		return err
	}
	if bad := failing(results); len(bad) > 0 {
		msg := "certapi is not ready: " + strings.Join(bad, ", ") + " failed"
		if o.wait {
			msg += fmt.Sprintf(" after waiting %s", o.timeout)
		}
		return errors.New(msg)
	}
	return nil
}

// requestTimeout bounds each read of a check, so that --wait keeps its rhythm when kube-apiserver hangs.
const requestTimeout = 10 * time.Second

// readCheckInput reads what Check looks at, through kube-apiserver.
func readCheckInput(ctx context.Context, c *clients) CheckInput {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	in := CheckInput{Now: time.Now()}
	_, in.DiscoveryErr = c.kube.Discovery().ServerResourcesForGroupVersion(groupVersion)
	in.CA, in.CAErr = c.certapi.CertapiV1alpha1().CertificateAuthorities().Get(ctx, certapiv1alpha1.CertificateAuthorityName, metav1.GetOptions{})
	in.Leader, in.LeaderErr = readLeader(ctx, c.certapi)
	in.APIService, in.APIServiceErr = c.aggregator.ApiregistrationV1().APIServices().Get(ctx, apiServiceName, metav1.GetOptions{})
	return in
}
