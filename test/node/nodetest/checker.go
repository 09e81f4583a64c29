package nodetest

import (
	"context"
	"crypto/elliptic"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/generated/clientset/versioned"
	"github.com/certapi/certapi/pkg/signer/signertest"
)

// The checker, in the manner of Jepsen: a workload writes ServingCertRequests and asks for certificates
// through kube-apiserver while a test makes faults, records every operation with what it was told, and
// CheckHistory then holds the history against what is there at the end. An operation that failed may or
// may not have been applied (a timeout, a 503 after the write reached etcd): the checker takes either. An
// acknowledged one must be there, unless a later operation on the same name was acknowledged or may have
// been applied.

// OpKind is one kind of operation of the workload.
type OpKind string

// The workload's operations: a create, an update or a delete of a ServingCertRequest, and a call of its
// servingcerts subresource.
const (
	OpCreate OpKind = "create"
	OpUpdate OpKind = "update"
	OpDelete OpKind = "delete"
	OpIssue  OpKind = "issue"
)

// Op is one operation of the workload and what it was told.
type Op struct {
	Kind OpKind
	// Name is the ServingCertRequest's.
	Name string
	// Mark is what a create or update wrote: the request's one dnsName, unique to the operation.
	Mark string
	// Start and End bound the call.
	Start, End time.Time
	// Err is nil when the operation was acknowledged.
	Err error
	// Certificate is the leaf an acknowledged issue was given (DER).
	Certificate []byte
	// Attempts are the operation's HTTP requests other than reads, in order: more than one when client-go
	// sent it again after a 429 or 5xx with Retry-After.
	Attempts []Attempt
}

// Acknowledged reports whether the operation succeeded.
func (o Op) Acknowledged() bool { return o.Err == nil }

// Refused reports whether the operation failed with an answer that says it wrote nothing: the request
// was there already, was not there, had changed meanwhile, or was refused as invalid or forbidden. Any
// other failure (a timeout, a 5xx, no answer) may or may not have been applied, and so may a refusal
// after an attempt that may have been applied (Retried): a delete sent again after a 5xx that is told
// "not found" may be not found because the first attempt deleted it.
func (o Op) Refused() bool {
	return o.Err != nil && !o.Retried() && (apierrors.IsAlreadyExists(o.Err) || apierrors.IsNotFound(o.Err) || apierrors.IsConflict(o.Err) ||
		apierrors.IsInvalid(o.Err) || apierrors.IsForbidden(o.Err) || apierrors.IsBadRequest(o.Err))
}

// Retried reports whether an attempt before the operation's last one may have been applied (a 5xx that
// client-go sent again): its write may land at any time after it, like an operation with no answer.
func (o Op) Retried() bool {
	return len(o.Attempts) > 1 && slices.ContainsFunc(o.Attempts[:len(o.Attempts)-1], Attempt.Ambiguous)
}

// Unavailable reports whether the operation failed for want of a working service: it failed, and not
// with a refusal (Refused).
func (o Op) Unavailable() bool { return o.Err != nil && !o.Refused() }

func (o Op) String() string {
	s := fmt.Sprintf("%s %s", o.Kind, o.Name)
	if o.Mark != "" {
		s += " (" + o.Mark + ")"
	}
	s += fmt.Sprintf(" at %s, %s", o.Start.UTC().Format("15:04:05.000"), o.End.Sub(o.Start).Round(time.Millisecond))
	if o.Err != nil {
		s += ": " + o.Err.Error()
	}
	if len(o.Attempts) > 0 {
		s += " [" + describeAttempts(o.Attempts) + "]"
	}
	return s
}

// Violation is an invariant a history broke: what, and the name of the ServingCertRequest it is about.
type Violation struct {
	Name, What string
}

func (v Violation) String() string { return v.What }

// CheckHistory holds ops against final (each name's dnsName at the end, "" for a request that is not
// there) and cas (the one line of CAs: every CA certificate certapi may sign with in the run), and returns
// what broke an invariant: an acknowledged write that is not there (nor overwritten by a later operation
// that was acknowledged or may have been applied), a request there that no operation may have written, a
// certificate that no CA of the line signed.
func CheckHistory(ops []Op, final map[string]string, cas []*x509.Certificate) []Violation {
	byName := map[string][]Op{}
	for _, o := range ops {
		byName[o.Name] = append(byName[o.Name], o)
	}
	var broken []Violation
	names := make([]string, 0, len(byName))
	for name := range byName {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		history := byName[name]
		slices.SortStableFunc(history, func(a, b Op) int { return a.Start.Compare(b.Start) })
		// What the request may be at the end: the effect of the last acknowledged write (absent before
		// any), or of any write whose answer did not say whether it was applied and that may have landed
		// after it: one after it, or a create or delete before it (they carry no resourceVersion, and a
		// call that timed out may still land). An update that may have landed before an acknowledged
		// write was read by that write (which reads, then writes with the resourceVersion it read), so
		// it is overwritten. A definite refusal (Refused) wrote nothing. An acknowledged create or delete
		// that client-go sent again after an answer that may have been applied (Retried) may land once
		// more later, like one with no answer.
		possible := []string{""}
		var late []string // the effects of unanswered creates and deletes so far
		var last *Op
		for i, o := range history {
			if o.Kind == OpIssue || o.Refused() {
				continue
			}
			effect := o.Mark
			if o.Kind == OpDelete {
				effect = ""
			}
			switch {
			case o.Acknowledged():
				possible = append([]string{effect}, late...)
				last = &history[i]
				if o.Retried() && o.Kind != OpUpdate && !slices.Contains(late, effect) {
					late = append(late, effect)
				}
			default:
				if !slices.Contains(possible, effect) {
					possible = append(possible, effect)
				}
				if o.Kind != OpUpdate && !slices.Contains(late, effect) {
					late = append(late, effect)
				}
			}
		}
		if got := final[name]; !slices.Contains(possible, got) {
			what := "no acknowledged write"
			if last != nil {
				what = "the last acknowledged write: " + last.String()
			}
			state := "absent"
			if got != "" {
				state = "holds " + got
			}
			broken = append(broken, Violation{name, fmt.Sprintf("ServingCertRequest %s %s at the end; it may be only %s (%s)", name, state, describe(possible), what)})
		}
	}
	for _, o := range ops {
		if o.Kind != OpIssue || !o.Acknowledged() {
			continue
		}
		leaf, err := x509.ParseCertificate(o.Certificate)
		if err != nil {
			broken = append(broken, Violation{o.Name, fmt.Sprintf("%s: the certificate does not parse: %v", o, err)})
			continue
		}
		if !slices.ContainsFunc(cas, func(ca *x509.Certificate) bool { return leaf.CheckSignatureFrom(ca) == nil }) {
			broken = append(broken, Violation{o.Name, fmt.Sprintf("%s: certificate %x was signed by %q, no CA of the line", o, leaf.SerialNumber, leaf.Issuer)})
		}
	}
	for name, got := range final {
		if _, ok := byName[name]; !ok && got != "" {
			broken = append(broken, Violation{name, fmt.Sprintf("ServingCertRequest %s holds %s, and no operation wrote it", name, got)})
		}
	}
	return broken
}

func describe(possible []string) string {
	out := make([]string, len(possible))
	for i, p := range possible {
		out[i] = p
		if p == "" {
			out[i] = "absent"
		}
	}
	return strings.Join(out, " or ")
}

// Workload writes ServingCertRequests in one namespace and asks for their certificates, from workers
// goroutines on names of their own, and records every operation (StartWorkload).
type Workload struct {
	ns string
	// client records each call's attempts (recordingConfig).
	client versioned.Interface
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu  sync.Mutex
	ops []Op
}

// errNoAnswer is the error of an operation still in flight when the workload stopped.
var errNoAnswer = errors.New("no answer: the workload stopped while the call was in flight")

// workloadNames is how many requests each worker of a Workload writes.
const workloadNames = 3

// StartWorkload starts workers goroutines on the namespace ns (which must exist), each every 100 ms
// creating, updating, deleting or asking for a certificate of one of its own workloadNames requests,
// chosen by a random source of seed: the same seed makes the same choices for the same answers. It calls
// through kube-apiserver with cfg, recording each request of an operation (Op.Attempts). Stop ends it and
// returns the history.
func StartWorkload(t *testing.T, cfg *rest.Config, ns string, workers int, seed uint64) *Workload {
	t.Helper()
	certapi, err := versioned.NewForConfig(recordingConfig(cfg))
	if err != nil {
		t.Fatal(err)
	}
	csr := &certapiv1alpha1.ServingCert{Spec: certapiv1alpha1.ServingCertSpec{CertificateRequest: signertest.CSRPEM(t, signertest.ECKey(t, elliptic.P256()))}}
	ctx, cancel := context.WithCancel(context.Background())
	w := &Workload{ns: ns, client: certapi, cancel: cancel}
	for i := range workers {
		rng := rand.New(rand.NewPCG(seed, uint64(i)))
		w.wg.Go(func() { w.run(ctx, certapi, csr, i, rng) })
	}
	t.Cleanup(func() { w.Stop() })
	return w
}

// run is one worker: it keeps what it believes of each of its requests (there or not), from what it was
// told, and reads it back after an operation that failed.
func (w *Workload) run(ctx context.Context, certapi versioned.Interface, csr *certapiv1alpha1.ServingCert, worker int, rng *rand.Rand) {
	client := certapi.CertapiV1alpha1().ServingCertRequests(w.ns)
	there := make([]bool, workloadNames)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for seq := 0; ; seq++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		i := rng.IntN(workloadNames)
		name := fmt.Sprintf("w%d-%d", worker, i)
		op := Op{Name: name, Mark: fmt.Sprintf("w%d-%d-%d.%s.svc", worker, i, seq, w.ns)}
		kind := OpCreate
		if there[i] {
			kind = []OpKind{OpUpdate, OpDelete, OpIssue, OpIssue}[rng.IntN(4)]
		}
		op.Kind = kind
		callCtx, cancel := context.WithTimeout(ctx, 2*CallBound)
		callCtx, attempts := withAttempts(callCtx)
		op.Start = time.Now()
		var err error
		switch kind {
		case OpCreate:
			_, err = client.Create(callCtx, &certapiv1alpha1.ServingCertRequest{
				ObjectMeta: metav1.ObjectMeta{Name: name},
				Spec:       certapiv1alpha1.ServingCertRequestSpec{ServiceName: "svc", DNSNames: []string{op.Mark}},
			}, metav1.CreateOptions{})
		case OpUpdate:
			// As a client does: read, change, write, again when certapi wrote the status meanwhile.
			err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
				cur, err := client.Get(callCtx, name, metav1.GetOptions{})
				if err != nil {
					return err
				}
				cur.Spec.DNSNames = []string{op.Mark}
				_, err = client.Update(callCtx, cur, metav1.UpdateOptions{})
				return err
			})
		case OpDelete:
			op.Mark = ""
			err = client.Delete(callCtx, name, metav1.DeleteOptions{})
		case OpIssue:
			op.Mark = ""
			var sc *certapiv1alpha1.ServingCert
			if sc, err = client.CreateServingCert(callCtx, name, csr, metav1.CreateOptions{}); err == nil {
				if b, _ := pem.Decode([]byte(sc.Status.Certificate)); b != nil {
					op.Certificate = b.Bytes
				}
			}
		}
		op.End = time.Now()
		cancel()
		op.Err = err
		op.Attempts = attempts.writes()
		if ctx.Err() != nil {
			// Stopped while in flight: no answer, and the write may have been applied.
			op.Err = errNoAnswer
			w.mu.Lock()
			w.ops = append(w.ops, op)
			w.mu.Unlock()
			return
		}
		w.mu.Lock()
		w.ops = append(w.ops, op)
		w.mu.Unlock()
		switch {
		case err == nil:
			there[i] = kind != OpDelete
		case apierrors.IsNotFound(err):
			there[i] = false
		case apierrors.IsAlreadyExists(err):
			there[i] = true
		default:
			readCtx, cancel := context.WithTimeout(ctx, CallBound)
			_, gerr := client.Get(readCtx, name, metav1.GetOptions{})
			cancel()
			switch {
			case gerr == nil:
				there[i] = true
			case apierrors.IsNotFound(gerr):
				there[i] = false
			}
		}
	}
}

// Ops returns the history so far.
func (w *Workload) Ops() []Op {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.ops)
}

// Stop ends the workload and returns its history; safe to call more than once.
func (w *Workload) Stop() []Op {
	w.cancel()
	w.wg.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.ops)
}

// atEnd reads what the workload's requests hold at the end, each one's dnsName by name, and returns the
// list's attempts too.
func (w *Workload) atEnd(ctx context.Context) (map[string]string, []Attempt, error) {
	ctx, attempts := withAttempts(ctx)
	list, err := w.client.CertapiV1alpha1().ServingCertRequests(w.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, attempts.all(), err
	}
	final := map[string]string{}
	for _, r := range list.Items {
		final[r.Name] = strings.Join(r.Spec.DNSNames, ",")
	}
	return final, attempts.all(), nil
}

// Summarize counts a history's operations: acknowledged and failed of each kind, the median and slowest
// acknowledged operation, and the longest time with no acknowledged certificate from the first operation's
// start to the last one's end.
func Summarize(ops []Op) string {
	type count struct{ ok, failed int }
	counts := map[OpKind]*count{}
	var issued []time.Time
	var took []time.Duration
	for _, o := range ops {
		if o.Acknowledged() {
			took = append(took, o.End.Sub(o.Start))
		}
		c := counts[o.Kind]
		if c == nil {
			c = &count{}
			counts[o.Kind] = c
		}
		if o.Acknowledged() {
			c.ok++
			if o.Kind == OpIssue {
				issued = append(issued, o.End)
			}
		} else {
			c.failed++
		}
	}
	// The gaps between certificates, and from the first operation's start to the first certificate and
	// from the last certificate to the last operation's end: a window in which every call hung has one
	// long gap, not none.
	var from, to time.Time
	for _, o := range ops {
		if from.IsZero() || o.Start.Before(from) {
			from = o.Start
		}
		if o.End.After(to) {
			to = o.End
		}
	}
	marks := append(append([]time.Time{from}, issued...), to)
	slices.SortFunc(marks, func(a, b time.Time) int { return a.Compare(b) })
	var gap time.Duration
	for i := 1; i < len(marks); i++ {
		gap = max(gap, marks[i].Sub(marks[i-1]))
	}
	var parts []string
	for _, k := range []OpKind{OpCreate, OpUpdate, OpDelete, OpIssue} {
		if c := counts[k]; c != nil {
			parts = append(parts, fmt.Sprintf("%s %d (%d failed)", k, c.ok+c.failed, c.failed))
		}
	}
	latency := "none acknowledged"
	if len(took) > 0 {
		slices.Sort(took)
		latency = fmt.Sprintf("median %s, slowest %s", took[len(took)/2].Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond))
	}
	return fmt.Sprintf("%s; acknowledged in %s; longest time without a certificate issued %s", strings.Join(parts, ", "), latency, gap.Round(10*time.Millisecond))
}

// Answers counts the failed operations of ops by what they were told (the error's text without the
// operation's own names), most frequent first.
func Answers(ops []Op) string {
	counts := map[string]int{}
	for _, o := range Failed(ops) {
		msg := o.Err.Error()
		if i := strings.Index(msg, " ("); i > 0 {
			msg = msg[:i] // client-go's "(post servingcertrequests.certapi.dev NAME)"
		}
		if i := strings.Index(msg, ` "`); i > 0 {
			msg = msg[:i] // a conflict's object name
		}
		counts[msg]++
	}
	type answer struct {
		msg string
		n   int
	}
	var all []answer
	for m, n := range counts {
		all = append(all, answer{m, n})
	}
	slices.SortFunc(all, func(a, b answer) int {
		if a.n != b.n {
			return b.n - a.n
		}
		return strings.Compare(a.msg, b.msg)
	})
	var parts []string
	for _, a := range all {
		parts = append(parts, fmt.Sprintf("%d %q", a.n, a.msg))
	}
	if len(parts) == 0 {
		return "none failed"
	}
	return strings.Join(parts, ", ")
}

// Failed returns the operations of ops that failed.
func Failed(ops []Op) []Op {
	var out []Op
	for _, o := range ops {
		if !o.Acknowledged() {
			out = append(out, o)
		}
	}
	return out
}

// CALine returns the CA certificates of the CertificateAuthority's bundle: the line of CAs certapi signs
// with, which every certificate of the workload must chain to.
func CALine(ca *certapiv1alpha1.CertificateAuthority) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	rest := []byte(ca.Status.CABundle)
	for {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("the CA bundle: %w", err)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("the CertificateAuthority %s has no CA bundle", ca.Name)
	}
	return out, nil
}
