package framework_test

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/certapi/certapi/test/framework"
)

// probeImage is the framework's test image (testdata/probe), built by the test.
const probeImage = "certapi-test/probe:dev"

// TestNodeRunsPods starts the control plane with a real node, runs a pod of an image built here behind a
// Service, reaches it through the Service's cluster IP from another pod (kube-proxy's rules), resolves the
// Service's names inside that pod (cluster DNS), and checks that stopping the control plane leaves nothing
// of the node on the machine: no bridge, mount, network namespace, shim, cgroup or KUBE-* chain.
func TestNodeRunsPods(t *testing.T) {
	buildCtx, cancelBuild := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancelBuild()
	archive := filepath.Join(t.TempDir(), "probe.tar")
	if err := framework.BuildTestImage(buildCtx, "./test/framework/testdata/probe", probeImage, archive); err != nil {
		t.Fatal(err)
	}
	// StartT may wait for another package's node to end first (one node at a time on a machine): the
	// test's own deadline starts once its node is up.
	cp := framework.StartT(t, framework.Options{SkipCertapi: true, Node: true, NodeImages: []string{archive}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cs, err := kubernetes.NewForConfig(cp.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	ns := "default"
	for _, name := range []string{"server", "client"} {
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, probePod(name), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	svc, err := cs.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "server"},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "server"},
			Ports:    []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	client := waitPodReady(ctx, t, cs, ns, "client")
	waitPodReady(ctx, t, cs, ns, "server")

	// From the client pod, through the Service's cluster IP: kube-proxy's rules on the node, once the
	// EndpointSlice controller has listed the server.
	url := fmt.Sprintf("http://%s:8080/get?url=http://%s:80/healthz", client.Status.PodIP, svc.Spec.ClusterIP)
	if err := framework.PollUntil(ctx, 250*time.Millisecond, time.Minute, "the client pod reaching the Service", nil, func(ctx context.Context) (bool, string) {
		body, code, err := framework.HTTPGet(ctx, http.DefaultClient, url)
		if err != nil {
			return false, err.Error()
		}
		return code == http.StatusOK && body == "200\nok\n", fmt.Sprintf("HTTP %d: %q", code, body)
	}); err != nil {
		t.Fatal(err)
	}

	// Cluster DNS from inside a pod: the Service's names, by its full name and through the pod's search
	// path, and the Service reached by name.
	for _, q := range []struct{ path, want string }{
		{"/resolve?name=server.default.svc.cluster.local", svc.Spec.ClusterIP + "\n"},
		{"/resolve?name=server", svc.Spec.ClusterIP + "\n"},
		{"/resolve?name=kubernetes.default", "10.0.0.1\n"},
		{"/get?url=http://server/healthz", "200\nok\n"},
	} {
		body, code, err := framework.HTTPGet(ctx, http.DefaultClient, fmt.Sprintf("http://%s:8080%s", client.Status.PodIP, q.path))
		if err != nil || code != http.StatusOK || body != q.want {
			t.Errorf("GET %s in the client pod: HTTP %d %q, %v; want HTTP 200 %q", q.path, code, body, err, q.want)
		}
	}

	// kube-apiserver reaches kubelet for a pod's log, as `kubectl logs` does.
	if _, err := cs.CoreV1().Pods(ns).GetLogs("server", &corev1.PodLogOptions{}).DoRaw(ctx); err != nil {
		t.Errorf("the server pod's log through kube-apiserver and kubelet: %v", err)
	}

	node := cp.ClusterNode
	cp.Stop()
	if left := node.Leftovers(); len(left) > 0 {
		t.Errorf("the node left on the machine: %s", strings.Join(left, "; "))
	}
}

func probePod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name:            "probe",
				Image:           probeImage,
				ImagePullPolicy: corev1.PullNever,
				Ports:           []corev1.ContainerPort{{ContainerPort: 8080}},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)}},
					PeriodSeconds: 1,
				},
			}},
			TerminationGracePeriodSeconds: new(int64),
		},
	}
}

// waitPodReady waits until the pod ns/name is Ready and returns it.
func waitPodReady(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns, name string) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	err := framework.PollUntil(ctx, 250*time.Millisecond, 2*time.Minute, "pod "+ns+"/"+name+" Ready", nil, func(ctx context.Context) (bool, string) {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		pod = p
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				return true, ""
			}
		}
		var why []string
		for _, s := range p.Status.ContainerStatuses {
			if s.State.Waiting != nil {
				why = append(why, s.Name+": "+s.State.Waiting.Reason+" "+s.State.Waiting.Message)
			}
		}
		return false, fmt.Sprintf("phase %s %s", p.Status.Phase, strings.Join(why, "; "))
	})
	if err != nil {
		t.Fatal(err)
	}
	return pod
}
