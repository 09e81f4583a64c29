package kubectlcertapi

import (
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clienttesting "k8s.io/client-go/testing"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/generated/clientset/versioned/fake"
)

func TestGeneratedValue(t *testing.T) {
	a, err := generatedValue(t0)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := generatedValue(t0)
	if !regexp.MustCompile(`^kubectl-certapi-20300601T120000Z-[0-9a-f]{6}$`).MatchString(a) {
		t.Fatalf("value %q", a)
	}
	if a == b {
		t.Fatalf("two runs in the same second made the same value %q: the second would start nothing", a)
	}
}

func TestRotationGoal(t *testing.T) {
	a, b, c := newCA(t, t0, 24*time.Hour), newCA(t, t0, 24*time.Hour), newCA(t, t0, 24*time.Hour)
	rot := func(entries ...certapiv1alpha1.CertificateAuthorityCertificate) *certapiv1alpha1.CertificateAuthority {
		return caObject(idle(), nil, entries...)
	}
	idleBefore := rot(caEntry(a, "Active"))
	runningBefore := rot(caEntry(a, "Active"), caEntry(b, "Next"))
	for _, tc := range []struct {
		name   string
		kind   rotationKind
		before *certapiv1alpha1.CertificateAuthority
		now    *certapiv1alpha1.CertificateAuthority
		done   bool
	}{
		{"rotate: nothing yet", kindRotate, idleBefore, rot(caEntry(a, "Active")), false},
		{"rotate: Next published", kindRotate, idleBefore, rot(caEntry(a, "Active"), caEntry(c, "Next")), false},
		{"rotate: Next signs", kindRotate, idleBefore, rot(caEntry(c, "Active"), caEntry(a, "Retiring")), true},
		{"rotate queued: the running rotation's Next signs first", kindRotate, runningBefore, rot(caEntry(b, "Active"), caEntry(a, "Retiring")), false},
		{"rotate queued: then ours is published", kindRotate, runningBefore, rot(caEntry(b, "Active"), caEntry(c, "Next"), caEntry(a, "Retiring")), false},
		{"rotate queued: ours signs", kindRotate, runningBefore, rot(caEntry(c, "Active"), caEntry(b, "Retiring"), caEntry(a, "Retiring")), true},
		{"distrust: new CA signs, old still in the bundle", kindDistrust, runningBefore, rot(caEntry(c, "Active"), caEntry(a, "Retiring"), caEntry(b, "Retiring")), false},
		{"distrust: one old CA left", kindDistrust, runningBefore, rot(caEntry(c, "Active"), caEntry(b, "Retiring")), false},
		{"distrust: done", kindDistrust, runningBefore, rot(caEntry(c, "Active")), true},
		{"distrust: a Retiring CA is distrusted too and must leave", kindDistrust, rot(caEntry(a, "Active"), caEntry(b, "Retiring")), rot(caEntry(c, "Active"), caEntry(b, "Retiring")), false},
		{"distrust: done once the Retiring CA left too", kindDistrust, rot(caEntry(a, "Active"), caEntry(b, "Retiring")), rot(caEntry(c, "Active")), true},
		{"rotate: an older Retiring CA does not count", kindRotate, rot(caEntry(a, "Active"), caEntry(b, "Retiring")), rot(caEntry(c, "Active"), caEntry(b, "Retiring"), caEntry(a, "Retiring")), true},
		{"no Active CA in status", kindRotate, idleBefore, rot(), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := newRotationGoal(tc.kind, tc.before).Done(tc.now); got != tc.done {
				t.Fatalf("Done = %v, want %v", got, tc.done)
			}
		})
	}
}

func TestProgressLinesShowEachStepOnce(t *testing.T) {
	a, b := newCA(t, t0, 24*time.Hour), newCA(t, t0, 24*time.Hour)
	published := metav1.Condition{Type: "Rotating", Status: "True", Reason: "NextPublished", Message: "waits"}
	steps := []*certapiv1alpha1.CertificateAuthority{
		caObject(idle(), &certapiv1alpha1.InjectionSummary{Targets: 2, UpToDate: 2}, caEntry(a, "Active")),
		caObject(published, &certapiv1alpha1.InjectionSummary{Targets: 2, UpToDate: 0}, caEntry(a, "Active"), caEntry(b, "Next")),
		caObject(published, &certapiv1alpha1.InjectionSummary{Targets: 2, UpToDate: 0}, caEntry(a, "Active"), caEntry(b, "Next")), // a status write that changes nothing shown
		caObject(published, &certapiv1alpha1.InjectionSummary{Targets: 2, UpToDate: 2}, caEntry(a, "Active"), caEntry(b, "Next")),
	}
	var printed [][]string
	var prev []string
	for _, s := range steps {
		cur := ProgressLines(s)
		printed = append(printed, newLines(prev, cur))
		prev = cur
	}
	until := formatTime(a.Certificate.NotAfter)
	want := [][]string{
		{"Rotating=False (Idle): no rotation is running", "Active CA " + serial(a) + ", valid until " + until, "injection: 2 of 2 targets hold the current bundle (0 skipped, 0 in conflict)"},
		{"Rotating=True (NextPublished): waits", "Next CA " + serial(b) + ", valid until " + formatTime(b.Certificate.NotAfter), "injection: 0 of 2 targets hold the current bundle (0 skipped, 0 in conflict)"},
		nil,
		{"injection: 2 of 2 targets hold the current bundle (0 skipped, 0 in conflict)"},
	}
	for i := range want {
		if strings.Join(printed[i], "\n") != strings.Join(want[i], "\n") {
			t.Errorf("step %d printed %q, want %q", i, printed[i], want[i])
		}
	}
}

func TestDistrustPlanNamesTheCAs(t *testing.T) {
	a, b, c := newCA(t, t0, 24*time.Hour), newCA(t, t0, 24*time.Hour), newCA(t, t0, 24*time.Hour)
	plan := DistrustPlan(caObject(idle(), nil, caEntry(a, "Active"), caEntry(b, "Next"), caEntry(c, "Retiring")))
	for _, want := range []string{
		"stop the Active CA " + serial(a) + " from signing; a new CA signs at once",
		"distrust with it every other CA older than the new one: the waiting Next CA " + serial(b) + ", the Retiring CA " + serial(c),
		"re-issue every Secret certapi delivers",
		"remove every distrusted CA from every trust bundle",
		"only the new CA is trusted",
		"stop being trusted",
	} {
		if !strings.Contains(plan, want) {
			t.Errorf("plan lacks %q:\n%s", want, plan)
		}
	}
	if plan := DistrustPlan(caObject(idle(), nil, caEntry(a, "Active"))); strings.Contains(plan, "Next") || strings.Contains(plan, "Retiring") {
		t.Errorf("a plan without a Next or Retiring CA mentions one:\n%s", plan)
	}
	if strings.Contains(plan, "endpoints") {
		t.Errorf("a plan with no served check mentions endpoints:\n%s", plan)
	}
}

// TestDistrustPlanNamesServedEndpoints: before it asks, distrust names the endpoints of injected webhooks
// and APIServices that present a certificate of a CA it would distrust (status.served.issuers).
func TestDistrustPlanNamesServedEndpoints(t *testing.T) {
	a, b := newCA(t, t0, 24*time.Hour), newCA(t, t0, 24*time.Hour)
	ca := caObject(idle(), nil, caEntry(a, "Active"), caEntry(b, "Retiring"))
	ca.Status.Served = &certapiv1alpha1.ServedSummary{Targets: 2, Verified: 2, Issuers: []certapiv1alpha1.ServedIssuer{
		{SerialNumber: serial(a), Endpoints: 2, Names: []string{"ValidatingWebhookConfiguration v webhook v.example.com: 10.0.0.7:8443", "APIService v1.example.com: 10.0.0.9:443"}},
		{SerialNumber: serial(b), Endpoints: 1, Names: []string{"MutatingWebhookConfiguration m webhook m.example.com: 10.0.0.8:8443"}},
	}}
	plan := DistrustPlan(ca)
	want := "wait, up to the deadline, for the 3 endpoints of injected webhooks and APIServices that present a certificate of these CAs\n" +
		"    to reload a re-issued one (kube-apiserver's calls to one that has not fail once the CAs leave): APIService v1.example.com: 10.0.0.9:443, " +
		"MutatingWebhookConfiguration m webhook m.example.com: 10.0.0.8:8443, ValidatingWebhookConfiguration v webhook v.example.com: 10.0.0.7:8443\n"
	if !strings.Contains(plan, want) {
		t.Errorf("plan lacks %q:\n%s", want, plan)
	}
}

// TestPatchSpecPreconditions: rotate and distrust patch with the resourceVersion they read; a conflict
// from a status write is retried on the object read again, and a spec value someone else set meanwhile
// is reported, not overridden by another rotation or distrust.
func TestPatchSpecPreconditions(t *testing.T) {
	type rv = string
	for _, tc := range []struct {
		name string
		// conflicts is how many patches the server refuses with a conflict before it accepts one.
		conflicts int
		// meanwhile is spec.distrust on the object read again after a conflict.
		meanwhile string
		wantRVs   []rv
		wantErr   string
	}{
		{name: "no conflict", wantRVs: []rv{"1"}},
		{name: "a status write in between: retried on the fresh object", conflicts: 1, wantRVs: []rv{"1", "2"}},
		{name: "someone else distrusted meanwhile: reported, not repeated", conflicts: 1, meanwhile: "theirs",
			wantRVs: []rv{"1"}, wantErr: `spec.distrust changed from "" to "theirs" while this command ran`},
		{name: "conflicts without end: give up and say so", conflicts: 100, wantRVs: []rv{"1", "2", "3", "4", "5"}, wantErr: "5 conflicts"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := caObject(idle(), nil)
			before.ResourceVersion = "1"
			client := fake.NewSimpleClientset()
			var sent []rv
			reads := 1
			client.PrependReactor("get", "certificateauthorities", func(clienttesting.Action) (bool, runtime.Object, error) {
				reads++
				cur := before.DeepCopy()
				cur.ResourceVersion = strconv.Itoa(reads)
				cur.Spec.Distrust = tc.meanwhile
				return true, cur, nil
			})
			client.PrependReactor("patch", "certificateauthorities", func(a clienttesting.Action) (bool, runtime.Object, error) {
				var p struct {
					Metadata struct {
						ResourceVersion string `json:"resourceVersion"`
					} `json:"metadata"`
					Spec map[string]string `json:"spec"`
				}
				if err := json.Unmarshal(a.(clienttesting.PatchAction).GetPatch(), &p); err != nil {
					t.Fatal(err)
				}
				sent = append(sent, p.Metadata.ResourceVersion)
				if len(sent) <= tc.conflicts {
					return true, nil, apierrors.NewConflict(schema.GroupResource{Group: "certapi.dev", Resource: "certificateauthorities"}, "default", errors.New("the object has been modified"))
				}
				after := before.DeepCopy()
				after.Spec.Distrust = p.Spec["distrust"]
				return true, after, nil
			})
			after, err := patchSpec(context.Background(), client.CertapiV1alpha1().CertificateAuthorities(), kindDistrust, "mine", before)
			if !slices.Equal(sent, tc.wantRVs) {
				t.Errorf("patches sent with resourceVersions %q; want %q", sent, tc.wantRVs)
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v; want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || after.Spec.Distrust != "mine" {
				t.Fatalf("patch: %v, spec.distrust %q", err, after.Spec.Distrust)
			}
		})
	}
}

// TestRotationDoneLine: the last line of rotate --wait carries the summary of the status that showed
// the switch, failed targets by name; a failed target shows in the progress lines too.
func TestRotationDoneLine(t *testing.T) {
	a, b := newCA(t, t0, 24*time.Hour), newCA(t, t0, 24*time.Hour)
	inj := &certapiv1alpha1.InjectionSummary{Targets: 5, UpToDate: 4, Failed: 1, FailedTargets: []string{"ConfigMap tenant/big"}}
	done := caObject(metav1.Condition{Type: "Rotating", Status: "True", Reason: "Retiring", Message: "m"}, inj, caEntry(b, "Active"), caEntry(a, "Retiring"))
	var said []string
	announceDone(newRotationGoal(kindRotate, caObject(idle(), nil, caEntry(a, "Active"))), done, func(s string) { said = append(said, s) })
	want := "done: the new CA " + serial(b) + " signs; injection: 4 of 5 targets hold the current bundle (0 skipped, 0 in conflict, 1 failed and not waited for: ConfigMap tenant/big)"
	if len(said) != 1 || said[0] != want {
		t.Errorf("said %q, want %q", said, want)
	}
	if lines := ProgressLines(done); !slices.Contains(lines, strings.TrimPrefix(want, "done: the new CA "+serial(b)+" signs; ")) {
		t.Errorf("progress lines %q lack the injection summary", lines)
	}
}
