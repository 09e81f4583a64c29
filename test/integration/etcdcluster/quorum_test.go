package etcdcluster

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/apiserver"
	"github.com/certapi/certapi/pkg/etcdcluster"
	"github.com/certapi/certapi/pkg/etcdcluster/incluster"
	"github.com/certapi/certapi/test/framework"
	"github.com/certapi/certapi/test/testhelpers"
)

// noQuorumBound is how long a call may take while the quorum is lost: it is answered at once, without
// waiting on etcd (whose request timeout is 7 s, and --handoff-timeout 3 s), through kube-apiserver on
// a loaded machine.
const noQuorumBound = time.Second

// inFlightBound is how long a call made as the quorum goes may wait: until the member holds it lost, the
// raft election timeout (1-2 s) and etcdcluster.NoLeaderGrace (3 s) after the members stop; not etcd's
// request timeout (7 s) nor the request's (60 s).
const inFlightBound = 10 * time.Second

// quorumBackBound is how soon after a quorum is back (a second member ready) calls succeed again.
const quorumBackBound = 5 * time.Second

// TestCertapiWithoutQuorum: certapi (the binary, ordinal 0) and two members in this process form a
// cluster of three. The two stop: certapi's member has no quorum, and certapi answers every resource
// request at once with 503, Retry-After and a Status that says so, while discovery, /livez and /readyz
// answer 200 (no other replica is Ready) and the APIService stays Available. An EndpointSlice of certapi's
// Service listing another Ready replica takes it out of /readyz, and its removal brings it back. The
// members come back: calls succeed within quorumBackBound, and nothing was lost.
func TestCertapiWithoutQuorum(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// Custody secret: the members of this process take the peer CA, with its key, from the Secret.
	cp, clientPort := startCertapiMember(ctx, t, "--etcd-advertise-host=127.0.0.1", "--etcd-peer-ca-custody=secret")
	kube := kubernetes.NewForConfigOrDie(rest.CopyConfig(cp.AdminConfig))
	certapi, _ := testhelpers.Clients(t, cp.AdminConfig)

	// Two more members in this process, from the peer CA certapi made.
	ca, err := (&incluster.PeerCASecret{Client: kube, Namespace: framework.CertapiNamespace, Name: incluster.DefaultSecretName, Member: "test"}).LoadOrCreate(ctx)
	if err != nil {
		t.Fatalf("the peer CA: %v", err)
	}
	w := newWorld(t, 3) // nodes[0] stands for certapi's own member and is never started here
	w.ca = ca
	w.deadMemberTimeout = time.Hour
	w.external = []string{"https://127.0.0.1:" + clientPort}
	w.start(w.nodes[1])
	w.start(w.nodes[2])
	w.waitVoters(3)

	const ns = "quorum"
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	scr, err := certapi.CertapiV1alpha1().ServingCertRequests(ns).Create(ctx, &certapiv1alpha1.ServingCertRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "before"}, Spec: certapiv1alpha1.ServingCertRequestSpec{ServiceName: "before"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	caBefore, err := certapi.CertapiV1alpha1().CertificateAuthorities().Get(ctx, certapiv1alpha1.CertificateAuthorityName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// Raw calls: client-go would retry the 503s this test wants to see.
	viaKube, err := rest.HTTPClientFor(rest.CopyConfig(cp.AdminConfig))
	if err != nil {
		t.Fatal(err)
	}
	viaKube.Timeout = 30 * time.Second
	call := func(ctx context.Context, method, path, body string) (int, http.Header, string, time.Duration) {
		req, err := http.NewRequestWithContext(ctx, method, cp.APIServerURL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		start := time.Now()
		resp, err := viaKube.Do(req)
		took := time.Since(start)
		if err != nil {
			return 0, nil, err.Error(), took
		}
		defer func() { _ = resp.Body.Close() }()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(b), took
	}
	admin, err := tls.X509KeyPair(cp.AdminConfig.CertData, cp.AdminConfig.KeyData)
	if err != nil {
		t.Fatal(err)
	}
	direct := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		InsecureSkipVerify: true, // certapi's own serving certificate: its trust is not what this tests
		Certificates:       []tls.Certificate{admin},
	}}}
	defer direct.CloseIdleConnections()
	health := func(ctx context.Context, path string) (int, string) {
		body, code, err := framework.HTTPGet(ctx, direct, cp.CertapiURL+path)
		if err != nil {
			return 0, err.Error()
		}
		return code, body
	}

	caPath := "/apis/certapi.dev/v1alpha1/certificateauthorities/" + certapiv1alpha1.CertificateAuthorityName
	resourceCalls := []struct{ method, path, body string }{
		{http.MethodGet, caPath, ""},
		{http.MethodGet, "/apis/certapi.dev/v1alpha1/namespaces/" + ns + "/servingcertrequests", ""},
		{http.MethodPost, "/apis/certapi.dev/v1alpha1/namespaces/" + ns + "/servingcertrequests",
			`{"apiVersion":"certapi.dev/v1alpha1","kind":"ServingCertRequest","metadata":{"name":"during"},"spec":{"serviceName":"during"}}`},
		{http.MethodPost, "/apis/certapi.dev/v1alpha1/namespaces/" + ns + "/servingcertrequests/before/servingcerts", `{"spec":{"certificateRequest":"x"}}`},
	}

	t.Log("two of three members stop")
	w.stop(w.nodes[1])
	w.stop(w.nodes[2])
	stopped := time.Now()
	// A call made as they stop waits on etcd until certapi's member holds the quorum lost (its raft
	// notices within the election timeout, 1-2 s, then etcdcluster.NoLeaderGrace), and is answered then.
	// A write made then is never answered with a Retry-After, which client-go would obey by sending it
	// again: its proposal may reach the etcd leader later and be applied still.
	type answer struct {
		code int
		h    http.Header
		body string
		took time.Duration
	}
	write := make(chan answer, 1)
	go func() {
		code, h, body, took := call(ctx, http.MethodPost, "/apis/certapi.dev/v1alpha1/namespaces/"+ns+"/servingcertrequests",
			`{"apiVersion":"certapi.dev/v1alpha1","kind":"ServingCertRequest","metadata":{"name":"in-flight"},"spec":{"serviceName":"in-flight"}}`)
		write <- answer{code, h, body, took}
	}()
	code, h, body, took := call(ctx, http.MethodGet, caPath, "")
	if code != http.StatusOK && (code != http.StatusServiceUnavailable || h.Get("Retry-After") == "") || took > inFlightBound {
		t.Errorf("a call made as the members stopped: %d with Retry-After %q in %s: %s; want 200 (the quorum not gone yet) or 503 with Retry-After, within %s",
			code, h.Get("Retry-After"), took, body, inFlightBound)
	}
	t.Logf("figure: a call made as two of three members stopped answered %d (Retry-After %q) in %s (bound %s)", code, h.Get("Retry-After"), took.Round(10*time.Millisecond), inFlightBound)
	if a := <-write; a.code != http.StatusCreated && (a.code < 500 || a.h.Get("Retry-After") != "") || a.took > inFlightBound {
		t.Errorf("a create made as the members stopped: %d with Retry-After %q in %s: %s; want 201 (the quorum not gone yet) or a 5xx without Retry-After (its outcome unknown), within %s",
			a.code, a.h.Get("Retry-After"), a.took, a.body, inFlightBound)
	} else {
		t.Logf("figure: a create made as two of three members stopped answered %d in %s: %s", a.code, a.took.Round(10*time.Millisecond), strings.TrimSpace(a.body))
	}
	testhelpers.WaitFor(t, 100*time.Millisecond, time.Minute, "certapi to answer 503 with Retry-After", func(ctx context.Context) (bool, string) {
		cctx, cancel := context.WithTimeout(ctx, inFlightBound)
		defer cancel()
		code, h, body, _ := call(cctx, http.MethodGet, caPath, "")
		return code == http.StatusServiceUnavailable && h.Get("Retry-After") != "", fmt.Sprintf("%d %s", code, body)
	})
	t.Logf("figure: every call answered 503 with Retry-After %s after two of three members stopped (etcdcluster.NoLeaderGrace %s)",
		time.Since(stopped).Round(100*time.Millisecond), etcdcluster.NoLeaderGrace)

	var slowest time.Duration
	for i := range 5 {
		for _, c := range resourceCalls {
			code, h, body, took := call(ctx, c.method, c.path, c.body)
			slowest = max(slowest, took)
			if code != http.StatusServiceUnavailable || h.Get("Retry-After") != strconv.Itoa(apiserver.QuorumRetryAfterSeconds) || took > noQuorumBound ||
				!strings.Contains(body, "no quorum") || !strings.Contains(body, "voting members") {
				t.Errorf("round %d: %s %s without a quorum: %d Retry-After %q in %s: %s; want 503 with Retry-After %d within %s and a message about the quorum",
					i, c.method, c.path, code, h.Get("Retry-After"), took, body, apiserver.QuorumRetryAfterSeconds, noQuorumBound)
			}
			if i == 0 && c.method == http.MethodGet && c.path == caPath {
				t.Logf("the answer: %s", body)
			}
		}
	}
	t.Logf("figure: %d resource calls without a quorum, every one 503 with Retry-After; slowest %s (bound %s)", 5*len(resourceCalls), slowest.Round(time.Millisecond), noQuorumBound)

	for _, path := range []string{"/apis/certapi.dev/v1alpha1", "/apis/certapi.dev", "/apis"} {
		if code, _, body, took := call(ctx, http.MethodGet, path, ""); code != http.StatusOK || took > noQuorumBound {
			t.Errorf("discovery %s without a quorum: %d in %s: %s", path, code, took, body)
		}
	}
	for _, path := range []string{"/livez", "/readyz", "/livez/etcd", "/readyz/etcd-readiness"} {
		if code, body := health(ctx, path); code != http.StatusOK {
			t.Errorf("%s without a quorum, no other replica Ready: %d: %s", path, code, body)
		}
	}

	t.Log("another replica of certapi's Service is Ready: this one leaves the Service")
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name: framework.CertapiServiceName + "-test", Namespace: framework.CertapiNamespace,
			Labels: map[string]string{discoveryv1.LabelServiceName: framework.CertapiServiceName},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{"10.0.0.2"},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: framework.CertapiNamespace, Name: "certapi-1"},
		}},
	}
	if _, err := kube.DiscoveryV1().EndpointSlices(framework.CertapiNamespace).Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testhelpers.WaitFor(t, 100*time.Millisecond, time.Minute, "/readyz to fail on etcd-readiness once etcdcluster.ReadinessSettle has passed", func(ctx context.Context) (bool, string) {
		code, body := health(ctx, "/readyz?verbose")
		return code != http.StatusOK && strings.Contains(body, "[-]etcd-readiness failed"), fmt.Sprintf("%d %s", code, body)
	})
	if code, body := health(ctx, "/livez"); code != http.StatusOK {
		t.Errorf("/livez out of the Service without a quorum: %d: %s", code, body)
	}
	if err := kube.DiscoveryV1().EndpointSlices(framework.CertapiNamespace).Delete(ctx, slice.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testhelpers.WaitFor(t, 100*time.Millisecond, 30*time.Second, "/readyz back once no other replica is Ready", func(ctx context.Context) (bool, string) {
		code, body := health(ctx, "/readyz")
		return code == http.StatusOK, fmt.Sprintf("%d %s", code, body)
	})
	if err := cp.WaitAPIServiceAvailable(ctx); err != nil {
		t.Errorf("the APIService without a quorum: %v", err)
	}

	t.Log("one member comes back: the quorum is back")
	w.start(w.nodes[1])
	back := time.Now()
	testhelpers.WaitFor(t, 50*time.Millisecond, time.Minute, "a call to succeed", func(ctx context.Context) (bool, string) {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		code, _, body, _ := call(cctx, http.MethodGet, caPath, "")
		return code == http.StatusOK, fmt.Sprintf("%d %s", code, body)
	})
	if since := time.Since(back); since > quorumBackBound {
		t.Errorf("calls succeeded %s after the quorum was back; want within %s", since, quorumBackBound)
	} else {
		t.Logf("figure: calls succeed %s after a second member is back (bound %s)", since.Round(10*time.Millisecond), quorumBackBound)
	}
	w.start(w.nodes[2])
	w.waitVoters(3)

	got, err := certapi.CertapiV1alpha1().ServingCertRequests(ns).Get(ctx, "before", metav1.GetOptions{})
	if err != nil || got.UID != scr.UID {
		t.Errorf("the ServingCertRequest made before the outage: %v", err)
	}
	caAfter, err := certapi.CertapiV1alpha1().CertificateAuthorities().Get(ctx, certapiv1alpha1.CertificateAuthorityName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if a, b := caBefore.Status.Certificates, caAfter.Status.Certificates; len(a) != len(b) || (len(a) > 0 && a[0].SerialNumber != b[0].SerialNumber) {
		t.Errorf("the CAs changed through the outage: before %+v, after %+v", a, b)
	}
	if _, err := certapi.CertapiV1alpha1().ServingCertRequests(ns).Create(ctx, &certapiv1alpha1.ServingCertRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "after"}, Spec: certapiv1alpha1.ServingCertRequestSpec{ServiceName: "after"},
	}, metav1.CreateOptions{}); err != nil {
		t.Errorf("creating a ServingCertRequest after the outage: %v", err)
	}
}
