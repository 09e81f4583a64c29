package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/certapi/certapi/pkg/issuer"
	"github.com/certapi/certapi/test/e2e/e2etest"
	"github.com/certapi/certapi/test/testhelpers"
)

// handoffAnswer is the leader's answer to a handoff key, as the issuer writes it.
type handoffAnswer struct {
	Result  *issuer.Result `json:"result"`
	Error   string         `json:"error"`
	Refused bool           `json:"refused"`
}

// TestForgedHandoffIsRefused writes handoff requests straight into certapi's etcd, as whoever can reach its
// client port could, bypassing the API, RBAC and admission: the leader signs only what a stored
// ServingCertRequest allows, and answers anything else with a refusal and no certificate.
func TestForgedHandoffIsRefused(t *testing.T) {
	ctx := context.Background()
	c, kube := testhelpers.Clients(t, cp.AdminConfig)
	ns := e2etest.Namespace(t, kube)
	req := e2etest.Request("stored", "svc")
	if _, err := c.CertapiV1alpha1().ServingCertRequests(ns).Create(ctx, req, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	etcd, err := clientv3.New(clientv3.Config{Endpoints: []string{cp.EtcdEndpoint}, DialTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	asStored := issuer.Request{Namespace: ns, Name: "stored", ServiceName: "svc", Duration: 24 * time.Hour, PublicKeyPKIX: pub, Path: issuer.PathServingCerts}
	forged := func(change func(*issuer.Request)) issuer.Request {
		r := asStored
		change(&r)
		return r
	}
	for _, tc := range []struct {
		name    string
		req     issuer.Request
		refused bool
	}{
		// The control: what the stored request allows is signed, so the refusals below are the check's.
		{name: "what the stored request allows", req: asStored},
		{name: "no such request", req: forged(func(r *issuer.Request) { r.Namespace, r.Name = "default", "forged" }), refused: true},
		{name: "another Service of the namespace", req: forged(func(r *issuer.Request) { r.ServiceName = "other" }), refused: true},
		{name: "a name of another namespace", req: forged(func(r *issuer.Request) { r.DNSNames = []string{"api.kube-system.svc"} }), refused: true},
		{name: "a longer lifetime", req: forged(func(r *issuer.Request) { r.Duration = 2000 * time.Hour }), refused: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			answer := writeHandoff(t, etcd, tc.req)
			if !tc.refused {
				if answer.Result == nil || answer.Error != "" {
					t.Fatalf("the leader did not sign what the stored request allows: %+v", answer)
				}
				return
			}
			if answer.Result != nil || !answer.Refused {
				t.Fatalf("the leader answered a forged handoff with %+v; want a refusal and no certificate", answer)
			}
			t.Logf("refused: %s", answer.Error)
		})
	}
}

// writeHandoff puts req under the issuer's handoff prefix, bound to a lease of its own, and returns the
// leader's answer.
func writeHandoff(t *testing.T, etcd *clientv3.Client, req issuer.Request) handoffAnswer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lease, err := etcd.Grant(ctx, 30)
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Revoke(context.Background(), lease.ID)
	body, err := json.Marshal(struct {
		issuer.Request
		Lease int64 `json:"lease"`
	}{req, int64(lease.ID)})
	if err != nil {
		t.Fatal(err)
	}
	id := make([]byte, 16)
	if _, err := rand.Read(id); err != nil {
		t.Fatal(err)
	}
	prefix := e2etest.Prefix + "/handoff/"
	put, err := etcd.Put(ctx, prefix+"requests/"+hex.EncodeToString(id), string(body), clientv3.WithLease(lease.ID))
	if err != nil {
		t.Fatal(err)
	}
	for wr := range etcd.Watch(ctx, prefix+"responses/"+hex.EncodeToString(id), clientv3.WithRev(put.Header.Revision)) {
		if err := wr.Err(); err != nil {
			t.Fatal(err)
		}
		for _, ev := range wr.Events {
			if ev.Type != clientv3.EventTypePut {
				continue
			}
			var a handoffAnswer
			if err := json.Unmarshal(ev.Kv.Value, &a); err != nil {
				t.Fatalf("decoding the leader's answer: %v", err)
			}
			return a
		}
	}
	t.Fatalf("no answer from the leader within 30s: %v", ctx.Err())
	return handoffAnswer{}
}
