package kubectlcertapi

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/printers"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	cmdutil "k8s.io/kubectl/pkg/cmd/util"
	"k8s.io/kubectl/pkg/util/templates"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/cawatch"
	"github.com/certapi/certapi/pkg/signer"
)

// DefaultCheckTimeout is how long check --wait waits unless --timeout says otherwise.
const DefaultCheckTimeout = 2 * time.Minute

// checkInterval is how often check --wait reads again while a failing check depends on something it does
// not watch (see pollNeeded).
const checkInterval = time.Second

// The checks, in the order they are shown.
const (
	checkAPI         = "API served"
	checkAPIService  = "APIService"
	checkLeader      = "leader"
	checkCertificate = "serving certificate"
	checkServed      = "served certificates"
)

// CheckResult is the outcome of one check.
type CheckResult struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
	// Warning marks a finding that does not make certapi unready (OK stays true): an injected webhook
	// whose endpoints serve a certificate its bundle does not verify is its owner's to fix.
	Warning bool `json:"warning,omitempty"`

	// onCA: the failure can only end with a change of CertificateAuthority/default (it is missing, names
	// no Active CA, or its Active CA expired), which check --wait watches; see pollNeeded.
	onCA bool
}

// CheckInput is what the checks look at; the command reads it through kube-apiserver.
type CheckInput struct {
	// DiscoveryErr is the error of discovering certapi.dev/v1alpha1 through kube-apiserver.
	DiscoveryErr error
	// CA and CAErr are the result of reading CertificateAuthority/default through kube-apiserver, which
	// proxies it to certapi over TLS verified against the APIService's caBundle. Its status.leader, which
	// the replica that answered read from the leader election, says who leads.
	CA    *certapiv1alpha1.CertificateAuthority
	CAErr error
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
	caMissing := apierrors.IsNotFound(in.CAErr)

	switch {
	case in.DiscoveryErr != nil:
		add(checkAPI, false, "discovery of %s through kube-apiserver failed: %v", groupVersion, in.DiscoveryErr)
	case in.CAErr != nil:
		add(checkAPI, false, "reading %s through kube-apiserver failed: %v", caResource, in.CAErr)
		out[len(out)-1].onCA = caMissing // the leader creates it with the first CA
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

	if in.CA == nil {
		add(checkLeader, false, "unknown: %s, whose status.leader says who leads, could not be read", caResource)
		out[len(out)-1].onCA = caMissing
	} else if leader, err := leaderIdentity(in.CA); err != nil {
		add(checkLeader, false, "%v", err)
	} else {
		add(checkLeader, true, "%s leads", leader)
	}

	out = append(out, checkServingCertificate(in))
	if in.CA != nil && in.CA.Status.Served != nil {
		out = append(out, checkServedCertificates(in.CA.Status.Served))
	}
	return out
}

// checkServedCertificates reports what the webhooks, conversion webhooks and APIServices certapi injects
// serve (status.served): the ones that are not Verified, as a warning, since they are not certapi's own
// readiness (check --wait does not wait for them).
func checkServedCertificates(s *certapiv1alpha1.ServedSummary) CheckResult {
	res := CheckResult{Name: checkServed, OK: true}
	if s.Verified == s.Targets {
		res.Detail = fmt.Sprintf("every one of the %d injected webhooks and APIServices checked serves a certificate its caBundle verifies", s.Targets)
		return res
	}
	res.Warning = true
	names := strings.Join(s.WorstTargets, ", ")
	if more := int(s.Targets-s.Verified) - len(s.WorstTargets); more > 0 {
		names += fmt.Sprintf(" and %d more", more)
	}
	res.Detail = fmt.Sprintf("%d of %d injected webhooks and APIServices checked are not Verified: %s (see status.served of %s, the Events on those objects, and docs/served-certificates.md)",
		s.Targets-s.Verified, s.Targets, names, caResource)
	return res
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
	failOnCA := func(format string, args ...any) CheckResult {
		res.onCA = true
		return fail(format, args...)
	}
	svc := in.APIService
	switch {
	case in.APIServiceErr != nil || svc == nil:
		return fail("unknown: the APIService could not be read")
	case svc.Spec.InsecureSkipTLSVerify:
		return fail("APIService %s sets insecureSkipTLSVerify: kube-apiserver does not verify certapi's certificate; remove it and annotate the APIService certapi.dev/inject-ca-bundle: \"true\"", apiServiceName)
	case len(svc.Spec.CABundle) == 0:
		return fail("APIService %s has no caBundle: certapi has not injected it (is it annotated certapi.dev/inject-ca-bundle: \"true\"?)", apiServiceName)
	case apierrors.IsNotFound(in.CAErr):
		return failOnCA("unknown: %s does not exist yet: the leader creates it with the first CA", caResource)
	case in.CAErr != nil || in.CA == nil:
		return fail("unknown: %s could not be read through kube-apiserver, which verifies certapi's certificate on the way: %v", caResource, in.CAErr)
	}
	active := certificate(in.CA, certapiv1alpha1.CARoleActive)
	if active == nil {
		return failOnCA("%s names no Active CA yet", caResource)
	}
	if !in.Now.Before(active.NotAfter.Time) {
		return failOnCA("the Active CA %s expired at %s", active.SerialNumber, formatTime(active.NotAfter.Time))
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

// pollNeeded reports whether check --wait, after a read that failed, must read again after checkInterval
// rather than only at the next change of CertificateAuthority/default: when the watch of that object does
// not follow it now (refused, failing, or the object missing), or when a failing check can end without it
// changing. Those are the APIService (kube-apiserver's availability controller sets Available, certapi
// injects the caBundle: a watch of APIServices would need list and watch on them where check needs only
// get), discovery and the reads through kube-apiserver (they fail while the aggregator cannot reach
// certapi, and nothing announces that it can again), and the leader (the election lives in certapi's
// etcd, in no object that can be watched). So the poll is bounded to what no watch of check's can push.
func pollNeeded(results []CheckResult, followingCA bool) bool {
	if !followingCA {
		return true
	}
	for _, r := range results {
		if !r.OK && !r.onCA {
			return true
		}
	}
	return false
}

// PrintChecks writes the results as a table.
func PrintChecks(out io.Writer, results []CheckResult) error {
	w := printers.GetNewTabWriter(out)
	fmt.Fprintln(w, "CHECK\tRESULT\tDETAIL")
	for _, r := range results {
		result := "ok"
		switch {
		case !r.OK:
			result = "FAILED"
		case r.Warning:
			result = "WARNING"
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
			* leader: a certapi replica leads (signs, delivers Secrets, injects bundles): status.leader of
			  CertificateAuthority/default, which certapi reads from its leader election at each request.
			* serving certificate: the APIService verifies TLS with a caBundle that holds certapi's Active
			  CA, and kube-apiserver verified certapi's certificate against it for the read above. Each
			  request reaches one replica.

			With --wait, check again at each change of CertificateAuthority/default, which it watches, and
			every second while a check fails that depends on the APIService, discovery or the leader
			election, until every check passes or --timeout. Without watch on certificateauthorities it
			checks every second.`),
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
	cmd.Flags().BoolVar(&o.wait, "wait", o.wait, "Check again at each change of CertificateAuthority/default (and every second while a failing check depends on the APIService, discovery or the leader) until every check passes, at most --timeout.")
	cmd.Flags().DurationVar(&o.timeout, "timeout", o.timeout, "How long --wait waits.")
	return cmd
}

func (o *checkOptions) run(ctx context.Context) error {
	c, err := o.clients()
	if err != nil {
		return err
	}
	var results []CheckResult
	if o.wait {
		results = o.waitReady(ctx, c)
	} else {
		results = Check(readCheckInput(ctx, c))
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

// waitReady reads and checks until every check passes or --timeout ends, and returns the last results.
// It reads again at each change of CertificateAuthority/default, followed with cawatch.Follow (the one
// way certapi's clients watch it), and, only while pollNeeded says so, after checkInterval.
func (o *checkOptions) waitReady(ctx context.Context, c *clients) []CheckResult {
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()

	changed := make(chan struct{}, 1)
	// following: the watch has delivered the CertificateAuthority and has not failed since.
	var following atomic.Bool
	wg.Go(func() {
		defer following.Store(false)
		// A refusal (no watch on certificateauthorities) ends the watch: check then polls.
		_ = cawatch.Follow(ctx, c.certapi.CertapiV1alpha1().CertificateAuthorities(), cawatch.Options{
			Failed: func(error, time.Duration) { following.Store(false) },
		}, func(*certapiv1alpha1.CertificateAuthority) (bool, error) {
			following.Store(true)
			select {
			case changed <- struct{}{}:
			default:
			}
			return false, nil
		})
	})

	// printed: what each failing check said when last printed; a check is printed again only when what it
	// says changes, so a wait on two failing checks prints two lines, not two lines a round.
	printed := map[string]string{}
	for {
		results := Check(readCheckInput(ctx, c))
		if len(failing(results)) == 0 {
			return results
		}
		for _, r := range results {
			if r.OK {
				delete(printed, r.Name)
				continue
			}
			if printed[r.Name] != r.Detail {
				printed[r.Name] = r.Detail
				fmt.Fprintf(o.ErrOut, "waiting: %s: %s\n", r.Name, r.Detail)
			}
		}
		var poll *time.Timer
		var tick <-chan time.Time
		if pollNeeded(results, following.Load()) {
			poll = time.NewTimer(checkInterval)
			tick = poll.C
		}
		select {
		case <-ctx.Done():
		case <-changed:
		case <-tick:
		}
		if poll != nil {
			poll.Stop()
		}
		if ctx.Err() != nil {
			return results
		}
	}
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
	in.APIService, in.APIServiceErr = c.aggregator.ApiregistrationV1().APIServices().Get(ctx, apiServiceName, metav1.GetOptions{})
	// A failed Get returns an empty object, not nil: Check reads a nil CA as "could not be read".
	if in.CAErr != nil {
		in.CA = nil
	}
	if in.APIServiceErr != nil {
		in.APIService = nil
	}
	return in
}
