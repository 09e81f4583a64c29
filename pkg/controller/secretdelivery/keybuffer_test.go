package secretdelivery

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	kubescheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"

	"github.com/certapi/certapi/pkg/controller/status"
	certapifake "github.com/certapi/certapi/pkg/generated/clientset/versioned/fake"
	"github.com/certapi/certapi/pkg/signer"
)

// keyBufferServer is a kube-apiserver stand-in for Secret creates and merge patches, over TLS with HTTP/2 as
// client-go talks to the real one. It answers the first attempt of every write 429 with Retry-After: 0,
// so that client-go sends the same request body a second time, and keeps a copy of every body it read.
type keyBufferServer struct {
	srv *httptest.Server

	mu       sync.Mutex
	attempts map[string]int // by method and path
	bodies   [][]byte       // every request body, as received
	protos   []string       // and the protocol of each request
	stored   *corev1.Secret // the Secret as the last successful write left it
}

func newKeyBufferServer(t *testing.T, existing *corev1.Secret) *keyBufferServer {
	t.Helper()
	s := &keyBufferServer{attempts: map[string]int{}, stored: existing}
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	s.srv.EnableHTTP2 = true
	s.srv.StartTLS()
	t.Cleanup(s.srv.Close)
	return s
}

func (s *keyBufferServer) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.bodies = append(s.bodies, bytes.Clone(body))
	s.protos = append(s.protos, r.Proto)
	what := r.Method + " " + r.URL.Path
	s.attempts[what]++
	if s.attempts[what] == 1 {
		w.Header().Set("Retry-After", "0")
		s.writeJSON(w, http.StatusTooManyRequests, &metav1.Status{
			TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"}, Status: metav1.StatusFailure,
			Reason: metav1.StatusReasonTooManyRequests, Code: http.StatusTooManyRequests,
		})
		return
	}
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/api/v1/namespaces/"+testNamespace+"/secrets":
		created, err := s.decode(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		created.ResourceVersion = "1"
		s.stored = created
		s.writeJSON(w, http.StatusCreated, created)
	case r.Method == http.MethodPatch && s.stored != nil &&
		r.URL.Path == "/api/v1/namespaces/"+testNamespace+"/secrets/"+s.stored.Name:
		// Only what write patches: data keys, labels and annotations.
		var patch struct {
			Metadata struct {
				Labels      map[string]string `json:"labels"`
				Annotations map[string]string `json:"annotations"`
			} `json:"metadata"`
			Data map[string][]byte `json:"data"`
		}
		if err := json.Unmarshal(body, &patch); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		patched := s.stored.DeepCopy()
		for k, v := range patch.Data {
			patched.Data[k] = v
		}
		for k, v := range patch.Metadata.Labels {
			patched.Labels[k] = v
		}
		for k, v := range patch.Metadata.Annotations {
			patched.Annotations[k] = v
		}
		patched.ResourceVersion = "2"
		s.stored = patched
		s.writeJSON(w, http.StatusOK, patched)
	default:
		http.Error(w, "unexpected "+what, http.StatusNotFound)
	}
}

// decode decodes a Secret as client-go sends it: protobuf by default, or JSON.
func (*keyBufferServer) decode(body []byte) (*corev1.Secret, error) {
	obj, _, err := kubescheme.Codecs.UniversalDeserializer().Decode(body, nil, &corev1.Secret{})
	if err != nil {
		return nil, err
	}
	return obj.(*corev1.Secret), nil
}

func (*keyBufferServer) writeJSON(w http.ResponseWriter, code int, obj any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(obj)
}

// clientset is a client-go clientset for the server, with client-go's default retries.
func (s *keyBufferServer) clientset(t *testing.T) kubernetes.Interface {
	t.Helper()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.srv.Certificate().Raw})
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: s.srv.URL, TLSClientConfig: rest.TLSClientConfig{CAData: ca}, QPS: -1})
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// TestDeliverSendsTheKeyIntactOnRetry: every attempt kube-apiserver receives, and the Secret it stores,
// hold the key intact, also when client-go retries a write: client-go encodes a created object into a
// buffer of its own (rest.Request.Body) and re-sends a retry's body from its bytes. Checked over TLS and
// HTTP/2 with a retried attempt, for the create of a missing Secret and the patch of an existing one.
// (Secret delivery once zeroed its key and patch buffers after a write; this guards any return of that.)
func TestDeliverSendsTheKeyIntactOnRetry(t *testing.T) {
	for _, tc := range []struct {
		name     string
		existing bool
	}{{"create", false}, {"patch", true}} {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Now()
			ca := newTestCA(t, now.Add(-time.Hour))
			bundle := signer.EncodeBundle(ca.Certificate)
			req := newRequest("webhook", "webhook-svc", "webhook-tls")

			var existing *corev1.Secret
			var cached *secretView
			if tc.existing {
				existing = deliveredSecret(t, req, ca, bundle, now.Add(-time.Minute))
				cached = viewOf(existing)
			}
			srv := newKeyBufferServer(t, existing)
			c, err := New(Options{
				Context:   newTestContext(t, srv.clientset(t), certapifake.NewSimpleClientset()),
				Authority: &fakeAuthority{ca: ca, bundle: bundle, ok: true},
				Status:    status.New(clientStatusUpdater{certapifake.NewSimpleClientset()}, time.Millisecond, 1),
			})
			if err != nil {
				t.Fatal(err)
			}
			c.recorder = events.NewFakeRecorder(10)
			if _, err := c.deliver(context.Background(), req, cached, now, decision{Why: "test"}); err != nil {
				t.Fatalf("deliver: %v", err)
			}

			srv.mu.Lock()
			defer srv.mu.Unlock()
			if len(srv.bodies) != 2 {
				t.Fatalf("%d requests, want 2 (a 429, then the retry)", len(srv.bodies))
			}
			if srv.protos[0] != "HTTP/2.0" {
				t.Errorf("client-go spoke %s; want HTTP/2.0, as to kube-apiserver", srv.protos[0])
			}
			if !bytes.Equal(srv.bodies[0], srv.bodies[1]) {
				t.Errorf("the retry sent another body than the first attempt (%d and %d bytes)", len(srv.bodies[0]), len(srv.bodies[1]))
			}
			verifyServing(t, srv.stored, "webhook-svc.webhooks.svc", now)
			for i, b := range srv.bodies {
				var sent struct {
					Data map[string][]byte `json:"data"`
				}
				if tc.existing { // a JSON merge patch
					err = json.Unmarshal(b, &sent)
				} else { // the Secret, in protobuf
					var s *corev1.Secret
					if s, err = srv.decode(b); err == nil {
						sent.Data = s.Data
					}
				}
				if err != nil {
					t.Fatalf("attempt %d: %v", i+1, err)
				}
				if !bytes.Equal(sent.Data[corev1.TLSPrivateKeyKey], srv.stored.Data[corev1.TLSPrivateKeyKey]) {
					t.Errorf("attempt %d sent another tls.key (%d bytes) than the Secret holds", i+1, len(sent.Data[corev1.TLSPrivateKeyKey]))
				}
			}
		})
	}
}
