package kubectlcertapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	cmdutil "k8s.io/kubectl/pkg/cmd/util"
	"k8s.io/kubectl/pkg/util/templates"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/cawatch"
	certapiclient "github.com/certapi/certapi/pkg/generated/clientset/versioned/typed/certapi/v1alpha1"
)

// Default limits of --wait.
const (
	// DefaultRotateTimeout leaves room for certapi's default --rotation-grace of 1h.
	DefaultRotateTimeout = 90 * time.Minute
	// DefaultDistrustTimeout leaves room for certapi's distrust deadline (15 minutes by default).
	DefaultDistrustTimeout = 30 * time.Minute
)

// rotationKind is which spec field a command sets.
type rotationKind string

const (
	kindRotate   rotationKind = "forceRotation"
	kindDistrust rotationKind = "distrust"
)

type rotateOptions struct {
	*rootOptions
	kind    rotationKind
	yes     bool
	wait    bool
	timeout time.Duration
	// etcdPeer rotates the peer CA of certapi's own etcd cluster instead of the CA; peerCASecret names its
	// Secret in the namespace of -n.
	etcdPeer     bool
	peerCASecret string
}

func newRotateCmd(root *rootOptions) *cobra.Command {
	o := &rotateOptions{rootOptions: root, kind: kindRotate, timeout: DefaultRotateTimeout, peerCASecret: certapiv1alpha1.DefaultEtcdPeerCASecretName}
	cmd := &cobra.Command{
		Use:   "rotate [--wait] [--etcd-peer -n <certapi's namespace>]",
		Short: "Rotate the CA with trust overlap (sets spec.forceRotation), or with --etcd-peer the etcd peer CA",
		Long: templates.LongDesc(`
			Start a CA rotation now: set CertificateAuthority/default's spec.forceRotation to a new,
			generated value. certapi publishes a Next CA in every trust bundle; once every injection target
			holds it and the rotation grace period has passed, the Next CA signs and the old one is Retiring
			until no certificate it signed can still be valid. Nothing stops trusting anything: this is the
			routine rotation. If a rotation is already running, this one starts after it.

			With --wait, follow the steps until the new CA signs.

			With --etcd-peer, rotate instead the peer CA of certapi's own etcd cluster (etcd.mode cluster):
			annotate its Secret (--etcd-peer-ca-secret in the namespace -n names, certapi's) with
			certapi.dev/etcd-peer-ca-rotate set to a new, generated value. The replica whose member is the
			etcd leader makes a new peer CA trusted beside the old one, every member re-issues its
			certificate from it, and once every member presents one the old CA leaves the bundle; no
			restart, no failed etcd request. With --wait, follow it until the old CA has left.`),
		Example: templates.Examples(`
			kubectl certapi rotate
			kubectl certapi rotate --wait --timeout=2h

			# Rotate the etcd peer CA of certapi installed in certapi-system, and follow it
			kubectl certapi rotate --etcd-peer -n certapi-system --wait`),
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.validate(cmd); err != nil {
				return err
			}
			return o.run(cmd.Context())
		},
	}
	cmd.Flags().BoolVar(&o.wait, "wait", o.wait, "Follow the rotation, printing each step, until the new CA signs.")
	cmd.Flags().DurationVar(&o.timeout, "timeout", o.timeout, "How long --wait waits. On timeout the command fails and says where the rotation stands; the rotation goes on.")
	cmd.Flags().BoolVar(&o.etcdPeer, "etcd-peer", o.etcdPeer, "Rotate the peer CA of certapi's own etcd cluster instead of the CA; -n names certapi's namespace.")
	cmd.Flags().StringVar(&o.peerCASecret, "etcd-peer-ca-secret", o.peerCASecret, "With --etcd-peer: the peer CA's Secret, as certapi's --etcd-peer-ca-secret (the Helm chart's <fullname>-etcd-peer-ca).")
	return cmd
}

func newDistrustCmd(root *rootOptions) *cobra.Command {
	o := &rotateOptions{rootOptions: root, kind: kindDistrust, timeout: DefaultDistrustTimeout}
	cmd := &cobra.Command{
		Use:   "distrust --yes [--wait]",
		Short: "Replace a compromised CA at once (sets spec.distrust); needs --yes",
		Long: templates.LongDesc(`
			The emergency path for a compromised CA: set CertificateAuthority/default's spec.distrust to a
			new, generated value. A new CA signs at once; every Secret certapi delivers is re-issued; clients
			of the servingcerts subresource (pkg/servingcert) re-issue when they see it; and every CA older
			than the new one (the Active CA, a waiting Next CA and every Retiring CA) is distrusted and
			leaves every trust bundle as soon as that is done, or at certapi's distrust deadline regardless.
			Certificates they signed that nobody re-issues then stop being trusted. It refuses to run without
			--yes, and says what it would do.

			With --wait, follow the steps until only the new CA is left in the bundle.`),
		Example: templates.Examples(`
			# Say what a distrust would do now, and do nothing
			kubectl certapi distrust

			# Do it, and follow it until every distrusted CA has left the bundle
			kubectl certapi distrust --yes --wait`),
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.validate(cmd); err != nil {
				return err
			}
			return o.run(cmd.Context())
		},
	}
	cmd.Flags().BoolVar(&o.yes, "yes", o.yes, "Really distrust the current CA. Without it, the command says what it would do and fails.")
	cmd.Flags().BoolVar(&o.wait, "wait", o.wait, "Follow the distrust, printing each step, until every distrusted CA has left the bundle.")
	cmd.Flags().DurationVar(&o.timeout, "timeout", o.timeout, "How long --wait waits. On timeout the command fails and says where the distrust stands; it goes on.")
	return cmd
}

func (o *rotateOptions) validate(cmd *cobra.Command) error {
	if cmd.Flags().Changed("timeout") && !o.wait {
		return cmdutil.UsageErrorf(cmd, "--timeout is the limit of --wait; add --wait")
	}
	if cmd.Flags().Changed("etcd-peer-ca-secret") && !o.etcdPeer {
		return cmdutil.UsageErrorf(cmd, "--etcd-peer-ca-secret names the Secret of --etcd-peer; add --etcd-peer")
	}
	if o.etcdPeer && !cmd.Flags().Changed("timeout") {
		o.timeout = DefaultPeerRotateTimeout
	}
	return positive("timeout", o.timeout)
}

func (o *rotateOptions) run(ctx context.Context) error {
	c, err := o.clients()
	if err != nil {
		return err
	}
	if o.etcdPeer {
		return o.runPeer(ctx, c)
	}
	cas := c.certapi.CertapiV1alpha1().CertificateAuthorities()
	before, err := cas.Get(ctx, certapiv1alpha1.CertificateAuthorityName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if o.kind == kindDistrust && !o.yes {
		return errors.New(DistrustPlan(before) + "\nRun it again with --yes to do it.")
	}
	value, err := generatedValue(time.Now())
	if err != nil {
		return err
	}
	after, err := patchSpec(ctx, cas, o.kind, value, before)
	if err != nil {
		return err
	}
	fmt.Fprintf(o.Out, "%s patched: spec.%s=%s\n", caResource, o.kind, value)
	if o.kind == kindRotate && certificate(before, certapiv1alpha1.CARoleNext) != nil {
		fmt.Fprintln(o.Out, "a rotation is running; this one starts once its Next CA signs")
	}
	if !o.wait {
		return nil
	}
	goal := newRotationGoal(o.kind, before)
	_, err = followRotation(ctx, cas, after, goal, o.timeout, func(line string) {
		fmt.Fprintf(o.Out, "%s %s\n", time.Now().UTC().Format(time.TimeOnly), line)
	})
	return err
}

// patchAttempts bounds how often patchSpec retries after a conflict.
const patchAttempts = 5

// patchSpec sets spec.<kind> to value with a merge patch that carries the resourceVersion read, so that
// it applies only to the object as read. certapi writes the status often (every rotation step, injection
// progress), and each write changes the resourceVersion: on a conflict it reads the object again and
// retries, as long as spec.<kind> is still what it was in before. If someone else set it meanwhile (a
// second admin's distrust), it does not start another: it says so and fails.
func patchSpec(ctx context.Context, cas certapiclient.CertificateAuthorityInterface, kind rotationKind, value string,
	before *certapiv1alpha1.CertificateAuthority) (*certapiv1alpha1.CertificateAuthority, error) {
	cur := before
	for attempt := 1; ; attempt++ {
		patch, err := json.Marshal(map[string]any{
			"metadata": map[string]string{"resourceVersion": cur.ResourceVersion},
			"spec":     map[string]string{string(kind): value},
		})
		if err != nil {
			return nil, fmt.Errorf("encoding the patch: %w", err)
		}
		after, err := cas.Patch(ctx, certapiv1alpha1.CertificateAuthorityName, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager})
		if err == nil {
			return after, nil
		}
		if !apierrors.IsConflict(err) {
			return nil, fmt.Errorf("patching %s: %w", caResource, err)
		}
		if attempt == patchAttempts {
			return nil, fmt.Errorf("patching %s: it kept changing (%d conflicts); nothing was changed, run the command again: %w", caResource, attempt, err)
		}
		if cur, err = cas.Get(ctx, certapiv1alpha1.CertificateAuthorityName, metav1.GetOptions{}); err != nil {
			return nil, fmt.Errorf("reading %s again after a conflict: %w", caResource, err)
		}
		if was, now := specValue(before, kind), specValue(cur, kind); was != now {
			return nil, fmt.Errorf("%s: spec.%s changed from %q to %q while this command ran (someone else started a %s); "+
				"not starting another: see `kubectl certapi status`", caResource, kind, was, now, rotationGoal{kind: kind}.what())
		}
	}
}

// specValue is ca's spec.<kind>.
func specValue(ca *certapiv1alpha1.CertificateAuthority, kind rotationKind) string {
	if kind == kindDistrust {
		return ca.Spec.Distrust
	}
	return ca.Spec.ForceRotation
}

// generatedValue is a value for spec.forceRotation or spec.distrust that no earlier run used: the time
// and a random suffix.
func generatedValue(now time.Time) (string, error) {
	b := make([]byte, 3)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generating a value: %w", err)
	}
	return "kubectl-certapi-" + now.UTC().Format("20060102T150405Z") + "-" + hex.EncodeToString(b), nil
}

// DistrustPlan says what a distrust of ca's current CAs would do: every CA it lists is distrusted.
func DistrustPlan(ca *certapiv1alpha1.CertificateAuthority) string {
	var b strings.Builder
	b.WriteString("distrust is the emergency path for a compromised CA. It will:\n")
	active := certificate(ca, certapiv1alpha1.CARoleActive)
	if active != nil {
		fmt.Fprintf(&b, "  - stop the Active CA %s from signing; a new CA signs at once\n", active.SerialNumber)
	} else {
		b.WriteString("  - stop the Active CA from signing; a new CA signs at once\n")
	}
	var others []string
	for _, c := range ca.Status.Certificates {
		switch c.Role {
		case certapiv1alpha1.CARoleNext:
			others = append(others, "the waiting Next CA "+c.SerialNumber)
		case certapiv1alpha1.CARoleRetiring:
			others = append(others, "the Retiring CA "+c.SerialNumber)
		}
	}
	if len(others) > 0 {
		fmt.Fprintf(&b, "  - distrust with it every other CA older than the new one: %s\n", strings.Join(others, ", "))
	}
	b.WriteString("  - re-issue every Secret certapi delivers; clients of the servingcerts subresource (pkg/servingcert) re-issue by themselves\n")
	if line := servedPlan(ca); line != "" {
		b.WriteString(line)
	}
	b.WriteString("  - remove every distrusted CA from every trust bundle (webhook configurations, CRDs, APIServices, ConfigMaps,\n" +
		"    the ClusterTrustBundle, ca.crt of Secrets) as soon as that is done, or at certapi's distrust deadline regardless,\n" +
		"    so that only the new CA is trusted: certificates they signed that nobody re-issues (Secrets of deleted or\n" +
		"    conflicting requests, certificates copied elsewhere) stop being trusted then")
	return b.String()
}

// servedPlan says which endpoints of injected webhooks and APIServices present a certificate of the CAs
// a distrust would distrust (every CA of the bundle now), from status.served.issuers: each must reload
// its re-issued certificate, and the distrust waits for them up to its deadline.
func servedPlan(ca *certapiv1alpha1.CertificateAuthority) string {
	s := ca.Status.Served
	if s == nil {
		return ""
	}
	ours := map[string]bool{}
	for _, c := range ca.Status.Certificates {
		ours[c.SerialNumber] = true
	}
	var count int32
	var list []string
	for _, i := range s.Issuers {
		if !ours[i.SerialNumber] {
			continue // a foreign CA an object keeps: the distrust does not remove it
		}
		count += i.Endpoints
		list = append(list, i.Names...)
	}
	if count == 0 {
		return ""
	}
	slices.Sort(list)
	list = list[:min(len(list), 10)]
	return fmt.Sprintf("  - wait, up to the deadline, for the %d endpoints of injected webhooks and APIServices that present a certificate of these CAs\n"+
		"    to reload a re-issued one (kube-apiserver's calls to one that has not fail once the CAs leave): %s\n", count, listNames(count, list))
}

// rotationGoal says when a rotate or distrust is done.
type rotationGoal struct {
	kind rotationKind
	// old are the serials of the CAs that were Active or Next before the patch, and for a distrust also
	// the Retiring ones: every CA a distrust distrusts.
	old map[string]bool
}

func newRotationGoal(kind rotationKind, before *certapiv1alpha1.CertificateAuthority) rotationGoal {
	g := rotationGoal{kind: kind, old: map[string]bool{}}
	for _, c := range before.Status.Certificates {
		if c.Role == certapiv1alpha1.CARoleActive || c.Role == certapiv1alpha1.CARoleNext || kind == kindDistrust {
			g.old[c.SerialNumber] = true
		}
	}
	return g
}

// Done reports whether ca shows the goal reached: for a rotation, a CA that was neither Active nor Next
// before signs (with a rotation already running, its Next CA signs first, then the one this run asked
// for); for a distrust, a new CA signs and no CA that was in the bundle before is left in it.
func (g rotationGoal) Done(ca *certapiv1alpha1.CertificateAuthority) bool {
	active := certificate(ca, certapiv1alpha1.CARoleActive)
	if active == nil || g.old[active.SerialNumber] {
		return false
	}
	if g.kind == kindRotate {
		return true
	}
	for _, c := range ca.Status.Certificates {
		if g.old[c.SerialNumber] {
			return false
		}
	}
	return true
}

// ProgressLines describes ca as a few lines; followRotation prints those that differ from the previous
// state's, so that each step shows once.
func ProgressLines(ca *certapiv1alpha1.CertificateAuthority) []string {
	var lines []string
	if c := meta.FindStatusCondition(ca.Status.Conditions, certapiv1alpha1.ConditionRotating); c != nil {
		line := fmt.Sprintf("Rotating=%s (%s)", c.Status, c.Reason)
		if c.Message != "" {
			line += ": " + c.Message
		}
		lines = append(lines, line)
	}
	for _, c := range ca.Status.Certificates {
		lines = append(lines, fmt.Sprintf("%s CA %s, valid until %s", c.Role, c.SerialNumber, formatTime(c.NotAfter.Time)))
	}
	if inj := ca.Status.Injection; inj != nil {
		lines = append(lines, "injection: "+injectionLine(inj))
	}
	if d := ca.Status.Distrust; d != nil && d.CompletedAt == nil {
		for _, w := range distrustWaits(d) {
			lines = append(lines, "distrust waits for "+w)
		}
	}
	return lines
}

// injectionLine is the injection summary in one line: who holds the current bundle, and who is not
// waited for (skipped, in conflict, failed, the failed ones by name).
func injectionLine(inj *certapiv1alpha1.InjectionSummary) string {
	line := fmt.Sprintf("%d of %d targets hold the current bundle (%d skipped, %d in conflict", inj.UpToDate, inj.Targets, inj.Skipped, inj.Conflicts)
	if inj.Failed > 0 {
		line += fmt.Sprintf(", %d failed and not waited for: %s", inj.Failed, failedNames(inj))
	}
	return line + ")"
}

// newLines returns the lines of cur that are not in prev, in cur's order.
func newLines(prev, cur []string) []string {
	seen := map[string]bool{}
	for _, l := range prev {
		seen[l] = true
	}
	var out []string
	for _, l := range cur {
		if !seen[l] {
			out = append(out, l)
		}
	}
	return out
}

// followRotation watches CertificateAuthority/default from start until goal is done, calling say with
// each new progress line. On timeout the error says where the rotation stands.
func followRotation(ctx context.Context, client certapiclient.CertificateAuthorityInterface, start *certapiv1alpha1.CertificateAuthority,
	goal rotationGoal, timeout time.Duration, say func(string)) (*certapiv1alpha1.CertificateAuthority, error) {
	waitCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	var shown []string
	last := start
	observe := func(ca *certapiv1alpha1.CertificateAuthority) bool {
		last = ca
		cur := ProgressLines(ca)
		for _, l := range newLines(shown, cur) {
			say(l)
		}
		shown = cur
		return goal.Done(ca)
	}
	if observe(start) {
		announceDone(goal, start, say)
		return start, nil
	}

	err := cawatch.Follow(waitCtx, client, cawatch.Options{}, func(ca *certapiv1alpha1.CertificateAuthority) (bool, error) {
		return observe(ca), nil
	})
	switch {
	case err == nil:
		announceDone(goal, last, say)
		return last, nil
	case errors.Is(waitCtx.Err(), context.DeadlineExceeded) && ctx.Err() == nil:
		where := "no Rotating condition"
		if c := meta.FindStatusCondition(last.Status.Conditions, certapiv1alpha1.ConditionRotating); c != nil {
			where = fmt.Sprintf("Rotating=%s (%s): %s", c.Status, c.Reason, c.Message)
		}
		return last, fmt.Errorf("timed out after %s waiting for the %s to complete; it goes on. %s; `kubectl certapi status` says what it waits for", timeout, goal.what(), where)
	default:
		return last, fmt.Errorf("following the %s: %w", goal.what(), err)
	}
}

func (g rotationGoal) what() string {
	if g.kind == kindDistrust {
		return "distrust"
	}
	return "rotation"
}

func announceDone(g rotationGoal, ca *certapiv1alpha1.CertificateAuthority, say func(string)) {
	active := certificate(ca, certapiv1alpha1.CARoleActive)
	if g.kind == kindDistrust {
		say(fmt.Sprintf("done: CA %s signs and every distrusted CA has left the bundle", active.SerialNumber))
	} else {
		say(rotationDone(active, ca.Status.Injection))
	}
}

// rotationDone is the last line of a rotation: the new CA signs, and how far its bundle reached. The
// status that shows the switch is written with it, so its summary is of the bundle the rotation waited
// for (the same CAs, the new one first now): certapi counts a target holding them in the previous order
// as up to date, never as "0 of N" in the second the order changes.
func rotationDone(active *certapiv1alpha1.CertificateAuthorityCertificate, inj *certapiv1alpha1.InjectionSummary) string {
	line := fmt.Sprintf("done: the new CA %s signs", active.SerialNumber)
	if inj != nil {
		line += "; injection: " + injectionLine(inj)
	}
	return line
}
