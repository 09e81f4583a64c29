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
type Report struct {
	// Time is when the report was made.
	Time time.Time `json:"time"`
	// Leader names the certapi replica that leads now, as CertificateAuthority/default's table says:
	// a replica's identity, "<none>" when no replica leads, "<unknown>" when it could not be read.
	Leader string `json:"leader"`
	// Ready is CertificateAuthority/default's Ready condition.
	Ready ConditionSummary `json:"ready"`
	// APIs is its APIsServed condition: whether kube-apiserver serves every API certapi uses or, when not
	// (an older Kubernetes), what certapi leaves off. Unknown before a leader of this version reported.
	APIs ConditionSummary `json:"apis"`
	// Rotation is where a CA rotation stands and what its next step waits for.
	Rotation RotationReport `json:"rotation"`
	// CertificateAuthorities are the CA certificates in the bundle, Active first.
	CertificateAuthorities []CAReport `json:"certificateAuthorities"`
	// Injection counts the objects that opted in to caBundle injection; nil before the leader reported.
	Injection *InjectionReport `json:"injection,omitempty"`
	// Etcd is certapi's own etcd cluster (its replicas' embedded members), as the replica whose member
	// is the etcd leader last wrote it into status.etcd; nil without one.
	Etcd *EtcdReport `json:"etcd,omitempty"`
	// Requests summarises the ServingCertRequests and lists those nearest expiry.
	Requests RequestsReport `json:"requests"`
	// Served is what the endpoints of the injected webhooks, conversion webhooks and APIServices serve,
	// as certapi's leader last checked them (status.served); nil while the check is off or before its
	// first round.
	Served *ServedReport `json:"served,omitempty"`
}

// ServedReport counts the checked caBundle slots (each webhook of a webhook configuration, a CRD's
// conversion webhook, an APIService) by the state of what their Service's endpoints serve, and names
// those that are not Verified (docs/served-certificates.md).
type ServedReport struct {
	Targets         int32 `json:"targets"`
	Verified        int32 `json:"verified"`
	ExpiringSoon    int32 `json:"expiringSoon"`
	Untrusted       int32 `json:"untrusted"`
	NameMismatch    int32 `json:"nameMismatch"`
	Expired         int32 `json:"expired"`
	HandshakeFailed int32 `json:"handshakeFailed"`
	Unreachable     int32 `json:"unreachable"`
	NoEndpoints     int32 `json:"noEndpoints"`
	// Failing is the number of slots kube-apiserver's calls would fail for now: every state but Verified
	// and ExpiringSoon.
	Failing int32 `json:"failing"`
	// NotVerified names the slots that are not Verified, worst first (at most 10), as
	// "<Kind> <name>[ webhook <webhook>]: <state>": status.served.worstTargets.
	NotVerified []string `json:"notVerified"`
}

// servedReport is status.served for the report; nil when absent.
func servedReport(s *certapiv1alpha1.ServedSummary) *ServedReport {
	if s == nil {
		return nil
	}
	r := &ServedReport{Targets: s.Targets, Verified: s.Verified, ExpiringSoon: s.ExpiringSoon, Untrusted: s.Untrusted,
		NameMismatch: s.NameMismatch, Expired: s.Expired, HandshakeFailed: s.HandshakeFailed, Unreachable: s.Unreachable,
		NoEndpoints: s.NoEndpoints, NotVerified: append([]string{}, s.WorstTargets...)}
	r.Failing = max(0, r.Targets-r.Verified-r.ExpiringSoon)
	return r
}

// EtcdReport is certapi's own etcd cluster: its members, the etcd leader, their health, the peer CA.
type EtcdReport struct {
	// Leader is the member that is the etcd leader.
	Leader string `json:"leader"`
	// Voters, Learners and Healthy count the members.
	Voters   int `json:"voters"`
	Learners int `json:"learners"`
	Healthy  int `json:"healthy"`
	// Members are every member, by name.
	Members []EtcdMemberReport `json:"members"`
	// PeerCA is the CA of the members' mutual TLS; nil when not reported.
	PeerCA *EtcdPeerCAReport `json:"peerCA,omitempty"`
}

// EtcdMemberReport is one member.
type EtcdMemberReport struct {
	Name    string `json:"name"`
	Role    string `json:"role"`
	Healthy bool   `json:"healthy"`
	Leader  bool   `json:"leader,omitempty"`
}

// EtcdPeerCAReport is the peer CA and its rotation.
type EtcdPeerCAReport struct {
	SerialNumber string     `json:"serialNumber"`
	NotAfter     time.Time  `json:"notAfter"`
	RotateAt     *time.Time `json:"rotateAt,omitempty"`
	Rotating     bool       `json:"rotating,omitempty"`
	WaitingFor   []string   `json:"waitingFor,omitempty"`
}

// ConditionSummary is one condition of the CertificateAuthority.
type ConditionSummary struct {
	// Status is True, False or Unknown (also when the condition is missing).
	Status string `json:"status"`
	// Reason and Message are the condition's.
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	// Since is the condition's lastTransitionTime.
	Since *time.Time `json:"since,omitempty"`
}

// RotationReport is where a CA rotation stands.
type RotationReport struct {
	// State is the Rotating condition's reason: Idle, NextPublished, Retiring or Distrusted.
	State string `json:"state"`
	ConditionSummary
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

// CAReport is one CA certificate in the bundle.
type CAReport struct {
	Role         string    `json:"role"`
	SerialNumber string    `json:"serialNumber"`
	SubjectKeyID string    `json:"subjectKeyID"`
	NotBefore    time.Time `json:"notBefore"`
	NotAfter     time.Time `json:"notAfter"`
}

// InjectionReport counts the opted-in objects by state.
type InjectionReport struct {
	Targets   int32 `json:"targets"`
	UpToDate  int32 `json:"upToDate"`
	Pending   int32 `json:"pending"`
	Skipped   int32 `json:"skipped"`
	Conflicts int32 `json:"conflicts"`
	// Failed are the targets whose write kube-apiserver refused for good (too large, forbidden): a
	// rotation does not wait for them. FailedTargets names the first few.
	Failed        int32    `json:"failed"`
	FailedTargets []string `json:"failedTargets,omitempty"`
}

// failedNames lists the failed targets the report names, and how many more it counts.
func (r *InjectionReport) failedNames() string {
	out := strings.Join(r.FailedTargets, ", ")
	if more := int(r.Failed) - len(r.FailedTargets); more > 0 {
		if out != "" {
			out += " and "
		}
		out += fmt.Sprintf("%d more", more)
	}
	return out
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
	Now    time.Time
	CA     *certapiv1alpha1.CertificateAuthority
	Leader string
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
	ca := in.CA
	r := Report{Time: in.Now, Leader: in.Leader}
	r.Ready = conditionSummary(ca.Status.Conditions, certapiv1alpha1.ConditionReady)
	r.APIs = conditionSummary(ca.Status.Conditions, certapiv1alpha1.ConditionAPIsServed)
	for _, c := range ca.Status.Certificates {
		r.CertificateAuthorities = append(r.CertificateAuthorities, CAReport{
			Role: string(c.Role), SerialNumber: c.SerialNumber, SubjectKeyID: c.SubjectKeyID,
			NotBefore: c.NotBefore.Time, NotAfter: c.NotAfter.Time,
		})
	}
	if inj := ca.Status.Injection; inj != nil {
		r.Injection = &InjectionReport{Targets: inj.Targets, UpToDate: inj.UpToDate, Skipped: inj.Skipped, Conflicts: inj.Conflicts,
			Failed: inj.Failed, FailedTargets: inj.FailedTargets,
			Pending: max(0, inj.Targets-inj.UpToDate-inj.Skipped-inj.Conflicts-inj.Failed)}
	}
	r.Requests = requestsReport(in)
	r.Rotation = rotationReport(ca, r.Injection, r.Requests, in.Now)
	r.Etcd = etcdReport(ca.Status.Etcd)
	r.Served = servedReport(ca.Status.Served)
	return r
}

// etcdReport is status.etcd for the report; nil when absent.
func etcdReport(e *certapiv1alpha1.EtcdClusterStatus) *EtcdReport {
	if e == nil {
		return nil
	}
	r := &EtcdReport{Leader: e.Leader, Members: []EtcdMemberReport{}}
	for _, m := range e.Members {
		if m.Role == certapiv1alpha1.EtcdMemberLearner {
			r.Learners++
		} else {
			r.Voters++
		}
		if m.Healthy {
			r.Healthy++
		}
		r.Members = append(r.Members, EtcdMemberReport{Name: m.Name, Role: string(m.Role), Healthy: m.Healthy, Leader: m.Name == e.Leader})
	}
	if p := e.PeerCA; p != nil {
		r.PeerCA = &EtcdPeerCAReport{SerialNumber: p.SerialNumber, NotAfter: p.NotAfter.Time, Rotating: p.Rotating, WaitingFor: p.WaitingFor}
		if p.RotateAt != nil {
			at := p.RotateAt.Time
			r.PeerCA.RotateAt = &at
		}
	}
	return r
}

func conditionSummary(conds []metav1.Condition, t string) ConditionSummary {
	c := meta.FindStatusCondition(conds, t)
	if c == nil {
		return ConditionSummary{Status: string(metav1.ConditionUnknown), Message: "no " + t + " condition yet"}
	}
	since := c.LastTransitionTime.Time
	s := ConditionSummary{Status: string(c.Status), Reason: c.Reason, Message: c.Message}
	if !since.IsZero() {
		s.Since = &since
	}
	return s
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
func rotationReport(ca *certapiv1alpha1.CertificateAuthority, inj *InjectionReport, reqs RequestsReport, now time.Time) RotationReport {
	cond := conditionSummary(ca.Status.Conditions, certapiv1alpha1.ConditionRotating)
	r := RotationReport{State: cond.Reason, ConditionSummary: cond}
	if r.State == "" {
		r.State = "Unknown"
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
		case inj.Pending > 0:
			r.WaitingFor = append(r.WaitingFor, fmt.Sprintf("%d of %d injection targets to take the bundle with %s", inj.Pending, inj.Targets, name))
		default:
			r.WaitingFor = append(r.WaitingFor, fmt.Sprintf("nothing from the injection targets: every injectable one holds %s", name))
		}
		if inj != nil && inj.Conflicts+inj.Skipped > 0 {
			r.WaitingFor = append(r.WaitingFor, fmt.Sprintf("(%d targets in conflict and %d skipped do not hold the gate; `kubectl get certificateauthority default -o yaml` and certapi's Events name them)",
				inj.Conflicts, inj.Skipped))
		}
		if inj != nil && inj.Failed > 0 {
			r.WaitingFor = append(r.WaitingFor, fmt.Sprintf("(%d failed targets do not hold the gate either: kube-apiserver refused them the bundle, so they will not trust %s; "+
				"their Warning Events (reason InjectionFailed) say why: %s)", inj.Failed, name, inj.failedNames()))
		}
		since := "its publication"
		if cond.Since != nil {
			since = formatTime(*cond.Since)
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
