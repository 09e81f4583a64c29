package kubectlcertapi

import (
	"cmp"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/signer"
)

// Report is what `kubectl certapi status` shows: the table, or this structure as JSON or YAML with -o.
// What CertificateAuthority/default publishes is here as the API's own types, under the names of its
// status fields (leader, conditions, certificates, injection, served, etcd: `kubectl explain
// certificateauthority.status` describes them); what the plugin computes from them and from the
// ServingCertRequests is in rotation, counts and requests.
type Report struct {
	// Time is when the report was made.
	Time time.Time `json:"time"`
	// Leader is status.leader: the certapi replica that leads, as the replica that answered read the
	// leader election. nil from a certapi older than this plugin.
	Leader *certapiv1alpha1.CertificateAuthorityLeader `json:"leader,omitempty"`
	// Conditions are status.conditions: Ready, Rotating and APIsServed.
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Certificates are status.certificates: the CA certificates in the bundle and their roles.
	Certificates []certapiv1alpha1.CertificateAuthorityCertificate `json:"certificates"`
	// Injection is status.injection; nil before the leader reported.
	Injection *certapiv1alpha1.InjectionSummary `json:"injection,omitempty"`
	// Served is status.served: what the endpoints of the injected webhooks, conversion webhooks and
	// APIServices serve, as certapi's leader last checked them; nil while the check is off or before its
	// first round.
	Served *certapiv1alpha1.ServedSummary `json:"served,omitempty"`
	// Etcd is status.etcd: certapi's own etcd cluster (its replicas' embedded members), as the replica
	// whose member is the etcd leader last wrote it; nil without one.
	Etcd *certapiv1alpha1.EtcdClusterStatus `json:"etcd,omitempty"`

	// Rotation is where a CA rotation stands and what its next step waits for.
	Rotation RotationReport `json:"rotation"`
	// Counts are computed from injection, served and etcd.
	Counts ReportCounts `json:"counts"`
	// Requests summarises the ServingCertRequests and lists those nearest expiry.
	Requests RequestsReport `json:"requests"`
}

// ReportCounts are the counts the report computes from the CertificateAuthority's status; each is zero
// when the part it counts is absent.
type ReportCounts struct {
	// InjectionPending is the number of injection targets that do not hold the current bundle yet and
	// that a rotation waits for: targets less upToDate, skipped, conflicts and failed.
	InjectionPending int32 `json:"injectionPending"`
	// ServedFailing is the number of served slots kube-apiserver's calls would fail for now: every state
	// but Verified and ExpiringSoon.
	ServedFailing int32 `json:"servedFailing"`
	// EtcdVoters, EtcdLearners and EtcdHealthy count status.etcd.members.
	EtcdVoters   int32 `json:"etcdVoters"`
	EtcdLearners int32 `json:"etcdLearners"`
	EtcdHealthy  int32 `json:"etcdHealthy"`
}

// RotationReport is where a CA rotation stands: the Rotating condition (in conditions) read with the CA
// certificates' lifetimes and the injection summary.
type RotationReport struct {
	// State is the Rotating condition's reason: Idle, NextPublished, Retiring or Distrusted; Unknown
	// when there is none.
	State string `json:"state"`
	// WaitingFor says, in words, what the next step of the CA's lifecycle waits for.
	WaitingFor []string `json:"waitingFor,omitempty"`
	// NextRotation, when no rotation runs, is when the next one begins by itself: when a third of the
	// Active CA's life remains.
	NextRotation *time.Time `json:"nextRotation,omitempty"`
	// ForcedSwitchAt, while a Next CA waits, is when it signs even if not every target holds it: when a
	// sixth of the Active CA's life remains.
	ForcedSwitchAt *time.Time `json:"forcedSwitchAt,omitempty"`
	// Pending says certapi has not acted on the latest spec yet (status.observedGeneration is behind).
	Pending bool `json:"pending,omitempty"`
}

// failedNames lists the failed injection targets status.injection names, and how many more it counts.
func failedNames(inj *certapiv1alpha1.InjectionSummary) string {
	out := strings.Join(inj.FailedTargets, ", ")
	if more := int(inj.Failed) - len(inj.FailedTargets); more > 0 {
		if out != "" {
			out += " and "
		}
		out += fmt.Sprintf("%d more", more)
	}
	return out
}

// injectionPending is the number of targets a rotation waits for that do not hold the current bundle.
func injectionPending(inj *certapiv1alpha1.InjectionSummary) int32 {
	if inj == nil {
		return 0
	}
	return max(0, inj.Targets-inj.UpToDate-inj.Skipped-inj.Conflicts-inj.Failed)
}

// RequestsReport summarises ServingCertRequests.
type RequestsReport struct {
	// Scope is "all namespaces" or the namespace the requests were listed in.
	Scope string `json:"scope"`
	// Error, when set, says why the requests could not be listed; the counts are then zero.
	Error string `json:"error,omitempty"`
	// Total is the number of requests; NotReady of those whose Ready condition is not True; NotIssued
	// of those that have never had a certificate; Overdue of those past their renewal time.
	Total     int `json:"total"`
	NotReady  int `json:"notReady"`
	NotIssued int `json:"notIssued"`
	Overdue   int `json:"overdue"`
	// Secrets is the number of requests delivering into a Secret, and SecretsFromActive of those whose
	// latest certificate the Active CA signed (what a distrust waits for).
	Secrets           int `json:"secrets"`
	SecretsFromActive int `json:"secretsFromActive"`
	// NearestExpiry lists the issued requests whose certificates expire first.
	NearestExpiry []RequestReport `json:"nearestExpiry"`
}

// RequestReport is one ServingCertRequest's latest certificate.
type RequestReport struct {
	Namespace   string     `json:"namespace"`
	Name        string     `json:"name"`
	Ready       string     `json:"ready"`
	NotAfter    time.Time  `json:"notAfter"`
	RenewalTime *time.Time `json:"renewalTime,omitempty"`
	// Overdue: the renewal time has passed and no newer certificate was issued.
	Overdue bool `json:"overdue,omitempty"`
	// SignedBy is the role of the CA that signed the certificate (Active, Next, Retiring), or "unknown"
	// when no CA in the bundle did.
	SignedBy string `json:"signedBy"`
}

// ReportInput is what BuildReport reads; the command fetches it.
type ReportInput struct {
	Now time.Time
	// CA is CertificateAuthority/default, with status.leader as the replica that answered read it.
	CA *certapiv1alpha1.CertificateAuthority
	// Requests are the listed ServingCertRequests; RequestsError is set instead when listing failed.
	Requests      []certapiv1alpha1.ServingCertRequest
	RequestsError error
	// Scope is "all namespaces" or a namespace.
	Scope string
	// Nearest is how many requests NearestExpiry lists.
	Nearest int
}

// BuildReport makes the status report from what was read.
func BuildReport(in ReportInput) Report {
	st := in.CA.Status
	r := Report{Time: in.Now, Leader: st.Leader, Conditions: st.Conditions, Certificates: st.Certificates,
		Injection: st.Injection, Served: st.Served, Etcd: st.Etcd}
	if r.Certificates == nil {
		r.Certificates = []certapiv1alpha1.CertificateAuthorityCertificate{}
	}
	r.Counts.InjectionPending = injectionPending(st.Injection)
	if s := st.Served; s != nil {
		r.Counts.ServedFailing = max(0, s.Targets-s.Verified-s.ExpiringSoon)
	}
	if e := st.Etcd; e != nil {
		for _, m := range e.Members {
			if m.Role == certapiv1alpha1.EtcdMemberLearner {
				r.Counts.EtcdLearners++
			} else {
				r.Counts.EtcdVoters++
			}
			if m.Healthy {
				r.Counts.EtcdHealthy++
			}
		}
	}
	r.Requests = requestsReport(in)
	r.Rotation = rotationReport(in.CA, r.Requests, in.Now)
	return r
}

// certificate returns the CA certificate of role in status, or nil.
func certificate(ca *certapiv1alpha1.CertificateAuthority, role certapiv1alpha1.CertificateAuthorityRole) *certapiv1alpha1.CertificateAuthorityCertificate {
	for i, c := range ca.Status.Certificates {
		if c.Role == role {
			return &ca.Status.Certificates[i]
		}
	}
	return nil
}

// rotationReport says where the rotation stands and what its next step waits for.
func rotationReport(ca *certapiv1alpha1.CertificateAuthority, reqs RequestsReport, now time.Time) RotationReport {
	inj := ca.Status.Injection
	cond := meta.FindStatusCondition(ca.Status.Conditions, certapiv1alpha1.ConditionRotating)
	if cond == nil {
		cond = &metav1.Condition{}
	}
	r := RotationReport{State: cond.Reason}
	if r.State == "" {
		r.State = string(metav1.ConditionUnknown)
	}
	if ca.Status.ObservedGeneration < ca.Generation {
		r.Pending = true
		r.WaitingFor = append(r.WaitingFor, fmt.Sprintf("certapi's leader to act on the latest spec (generation %d; the status describes %d)",
			ca.Generation, ca.Status.ObservedGeneration))
	}
	active := certificate(ca, certapiv1alpha1.CARoleActive)
	var life time.Duration
	if active != nil {
		life = active.NotAfter.Sub(active.NotBefore.Time)
	}
	if p := ca.Status.PendingRequest; p != nil {
		r.WaitingFor = append(r.WaitingFor, fmt.Sprintf("the organisation's CA to sign the CA certificate request made %s (%s): `kubectl certapi ca request` prints it, "+
			"`kubectl certapi ca import` takes the signed certificate back; until then the Active CA signs, at the latest until its chain expires at %s",
			formatTime(p.CreatedAt.Time), p.Reason, formatTime(p.ActiveNotAfter.Time)))
	}
	switch r.State {
	case certapiv1alpha1.RotatingReasonIdle:
		if active != nil && ca.Status.PendingRequest == nil {
			t := active.NotAfter.Add(-life / 3)
			r.NextRotation = &t
			r.WaitingFor = append(r.WaitingFor, fmt.Sprintf("nothing: the next rotation begins by itself at %s, when a third of the Active CA's life remains, or at once with `kubectl certapi rotate`",
				formatTime(t)))
		}
	case certapiv1alpha1.RotatingReasonNextPublished:
		next := certificate(ca, certapiv1alpha1.CARoleNext)
		name := "the Next CA"
		if next != nil {
			name += " " + next.SerialNumber
		}
		switch {
		case inj == nil:
			r.WaitingFor = append(r.WaitingFor, "every injection target to hold the bundle with "+name+" (no injection summary yet)")
		case injectionPending(inj) > 0:
			r.WaitingFor = append(r.WaitingFor, fmt.Sprintf("%d of %d injection targets to take the bundle with %s", injectionPending(inj), inj.Targets, name))
		default:
			r.WaitingFor = append(r.WaitingFor, fmt.Sprintf("nothing from the injection targets: every injectable one holds %s", name))
		}
		if inj != nil && inj.Conflicts+inj.Skipped > 0 {
			r.WaitingFor = append(r.WaitingFor, fmt.Sprintf("(%d targets in conflict and %d skipped do not hold the gate; `kubectl get certificateauthority default -o yaml` and certapi's Events name them)",
				inj.Conflicts, inj.Skipped))
		}
		if inj != nil && inj.Failed > 0 {
			r.WaitingFor = append(r.WaitingFor, fmt.Sprintf("(%d failed targets do not hold the gate either: kube-apiserver refused them the bundle, so they will not trust %s; "+
				"their Warning Events (reason InjectionFailed) say why: %s)", inj.Failed, name, failedNames(inj)))
		}
		since := "its publication"
		if !cond.LastTransitionTime.IsZero() {
			since = formatTime(cond.LastTransitionTime.Time)
		}
		r.WaitingFor = append(r.WaitingFor, "the rotation grace period (certapi's --rotation-grace, default 1h) from "+since)
		if active != nil {
			t := active.NotAfter.Add(-life / 6)
			r.ForcedSwitchAt = &t
			r.WaitingFor = append(r.WaitingFor, fmt.Sprintf("at the latest %s, when a sixth of the Active CA's life remains: %s then signs anyway (a forced switch)", formatTime(t), name))
		}
	case certapiv1alpha1.RotatingReasonRetiring:
		r.WaitingFor = append(r.WaitingFor, "the Retiring CA to leave the bundle when no certificate it signed can still be valid: "+cond.Message)
	case certapiv1alpha1.RotatingReasonDistrusted:
		if d := ca.Status.Distrust; d != nil && d.CompletedAt == nil {
			break // said below, from status.distrust
		}
		switch {
		case reqs.Error != "":
			r.WaitingFor = append(r.WaitingFor, "every Secret certapi delivers to be re-issued by the Active CA (the requests could not be listed: "+reqs.Error+")")
		default:
			r.WaitingFor = append(r.WaitingFor, fmt.Sprintf("every Secret certapi delivers to be re-issued by the Active CA: %d of %d are (%s)",
				reqs.SecretsFromActive, reqs.Secrets, reqs.Scope))
		}
		r.WaitingFor = append(r.WaitingFor, "clients of the servingcerts subresource (pkg/servingcert) re-issue by themselves when they see the distrust")
	}
	if d := ca.Status.Distrust; d != nil && d.CompletedAt == nil {
		r.WaitingFor = append(r.WaitingFor, distrustWaits(d)...)
	}
	return r
}

// distrustWaits says what a running distrust waits for, from status.distrust.
func distrustWaits(d *certapiv1alpha1.DistrustStatus) []string {
	var out []string
	if ps := d.PendingSecrets; ps != nil && ps.Count > 0 {
		out = append(out, fmt.Sprintf("%d delivered Secrets to be re-issued by the Active CA%s", ps.Count, names(ps)))
	} else {
		out = append(out, "nothing from the delivered Secrets: every one is re-issued")
	}
	if d.PendingReplicas > 0 {
		out = append(out, fmt.Sprintf("%d certapi replicas to serve a certificate of the Active CA", d.PendingReplicas))
	}
	if pe := d.PendingEndpoints; pe != nil && pe.Count > 0 {
		out = append(out, fmt.Sprintf("%d served endpoints of injected webhooks and APIServices to reload a certificate of the Active CA "+
			"(they present one of a distrusted CA, and kube-apiserver's calls to them fail once it leaves the bundle): %s", pe.Count, listNames(pe.Count, pe.Names)))
	} else {
		out = append(out, "nothing from the served endpoints: none presents a certificate of a distrusted CA")
	}
	if d.Deadline != nil {
		out = append(out, fmt.Sprintf("at the latest %s (certapi's --distrust-deadline): every distrusted CA leaves every bundle then, whatever is still pending",
			formatTime(d.Deadline.Time)))
	}
	if us := d.UnmanagedSecrets; us != nil && us.Count > 0 {
		out = append(out, fmt.Sprintf("(not waited for: %d labelled Secrets certapi will not re-issue%s; they stop verifying when the distrusted CAs leave)", us.Count, names(us)))
	}
	return out
}

// listNames lists the first names of count, and says how many more there are.
func listNames(count int32, names []string) string {
	out := strings.Join(names, ", ")
	if more := int(count) - len(names); more > 0 {
		out += fmt.Sprintf(" and %d more", more)
	}
	return out
}

// names lists a summary's names, if it has any, as ": a, b".
func names(s *certapiv1alpha1.SecretsSummary) string {
	if len(s.Names) == 0 {
		return ""
	}
	more := ""
	if int(s.Count) > len(s.Names) {
		more = ", ..."
	}
	return ": " + strings.Join(s.Names, ", ") + more
}

// requestsReport counts the requests and picks those nearest expiry.
func requestsReport(in ReportInput) RequestsReport {
	r := RequestsReport{Scope: in.Scope, NearestExpiry: []RequestReport{}}
	if in.RequestsError != nil {
		r.Error = in.RequestsError.Error()
		return r
	}
	roles := caRoles(in.CA)
	var issued []RequestReport
	for i := range in.Requests {
		scr := &in.Requests[i]
		r.Total++
		ready := meta.FindStatusCondition(scr.Status.Conditions, certapiv1alpha1.ConditionReady)
		readyText := string(metav1.ConditionUnknown)
		if ready != nil {
			readyText = string(ready.Status)
			if ready.Reason != "" {
				readyText += " (" + ready.Reason + ")"
			}
		}
		if ready == nil || ready.Status != metav1.ConditionTrue {
			r.NotReady++
		}
		signedBy := signedByRole(scr.Status.Certificate, roles)
		if scr.Spec.SecretName != "" {
			r.Secrets++
			if signedBy == string(certapiv1alpha1.CARoleActive) {
				r.SecretsFromActive++
			}
		}
		if scr.Status.NotAfter == nil {
			r.NotIssued++
			continue
		}
		rep := RequestReport{Namespace: scr.Namespace, Name: scr.Name, Ready: readyText, NotAfter: scr.Status.NotAfter.Time, SignedBy: signedBy}
		if rt := scr.Status.RenewalTime; rt != nil {
			t := rt.Time
			rep.RenewalTime = &t
			if !in.Now.Before(t) {
				rep.Overdue = true
				r.Overdue++
			}
		}
		issued = append(issued, rep)
	}
	slices.SortFunc(issued, func(a, b RequestReport) int {
		return cmp.Or(a.NotAfter.Compare(b.NotAfter), cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	if len(issued) > in.Nearest {
		issued = issued[:in.Nearest]
	}
	r.NearestExpiry = append(r.NearestExpiry, issued...)
	return r
}

// caRoles maps each CA's subject key ID (lower-case hex) to its role.
func caRoles(ca *certapiv1alpha1.CertificateAuthority) map[string]string {
	roles := map[string]string{}
	for _, c := range ca.Status.Certificates {
		roles[c.SubjectKeyID] = string(c.Role)
	}
	return roles
}

// signedByRole returns the role of the CA whose key signed the first certificate in certPEM, by its
// authority key ID; "unknown" when none in roles did or certPEM holds no certificate.
func signedByRole(certPEM string, roles map[string]string) string {
	cert := firstCertificate([]byte(certPEM))
	if cert == nil {
		return "unknown"
	}
	if role, ok := roles[signer.FormatKeyID(cert.AuthorityKeyId)]; ok && len(cert.AuthorityKeyId) > 0 {
		return role
	}
	return "unknown"
}

// firstCertificate parses the first CERTIFICATE block of data, or returns nil.
func firstCertificate(data []byte) *x509.Certificate {
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			return nil
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil
		}
		return cert
	}
}

// formatTime is how times are shown in tables and messages.
func formatTime(t time.Time) string {
	return t.UTC().Format(time.RFC3339)
}
