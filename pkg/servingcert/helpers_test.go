package servingcert

import (
	"context"
	"crypto/x509"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	k8stesting "k8s.io/client-go/testing"
	testingclock "k8s.io/utils/clock/testing"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/generated/clientset/versioned/fake"
	"github.com/certapi/certapi/pkg/signer"
	"github.com/certapi/certapi/pkg/signer/signertest"
)

const (
	testNS   = "ns"
	testName = "hook"
)

var (
	scrGVR = certapiv1alpha1.SchemeGroupVersion.WithResource("servingcertrequests")
	caGVR  = certapiv1alpha1.SchemeGroupVersion.WithResource("certificateauthorities")
)

// harness is a Source on a fake clientset and a fake clock, with a servingcerts reactor that signs with a
// CA made here, the way certapi does.
type harness struct {
	t   *testing.T
	clk *testingclock.FakeClock
	cs  *fake.Clientset
	src *Source
	log *logStore

	ca          atomic.Pointer[signer.CA]
	duration    time.Duration
	renewBefore time.Duration

	mu       sync.Mutex
	failWith func() error // nil: sign; otherwise the error to answer with, when it returns one
	issued   []*x509.Certificate

	waits  chan time.Duration
	cancel context.CancelFunc
	done   chan struct{}
}

type harnessOptions struct {
	objects []runtime.Object
	opts    Options
	random  func() float64
	ca      *signer.CA // default: a new one
}

func newHarness(t *testing.T, ho harnessOptions) *harness {
	t.Helper()
	clk := testingclock.NewFakeClock(time.Now().Truncate(time.Second))
	h := &harness{
		t:           t,
		clk:         clk,
		cs:          fake.NewClientset(ho.objects...),
		log:         &logStore{},
		duration:    time.Hour,
		renewBefore: 20 * time.Minute,
		waits:       make(chan time.Duration, 1000),
	}
	if ho.ca == nil {
		ho.ca = newCA(t, clk.Now())
	}
	h.ca.Store(ho.ca)
	h.cs.PrependReactor("create", "servingcertrequests", h.serveServingCert)

	o := ho.opts
	o.Client = h.cs
	o.Namespace, o.Name = testNS, testName
	o.Clock = clk
	o.Logger = logr.New(&logSink{store: h.log})
	src, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	src.random = func() float64 { return 0.5 }
	if ho.random != nil {
		src.random = ho.random
	}
	src.testHookWait = func(d time.Duration) { h.waits <- d }
	h.src = src
	t.Cleanup(func() {
		h.stop()
		if t.Failed() {
			t.Logf("log of the Source:\n%s", h.log.String())
		}
	})
	return h
}

func newCA(t *testing.T, now time.Time) *signer.CA {
	t.Helper()
	return signertest.NewCA(t, now, 0)
}

// serveServingCert answers servingcerts creates: NotFound without the parent, else a certificate.
func (h *harness) serveServingCert(a k8stesting.Action) (bool, runtime.Object, error) {
	if a.GetSubresource() != "servingcerts" {
		return false, nil, nil
	}
	h.mu.Lock()
	fail := h.failWith
	h.mu.Unlock()
	if fail != nil {
		if err := fail(); err != nil {
			return true, nil, err
		}
	}
	create := a.(k8stesting.CreateActionImpl)
	if _, err := h.cs.Tracker().Get(scrGVR, a.GetNamespace(), create.Name); err != nil {
		return true, nil, err
	}
	body := create.GetObject().(*certapiv1alpha1.ServingCert)
	csr, err := signer.ParseCSR([]byte(body.Spec.CertificateRequest))
	if err != nil {
		return true, nil, apierrors.NewBadRequest(err.Error())
	}
	now := h.clk.Now()
	ca := h.ca.Load()
	leaf, err := ca.Sign(signer.LeafRequest{
		ServiceName: testName, Namespace: testNS, ClusterDomain: "cluster.local",
		PublicKey: csr.PublicKey, Duration: h.duration, Now: now,
	})
	if err != nil {
		return true, nil, apierrors.NewInternalError(err)
	}
	rb := h.renewBefore
	renewal := signer.RenewalTime(leaf.NotBefore, leaf.NotAfter, &rb, now)
	h.mu.Lock()
	h.issued = append(h.issued, leaf.Certificate)
	h.mu.Unlock()
	return true, &certapiv1alpha1.ServingCert{
		ObjectMeta: metav1.ObjectMeta{Name: create.Name, Namespace: testNS},
		Status: certapiv1alpha1.ServingCertStatus{
			Certificate:  string(leaf.CertificatePEM),
			CABundle:     string(signer.EncodeBundle(ca.Certificate)),
			SerialNumber: leaf.SerialNumber,
			NotBefore:    &metav1.Time{Time: leaf.NotBefore},
			NotAfter:     &metav1.Time{Time: leaf.NotAfter},
			RenewalTime:  &metav1.Time{Time: renewal},
		},
	}, nil
}

func (h *harness) setFailure(f func() error) {
	h.mu.Lock()
	h.failWith = f
	h.mu.Unlock()
}

func (h *harness) issuedCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.issued)
}

func (h *harness) lastIssued() *x509.Certificate {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.issued) == 0 {
		return nil
	}
	return h.issued[len(h.issued)-1]
}

func (h *harness) start() {
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	h.done = make(chan struct{})
	go func() {
		defer close(h.done)
		if err := h.src.Start(ctx); err != nil {
			h.t.Errorf("Start: %v", err)
		}
	}()
}

func (h *harness) stop() {
	if h.cancel == nil {
		return
	}
	h.cancel()
	select {
	case <-h.done:
	case <-time.After(10 * time.Second):
		h.t.Error("Start did not return within 10s of its context ending")
	}
	h.cancel = nil
}

// nextWait returns the next wait the issuance loop starts.
func (h *harness) nextWait() time.Duration {
	h.t.Helper()
	select {
	case d := <-h.waits:
		return d
	case <-time.After(10 * time.Second):
		h.t.Fatalf("the Source started no wait within 10s; log:\n%s", h.log.String())
		return 0
	}
}

// advance takes the next wait and steps the clock by it, so that the loop's timer fires.
func (h *harness) advance() time.Duration {
	h.t.Helper()
	d := h.nextWait()
	h.clk.Step(d)
	return d
}

// eventually polls cond (real time) for up to 10s.
func (h *harness) eventually(what string, cond func() bool) {
	h.t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	})
	if err != nil {
		h.t.Fatalf("timed out waiting for %s; log:\n%s", what, h.log.String())
	}
}

func (h *harness) countActions(verb, resource, subresource string) int {
	n := 0
	for _, a := range h.cs.Actions() {
		if a.GetVerb() == verb && a.GetResource().Resource == resource && a.GetSubresource() == subresource {
			n++
		}
	}
	return n
}

// served returns the certificate GetCertificate serves now.
func (h *harness) served() *x509.Certificate {
	h.t.Helper()
	c, err := h.src.GetCertificate(nil)
	if err != nil {
		h.t.Fatalf("GetCertificate: %v", err)
	}
	return c.Leaf
}

func caObject(ca *signer.CA) *certapiv1alpha1.CertificateAuthority {
	return &certapiv1alpha1.CertificateAuthority{
		ObjectMeta: metav1.ObjectMeta{Name: "default"},
		Status: certapiv1alpha1.CertificateAuthorityStatus{
			CABundle: string(signer.EncodeBundle(ca.Certificate)),
			Active: &certapiv1alpha1.CertificateAuthorityRef{
				SerialNumber: signer.FormatSerialNumber(ca.Certificate.SerialNumber),
				SubjectKeyID: ca.SubjectKeyID(),
			},
		},
	}
}

// logStore keeps every log entry of a Source.
type logStore struct {
	mu      sync.Mutex
	entries []logEntry
}

type logEntry struct {
	level int
	err   error
	msg   string
	kv    []any
}

func (e logEntry) String() string {
	kind := fmt.Sprintf("I%d", e.level)
	if e.err != nil {
		kind = "E"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %q", kind, e.msg)
	if e.err != nil {
		fmt.Fprintf(&b, " err=%q", e.err.Error())
	}
	for i := 0; i+1 < len(e.kv); i += 2 {
		fmt.Fprintf(&b, " %v=%v", e.kv[i], e.kv[i+1])
	}
	return b.String()
}

func (l *logStore) add(e logEntry) {
	l.mu.Lock()
	l.entries = append(l.entries, e)
	l.mu.Unlock()
}

func (l *logStore) all() []logEntry {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]logEntry(nil), l.entries...)
}

func (l *logStore) String() string {
	var b strings.Builder
	for _, e := range l.all() {
		b.WriteString(e.String())
		b.WriteByte('\n')
	}
	return b.String()
}

// matching returns the entries whose message contains substr.
func (l *logStore) matching(substr string) []logEntry {
	var out []logEntry
	for _, e := range l.all() {
		if strings.Contains(e.msg, substr) {
			out = append(out, e)
		}
	}
	return out
}

func (e logEntry) value(key string) (any, bool) {
	for i := 0; i+1 < len(e.kv); i += 2 {
		if e.kv[i] == key {
			return e.kv[i+1], true
		}
	}
	return nil, false
}

type logSink struct {
	store  *logStore
	values []any
}

func (s *logSink) Init(logr.RuntimeInfo)  {}
func (s *logSink) Enabled(level int) bool { return true }
func (s *logSink) Info(level int, msg string, kv ...any) {
	s.store.add(logEntry{level: level, msg: msg, kv: append(append([]any(nil), s.values...), kv...)})
}
func (s *logSink) Error(err error, msg string, kv ...any) {
	if err == nil {
		err = fmt.Errorf("<nil>")
	}
	s.store.add(logEntry{err: err, msg: msg, kv: append(append([]any(nil), s.values...), kv...)})
}
func (s *logSink) WithValues(kv ...any) logr.LogSink {
	return &logSink{store: s.store, values: append(append([]any(nil), s.values...), kv...)}
}
func (s *logSink) WithName(string) logr.LogSink { return s }
