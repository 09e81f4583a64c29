// Package servedcert runs certapi's check of what injected webhooks serve against a real kube-apiserver
// and etcd (test/framework): webhook servers run in the test process on this machine's address behind selector-less
// Services whose EndpointSlices the tests write, as the EndpointSlice controller would for pods. It is a
// package of its own so that `go test ./test/e2e/...` runs it beside the others.
package servedcert

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/certapi/certapi/test/framework"
	"github.com/certapi/certapi/test/testhelpers"
)

// cp is the control plane the tests of this package share.
var cp *framework.ControlPlane

// host is the address of this machine the tests' webhook servers listen on: one an EndpointSlice may
// hold (testhelpers.EndpointIP).
var host string

// interval is certapi's --served-check-interval here: short, so that a certificate changed with no API
// event is seen within seconds.
const interval = 3 * time.Second

// webhookDomain ends the name of every webhook these tests make, <service>.served.e2e.certapi.dev
// (testhelpers.InjectedWebhook): the tests assert on those names.
const webhookDomain = "served.e2e.certapi.dev"

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var err error
	if host, err = testhelpers.EndpointIP(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	dir, err := os.MkdirTemp("", "certapi-e2e-servedcert-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cp = framework.StartMain(ctx, framework.Options{Dir: dir, Stdout: os.Stderr, CertapiArgs: []string{
		"-v=2", "--served-check-interval=" + interval.String(), "--served-check-timeout=1s",
	}})
	if cp == nil {
		return 1
	}
	code := m.Run()
	if code != 0 {
		framework.PrintLogTails(os.Stderr, cp.Logs())
		fmt.Fprintf(os.Stderr, "logs and data kept in %s\n", dir)
	}
	cp.Stop()
	if code == 0 {
		_ = os.RemoveAll(dir)
	}
	return code
}
