package nodetest

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"
)

// Attempt is one HTTP request of an operation. client-go sends a request again, up to ten times, when
// it is answered 429 or 5xx with a Retry-After header, whatever its verb: one operation of the workload
// may be several attempts, and an attempt answered 5xx may have been applied (a write that reached etcd,
// then timed out) although a later attempt is what the operation was told.
type Attempt struct {
	Method string
	// Status is the answer's HTTP status, 0 when none came (the connection failed or the call ended).
	Status int
	// AuditID is kube-apiserver's audit ID of the request, which certapi's replica that served it logs
	// (at --v=3, with the request): it names the replica.
	AuditID string
	At      time.Time
}

// Ambiguous reports whether the attempt may have been applied although its answer was not a success: a
// 5xx or no answer. A 429 is a refusal before the request was served (API Priority and Fairness, or a
// watch cache not ready), and a 4xx one after it was read.
func (a Attempt) Ambiguous() bool { return a.Status == 0 || a.Status >= 500 }

func (a Attempt) String() string {
	status := "no answer"
	if a.Status != 0 {
		status = fmt.Sprint(a.Status)
	}
	return fmt.Sprintf("%s %s at %s (audit ID %s)", a.Method, status, a.At.UTC().Format("15:04:05.000"), a.AuditID)
}

// attemptLog collects the attempts of the calls made with one context (withAttempts).
type attemptLog struct {
	mu       sync.Mutex
	attempts []Attempt
}

type attemptLogKey struct{}

// withAttempts returns a context whose calls through a client of recordingConfig are recorded in the
// returned log.
func withAttempts(ctx context.Context) (context.Context, *attemptLog) {
	l := &attemptLog{}
	return context.WithValue(ctx, attemptLogKey{}, l), l
}

// all returns the attempts so far.
func (l *attemptLog) all() []Attempt {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.attempts)
}

// writes returns the attempts other than reads (the GETs of an update's read-modify-write).
func (l *attemptLog) writes() []Attempt {
	return slices.DeleteFunc(l.all(), func(a Attempt) bool { return a.Method == http.MethodGet })
}

// recordingConfig returns a copy of cfg whose requests are recorded in the attemptLog of their context,
// if it has one.
func recordingConfig(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return attemptRecorder{rt} })
	return cfg
}

type attemptRecorder struct{ next http.RoundTripper }

func (r attemptRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	l, _ := req.Context().Value(attemptLogKey{}).(*attemptLog)
	at := time.Now()
	resp, err := r.next.RoundTrip(req)
	if l != nil {
		a := Attempt{Method: req.Method, At: at}
		if err == nil {
			a.Status = resp.StatusCode
			a.AuditID = resp.Header.Get("Audit-Id")
		}
		l.mu.Lock()
		l.attempts = append(l.attempts, a)
		l.mu.Unlock()
	}
	return resp, err
}

// describeAttempts is an operation's attempts on one line, for its history.
func describeAttempts(attempts []Attempt) string {
	parts := make([]string, len(attempts))
	for i, a := range attempts {
		parts[i] = a.String()
	}
	return strings.Join(parts, "; ")
}
