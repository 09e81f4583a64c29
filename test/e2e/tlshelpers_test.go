package e2e

import (
	"crypto/tls"
	"encoding/pem"
	"testing"

	aggregator "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"

	"github.com/certapi/certapi/pkg/signer"
	"github.com/certapi/certapi/test/e2e/e2etest"
	"github.com/certapi/certapi/test/framework"
	"github.com/certapi/certapi/test/testhelpers"
)

// pemOf returns the PEM of the leaf of a tls.Certificate.
func pemOf(c *tls.Certificate) string {
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Certificate[0]}))
}

// servedIssuer connects to certapi directly and returns the serial of the CA that signed the
// certificate it serves ("" when that CA is not in the current bundle).
func servedIssuer(t *testing.T, own *framework.ControlPlane) string {
	t.Helper()
	c, _ := testhelpers.Clients(t, own.AdminConfig)
	ca := e2etest.CAObject(t, c)
	conn, err := tls.Dial("tcp", own.CertapiURL[len("https://"):], &tls.Config{InsecureSkipVerify: true}) // inspected, not trusted
	if err != nil {
		return ""
	}
	defer conn.Close()
	certs := conn.ConnectionState().PeerCertificates
	if len(certs) == 0 {
		return ""
	}
	cas, err := signer.ParseBundle([]byte(ca.Status.CABundle))
	if err != nil {
		return ""
	}
	for _, c := range cas {
		if certs[0].CheckSignatureFrom(c) == nil {
			return signer.FormatSerialNumber(c.SerialNumber)
		}
	}
	return ""
}

// aggregatorClient returns an APIService client for own's kube-apiserver.
func aggregatorClient(t *testing.T, own *framework.ControlPlane) aggregator.Interface {
	t.Helper()
	a, err := aggregator.NewForConfig(own.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
