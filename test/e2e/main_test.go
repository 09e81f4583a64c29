// Package e2e runs certapi against a real kube-apiserver and etcd, started as processes on loopback by
// test/framework. Every test here goes through kube-apiserver's aggregation layer, as users do.
package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"k8s.io/client-go/kubernetes"

	"github.com/certapi/certapi/test/framework"
)

// cp is the control plane shared by the tests of this package; tests that restart certapi make their own.
var cp *framework.ControlPlane

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "certapi-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// -v=6 logs every request URL and more; key material must still never appear (checked below). A
	// short --served-check-interval lets a test see a server change its certificate within seconds.
	cp = framework.StartMain(ctx, framework.Options{Dir: dir, Stdout: os.Stderr, CertapiArgs: []string{"-v=6", "--served-check-interval=5s"}})
	if cp == nil {
		return 1
	}
	code := m.Run()
	if leaks := keyMaterialIn(cp); len(leaks) > 0 {
		fmt.Fprintf(os.Stderr, "FAIL: key material found where it must never be:\n  %s\n", strings.Join(leaks, "\n  "))
		code = 1
	}
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

// keyMaterialIn scans every process log of the shared control plane (certapi runs at -v=6) and every Event
// in the cluster for private key material, and returns where it found some.
func keyMaterialIn(own *framework.ControlPlane) []string {
	var leaks []string
	markers := []string{"PRIVATE KEY", "MII"} // PEM armour, and the start of base64 DER of any key or certificate
	for name, path := range own.Logs() {
		data, err := os.ReadFile(path)
		if err != nil {
			leaks = append(leaks, fmt.Sprintf("cannot read %s log %s: %v", name, path, err))
			continue
		}
		for _, line := range strings.Split(string(data), "\n") {
			if strings.Contains(line, markers[0]) || (name != "kube-apiserver" && strings.Contains(line, markers[1])) {
				leaks = append(leaks, fmt.Sprintf("%s log: %.160s", name, line))
				break
			}
		}
	}
	kube, err := kubernetes.NewForConfig(own.AdminConfig)
	if err != nil {
		return append(leaks, err.Error())
	}
	events, err := kube.EventsV1().Events("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return append(leaks, fmt.Sprintf("listing events: %v", err))
	}
	for _, e := range events.Items {
		if strings.Contains(e.Note, markers[0]) || strings.Contains(e.Note, "BEGIN") {
			leaks = append(leaks, fmt.Sprintf("event %s/%s: %.160s", e.Namespace, e.Name, e.Note))
		}
	}
	return leaks
}

// testdata returns the path of a file under test/e2e/testdata.
func testdata(name string) string {
	return filepath.Join("testdata", name)
}
