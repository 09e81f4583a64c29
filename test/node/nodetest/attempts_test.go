package nodetest

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/certapi/certapi/pkg/generated/clientset/versioned"
)

// TestAttemptsRecordClientGoRetries: a delete answered 503 with Retry-After is sent again by client-go,
// and the operation's attempts say so, with each answer's audit ID; a call made without withAttempts
// records nothing.
func TestAttemptsRecordClientGoRetries(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := calls.Add(1)
		w.Header().Set("Audit-Id", []string{"first", "second"}[min(n-1, 1)])
		w.Header().Set("Content-Type", "application/json")
		if n == 1 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","code":503}`))
			return
		}
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`))
	}))
	defer srv.Close()
	client, err := versioned.NewForConfig(recordingConfig(&rest.Config{Host: srv.URL}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, attempts := withAttempts(context.Background())
	err = client.CertapiV1alpha1().ServingCertRequests("ns").Delete(ctx, "a", metav1.DeleteOptions{})
	op := Op{Kind: OpDelete, Name: "a", Err: err, Attempts: attempts.writes()}
	if len(op.Attempts) != 2 || op.Attempts[0].Status != 503 || op.Attempts[1].Status != 404 ||
		op.Attempts[0].AuditID != "first" || op.Attempts[1].AuditID != "second" {
		t.Fatalf("attempts = %v; want a 503 (first) then a 404 (second)", op.Attempts)
	}
	if !op.Retried() || op.Refused() {
		t.Errorf("Retried() = %v, Refused() = %v; want a not-found after a 503 retried and not a refusal", op.Retried(), op.Refused())
	}
	if err := client.CertapiV1alpha1().ServingCertRequests("ns").Delete(context.Background(), "a", metav1.DeleteOptions{}); err == nil {
		t.Fatal("the second delete succeeded; want not found")
	}
	if got := attempts.all(); len(got) != 2 {
		t.Errorf("a call without its context recorded: %v", got)
	}
}

// TestServedBy: each attempt's audit ID is looked up in the replicas' logs (k8s.io/apiserver's httplog
// lines at --v=3), and one no log names is a question mark.
func TestServedBy(t *testing.T) {
	line := func(id string) string {
		return `I1207 23:23:45.485 1 httplog.go:134] "HTTP" verb="CREATE" URI="/apis/certapi.dev/v1alpha1/namespaces/ns/servingcertrequests" latency="1ms" audit-ID="` + id + `" srcIP="10.0.0.1:1234" resp=503` + "\n"
	}
	index := auditIDs(map[string]string{
		"certapi-0":            line("a") + line("b"),
		"certapi-1":            line("b"),
		"certapi-1 (previous)": line("c") + line("c"),
	})
	for _, tc := range []struct {
		attempts []Attempt
		want     string
	}{
		{[]Attempt{{AuditID: "a"}, {AuditID: "b"}}, " served by certapi-0, certapi-0+certapi-1"},
		{[]Attempt{{AuditID: "c"}, {AuditID: "d"}}, " served by certapi-1 (previous), ?"},
		{[]Attempt{{Status: 0}}, ""},
		{nil, ""},
	} {
		if got := servedBy(index, tc.attempts); got != tc.want {
			t.Errorf("servedBy(%v) = %q; want %q", tc.attempts, got, tc.want)
		}
	}
}
