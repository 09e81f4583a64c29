package secretdelivery

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/controller"
	"github.com/certapi/certapi/pkg/controller/status"
	"github.com/certapi/certapi/pkg/deliveryscope"
	certapifake "github.com/certapi/certapi/pkg/generated/clientset/versioned/fake"
	"github.com/certapi/certapi/pkg/signer"
)

// eventually polls cond every 10ms until it holds or 15 s pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 15*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	})
	if err != nil {
		t.Fatalf("timed out waiting for %s", what)
	}
}

// runEnv is a Controller's surroundings on fake clientsets with real informers and the real clock.
type runEnv struct {
	kube      *kubefake.Clientset
	certapi   *certapifake.Clientset
	authority *fakeAuthority
	status    *status.Writer
}

func newRunEnv(t *testing.T) *runEnv {
	t.Helper()
	e := &runEnv{
		// testNamespace opted in to Secret delivery: the controller runs in the default scope,
		// labelled-namespaces, with an informer of its own for the namespace's Secrets.
		kube:      kubefake.NewClientset(optedIn(testNamespace)),
		certapi:   certapifake.NewSimpleClientset(),
		authority: &fakeAuthority{},
	}
	copyingWatches(e.kube)
	copyingWatches(e.certapi)
	ca := newTestCA(t, time.Now())
	e.authority.set(ca, signer.EncodeBundle(ca.Certificate), true)
	e.status = status.New(clientStatusUpdater{e.certapi}, 10*time.Millisecond, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = e.status.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return e
}

// optedIn is a namespace labelled certapi.dev/secret-delivery=enabled.
func optedIn(name string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name,
		Labels: map[string]string{certapiv1alpha1.LabelSecretDelivery: certapiv1alpha1.SecretDeliveryEnabled}}}
}

// fakeClientset is what copyingWatches needs of a generated fake clientset.
type fakeClientset interface {
	PrependWatchReactor(resource string, reaction k8stesting.WatchReactionFunc)
	Tracker() k8stesting.ObjectTracker
}

// copyingWatches makes every watch of cs send its own copy of each object, as a real kube-apiserver does
// (it decodes a new object for every event). The fake's watch sends the objects it stores, when it
// replays them from the watch's resourceVersion, without copying them (k8s.io/client-go v0.37.2,
// testing/fixture.go, tracker.Watch), and the informers' transforms (viewSecret; the Context's
// ServingCertRequest transform) change in place what they are given, as client-go allows: that changed
// the fake's stored object while a Get copied it, a data race under -race. This reactor replaces the
// fake's default one, which it mirrors, and copies each event's object.
func copyingWatches(cs fakeClientset) {
	cs.PrependWatchReactor("*", func(action k8stesting.Action) (bool, watch.Interface, error) {
		var opts metav1.ListOptions
		if wa, ok := action.(k8stesting.WatchActionImpl); ok {
			opts = wa.ListOptions
		}
		w, err := cs.Tracker().Watch(action.GetResource(), action.GetNamespace(), opts)
		if err != nil {
			return false, nil, err
		}
		labelSel, err := labels.Parse(opts.LabelSelector)
		if err != nil {
			return true, nil, err
		}
		fieldSel, err := fields.ParseSelector(opts.FieldSelector)
		if err != nil {
			return true, nil, err
		}
		return true, watch.Filter(w, func(ev watch.Event) (watch.Event, bool) {
			if m, err := meta.Accessor(ev.Object); err == nil {
				if !labelSel.Matches(labels.Set(m.GetLabels())) ||
					!fieldSel.Matches(fields.Set{"metadata.name": m.GetName(), "metadata.namespace": m.GetNamespace()}) {
					return ev, false
				}
			}
			if ev.Object != nil {
				ev.Object = ev.Object.DeepCopyObject()
			}
			return ev, true
		}), nil
	})
}

// start runs c in a term of its own (cc's informers, started and stopped with it) until the returned stop
// function is called; stop returns the term's error.
func start(t *testing.T, cc *controller.Context, c *Controller) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cc.RunTerm(ctx, controller.Named{Name: "secretdelivery", Runnable: c}) }()
	return func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(10 * time.Second):
			t.Fatal("the term did not end after its context ended")
			return nil
		}
	}
}

func (e *runEnv) secret(name string) *corev1.Secret {
	s, err := e.kube.CoreV1().Secrets(testNamespace).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	return s
}

// TestRun runs the controller with real informers (on fake clientsets): it delivers into a new Secret,
// records an events.k8s.io Event regarding the request, delivers a rotated CA bundle, re-creates the Secret
// when it is deleted, and stops when its context ends.
func TestRun(t *testing.T) {
	e := newRunEnv(t)
	cc := newTestContext(t, e.kube, e.certapi)
	c, err := New(Options{Context: cc, Authority: e.authority, Status: e.status, Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	stop := start(t, cc, c)

	req := newRequest("webhook", "webhook-svc", "webhook-tls")
	if _, err := e.certapi.CertapiV1alpha1().ServingCertRequests(testNamespace).Create(context.Background(), req, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the Secret", func() bool { return e.secret("webhook-tls") != nil })
	first := e.secret("webhook-tls")
	verifyServing(t, first, "webhook-svc.webhooks.svc", time.Now())

	eventually(t, "an Issued Event regarding the request", func() bool {
		evs, err := e.kube.EventsV1().Events(testNamespace).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false
		}
		for _, ev := range evs.Items {
			if ev.Reason == "Issued" && ev.Regarding.Kind == "ServingCertRequest" && ev.Regarding.Name == "webhook" &&
				ev.Regarding.APIVersion == "certapi.dev/v1alpha1" && ev.Type == corev1.EventTypeNormal &&
				ev.ReportingController == ReportingController && ev.Related != nil && ev.Related.Name == "webhook-tls" {
				noKeyMaterial(t, ev.Note)
				return strings.Contains(ev.Note, first.Annotations[certapiv1alpha1.AnnotationSerialNumber])
			}
		}
		return false
	})
	waitReady(t, &harness{certapi: e.certapi}, req, status.ReasonIssued)

	// CA rotation, step 1: the bundle gains the Next CA. The Secret gets the new bundle without any event
	// on the request or the Secret.
	ca, _, _ := e.authority.Signing()
	next := newTestCA(t, time.Now())
	rotated := signer.EncodeBundle(ca.Certificate, next.Certificate)
	e.authority.set(ca, rotated, true)
	eventually(t, "the new bundle in ca.crt", func() bool {
		s := e.secret("webhook-tls")
		return s != nil && string(s.Data[certapiv1alpha1.SecretKeyCABundle]) == string(rotated)
	})
	current := e.secret("webhook-tls")

	if err := e.kube.CoreV1().Secrets(testNamespace).Delete(context.Background(), "webhook-tls", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the Secret re-created", func() bool {
		s := e.secret("webhook-tls")
		return s != nil && s.Annotations[certapiv1alpha1.AnnotationSerialNumber] != current.Annotations[certapiv1alpha1.AnnotationSerialNumber]
	})
	verifyServing(t, e.secret("webhook-tls"), "webhook-svc.webhooks.svc", time.Now())

	// Deleting the request leaves the Secret in place.
	if err := e.certapi.CertapiV1alpha1().ServingCertRequests(testNamespace).Delete(context.Background(), "webhook", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// A negative check: give the controller a window in which it would have acted on the deletion.
	time.Sleep(200 * time.Millisecond)
	if e.secret("webhook-tls") == nil {
		t.Errorf("deleting the request deleted its Secret")
	}

	if err := stop(); err != nil {
		t.Errorf("Run: %v", err)
	}
	// Only certapi's Secrets are listed and watched, never all Secrets in the cluster.
	lists := 0
	for _, a := range e.kube.Actions() {
		if a.GetResource().Resource != "secrets" {
			continue
		}
		var sel string
		switch a := a.(type) {
		case k8stesting.ListAction:
			sel = a.GetListRestrictions().Labels.String()
		case k8stesting.WatchAction:
			sel = a.GetWatchRestrictions().Labels.String()
		default:
			continue
		}
		lists++
		if sel != certapiv1alpha1.LabelManaged+"=true" {
			t.Errorf("%s of Secrets with label selector %q; want %s=true", a.GetVerb(), sel, certapiv1alpha1.LabelManaged)
		}
	}
	if lists == 0 {
		t.Errorf("no list or watch of Secrets seen")
	}
	if err := c.Run(context.Background()); err == nil {
		t.Errorf("a second Run was accepted")
	}
}

// TestRunAcrossLeadershipTerms: each leadership term has a Context of its own and a new Controller; the
// second term delivers as the first did, with nothing left over from it.
func TestRunAcrossLeadershipTerms(t *testing.T) {
	e := newRunEnv(t)
	for term, name := range []string{"a", "b"} {
		cc := newTestContext(t, e.kube, e.certapi)
		c, err := New(Options{Context: cc, Authority: e.authority, Status: e.status, Workers: 1})
		if err != nil {
			t.Fatalf("term %d: New: %v", term, err)
		}
		stop := start(t, cc, c)
		req := newRequest(name, "webhook-svc", name+"-tls")
		if _, err := e.certapi.CertapiV1alpha1().ServingCertRequests(testNamespace).Create(context.Background(), req, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the Secret of term "+name, func() bool { return e.secret(name+"-tls") != nil })
		if err := stop(); err != nil {
			t.Fatalf("term %d: %v", term, err)
		}
	}
}

// TestRunWakesOnPushedChanges: with real informers, a request that waited for the Authority to sign is
// delivered when the Authority says it signs again (same CA: no bundle change), and a request in
// conflict with a Secret that is not certapi's is delivered when that Secret is handed over, through the
// watch of that Secret: no timer is involved in either (the syncs' results are checked in the unit tests).
func TestRunWakesOnPushedChanges(t *testing.T) {
	e := newRunEnv(t)
	ca, bundle, _ := e.authority.Signing()
	cc := newTestContext(t, e.kube, e.certapi)
	c, err := New(Options{Context: cc, Authority: e.authority, Status: e.status, Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	stop := start(t, cc, c)
	defer func() { _ = stop() }()
	ctx := context.Background()

	e.authority.set(ca, bundle, false)
	waiting := newRequest("waiting", "waiting-svc", "waiting-tls")
	if _, err := e.certapi.CertapiV1alpha1().ServingCertRequests(testNamespace).Create(ctx, waiting, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the request to wait for signing", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		_, ok := c.notSigning[keyFor(waiting)]
		return ok
	})
	e.authority.set(ca, bundle, true)
	eventually(t, "the Secret of the request that waited for signing", func() bool { return e.secret("waiting-tls") != nil })

	// The fake clientset keeps the resourceVersion it is given and makes none; kube-apiserver always does.
	foreign := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: "taken-tls", ResourceVersion: "1"}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{corev1.TLSCertKey: nil, corev1.TLSPrivateKeyKey: nil}}
	if _, err := e.kube.CoreV1().Secrets(testNamespace).Create(ctx, foreign, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	taken := newRequest("taken", "taken-svc", "taken-tls")
	if _, err := e.certapi.CertapiV1alpha1().ServingCertRequests(testNamespace).Create(ctx, taken, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a watch of the Secret in conflict", func() bool { return c.conflicts.active() == 1 })
	handed := foreign.DeepCopy()
	handed.Annotations = map[string]string{certapiv1alpha1.AnnotationServingCertRequest: "taken"}
	if _, err := e.kube.CoreV1().Secrets(testNamespace).Update(ctx, handed, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the handed-over Secret delivered to", func() bool {
		s := e.secret("taken-tls")
		return s != nil && len(s.Data[corev1.TLSCertKey]) > 0
	})
	eventually(t, "the watch of the Secret closed once the conflict is over", func() bool { return c.conflicts.active() == 0 })
}

// TestRunNamespaceOptIn: in the labelled-namespaces scope a request with spec.secretName in a namespace
// that has not opted in is reported (NamespaceNotOptedIn) and delivered once the namespace is labelled;
// when the label goes, the namespace's Secret informer stops and the request says so again. A namespace
// whose Secrets kube-apiserver refuses (labelled, no RoleBinding) is reported as such
// (SecretAccessForbidden), without a write, and delivered once the refusal ends.
func TestRunNamespaceOptIn(t *testing.T) {
	e := newRunEnv(t)
	ctx := context.Background()
	var refuse atomic.Bool
	refuse.Store(true)
	refusal := func(action k8stesting.Action) (bool, runtime.Object, error) {
		if action.GetNamespace() == "locked" && refuse.Load() {
			return true, nil, apierrors.NewForbidden(corev1.Resource("secrets"), "", errors.New("no RBAC rule"))
		}
		return false, nil, nil
	}
	e.kube.PrependReactor("list", "secrets", refusal)
	e.kube.PrependReactor("create", "secrets", refusal)
	e.kube.PrependWatchReactor("secrets", func(action k8stesting.Action) (bool, watch.Interface, error) {
		if action.GetNamespace() == "locked" && refuse.Load() {
			return true, nil, apierrors.NewForbidden(corev1.Resource("secrets"), "", errors.New("no RBAC rule"))
		}
		return false, nil, nil
	})
	for _, ns := range []*corev1.Namespace{{ObjectMeta: metav1.ObjectMeta{Name: "team"}}, optedIn("locked")} {
		if _, err := e.kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cc := newTestContext(t, e.kube, e.certapi)
	c, err := New(Options{Context: cc, Authority: e.authority, Status: e.status, Workers: 2,
		Policy: deliveryscope.Policy{ServiceAccount: types.NamespacedName{Namespace: "certapi-system", Name: "certapi"}}})
	if err != nil {
		t.Fatal(err)
	}
	stop := start(t, cc, c)
	defer func() { _ = stop() }()
	secret := func(ns, name string) *corev1.Secret {
		s, err := e.kube.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil
		}
		return s
	}
	ready := func(ns, name string) *metav1.Condition {
		r, err := e.certapi.CertapiV1alpha1().ServingCertRequests(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil
		}
		return readyCondition(r)
	}

	req := newRequest("web", "web-svc", "web-tls")
	req.Namespace = "team"
	if _, err := e.certapi.CertapiV1alpha1().ServingCertRequests("team").Create(ctx, req, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "NamespaceNotOptedIn on the request", func() bool {
		cond := ready("team", "web")
		return cond != nil && cond.Reason == status.ReasonNamespaceNotOptedIn && cond.Status == metav1.ConditionFalse &&
			strings.Contains(cond.Message, "kubectl label namespace team certapi.dev/secret-delivery=enabled") &&
			strings.Contains(cond.Message, "--clusterrole=certapi:secret-delivery --serviceaccount=certapi-system:certapi")
	})
	if s := secret("team", "web-tls"); s != nil {
		t.Fatalf("a Secret was delivered into a namespace that has not opted in")
	}

	if _, err := e.kube.CoreV1().Namespaces().Update(ctx, optedIn("team"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the Secret once the namespace opted in", func() bool { return secret("team", "web-tls") != nil })
	eventually(t, "Ready=True", func() bool {
		cond := ready("team", "web")
		return cond != nil && cond.Reason == status.ReasonIssued
	})

	// kube-apiserver tells a label-selected watch that an object lost the label with a DELETED event;
	// the fake's watch drops the update instead, so the namespace goes here as it would to the informer.
	if err := e.kube.CoreV1().Namespaces().Delete(ctx, "team", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "NamespaceNotOptedIn once the label is gone", func() bool {
		cond := ready("team", "web")
		return cond != nil && cond.Reason == status.ReasonNamespaceNotOptedIn
	})
	eventually(t, "the namespace's Secret informer stopped", func() bool { return c.nsSecrets.cacheOf("team") == nil })

	locked := newRequest("api", "api-svc", "api-tls")
	locked.Namespace = "locked"
	if _, err := e.certapi.CertapiV1alpha1().ServingCertRequests("locked").Create(ctx, locked, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "SecretAccessForbidden on the request", func() bool {
		cond := ready("locked", "api")
		return cond != nil && cond.Reason == status.ReasonSecretAccessForbidden && strings.Contains(cond.Message, "no RBAC rule") &&
			strings.Contains(cond.Message, "kubectl create rolebinding certapi-secret-delivery -n locked")
	})
	for _, a := range e.kube.Actions() {
		if a.GetNamespace() == "locked" && a.GetResource().Resource == "secrets" && a.GetVerb() == "create" {
			t.Fatalf("certapi tried to write a Secret in a namespace whose Secrets it may not list")
		}
	}
	refuse.Store(false) // the RoleBinding is created: the informer's next retry succeeds
	eventually(t, "the Secret once kube-apiserver allows it", func() bool { return secret("locked", "api-tls") != nil })
}

// TestAuthorityChangeLogsThroughRunsLogger: the Authority's listener, which has no context of its own,
// logs a new CA bundle through the logger of the controller's Run (the term's, named for the controller).
func TestAuthorityChangeLogsThroughRunsLogger(t *testing.T) {
	e := newRunEnv(t)
	cc := newTestContext(t, e.kube, e.certapi)
	c, err := New(Options{Context: cc, Authority: e.authority, Status: e.status})
	if err != nil {
		t.Fatal(err)
	}
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	done := make(chan error, 1)
	go func() { done <- cc.RunTerm(ctx, controller.Named{Name: "secretdelivery", Runnable: c}) }()
	defer func() { cancel(); <-done }()

	// A delivered Secret says Run runs.
	req := newRequest("webhook", "webhook-svc", "webhook-tls")
	if _, err := e.certapi.CertapiV1alpha1().ServingCertRequests(testNamespace).Create(context.Background(), req, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the Secret", func() bool { return e.secret("webhook-tls") != nil })

	ca, _, _ := e.authority.Signing()
	next := newTestCA(t, time.Now())
	e.authority.set(ca, signer.EncodeBundle(ca.Certificate, next.Certificate), true)
	buffer := logger.GetSink().(ktesting.Underlier).GetBuffer()
	eventually(t, "the log of the new bundle", func() bool {
		out := buffer.String()
		return strings.Contains(out, "secretdelivery: CA bundle or signing CA changed; re-examining every delivered Secret")
	})
}
