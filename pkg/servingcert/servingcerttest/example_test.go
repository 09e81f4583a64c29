package servingcerttest_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/servingcert"
	"github.com/certapi/certapi/pkg/servingcert/servingcerttest"
)

// A webhook server under test gets its certificate from the in-memory CA through the operator's own
// servingcert.Source, and a client that trusts CABundle (as kube-apiserver does with a webhook
// configuration's caBundle) verifies it for <service>.<namespace>.svc; after a rotation the Source
// serves a certificate of the new CA. test/integration/servingcerttest runs the same against a real
// kube-apiserver.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	ca, err := servingcerttest.NewCA(servingcerttest.Options{})
	if err != nil {
		panic(err)
	}
	if err := ca.AddRequest(&certapiv1alpha1.ServingCertRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: "my-system", Name: "my-webhook"},
		Spec:       certapiv1alpha1.ServingCertRequestSpec{ServiceName: "my-webhook"},
	}); err != nil {
		panic(err)
	}
	// The operator's code builds these Options; its test adds Issuer (instead of a client) and a
	// short CAChangeDelay.
	src, err := servingcert.New(servingcert.Options{
		Issuer: ca, Namespace: "my-system", Name: "my-webhook", CAChangeDelay: time.Millisecond,
	})
	if err != nil {
		panic(err)
	}
	go func() { _ = src.Start(ctx) }()
	if err := src.WaitReady(ctx); err != nil {
		panic(err)
	}

	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "allowed")
	}))
	srv.TLS = src.TLSConfig()
	srv.StartTLS()
	defer srv.Close()

	get := func() {
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(ca.CABundle())
		client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{
			RootCAs: roots, ServerName: "my-webhook.my-system.svc",
		}}}
		resp, err := client.Get(srv.URL)
		if err != nil {
			fmt.Println(err)
			return
		}
		defer resp.Body.Close()
		issuer := resp.TLS.PeerCertificates[0].CheckSignatureFrom(ca.Active()) == nil
		fmt.Println(resp.Status, "signed by the Active CA:", issuer)
	}
	get()

	if err := ca.Rotate(); err != nil {
		panic(err)
	}
	if err := ca.WaitServing(ctx, src); err != nil { // the Source re-issues from the new CA
		panic(err)
	}
	get()
	// Output:
	// 200 OK signed by the Active CA: true
	// 200 OK signed by the Active CA: true
}
