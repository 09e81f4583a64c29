package kubectlcertapi

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
)

func request(ns, name, secret, certPEM string, notAfter, renewal *time.Time, ready metav1.ConditionStatus, reason string) certapiv1alpha1.ServingCertRequest {
	r := certapiv1alpha1.ServingCertRequest{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: certapiv1alpha1.ServingCertRequestSpec{ServiceName: name, SecretName: secret}}
	r.Status.Certificate = certPEM
	if notAfter != nil {
		na := metav1.NewTime(*notAfter)
		r.Status.NotAfter = &na
	}
	if renewal != nil {
		rt := metav1.NewTime(*renewal)
		r.Status.RenewalTime = &rt
	}
	if ready != "" {
		r.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: ready, Reason: reason}}
	}
	return r
}

func at(d time.Duration) *time.Time { t := t0.Add(d); return &t }

func TestBuildReportRequests(t *testing.T) {
	active := newCA(t, t0.Add(-24*time.Hour), 365*24*time.Hour)
	retiring := newCA(t, t0.Add(-300*24*time.Hour), 365*24*time.Hour)
	stranger := newCA(t, t0.Add(-24*time.Hour), 365*24*time.Hour)
	fromActive, _ := leaf(t, active, "a", "ns1", t0, time.Hour)
	fromRetiring, _ := leaf(t, retiring, "b", "ns1", t0, time.Hour)
	fromStranger, _ := leaf(t, stranger, "c", "ns2", t0, time.Hour)
	ca := caObject(idle(), nil, caEntry(active, "Active"), caEntry(retiring, "Retiring"))

	reqs := []certapiv1alpha1.ServingCertRequest{
		request("ns1", "late", "late-tls", string(fromActive), at(72*time.Hour), at(48*time.Hour), metav1.ConditionTrue, "Issued"),
		request("ns1", "soon", "soon-tls", string(fromRetiring), at(2*time.Hour), at(-time.Minute), metav1.ConditionTrue, "Issued"),
		request("ns2", "mid", "", string(fromStranger), at(24*time.Hour), at(12*time.Hour), metav1.ConditionFalse, "SecretConflict"),
		request("ns2", "never", "never-tls", "", nil, nil, "", ""),
	}
	r := BuildReport(ReportInput{Now: t0, CA: ca, Requests: reqs, Scope: allNamespaces, Nearest: 2})
	q := r.Requests
	if q.Total != 4 || q.NotReady != 2 || q.NotIssued != 1 || q.Overdue != 1 || q.Secrets != 3 || q.SecretsFromActive != 1 {
		t.Fatalf("counts %+v", q)
	}
	if len(q.NearestExpiry) != 2 || q.NearestExpiry[0].Name != "soon" || q.NearestExpiry[1].Name != "mid" {
		t.Fatalf("nearest %+v, want soon then mid", q.NearestExpiry)
	}
	soon, mid := q.NearestExpiry[0], q.NearestExpiry[1]
	if !soon.Overdue || soon.SignedBy != "Retiring" || soon.Ready != "True (Issued)" {
		t.Errorf("soon %+v", soon)
	}
	if mid.Overdue || mid.SignedBy != "unknown" || mid.Ready != "False (SecretConflict)" {
		t.Errorf("mid %+v", mid)
	}

	r = BuildReport(ReportInput{Now: t0, CA: ca, RequestsError: errors.New("forbidden"), Scope: allNamespaces, Nearest: 5})
	if r.Requests.Error != "forbidden" || r.Requests.Total != 0 || r.Requests.NearestExpiry == nil {
		t.Fatalf("with a list error: %+v", r.Requests)
	}
}

func TestBuildReportRotation(t *testing.T) {
	life := 360 * 24 * time.Hour
	active := newCA(t, t0.Add(-24*time.Hour), life)
	next := newCA(t, t0, life)
	notBefore, notAfter := active.Certificate.NotBefore, active.Certificate.NotAfter
	third, sixth := notAfter.Add(-notAfter.Sub(notBefore)/3), notAfter.Add(-notAfter.Sub(notBefore)/6)
	since := metav1.NewTime(t0.Add(-10 * time.Minute))
	for _, tc := range []struct {
		name           string
		ca             *certapiv1alpha1.CertificateAuthority
		requests       []certapiv1alpha1.ServingCertRequest
		want           []string // substrings of WaitingFor, in order
		nextRotation   *time.Time
		forcedSwitchAt *time.Time
	}{{
		name:         "idle: the next rotation at a third of the life left",
		ca:           caObject(idle(), &certapiv1alpha1.InjectionSummary{Targets: 2, UpToDate: 2}, caEntry(active, "Active")),
		want:         []string{"nothing: the next rotation begins by itself at " + formatTime(third)},
		nextRotation: &third,
	}, {
		name: "next published: pending targets, grace, forced switch",
		ca: caObject(metav1.Condition{Type: "Rotating", Status: "True", Reason: "NextPublished", Message: "m", LastTransitionTime: since},
			&certapiv1alpha1.InjectionSummary{Targets: 10, UpToDate: 6, Skipped: 1, Conflicts: 1},
			caEntry(active, "Active"), caEntry(next, "Next")),
		want: []string{
			"2 of 10 injection targets to take the bundle with the Next CA " + serial(next),
			"(1 targets in conflict and 1 skipped do not hold the gate",
			"the rotation grace period (certapi's --rotation-grace, default 1h) from " + formatTime(since.Time),
			"at the latest " + formatTime(sixth) + ", when a sixth of the Active CA's life remains",
		},
		forcedSwitchAt: &sixth,
	}, {
		name: "next published: a failed target is named and not waited for",
		ca: caObject(metav1.Condition{Type: "Rotating", Status: "True", Reason: "NextPublished", Message: "m", LastTransitionTime: since},
			&certapiv1alpha1.InjectionSummary{Targets: 4, UpToDate: 3, Failed: 1, FailedTargets: []string{"ConfigMap tenant/big"}},
			caEntry(active, "Active"), caEntry(next, "Next")),
		want: []string{
			"nothing from the injection targets: every injectable one holds the Next CA " + serial(next),
			"(1 failed targets do not hold the gate either: kube-apiserver refused them the bundle, so they will not trust the Next CA " + serial(next) +
				"; their Warning Events (reason InjectionFailed) say why: ConfigMap tenant/big)",
			"the rotation grace period",
			"at the latest",
		},
		forcedSwitchAt: &sixth,
	}, {
		name: "next published: every target holds it",
		ca: caObject(metav1.Condition{Type: "Rotating", Status: "True", Reason: "NextPublished", LastTransitionTime: since},
			&certapiv1alpha1.InjectionSummary{Targets: 3, UpToDate: 3}, caEntry(active, "Active"), caEntry(next, "Next")),
		want:           []string{"nothing from the injection targets: every injectable one holds the Next CA", "the rotation grace period", "at the latest"},
		forcedSwitchAt: &sixth,
	}, {
		name: "retiring: the condition's message",
		ca: caObject(metav1.Condition{Type: "Rotating", Status: "True", Reason: "Retiring", Message: "the Retiring CA 1f leaves the bundle at X"},
			nil, caEntry(next, "Active"), caEntry(active, "Retiring")),
		want: []string{"the Retiring CA to leave the bundle when no certificate it signed can still be valid: the Retiring CA 1f leaves the bundle at X"},
	}, {
		name: "distrusted: Secrets re-issued so far",
		ca: caObject(metav1.Condition{Type: "Rotating", Status: "True", Reason: "Distrusted"},
			nil, caEntry(next, "Active"), caEntry(active, "Retiring")),
		requests: func() []certapiv1alpha1.ServingCertRequest {
			newer, _ := leaf(t, next, "a", "ns", t0, time.Hour)
			older, _ := leaf(t, active, "b", "ns", t0, time.Hour)
			return []certapiv1alpha1.ServingCertRequest{
				request("ns", "a", "a-tls", string(newer), at(time.Hour), nil, "True", ""),
				request("ns", "b", "b-tls", string(older), at(time.Hour), nil, "True", ""),
				request("ns", "c", "", string(older), at(time.Hour), nil, "True", ""),
			}
		}(),
		want: []string{"every Secret certapi delivers to be re-issued by the Active CA: 1 of 2 are (all namespaces)", "pkg/servingcert"},
	}, {
		name: "distrusted, with status.distrust: what it waits for and until when",
		ca: func() *certapiv1alpha1.CertificateAuthority {
			ca := caObject(metav1.Condition{Type: "Rotating", Status: "True", Reason: "Distrusted"}, nil, caEntry(next, "Active"), caEntry(active, "Retiring"))
			deadline := metav1.NewTime(t0.Add(15 * time.Minute))
			ca.Status.Distrust = &certapiv1alpha1.DistrustStatus{Distrust: "leak", StartedAt: metav1.NewTime(t0), Deadline: &deadline,
				PendingSecrets:   &certapiv1alpha1.SecretsSummary{Count: 12, Names: []string{"a/x-tls", "b/y-tls"}},
				PendingReplicas:  1,
				UnmanagedSecrets: &certapiv1alpha1.SecretsSummary{Count: 1, Names: []string{"c/old-tls"}},
				PendingEndpoints: &certapiv1alpha1.EndpointsSummary{Count: 11, Names: []string{"APIService v1.example.com: 10.0.0.9:443"}}}
			return ca
		}(),
		want: []string{
			"12 delivered Secrets to be re-issued by the Active CA: a/x-tls, b/y-tls, ...",
			"1 certapi replicas to serve a certificate of the Active CA",
			"11 served endpoints of injected webhooks and APIServices to reload a certificate of the Active CA (they present one of a distrusted CA, " +
				"and kube-apiserver's calls to them fail once it leaves the bundle): APIService v1.example.com: 10.0.0.9:443 and 10 more",
			"at the latest " + formatTime(t0.Add(15*time.Minute)) + " (certapi's --distrust-deadline)",
			"(not waited for: 1 labelled Secrets certapi will not re-issue: c/old-tls;",
		},
	}, {
		name: "a spec change not acted on yet",
		ca: func() *certapiv1alpha1.CertificateAuthority {
			ca := caObject(idle(), nil, caEntry(active, "Active"))
			ca.Generation = 3
			return ca
		}(),
		want:         []string{"certapi's leader to act on the latest spec (generation 3; the status describes 1)", "nothing: the next rotation"},
		nextRotation: &third,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			r := BuildReport(ReportInput{Now: t0, CA: tc.ca, Requests: tc.requests, Scope: allNamespaces, Nearest: 5})
			if len(r.Rotation.WaitingFor) != len(tc.want) {
				t.Fatalf("waitingFor %q, want %d entries like %q", r.Rotation.WaitingFor, len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if !strings.Contains(r.Rotation.WaitingFor[i], w) {
					t.Errorf("waitingFor[%d] = %q, want it to contain %q", i, r.Rotation.WaitingFor[i], w)
				}
			}
			if !equalTime(r.Rotation.NextRotation, tc.nextRotation) || !equalTime(r.Rotation.ForcedSwitchAt, tc.forcedSwitchAt) {
				t.Errorf("nextRotation %v forcedSwitchAt %v, want %v %v", r.Rotation.NextRotation, r.Rotation.ForcedSwitchAt, tc.nextRotation, tc.forcedSwitchAt)
			}
		})
	}
}

func equalTime(a, b *time.Time) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Equal(*b)
}

func TestPrintReport(t *testing.T) {
	active := newCA(t, t0.Add(-24*time.Hour), 365*24*time.Hour)
	fromActive, _ := leaf(t, active, "web", "team-a", t0, 168*time.Hour)
	ca := caObject(idle(), &certapiv1alpha1.InjectionSummary{Targets: 4, UpToDate: 2, Skipped: 1, Conflicts: 0}, caEntry(active, "Active"))
	r := BuildReport(ReportInput{Now: t0, CA: ca, Scope: allNamespaces, Nearest: 5,
		Requests: []certapiv1alpha1.ServingCertRequest{request("team-a", "web", "web-tls", string(fromActive), at(168*time.Hour), at(-time.Hour), "True", "Issued")}})
	var out bytes.Buffer
	if err := PrintReport(&out, r); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, want := range []string{
		"CERTIFICATE AUTHORITY   LEADER      READY            ROTATING",
		"default                 certapi-0   True (Signing)   False (Idle)",
		"Active   " + serial(active) + "   " + active.SubjectKeyID(),
		"364d",
		"Rotation: Idle: no rotation is running",
		"  waiting for nothing: the next rotation begins by itself",
		"Injection: 4 targets: 2 up to date, 1 pending, 1 skipped, 0 in conflict, 0 failed",
		"ServingCertRequests (all namespaces): 1, 0 not Ready, 0 never issued, 1 past their renewal time",
		"NAMESPACE   NAME   READY           NOT AFTER",
		"team-a      web    True (Issued)   " + formatTime(t0.Add(168*time.Hour)) + "   7d",
		"(overdue)   Active",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
}

// TestPrintReportFailedTargets: status counts the failed targets apart from the pending ones and names
// them, with how many more there are.
func TestPrintReportFailedTargets(t *testing.T) {
	active := newCA(t, t0.Add(-24*time.Hour), 365*24*time.Hour)
	ca := caObject(idle(), &certapiv1alpha1.InjectionSummary{Targets: 15, UpToDate: 2, Skipped: 1, Failed: 12,
		FailedTargets: []string{"ConfigMap a/big", "ConfigMap b/big"}}, caEntry(active, "Active"))
	r := BuildReport(ReportInput{Now: t0, CA: ca, Scope: allNamespaces, Nearest: 5})
	if r.Counts.InjectionPending != 0 || r.Injection.Failed != 12 {
		t.Errorf("injection %+v, counts %+v", r.Injection, r.Counts)
	}
	var out bytes.Buffer
	if err := PrintReport(&out, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"Injection: 15 targets: 2 up to date, 0 pending, 1 skipped, 0 in conflict, 12 failed",
		"  failed (kube-apiserver refused the bundle; rotations do not wait for them): ConfigMap a/big, ConfigMap b/big and 10 more",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestPrintReportEtcd: status shows certapi's own etcd cluster from status.etcd (members, roles,
// health, the etcd leader, the peer CA and its rotation), and nothing of it without one.
func TestPrintReportEtcd(t *testing.T) {
	active := newCA(t, t0.Add(-24*time.Hour), 365*24*time.Hour)
	rotateAt := metav1.NewTime(t0.Add(1000 * 24 * time.Hour))
	notAfter := metav1.NewTime(t0.Add(3000 * 24 * time.Hour))
	cluster := &certapiv1alpha1.EtcdClusterStatus{
		Leader: "certapi-1",
		Members: []certapiv1alpha1.EtcdMemberStatus{
			{Name: "certapi-0", Role: certapiv1alpha1.EtcdMemberVoter, Healthy: true},
			{Name: "certapi-1", Role: certapiv1alpha1.EtcdMemberVoter, Healthy: true},
			{Name: "certapi-2", Role: certapiv1alpha1.EtcdMemberLearner},
		},
		PeerCA: &certapiv1alpha1.EtcdPeerCAStatus{SerialNumber: "5e", NotAfter: notAfter, RotateAt: &rotateAt},
	}
	tests := []struct {
		name   string
		etcd   *certapiv1alpha1.EtcdClusterStatus
		want   []string
		absent []string
	}{
		{"no cluster", nil, nil, []string{"Etcd"}},
		{"settled", cluster, []string{
			"Etcd cluster: 2 voting, 1 learning, 2 of 3 healthy; etcd leader certapi-1",
			"MEMBER      ROLE      HEALTHY   LEADER",
			"certapi-1   Voter     true      *",
			"certapi-2   Learner   false",
			"Etcd peer CA 5e, valid until " + formatTime(notAfter.Time) + " (8y",
			"rotates by itself at " + formatTime(rotateAt.Time),
		}, []string{"rotating to it"}},
		{"rotating", func() *certapiv1alpha1.EtcdClusterStatus {
			c := cluster.DeepCopy()
			c.PeerCA.Rotating = true
			c.PeerCA.WaitingFor = []string{"certapi-2 (not reached)"}
			return c
		}(), []string{
			"rotating to it: the members trust the CA it replaces too",
			"  waiting for certapi-2 (not reached)",
		}, []string{"rotates by itself"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ca := caObject(idle(), nil, caEntry(active, "Active"))
			ca.Status.Etcd = tt.etcd
			r := BuildReport(ReportInput{Now: t0, CA: ca, Scope: allNamespaces, Nearest: 5})
			if r.Etcd != tt.etcd {
				t.Fatalf("report's etcd = %+v, want status.etcd itself", r.Etcd)
			}
			if want := (ReportCounts{EtcdVoters: 2, EtcdLearners: 1, EtcdHealthy: 2}); tt.etcd != nil && r.Counts != want {
				t.Errorf("counts %+v, want %+v", r.Counts, want)
			}
			var out bytes.Buffer
			if err := PrintReport(&out, r); err != nil {
				t.Fatal(err)
			}
			for _, want := range tt.want {
				if !strings.Contains(out.String(), want) {
					t.Errorf("output lacks %q:\n%s", want, out.String())
				}
			}
			for _, no := range tt.absent {
				if strings.Contains(out.String(), no) {
					t.Errorf("output has %q:\n%s", no, out.String())
				}
			}
		})
	}
}

// TestPrintReportAPIs: status says which Kubernetes APIs certapi lacks and what it leaves off, says so
// briefly when all are served, and nothing before a leader reported the condition.
func TestPrintReportAPIs(t *testing.T) {
	active := newCA(t, t0.Add(-24*time.Hour), 365*24*time.Hour)
	notServed := "kube-apiserver v1.33.7 serves no certificates.k8s.io/v1 podcertificaterequests (Kubernetes 1.37 or later does): signer certapi.dev/serving answers no PodCertificateRequest; everything else runs"
	for _, tc := range []struct {
		name  string
		cond  *metav1.Condition
		want  string
		never string
	}{
		{name: "not served", want: "Kubernetes APIs: not all served: " + notServed,
			cond: &metav1.Condition{Type: certapiv1alpha1.ConditionAPIsServed, Status: metav1.ConditionFalse, Reason: certapiv1alpha1.APIsServedReasonNotServed, Message: notServed}},
		{name: "all served", want: "Kubernetes APIs: kube-apiserver v1.37.2 serves every API certapi uses", never: "not all served",
			cond: &metav1.Condition{Type: certapiv1alpha1.ConditionAPIsServed, Status: metav1.ConditionTrue, Reason: certapiv1alpha1.APIsServedReasonAllServed, Message: "kube-apiserver v1.37.2 serves every API certapi uses"}},
		{name: "no condition yet", never: "Kubernetes APIs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ca := caObject(idle(), nil, caEntry(active, "Active"))
			if tc.cond != nil {
				ca.Status.Conditions = append(ca.Status.Conditions, *tc.cond)
			}
			r := BuildReport(ReportInput{Now: t0, CA: ca, Scope: allNamespaces, Nearest: 5})
			if got := meta.FindStatusCondition(r.Conditions, certapiv1alpha1.ConditionAPIsServed); tc.cond != nil && (got == nil || *got != *tc.cond) {
				t.Errorf("report's APIsServed condition %+v; want %+v", got, tc.cond)
			}
			var out bytes.Buffer
			if err := PrintReport(&out, r); err != nil {
				t.Fatal(err)
			}
			if tc.want != "" && !strings.Contains(out.String(), tc.want) {
				t.Errorf("output lacks %q:\n%s", tc.want, out.String())
			}
			if tc.never != "" && strings.Contains(out.String(), tc.never) {
				t.Errorf("output says %q:\n%s", tc.never, out.String())
			}
		})
	}
}

// TestReportServed: status lists the served targets that would fail from status.served, in its table and
// in its JSON (field served), and says so when the check has not run.
func TestReportServed(t *testing.T) {
	active := newCA(t, t0.Add(-24*time.Hour), 365*24*time.Hour)
	ca := caObject(idle(), nil, caEntry(active, "Active"))
	r := BuildReport(ReportInput{Now: t0, CA: ca, Scope: allNamespaces})
	var out bytes.Buffer
	if err := PrintReport(&out, r); err != nil {
		t.Fatal(err)
	}
	if r.Served != nil || !strings.Contains(out.String(), "Served certificates: not checked yet") {
		t.Errorf("without status.served: %+v\n%s", r.Served, out.String())
	}

	ca.Status.Served = &certapiv1alpha1.ServedSummary{Targets: 15, Verified: 2, ExpiringSoon: 1, Untrusted: 10, Unreachable: 2,
		WorstTargets: []string{"ValidatingWebhookConfiguration v webhook a.example.com: Untrusted", "APIService v1.example.com: Unreachable"}}
	r = BuildReport(ReportInput{Now: t0, CA: ca, Scope: allNamespaces})
	if r.Served != ca.Status.Served || r.Counts.ServedFailing != 12 {
		t.Fatalf("served %+v, counts %+v; want status.served itself and 12 failing", r.Served, r.Counts)
	}
	out.Reset()
	if err := PrintReport(&out, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"Served certificates: 15 webhooks and APIServices checked: 2 Verified, 1 ExpiringSoon, 12 would fail (10 Untrusted, 2 Unreachable)",
		"  ValidatingWebhookConfiguration v webhook a.example.com: Untrusted\n",
		"  APIService v1.example.com: Unreachable\n",
		"  and 11 more\n",
		"kubectl certapi inspect KIND/NAME",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if err := printStructured(&out, outputJSON, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"served": {`, `"servedFailing": 12`, `"untrusted": 10`, `"worstTargets": [`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("JSON lacks %q:\n%s", want, out.String())
		}
	}
}

// TestRotationReportPendingRequest: a CA certificate request waiting for the organisation's signature
// is what the rotation waits for, not "nothing".
func TestRotationReportPendingRequest(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	ca := &certapiv1alpha1.CertificateAuthority{Status: certapiv1alpha1.CertificateAuthorityStatus{
		Conditions: []metav1.Condition{{Type: certapiv1alpha1.ConditionRotating, Status: metav1.ConditionFalse, Reason: certapiv1alpha1.RotatingReasonIdle}},
		Certificates: []certapiv1alpha1.CertificateAuthorityCertificate{{Role: certapiv1alpha1.CARoleActive,
			NotBefore: metav1.NewTime(now.Add(-time.Hour)), NotAfter: metav1.NewTime(now.Add(1000 * time.Hour))}},
		PendingRequest: &certapiv1alpha1.CertificateAuthorityPendingRequest{Reason: "ForceRotation", CreatedAt: metav1.NewTime(now), ActiveNotAfter: metav1.NewTime(now.Add(1000 * time.Hour))},
	}}
	r := rotationReport(ca, RequestsReport{}, now)
	got := strings.Join(r.WaitingFor, "\n")
	if !strings.Contains(got, "kubectl certapi ca import") || strings.Contains(got, "nothing: the next rotation begins") || r.NextRotation != nil {
		t.Fatalf("waiting for:\n%s", got)
	}
}

// TestReportStructuredIsTheAPI: -o json and -o yaml print the parts CertificateAuthority/default
// publishes as the API's types, under its status field names: each decodes, strictly, into the API type
// and equals what status held; the computed parts sit beside them.
func TestReportStructuredIsTheAPI(t *testing.T) {
	active := newCA(t, t0.Add(-24*time.Hour), 365*24*time.Hour)
	ca := caObject(idle(), &certapiv1alpha1.InjectionSummary{Targets: 4, UpToDate: 2, Skipped: 1}, caEntry(active, "Active"))
	rotateAt := metav1.NewTime(t0.Add(time.Hour).Truncate(time.Second))
	ca.Status.Etcd = &certapiv1alpha1.EtcdClusterStatus{Leader: "certapi-1",
		Members: []certapiv1alpha1.EtcdMemberStatus{{Name: "certapi-0", Role: certapiv1alpha1.EtcdMemberVoter, Healthy: true}, {Name: "certapi-1", Role: certapiv1alpha1.EtcdMemberVoter}},
		PeerCA:  &certapiv1alpha1.EtcdPeerCAStatus{SerialNumber: "5e", NotAfter: metav1.NewTime(t0.Add(48 * time.Hour)), RotateAt: &rotateAt}}
	ca.Status.Served = &certapiv1alpha1.ServedSummary{Targets: 3, Verified: 1, Untrusted: 2, WorstTargets: []string{"APIService v1.example.com: Untrusted"}}
	r := BuildReport(ReportInput{Now: t0, CA: ca, Scope: allNamespaces, Nearest: 5})

	for _, format := range []string{outputJSON, outputYAML} {
		t.Run(format, func(t *testing.T) {
			var out bytes.Buffer
			if err := printStructured(&out, format, r); err != nil {
				t.Fatal(err)
			}
			var doc map[string]any
			if err := yaml.Unmarshal(out.Bytes(), &doc); err != nil {
				t.Fatal(err)
			}
			for field, want := range map[string]any{
				"leader": ca.Status.Leader, "conditions": &ca.Status.Conditions, "certificates": &ca.Status.Certificates,
				"injection": ca.Status.Injection, "served": ca.Status.Served, "etcd": ca.Status.Etcd,
			} {
				part, err := yaml.Marshal(doc[field])
				if err != nil {
					t.Fatal(err)
				}
				got := reflect.New(reflect.TypeOf(want).Elem()).Interface()
				if err := yaml.UnmarshalStrict(part, got); err != nil {
					t.Fatalf("%s does not decode strictly into %T: %v\n%s", field, want, err, part)
				}
				if !apiequality.Semantic.DeepEqual(got, want) {
					t.Errorf("%s = %+v, want status.%s %+v", field, got, field, want)
				}
			}
			counts, _ := yaml.Marshal(doc["counts"])
			var c ReportCounts
			if err := yaml.UnmarshalStrict(counts, &c); err != nil || c != (ReportCounts{InjectionPending: 1, ServedFailing: 2, EtcdVoters: 2, EtcdHealthy: 1}) {
				t.Errorf("counts %+v (%v)", c, err)
			}
			if !strings.Contains(out.String(), "Elected") || !strings.Contains(out.String(), "certapi-0") {
				t.Errorf("no leader in:\n%s", out.String())
			}
		})
	}
}

// TestPrintReportLeader: the LEADER cell says who leads, that none does, that the election could not
// be read, or that certapi publishes no status.leader.
func TestPrintReportLeader(t *testing.T) {
	active := newCA(t, t0.Add(-24*time.Hour), 365*24*time.Hour)
	for _, tc := range []struct {
		leader *certapiv1alpha1.CertificateAuthorityLeader
		want   string
	}{
		{&certapiv1alpha1.CertificateAuthorityLeader{State: certapiv1alpha1.LeaderStateElected, Identity: "certapi-2"}, "default                 certapi-2   True"},
		{&certapiv1alpha1.CertificateAuthorityLeader{State: certapiv1alpha1.LeaderStateNone}, "default                 <none>   True"},
		{&certapiv1alpha1.CertificateAuthorityLeader{State: certapiv1alpha1.LeaderStateUnknown}, "default                 <unknown>   True"},
		{nil, "<not published: certapi is older than this plugin>"},
	} {
		ca := caObject(idle(), nil, caEntry(active, "Active"))
		ca.Status.Leader = tc.leader
		var out bytes.Buffer
		if err := PrintReport(&out, BuildReport(ReportInput{Now: t0, CA: ca, Scope: allNamespaces})); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out.String(), tc.want) {
			t.Errorf("leader %+v: output lacks %q:\n%s", tc.leader, tc.want, out.String())
		}
	}
}
