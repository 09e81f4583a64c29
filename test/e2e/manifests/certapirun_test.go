package manifests

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"

	"github.com/certapi/certapi/test/e2e/e2etest"
	"github.com/certapi/certapi/test/framework"
	"github.com/certapi/certapi/test/testhelpers"
)

// certapiRun is a control plane of its own on which a rendering of the manifests is applied for real, its
// RBAC and admission policies included, and certapi runs as a process with exactly the permissions they
// give its ServiceAccount (applyForCertapi, then start).
type certapiRun struct {
	t   *testing.T
	own *framework.ControlPlane
	// sa is certapi's identity: its ServiceAccount certapi-system/certapi, as the kubelet's token would
	// present it.
	sa *rest.Config
	// args are the arguments of the rendering's certapi workload, with what only a pod has replaced: a
	// single embedded etcd member instead of the replicas' cluster, files and identity of this test,
	// loopback instead of in-cluster config.
	args    []string
	bin     string
	logPath string

	cmd    *exec.Cmd
	exited chan error
}

// applyForCertapi starts a control plane of its own and applies objs there, except that certapi will run
// as a process: its Service points at it (ExternalName to localhost, as the framework does) and its
// APIService at its port. certapi is not started yet (start).
func applyForCertapi(ctx context.Context, t *testing.T, objs []*unstructured.Unstructured) *certapiRun {
	t.Helper()
	bin, err := framework.CertapiBinary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r := &certapiRun{t: t, bin: bin, own: framework.StartT(t, framework.Options{SkipCertapi: true})}
	port := e2etest.FreePort(t)
	var apply []*unstructured.Unstructured
	for _, u := range objs {
		switch u.GetKind() {
		case "Service":
			u = &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "v1", "kind": "Service",
				"metadata": map[string]any{"name": u.GetName(), "namespace": u.GetNamespace()},
				"spec": map[string]any{"type": "ExternalName", "externalName": "localhost",
					"ports": []any{map[string]any{"name": "https", "port": int64(port), "protocol": "TCP"}}},
			}}
		case "APIService":
			u = u.DeepCopy()
			if err := unstructured.SetNestedField(u.Object, int64(port), "spec", "service", "port"); err != nil {
				t.Fatal(err)
			}
		}
		apply = append(apply, u)
	}
	r.kubectl("apply", "-f", writeObjects(t, apply))

	if r.sa, err = r.own.UserConfig("system:serviceaccount:certapi-system:certapi", "system:serviceaccounts", "system:serviceaccounts:certapi-system"); err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "mf-rbac-") // short: the embedded etcd's sockets live in it
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	kubeconfig := filepath.Join(dir, "certapi.kubeconfig")
	e2etest.WriteKubeconfig(t, kubeconfig, r.sa)
	// The sample of artifacts/deploy/README.md: secretbox, one key, the resource name it documents.
	encFile := testhelpers.CAKeysEncryptionConfigFile(t)

	w := certapiWorkload(t, objs)
	for _, a := range containerOf(t, &w.template.Spec, "certapi").Args {
		switch name := flagName(a); {
		case strings.HasPrefix(name, "etcd-"), name == "secure-port", name == "data-dir":
		case name == "encryption-provider-config":
			r.args = append(r.args, "--encryption-provider-config="+encFile)
		case name == "leader-identity":
			r.args = append(r.args, "--leader-identity=manifests-rbac")
		default:
			r.args = append(r.args, a)
		}
	}
	r.args = append(r.args,
		"--data-dir="+filepath.Join(dir, "data"),
		"--bind-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", port),
		"--kubeconfig="+kubeconfig,
		"--authentication-kubeconfig="+kubeconfig,
		"--authorization-kubeconfig="+kubeconfig,
		"-v=2",
	)
	r.logPath = filepath.Join(dir, "certapi.log")
	t.Cleanup(func() {
		if t.Failed() {
			data, _ := os.ReadFile(r.logPath)
			t.Logf("certapi log (%s):\n%s", r.logPath, e2etest.Tail(string(data), 150))
		}
	})
	return r
}

// kubectl runs kubectl against the control plane and returns what it printed; it fails the test on an
// error.
func (r *certapiRun) kubectl(args ...string) string {
	r.t.Helper()
	out, errOut, err := e2etest.Run(r.t, e2etest.KubectlPath(r.t), append([]string{"--kubeconfig", r.own.Kubeconfig}, args...)...)
	if err != nil {
		r.t.Fatalf("kubectl %s: %v\n%s%s", strings.Join(args, " "), err, out, errOut)
	}
	return string(out)
}

// start starts certapi with args, logging to logPath (appended to across restarts); the test's end stops it.
func (r *certapiRun) start(args []string) {
	r.t.Helper()
	logFile, err := os.OpenFile(r.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		r.t.Fatal(err)
	}
	r.cmd = exec.Command(r.bin, args...)
	r.cmd.Stdout, r.cmd.Stderr = logFile, logFile
	if err := r.cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	r.exited = make(chan error, 1)
	c, done := r.cmd, r.exited
	go func() { done <- c.Wait(); _ = logFile.Close() }()
	r.t.Cleanup(r.stop)
}

// stop stops certapi (SIGTERM, then SIGKILL after 20 seconds); nothing when it is not running.
func (r *certapiRun) stop() {
	if r.cmd == nil {
		return
	}
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-r.exited:
		r.exited <- err
	case <-time.After(20 * time.Second):
		_ = r.cmd.Process.Kill()
		r.exited <- <-r.exited
	}
	r.cmd = nil
}

// waitFor polls cond until it holds, and fails the test after timeout or as soon as certapi exits.
func (r *certapiRun) waitFor(ctx context.Context, what string, timeout time.Duration, cond func(ctx context.Context) (bool, error)) {
	r.t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		select {
		case err := <-r.exited:
			r.exited <- err
			return false, fmt.Errorf("certapi exited: %w", err)
		default:
		}
		ok, err := cond(ctx)
		last = err
		return ok, nil
	})
	if err != nil {
		r.t.Fatalf("waiting for %s: %v (last: %v)", what, err, last)
	}
}

// waitAvailable waits until kube-apiserver trusts certapi: certapi injected its own CA into its
// APIService, which is Available, and certapi.dev/v1alpha1 is discovered.
func (r *certapiRun) waitAvailable(ctx context.Context) {
	r.t.Helper()
	_, kube := testhelpers.Clients(r.t, r.own.AdminConfig)
	agg := aggregator(r.t, r.own)
	r.waitFor(ctx, "APIService v1alpha1.certapi.dev Available", 2*time.Minute, func(ctx context.Context) (bool, error) {
		s, err := agg.ApiregistrationV1().APIServices().Get(ctx, "v1alpha1.certapi.dev", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, cond := range s.Status.Conditions {
			if cond.Type == apiregistrationv1.Available {
				if cond.Status == apiregistrationv1.ConditionTrue {
					_, err := kube.Discovery().ServerResourcesForGroupVersion("certapi.dev/v1alpha1")
					return err == nil, err
				}
				return false, fmt.Errorf("%s: %s", cond.Reason, cond.Message)
			}
		}
		return false, errors.New("no Available condition")
	})
}

// log returns what certapi has logged so far.
func (r *certapiRun) log() string {
	r.t.Helper()
	data, err := os.ReadFile(r.logPath)
	if err != nil {
		r.t.Fatal(err)
	}
	return string(data)
}

// checkNeverForbidden fails the test for each line of certapi's log that says it was refused something:
// the manifests' RBAC or admission policies kept certapi from its work.
func (r *certapiRun) checkNeverForbidden() {
	r.t.Helper()
	for _, line := range strings.Split(r.log(), "\n") {
		if strings.Contains(strings.ToLower(line), "forbidden") {
			r.t.Errorf("certapi was refused something with the manifests' RBAC: %.400s", line)
		}
	}
}
