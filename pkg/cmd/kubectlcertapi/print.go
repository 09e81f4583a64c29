package kubectlcertapi

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/cli-runtime/pkg/printers"
	"sigs.k8s.io/yaml"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
)

// Output formats of -o for the commands that print a report.
const (
	outputTable = ""
	outputJSON  = "json"
	outputYAML  = "yaml"
)

// validOutput checks an -o value.
func validOutput(o string) error {
	switch o {
	case outputTable, outputJSON, outputYAML:
		return nil
	}
	return fmt.Errorf("unable to match a printer suitable for the output format %q, allowed formats are: json,yaml", o)
}

// printStructured writes v as JSON or YAML.
func printStructured(w io.Writer, format string, v any) error {
	switch format {
	case outputJSON:
		data, err := json.MarshalIndent(v, "", "    ")
		if err != nil {
			return fmt.Errorf("encoding JSON: %w", err)
		}
		_, err = fmt.Fprintf(w, "%s\n", data)
		return err
	case outputYAML:
		data, err := yaml.Marshal(v)
		if err != nil {
			return fmt.Errorf("encoding YAML: %w", err)
		}
		_, err = w.Write(data)
		return err
	}
	return fmt.Errorf("no structured output format %q", format)
}

// timeLeft says how long until t, as kubectl shows ages; "expired" once t has passed.
func timeLeft(now, t time.Time) string {
	if !t.After(now) {
		return "expired"
	}
	return duration.HumanDuration(t.Sub(now))
}

// PrintReport writes the status report as tables and short paragraphs.
func PrintReport(out io.Writer, r Report) error {
	w := printers.GetNewTabWriter(out)
	fmt.Fprintln(w, "CERTIFICATE AUTHORITY\tLEADER\tREADY\tROTATING")
	fmt.Fprintf(w, "default\t%s\t%s\t%s\n", leaderText(r.Leader), conditionCell(r.Conditions, certapiv1alpha1.ConditionReady),
		conditionCell(r.Conditions, certapiv1alpha1.ConditionRotating))
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(out)

	w = printers.GetNewTabWriter(out)
	fmt.Fprintln(w, "ROLE\tSERIAL\tSUBJECT KEY ID\tNOT BEFORE\tNOT AFTER\tLEFT")
	for _, c := range r.Certificates {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", c.Role, c.SerialNumber, c.SubjectKeyID, formatTime(c.NotBefore.Time), formatTime(c.NotAfter.Time), timeLeft(r.Time, c.NotAfter.Time))
	}
	if len(r.Certificates) == 0 {
		fmt.Fprintln(w, "<none: certapi's leader has not published the CA yet>")
	}
	if err := w.Flush(); err != nil {
		return err
	}

	fmt.Fprintf(out, "\nRotation: %s", r.Rotation.State)
	if c := meta.FindStatusCondition(r.Conditions, certapiv1alpha1.ConditionRotating); c != nil && c.Message != "" {
		fmt.Fprintf(out, ": %s", c.Message)
	}
	fmt.Fprintln(out)
	for _, s := range r.Rotation.WaitingFor {
		fmt.Fprintf(out, "  waiting for %s\n", s)
	}

	if apis := meta.FindStatusCondition(r.Conditions, certapiv1alpha1.ConditionAPIsServed); apis != nil {
		switch apis.Status {
		case metav1.ConditionFalse:
			fmt.Fprintf(out, "\nKubernetes APIs: not all served: %s\n", apis.Message)
		case metav1.ConditionTrue:
			fmt.Fprintf(out, "\nKubernetes APIs: %s\n", apis.Message)
		}
	}

	if inj := r.Injection; inj != nil {
		fmt.Fprintf(out, "\nInjection: %d targets: %d up to date, %d pending, %d skipped, %d in conflict, %d failed\n",
			inj.Targets, inj.UpToDate, r.Counts.InjectionPending, inj.Skipped, inj.Conflicts, inj.Failed)
		if inj.Failed > 0 {
			fmt.Fprintf(out, "  failed (kube-apiserver refused the bundle; rotations do not wait for them): %s\n", failedNames(inj))
		}
	} else {
		fmt.Fprintln(out, "\nInjection: no summary yet")
	}
	printServed(out, r.Served, r.Counts.ServedFailing)
	if err := printEtcd(out, r.Time, r.Etcd, r.Counts); err != nil {
		return err
	}

	q := r.Requests
	if q.Error != "" {
		_, err := fmt.Fprintf(out, "\nServingCertRequests (%s): cannot list them: %s\n", q.Scope, q.Error)
		return err
	}
	fmt.Fprintf(out, "\nServingCertRequests (%s): %d, %d not Ready, %d never issued, %d past their renewal time\n",
		q.Scope, q.Total, q.NotReady, q.NotIssued, q.Overdue)
	if len(q.NearestExpiry) == 0 {
		return nil
	}
	fmt.Fprintln(out)
	w = printers.GetNewTabWriter(out)
	fmt.Fprintln(w, "NAMESPACE\tNAME\tREADY\tNOT AFTER\tLEFT\tRENEWAL\tSIGNED BY")
	for _, e := range q.NearestExpiry {
		renewal := "<none>"
		if e.RenewalTime != nil {
			renewal = formatTime(*e.RenewalTime)
			if e.Overdue {
				renewal += " (overdue)"
			}
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Namespace, e.Name, e.Ready, formatTime(e.NotAfter), timeLeft(r.Time, e.NotAfter), renewal, e.SignedBy)
	}
	return w.Flush()
}

// conditionCell is the condition of type t as one table cell: Status (Reason), or Unknown when there is
// none.
func conditionCell(conds []metav1.Condition, t string) string {
	c := meta.FindStatusCondition(conds, t)
	switch {
	case c == nil:
		return string(metav1.ConditionUnknown)
	case c.Reason == "":
		return string(c.Status)
	}
	return string(c.Status) + " (" + c.Reason + ")"
}

// leaderText is status.leader as one table cell: the identity of the replica that leads, <none>,
// <unknown> (the election could not be read), or what is wrong.
func leaderText(l *certapiv1alpha1.CertificateAuthorityLeader) string {
	switch {
	case l == nil:
		return "<not published: certapi is older than this plugin>"
	case l.State == certapiv1alpha1.LeaderStateElected && l.Identity != "":
		return l.Identity
	case l.State == certapiv1alpha1.LeaderStateNone:
		return "<none>"
	}
	return "<unknown>"
}

// indent prefixes every line of s with prefix.
func indent(s, prefix string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return prefix + strings.Join(lines, "\n"+prefix) + "\n"
}

// printEtcd writes the etcd cluster's section: nothing without one.
func printEtcd(out io.Writer, now time.Time, e *certapiv1alpha1.EtcdClusterStatus, counts ReportCounts) error {
	if e == nil {
		return nil
	}
	fmt.Fprintf(out, "\nEtcd cluster: %d voting, %d learning, %d of %d healthy; etcd leader %s\n",
		counts.EtcdVoters, counts.EtcdLearners, counts.EtcdHealthy, len(e.Members), e.Leader)
	w := printers.GetNewTabWriter(out)
	fmt.Fprintln(w, "MEMBER\tROLE\tHEALTHY\tLEADER")
	for _, m := range e.Members {
		leader := ""
		if m.Name == e.Leader {
			leader = "*"
		}
		fmt.Fprintf(w, "%s\t%s\t%t\t%s\n", m.Name, m.Role, m.Healthy, leader)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	p := e.PeerCA
	if p == nil {
		return nil
	}
	fmt.Fprintf(out, "Etcd peer CA %s, valid until %s (%s left)", p.SerialNumber, formatTime(p.NotAfter.Time), timeLeft(now, p.NotAfter.Time))
	switch {
	case p.Rotating:
		fmt.Fprintln(out, "; rotating to it: the members trust the CA it replaces too")
		for _, m := range p.WaitingFor {
			fmt.Fprintf(out, "  waiting for %s\n", m)
		}
	case p.RotateAt != nil:
		fmt.Fprintf(out, "; rotates by itself at %s (`kubectl certapi rotate --etcd-peer` now)\n", formatTime(p.RotateAt.Time))
	default:
		fmt.Fprintln(out)
	}
	return nil
}

// printServed writes what the injected webhooks and APIServices serve, and the slots that would fail.
func printServed(out io.Writer, s *certapiv1alpha1.ServedSummary, failing int32) {
	if s == nil {
		fmt.Fprintln(out, "\nServed certificates: not checked yet (certapi's check is off, or its first round is not done)")
		return
	}
	fmt.Fprintf(out, "\nServed certificates: %d webhooks and APIServices checked: %d Verified, %d ExpiringSoon, %d would fail", s.Targets, s.Verified, s.ExpiringSoon, failing)
	var parts []string
	for _, c := range []struct {
		state string
		n     int32
	}{{"Untrusted", s.Untrusted}, {"NameMismatch", s.NameMismatch}, {"Expired", s.Expired}, {"HandshakeFailed", s.HandshakeFailed},
		{"Unreachable", s.Unreachable}, {"NoEndpoints", s.NoEndpoints}} {
		if c.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", c.n, c.state))
		}
	}
	if len(parts) > 0 {
		fmt.Fprintf(out, " (%s)", strings.Join(parts, ", "))
	}
	fmt.Fprintln(out)
	for _, t := range s.WorstTargets {
		fmt.Fprintf(out, "  %s\n", t)
	}
	if more := int(s.Targets-s.Verified) - len(s.WorstTargets); more > 0 {
		fmt.Fprintf(out, "  and %d more\n", more)
	}
	if len(s.WorstTargets) > 0 {
		fmt.Fprintln(out, "  (`kubectl certapi inspect KIND/NAME` shows what each endpoint presents)")
	}
}
