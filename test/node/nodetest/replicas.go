package nodetest

import (
	"context"
	"crypto/x509"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/generated/clientset/versioned"
	"github.com/certapi/certapi/test/framework"
)

// Check ends a workload's run: it reads what the requests hold at the end, holds history against it and
// cas (CheckHistory), and reports each broken invariant as an error of t, prefixed with label. For each
// request one is about it logs the request's history (each operation's attempts, with the certapi
// replica whose log names the attempt's audit ID, and the same for the list at the end) and what every
// certapi replica (the pods of selector in certapiNS) reads of it, called directly: from etcd (a Get with
// no resourceVersion, a quorum read through that replica's member) and from its watch cache alone (a List
// at resourceVersion 0 of that name, which the cache answers, or refuses with 429 while it is not ready),
// so that a replica serving stale reads is told from a write etcd lost. Then it holds the signatures the
// replicas logged to fencing (CheckFencing: certapi must run with --v=3). It returns the broken invariants.
func (w *Workload) Check(t *testing.T, cp *framework.ControlPlane, history []Op, cas []*x509.Certificate, certapiNS, selector, label string) []Violation {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	final, listed, err := w.atEnd(ctx)
	cancel()
	if err != nil {
		t.Fatalf("%sreading the workload's requests at the end: %v", label, err)
	}
	logs := replicaLogs(t, cp, certapiNS, selector)
	broken := CheckHistory(history, final, cas)
	for _, v := range broken {
		t.Errorf("%s%s", label, v)
	}
	var index map[string][]string
	if len(broken) > 0 {
		index = auditIDs(logs)
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
				lines = append(lines, "  "+o.String()+servedBy(index, o.Attempts))
			}
		}
		lines = append(lines, "  the list at the end: "+describeAttempts(listed)+servedBy(index, listed))
		t.Logf("%sthe history of %s:\n%s", label, v.Name, strings.Join(lines, "\n"))
		t.Logf("%swhat each replica reads of %s now:\n%s", label, v.Name, strings.Join(w.replicaReads(t, cp, certapiNS, selector, v.Name), "\n"))
	}
	return append(broken, checkFencing(t, logs, history, label)...)
}

// replicaLogs reads the log of every certapi pod of selector in certapiNS, the container running and the
// one before it, by container ("certapi-1", "certapi-1 (previous)").
func replicaLogs(t *testing.T, cp *framework.ControlPlane, certapiNS, selector string) map[string]string {
	t.Helper()
	kube, _ := Clients(t, cp)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	pods, err := kube.CoreV1().Pods(certapiNS).List(ctx, metav1.ListOptions{LabelSelector: selector})
	cancel()
	if err != nil {
		t.Errorf("listing certapi's pods for their logs: %v", err)
		return nil
	}
	logs := map[string]string{}
	for _, pod := range pods.Items {
		for _, previous := range []bool{false, true} {
			out, err := KubectlErr(cp, "-n", certapiNS, "logs", pod.Name, "--previous="+strconv.FormatBool(previous))
			if err != nil {
				continue // no container before this one
			}
			name := pod.Name
			if previous {
				name += " (previous)"
			}
			logs[name] = out
		}
	}
	return logs
}

// auditIDs maps the audit ID of every request a replica's log names (certapi logs each request at
// --v=3, as k8s.io/apiserver's httplog: audit-ID="...") to the containers whose log holds it: each log
// is read once.
func auditIDs(logs map[string]string) map[string][]string {
	index := map[string][]string{}
	for name, out := range logs {
		for _, m := range auditIDField.FindAllStringSubmatch(out, -1) {
			if ids := index[m[1]]; len(ids) == 0 || ids[len(ids)-1] != name {
				index[m[1]] = append(ids, name)
			}
		}
	}
	for _, names := range index {
		sort.Strings(names)
	}
	return index
}

var auditIDField = regexp.MustCompile(`audit-ID="([^"]+)"`)

// servedBy names, for each attempt with an audit ID, the containers whose log holds it (index, auditIDs):
// " served by certapi-1, certapi-0, ?" in the attempts' order.
func servedBy(index map[string][]string, attempts []Attempt) string {
	var by []string
	for _, a := range attempts {
		if a.AuditID == "" {
			continue
		}
		containers := slices.Compact(slices.Clone(index[a.AuditID]))
		if len(containers) == 0 {
			containers = []string{"?"}
		}
		by = append(by, strings.Join(containers, "+"))
	}
	if len(by) == 0 {
		return ""
	}
	return " served by " + strings.Join(by, ", ")
}

// replicaReads says what each certapi replica reads of the request name, one line a replica; a replica
// that cannot be asked is a line that says why.
func (w *Workload) replicaReads(t *testing.T, cp *framework.ControlPlane, certapiNS, selector, name string) []string {
	kube, _ := Clients(t, cp)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	pods, err := kube.CoreV1().Pods(certapiNS).List(ctx, metav1.ListOptions{LabelSelector: selector})
	cancel()
	if err != nil {
		return []string{fmt.Sprintf("  listing certapi's pods: %v", err)}
	}
	var lines []string
	for _, pod := range pods.Items {
		lines = append(lines, fmt.Sprintf("  %s on %s: %s", pod.Name, pod.Spec.NodeName, w.readsOf(cp, pod.Status.PodIP, name)))
	}
	return lines
}

// readsOf asks the replica at podIP for the request name, from etcd and from its watch cache.
func (w *Workload) readsOf(cp *framework.ControlPlane, podIP, name string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg, err := cp.CertapiPodConfig(ctx, podIP)
	if err != nil {
		return err.Error()
	}
	cfg.Timeout = 10 * time.Second
	client, err := versioned.NewForConfig(cfg)
	if err != nil {
		return err.Error()
	}
	scrs := client.CertapiV1alpha1().ServingCertRequests(w.ns)
	held := func(r *certapiv1alpha1.ServingCertRequest) string {
		return fmt.Sprintf("holds %s (resourceVersion %s)", strings.Join(r.Spec.DNSNames, ","), r.ResourceVersion)
	}
	fromEtcd := "absent"
	if r, err := scrs.Get(ctx, name, metav1.GetOptions{}); err != nil && !apierrors.IsNotFound(err) {
		fromEtcd = "error: " + err.Error()
	} else if err == nil {
		fromEtcd = held(r)
	}
	fromCache := "absent"
	list, err := scrs.List(ctx, metav1.ListOptions{ResourceVersion: "0", FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()})
	switch {
	case err != nil:
		fromCache = "error: " + err.Error()
	case len(list.Items) > 0:
		fromCache = held(&list.Items[0])
	}
	if err == nil {
		fromCache += fmt.Sprintf(" (the cache at resourceVersion %s)", list.ResourceVersion)
	}
	return fmt.Sprintf("from etcd %s; from its watch cache %s", fromEtcd, fromCache)
}
