package nodetest

import (
	"context"
	"crypto/x509"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/certapi/certapi/pkg/generated/clientset/versioned"
	"github.com/certapi/certapi/test/framework"
)

// Check ends a workload's run: it reads what the requests hold at the end, holds history against
// it and cas (CheckHistory), and reports each broken invariant as an error of t. For each request one is
// about it logs the request's history and what every certapi replica (the pods of selector in certapiNS)
// reads of it, called directly: from etcd (a Get with no resourceVersion: a quorum read through that
// replica's member), from its watch cache (a Get at resourceVersion 0) and by a List (consistent, from
// the cache), so that a replica serving stale reads is told from a write etcd lost.
func (w *Workload) Check(t *testing.T, cp *framework.ControlPlane, certapi versioned.Interface, history []Op, cas []*x509.Certificate, certapiNS, selector string) []Violation {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	final, err := w.atEnd(ctx, certapi)
	if err != nil {
		t.Fatalf("reading the workload's requests at the end: %v", err)
	}
	broken := CheckHistory(history, final, cas)
	for _, v := range broken {
		t.Error(v)
	}
	seen := map[string]bool{}
	for _, v := range broken {
		if seen[v.Name] {
			continue
		}
		seen[v.Name] = true
		var lines []string
		for _, o := range history {
			if o.Name == v.Name {
				lines = append(lines, "  "+o.String())
			}
		}
		t.Logf("the history of %s:\n%s", v.Name, strings.Join(lines, "\n"))
		t.Logf("what each replica reads of %s now:\n%s", v.Name, strings.Join(w.replicaReads(ctx, t, cp, certapiNS, selector, v.Name), "\n"))
	}
	return broken
}

// replicaReads says what each certapi replica reads of the request name, one line a replica.
func (w *Workload) replicaReads(ctx context.Context, t *testing.T, cp *framework.ControlPlane, certapiNS, selector, name string) []string {
	kube, _ := Clients(t, cp)
	pods, err := kube.CoreV1().Pods(certapiNS).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return []string{fmt.Sprintf("  listing certapi's pods: %v", err)}
	}
	var lines []string
	for _, pod := range pods.Items {
		if pod.Status.PodIP == "" {
			lines = append(lines, fmt.Sprintf("  %s: no pod IP", pod.Name))
			continue
		}
		cfg, err := cp.ReplicaConfig(pod.Status.PodIP, "system:admin", "system:masters")
		if err != nil {
			t.Fatal(err)
		}
		cfg.Timeout = 10 * time.Second
		client, err := versioned.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		scrs := client.CertapiV1alpha1().ServingCertRequests(w.ns)
		read := func(rv string) string {
			r, err := scrs.Get(ctx, name, metav1.GetOptions{ResourceVersion: rv})
			switch {
			case apierrors.IsNotFound(err):
				return "absent"
			case err != nil:
				return "error: " + err.Error()
			}
			return fmt.Sprintf("holds %s (resourceVersion %s)", strings.Join(r.Spec.DNSNames, ","), r.ResourceVersion)
		}
		listed := "absent"
		if list, err := scrs.List(ctx, metav1.ListOptions{}); err != nil {
			listed = "error: " + err.Error()
		} else {
			for _, r := range list.Items {
				if r.Name == name {
					listed = fmt.Sprintf("holds %s (resourceVersion %s)", strings.Join(r.Spec.DNSNames, ","), r.ResourceVersion)
				}
			}
			listed += fmt.Sprintf(", the list at resourceVersion %s", list.ResourceVersion)
		}
		lines = append(lines, fmt.Sprintf("  %s on %s: from etcd %s; from its cache %s; listed %s", pod.Name, pod.Spec.NodeName, read(""), read("0"), listed))
	}
	return lines
}
