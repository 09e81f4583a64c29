package framework

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

// cert-manager as a certificates.k8s.io/v1 CertificateSigningRequest signer for the tests: cert-manager's own
// issuer and CSR signer controllers (cert-manager-controller, built by `hack/build-tools.sh cert-manager` from
// the module hack/tools/cert-manager) against the control plane, with cert-manager's CRDs. It needs only
// kube-apiserver: no node, no kube-controller-manager, and no cert-manager webhook (none runs).

// ProcessCertManager is cert-manager-controller's name in Logs and <Dir>/logs/<name>.log.
const ProcessCertManager = "cert-manager"

// Environment variables that override where StartCertManager finds what `hack/build-tools.sh cert-manager`
// builds.
const (
	// EnvCertManagerBin names a cert-manager-controller to use instead of <repo>/_output/bin/cert-manager-controller.
	EnvCertManagerBin = "CERT_MANAGER_CONTROLLER_BIN"
	// EnvCertManagerCRDs names a directory of cert-manager's CRDs (*.yaml) to use instead of
	// <repo>/_output/cert-manager/crds.
	EnvCertManagerCRDs = "CERT_MANAGER_CRDS"
)

// certManagerReadyMessage is hack/tools/cert-manager's ReadyMessage: the line it writes to standard error
// once its informer caches have synced.
const certManagerReadyMessage = "cert-manager-controller: informer caches synced, controllers running"

// Deadlines of StartCertManager's steps: generous for a busy two-core machine.
const (
	certManagerCRDTimeout   = time.Minute
	certManagerReadyTimeout = 2 * time.Minute
	certManagerStopGrace    = 10 * time.Second
)

// CertManagerFieldManager is the field manager StartCertManager applies cert-manager's CRDs with.
const CertManagerFieldManager = "certapi-test-framework"

// CertManagerUser is the user cert-manager-controller runs as: a client certificate of the framework's
// client CA in group system:masters, so that what it writes (events, CSR status) is told apart from the
// tests' admin in audit and managed fields.
const CertManagerUser = "cert-manager"

// CertManagerBuildHint is how to build what StartCertManager needs.
const CertManagerBuildHint = "hack/build-tools.sh cert-manager"

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// CertManager is a running cert-manager-controller (see StartCertManager).
type CertManager struct {
	*Process
	// logStart is the size of the log when this process started: WaitLog reads only what came after.
	logStart int64
}

// CertManagerBinary returns the cert-manager-controller to run: $CERT_MANAGER_CONTROLLER_BIN if set, otherwise
// <repo>/_output/bin/cert-manager-controller, built by `hack/build-tools.sh cert-manager` (and `make tools`).
func CertManagerBinary() (string, error) {
	return certManagerPath(EnvCertManagerBin, "bin", "cert-manager-controller")
}

// CertManagerCRDsDir returns the directory of cert-manager's CRDs: $CERT_MANAGER_CRDS if set, otherwise
// <repo>/_output/cert-manager/crds, where `hack/build-tools.sh cert-manager` copies the deploy/crds of the
// cert-manager module that cert-manager-controller is built from.
func CertManagerCRDsDir() (string, error) {
	return certManagerPath(EnvCertManagerCRDs, "cert-manager", "crds")
}

func certManagerPath(envVar string, under ...string) (string, error) {
	if p := os.Getenv(envVar); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s=%s: %w", envVar, p, err)
		}
		return p, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	p := filepath.Join(append([]string{root, "_output"}, under...)...)
	if _, err := os.Stat(p); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("%s not found: run `%s` (or set %s)", p, CertManagerBuildHint, envVar)
		}
		return "", fmt.Errorf("checking %s: %w", p, err)
	}
	return p, nil
}

// CertManagerCRDs reads cert-manager's CRDs from CertManagerCRDsDir, every *.yaml file in name order.
func CertManagerCRDs() ([]*unstructured.Unstructured, error) {
	dir, err := CertManagerCRDsDir()
	if err != nil {
		return nil, err
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", dir, err)
	}
	slices.Sort(files)
	var crds []*unstructured.Unstructured
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("reading cert-manager's CRDs: %w", err)
		}
		objs, err := DecodeManifests(data)
		if err != nil {
			return nil, fmt.Errorf("reading cert-manager's CRDs from %s: %w", f, err)
		}
		for _, o := range objs {
			if o.GetKind() != "CustomResourceDefinition" {
				return nil, fmt.Errorf("%s holds a %s %q; expected only CustomResourceDefinitions", f, o.GetKind(), o.GetName())
			}
			crds = append(crds, o)
		}
	}
	if len(crds) == 0 {
		return nil, fmt.Errorf("no CustomResourceDefinition in %s/*.yaml: run `%s`", dir, CertManagerBuildHint)
	}
	return crds, nil
}

// ApplyCertManagerCRDs applies cert-manager's CRDs (CertManagerCRDs) with server-side apply as the admin,
// under field manager CertManagerFieldManager, and waits until each is Established.
func (cp *ControlPlane) ApplyCertManagerCRDs(ctx context.Context) error {
	crds, err := CertManagerCRDs()
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(cp.AdminConfig)
	if err != nil {
		return fmt.Errorf("creating a dynamic client: %w", err)
	}
	client := dyn.Resource(crdGVR)
	for _, crd := range crds {
		if _, err := client.Apply(ctx, crd.GetName(), crd, metav1.ApplyOptions{FieldManager: CertManagerFieldManager, Force: true}); err != nil {
			return fmt.Errorf("applying cert-manager's CRD %s: %w", crd.GetName(), err)
		}
	}
	for _, crd := range crds {
		name := crd.GetName()
		err := PollUntil(ctx, pollInterval, certManagerCRDTimeout, "CRD "+name+" to be Established", nil, func(ctx context.Context) (bool, string) {
			got, err := client.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			return crdEstablished(got)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// crdEstablished reports whether a CRD has the condition Established True, and what it has otherwise.
func crdEstablished(crd *unstructured.Unstructured) (bool, string) {
	conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
	for _, c := range conds {
		m, ok := c.(map[string]any)
		if !ok || m["type"] != "Established" {
			continue
		}
		if m["status"] == "True" {
			return true, "Established"
		}
		return false, fmt.Sprintf("Established %v: %v", m["status"], m["message"])
	}
	return false, "no Established condition yet"
}

// StartCertManager applies cert-manager's CRDs (ApplyCertManagerCRDs) and starts cert-manager-controller
// (CertManagerBinary) against the control plane as CertManagerUser, with its default controllers (the
// Issuer and ClusterIssuer readiness controllers and the CertificateSigningRequest signers of the CA and
// SelfSigned issuers) and --cluster-resource-namespace kube-system, then args (for example "-v=4", its debug
// level, which logs each CertificateSigningRequest it skips and why). It logs to <Dir>/logs/cert-manager.log
// (in Logs as ProcessCertManager) and returns once its informer caches have synced. The caller stops it
// (CertManager.Stop); the control plane's Stop does not. StartCertManagerT does both for a test.
func (cp *ControlPlane) StartCertManager(ctx context.Context, args ...string) (*CertManager, error) {
	bin, err := CertManagerBinary()
	if err != nil {
		return nil, err
	}
	if err := cp.ApplyCertManagerCRDs(ctx); err != nil {
		return nil, err
	}
	cfg, err := cp.UserConfig(CertManagerUser, "system:masters")
	if err != nil {
		return nil, fmt.Errorf("making cert-manager's client certificate: %w", err)
	}
	kubeconfig := filepath.Join(cp.Dir, "cert-manager.kubeconfig")
	if err := WriteKubeconfig(kubeconfig, cfg); err != nil {
		return nil, fmt.Errorf("writing cert-manager's kubeconfig: %w", err)
	}
	logPath := cp.logPath(ProcessCertManager)
	var logStart int64
	if st, err := os.Stat(logPath); err == nil {
		logStart = st.Size()
	}
	flags := append([]string{"--kubeconfig=" + kubeconfig, "--cluster-resource-namespace=kube-system"}, args...)
	proc, err := StartProcess(ProcessCertManager, logPath, bin, flags, nil)
	if err != nil {
		return nil, err
	}
	cp.mu.Lock()
	cp.logs[ProcessCertManager] = logPath
	cp.mu.Unlock()
	cm := &CertManager{Process: proc, logStart: logStart}
	if err := cm.WaitLog(ctx, certManagerReadyTimeout, "cert-manager-controller's informer caches to sync", certManagerReadyMessage); err != nil {
		_ = proc.Stop(certManagerStopGrace)
		return nil, err
	}
	cp.progress("cert-manager-controller ready (%s)", bin)
	return cm, nil
}

// StartCertManagerT is StartCertManager for a test: a failure fails it with t.Fatal, and t.Cleanup stops
// cert-manager-controller (before the control plane of StartT, whose cleanup then prints its log's tail too
// when the test failed).
func StartCertManagerT(t testing.TB, cp *ControlPlane, args ...string) *CertManager {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), certManagerCRDTimeout+certManagerReadyTimeout)
	defer cancel()
	cm, err := cp.StartCertManager(ctx, args...)
	if err != nil {
		t.Fatalf("starting cert-manager: %v", err)
	}
	t.Cleanup(func() {
		if err := cm.Stop(certManagerStopGrace); err != nil {
			t.Errorf("stopping cert-manager: %v", err)
		}
	})
	return cm
}

// WaitLog waits up to timeout for a line of this cert-manager-controller's log (what it wrote since it
// started) that holds every one of substrings, or fails with the process's exit or the deadline. what names
// the wait in the error.
func (cm *CertManager) WaitLog(ctx context.Context, timeout time.Duration, what string, substrings ...string) error {
	return PollUntil(ctx, pollInterval, timeout, what, []*Process{cm.Process}, func(context.Context) (bool, string) {
		found, err := logHasLine(cm.logPath, cm.logStart, substrings)
		if err != nil {
			return false, err.Error()
		}
		if !found {
			return false, fmt.Sprintf("no line of %s after byte %d holds all of %q", cm.logPath, cm.logStart, substrings)
		}
		return true, ""
	})
}

// logHasLine reports whether a line of the file at path, from offset on, holds every one of substrings.
func logHasLine(path string, offset int64, substrings []string) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return false, fmt.Errorf("seeking %s: %w", path, err)
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if !slices.ContainsFunc(substrings, func(s string) bool { return !strings.Contains(line, s) }) {
			return true, nil
		}
	}
	if err := sc.Err(); err != nil {
		return false, fmt.Errorf("reading %s: %w", path, err)
	}
	return false, nil
}
