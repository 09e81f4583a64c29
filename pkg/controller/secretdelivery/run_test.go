package secretdelivery

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/certapi/certapi/pkg/controller/status"
	certapifake "github.com/certapi/certapi/pkg/generated/clientset/versioned/fake"
	"github.com/certapi/certapi/pkg/generated/informers/externalversions"
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
		kube:      kubefake.NewClientset(),
		certapi:   certapifake.NewSimpleClientset(),
		authority: &fakeAuthority{},
	}
	ca := newTestCA(t, time.Now())
	e.authority.set(ca, signer.EncodeBundle(ca.Certificate), true)
	e.status = status.New(e.certapi, 10*time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { e.status.Run(ctx, 1); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return e
}

// start runs c until the returned stop function is called; stop returns Run's error.
func start(t *testing.T, c *Controller) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	return func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(10 * time.Second):
			t.Fatal("Run did not return after its context ended")
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
	c, err := New(Options{
		Kube:          e.kube,
		Certapi:       e.certapi, // no Informers: a private factory that Run starts and stops
		Authority:     e.authority,
		Status:        e.status,
		ClusterDomain: testDomain,
		Workers:       2,
		// no Recorder: an events.k8s.io recorder on Kube
	})
	if err != nil {
		t.Fatal(err)
	}
	stop := start(t, c)

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
				return strings.Contains(ev.Note, first.Annotations[AnnotationSerialNumber])
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
		return s != nil && string(s.Data[keyCABundle]) == string(rotated)
	})
	current := e.secret("webhook-tls")

	if err := e.kube.CoreV1().Secrets(testNamespace).Delete(context.Background(), "webhook-tls", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the Secret re-created", func() bool {
		s := e.secret("webhook-tls")
		return s != nil && s.Annotations[AnnotationSerialNumber] != current.Annotations[AnnotationSerialNumber]
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
		if sel != LabelManaged+"=true" {
			t.Errorf("%s of Secrets with label selector %q; want %s=true", a.GetVerb(), sel, LabelManaged)
		}
	}
	if lists == 0 {
		t.Errorf("no list or watch of Secrets seen")
	}
	if err := c.Run(context.Background()); err == nil {
		t.Errorf("a second Run was accepted")
	}
}

// TestRunAcrossLeadershipTerms: with a long-lived shared factory that the caller starts after New, a new
// Controller per leadership term works on the same informer; an informer that has stopped is refused
// instead of serving a stale cache.
func TestRunAcrossLeadershipTerms(t *testing.T) {
	e := newRunEnv(t)
	opts := func(f externalversions.SharedInformerFactory) Options {
		return Options{Kube: e.kube, Informers: f, Authority: e.authority, Status: e.status, ClusterDomain: testDomain,
			Recorder: nil, Workers: 1}
	}

	t.Run("caller-started factory", func(t *testing.T) {
		factory := externalversions.NewSharedInformerFactory(e.certapi, 0)
		serverCtx, cancelServer := context.WithCancel(context.Background())
		defer func() { cancelServer(); factory.Shutdown() }()

		for term, name := range []string{"a", "b"} {
			c, err := New(opts(factory))
			if err != nil {
				t.Fatalf("term %d: New: %v", term, err)
			}
			factory.Start(serverCtx.Done()) // after New: the request informer is the server's, not the term's
			stop := start(t, c)
			req := newRequest(name, "webhook-svc", name+"-tls")
			if _, err := e.certapi.CertapiV1alpha1().ServingCertRequests(testNamespace).Create(context.Background(), req, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			eventually(t, "the Secret of term "+name, func() bool { return e.secret(name+"-tls") != nil })
			if err := stop(); err != nil {
				t.Fatalf("term %d: Run: %v", term, err)
			}
		}
	})

	t.Run("factory stopped", func(t *testing.T) {
		factory := externalversions.NewSharedInformerFactory(e.certapi, 0)
		c1, err := New(opts(factory))
		if err != nil {
			t.Fatal(err)
		}
		_ = c1
		ctx, cancel := context.WithCancel(context.Background())
		factory.Start(ctx.Done())
		factory.WaitForCacheSync(ctx.Done())
		cancel()
		factory.Shutdown()
		c2, err := New(opts(factory))
		if err != nil {
			t.Fatal(err)
		}
		if err := c2.Run(context.Background()); err == nil {
			t.Fatal("Run accepted an informer that has stopped")
		}
	})
}
