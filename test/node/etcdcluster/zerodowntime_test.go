package etcdcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/certapi/certapi/test/node/nodetest"
)

// apiService is certapi's APIService, whose Available condition kube-apiserver's discovery depends on.
const apiService = "v1alpha1.certapi.dev"

// TestZeroDowntime: on the default install (three members), under issuance load through kube-apiserver
// (nodetest.StartLoad: 4 client-go callers, with client-go's retries of a 503 or 429 with Retry-After),
//
//   - a rolling upgrade to a new image: the release's image tagged anew in the node's containerd, as a
//     registry would serve a new version, and `helm upgrade --reuse-values --set image.tag=<new>`, which
//     also moves the etcd peer CA's key out of its Secret into the members' etcd
//     (etcd.cluster.peerCACustody etcd): once every member keeps it there, the etcd leader empties the
//     Secret's tls.key, and what certapi's token reads of the Secret signs nothing;
//   - a node drain, as the eviction API does it: one policy/v1 Eviction of every pod at once, each
//     refused (429) by the PodDisruptionBudget and retried as `kubectl drain` does until it goes. The one
//     node is not cordoned: its pods must come back on it;
//   - the leader's pod deleted with `--force --grace-period=0`;
//   - a member's volume lost: its new pod has no certificate and no key, proves with its projected token
//     that it is a pod of the StatefulSet, and a member that holds the key issues its certificate;
//
// each fail no call and keep every call within nodetest.CallBound, the APIService never reports anything
// but Available throughout (watched), and the CA stays the same.
func TestZeroDowntime(t *testing.T) {
	ctx := context.Background()
	kube, certapi, before := installed3(t)

	const loadNS = "zero-downtime"
	nodetest.Kubectl(t, cp, "create", "namespace", loadNS)
	t.Cleanup(func() {
		_, _ = nodetest.KubectlErr(cp, "delete", "namespace", loadNS, "--ignore-not-found", "--wait=false")
	})
	nodetest.Kubectl(t, cp, "create", "servingcertrequest", "load", "-n", loadNS, "--service=load")
	avail := nodetest.WatchAvailability(t, cp, apiService)
	l := nodetest.StartLoad(t, certapi, loadNS, "load")
	// A few seconds of calls before the first disruption: what they cost undisturbed.
	nodetest.WaitFor(t, time.Minute, "calls under way", func(context.Context) (bool, string) {
		return l.Calls() >= 40, fmt.Sprintf("%d calls", l.Calls())
	})
	t.Logf("figure: undisturbed: %s", l.Check(t, "undisturbed"))
	avail.Check(t, "undisturbed")

	// (a) A rolling upgrade to a new image.
	image := strings.TrimSpace(nodetest.Kubectl(t, cp, "-n", ns, "get", "statefulset", "certapi", "-o", "jsonpath={.spec.template.spec.containers[0].image}"))
	repo, tag, ok := splitTag(image)
	if !ok {
		t.Fatalf("the StatefulSet's image %q has no tag", image)
	}
	newTag := tag + "-next"
	if err := cp.ClusterNode.TagImage(ctx, image, repo+":"+newTag); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	helm(t, "upgrade", "certapi", releaseChart(t), "--namespace", ns, "--reuse-values", "--set", "image.tag="+newTag, "--set", "etcd.cluster.peerCACustody=etcd")
	nodetest.Kubectl(t, cp, "-n", ns, "rollout", "status", "statefulset/certapi", "--timeout=10m")
	took := time.Since(start)
	nodetest.WaitFor(t, 2*time.Minute, "the etcd leader to remove the peer CA's key from its Secret", func(ctx context.Context) (bool, string) {
		sec, err := kube.CoreV1().Secrets(ns).Get(ctx, "certapi-etcd-peer-ca", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return len(sec.Data[corev1.TLSPrivateKeyKey]) == 0, fmt.Sprintf("tls.key holds %d bytes", len(sec.Data[corev1.TLSPrivateKeyKey]))
	})
	// What certapi's own token reads of the Secret: the public part only.
	asCertapi := nodetest.Kubectl(t, cp, "-n", ns, "get", "secret", "certapi-etcd-peer-ca", "-o", "jsonpath={.data.tls\\.key}",
		"--as=system:serviceaccount:"+ns+":certapi")
	if strings.TrimSpace(asCertapi) != "" {
		t.Errorf("certapi's token reads a key from the peer CA Secret: %d bytes", len(asCertapi))
	}
	pods := certapiPods(t, kube)
	for _, p := range pods {
		if got := p.Spec.Containers[0].Image; got != repo+":"+newTag {
			t.Errorf("pod %s runs %s after the upgrade; want %s:%s", p.Name, got, repo, newTag)
		}
	}
	t.Logf("figure: rolling upgrade (helm upgrade to a new image tag, three members replaced one at a time, to rollout complete) in %s: %s",
		took.Round(time.Second), l.Check(t, "the rolling upgrade"))
	avail.Check(t, "the rolling upgrade")

	// (b) A drain's evictions: every pod at once, through the PodDisruptionBudget.
	start = time.Now()
	refused, err := evictAll(ctx, kube, pods)
	if err != nil {
		t.Fatal(err)
	}
	nodetest.WaitFor(t, 10*time.Minute, "every evicted pod replaced and Ready", func(ctx context.Context) (bool, string) {
		if ok, why := nodetest.PodsReady(ctx, kube, ns, selector, 3); !ok {
			return false, why
		}
		return replaced(ctx, kube, pods)
	})
	if refused == 0 {
		t.Error("the PodDisruptionBudget refused no eviction of three at once; want it to let one go at a time")
	}
	t.Logf("figure: a drain's evictions of all three pods at once (%d refusals by the PodDisruptionBudget, retried every second), to three new pods Ready, in %s: %s",
		refused, time.Since(start).Round(time.Second), l.Check(t, "the evictions"))
	avail.Check(t, "the evictions")

	// (c) The leader's pod deleted at once, without its grace period.
	leader := nodetest.LeaderPod(t, cp)
	var victim []corev1.Pod
	for _, p := range certapiPods(t, kube) {
		if p.Name == leader {
			victim = append(victim, p)
		}
	}
	if len(victim) != 1 {
		t.Fatalf("the leader %s is none of certapi's pods", leader)
	}
	start = time.Now()
	nodetest.Kubectl(t, cp, "-n", ns, "delete", "pod", leader, "--force", "--grace-period=0")
	nodetest.WaitFor(t, 2*time.Minute, "another replica leading", func(context.Context) (bool, string) {
		who, err := nodetest.LeaderOf(cp)
		return err == nil && who != "" && who != leader, fmt.Sprintf("leader %q, %v", who, err)
	})
	newLeader := time.Since(start)
	nodetest.WaitFor(t, 10*time.Minute, "the leader's pod replaced and Ready", func(ctx context.Context) (bool, string) {
		if ok, why := nodetest.PodsReady(ctx, kube, ns, selector, 3); !ok {
			return false, why
		}
		return replaced(ctx, kube, victim)
	})
	t.Logf("figure: the leader's pod %s deleted with --force --grace-period=0: another leader after %s, the pod back Ready after %s: %s",
		leader, newLeader.Round(100*time.Millisecond), time.Since(start).Round(time.Second), l.Check(t, "the leader's pod deleted at once"))
	avail.Check(t, "the leader's pod deleted at once")

	// (d) A member's volume lost: its new pod enrolls.
	if err := cp.CreateHostPathPV(ctx, "certapi-data-enroll", "1Gi"); err != nil {
		t.Fatal(err)
	}
	victim = nil
	for _, p := range certapiPods(t, kube) {
		if p.Name == "certapi-1" {
			victim = append(victim, p)
		}
	}
	start = time.Now()
	nodetest.Kubectl(t, cp, "-n", ns, "delete", "pvc", "data-certapi-1", "--wait=false")
	nodetest.Kubectl(t, cp, "-n", ns, "delete", "pod", "certapi-1")
	nodetest.WaitFor(t, 10*time.Minute, "certapi-1 back on a new claim and Ready", func(ctx context.Context) (bool, string) {
		if ok, why := nodetest.PodsReady(ctx, kube, ns, selector, 3); !ok {
			return false, why
		}
		return replaced(ctx, kube, victim)
	})
	nodetest.Logged(t, cp, ns, "certapi-1", "Enrolling with the etcd cluster for a member certificate",
		"Enrolled with the etcd cluster: a member issued this member's certificate", "Loaded the etcd peer CA's key from the members' etcd")
	enrolled := ""
	if out, err := nodetest.KubectlErr(cp, "-n", ns, "logs", "certapi-1"); err == nil {
		for _, line := range strings.Split(out, "\n") {
			if _, after, ok := strings.Cut(line, `took="`); ok && strings.Contains(line, "Enrolled with the etcd cluster") {
				enrolled, _, _ = strings.Cut(after, `"`)
			}
		}
	}
	t.Logf("figure: a member whose volume was lost enrolled (its enrollment request, token review and certificate: %s), joined and Ready in %s: %s",
		enrolled, time.Since(start).Round(time.Second), l.Check(t, "a member's volume lost"))
	avail.Check(t, "a member's volume lost")

	l.Stop()
	ca, err := certapi.CertapiV1alpha1().CertificateAuthorities().Get(ctx, "default", metav1.GetOptions{})
	if err != nil || nodetest.CACertificates(ca) != before {
		t.Errorf("the CAs changed through the disruptions: %v: before %s, after %s", err, before, nodetest.CACertificates(ca))
	}
}

// splitTag splits an image reference repo:tag (no digest) at its tag.
func splitTag(image string) (repo, tag string, ok bool) {
	i := strings.LastIndex(image, ":")
	if i < 0 || strings.Contains(image[i:], "/") || strings.Contains(image, "@") {
		return "", "", false
	}
	return image[:i], image[i+1:], true
}

// releaseChart returns the release's chart, _output/release/certapi-*.tgz, which the README installs.
func releaseChart(t *testing.T) string {
	t.Helper()
	m, err := filepath.Glob(nodetest.RepoPath(t, filepath.Join("_output", "release", "certapi-*.tgz")))
	if err != nil || len(m) != 1 {
		t.Fatalf("the release's chart: %v %v (make release builds one)", m, err)
	}
	if _, err := os.Stat(m[0]); err != nil {
		t.Fatal(err)
	}
	return m[0]
}

// certapiPods returns certapi's pods, which must be three, none terminating.
func certapiPods(t *testing.T, kube kubernetes.Interface) []corev1.Pod {
	t.Helper()
	pods, err := kube.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 3 {
		t.Fatalf("%d certapi pods; want 3", len(pods.Items))
	}
	return pods.Items
}

// replaced reports whether every one of pods was replaced: its name now belongs to a pod of another UID.
func replaced(ctx context.Context, kube kubernetes.Interface, pods []corev1.Pod) (bool, string) {
	for _, old := range pods {
		p, err := kube.CoreV1().Pods(ns).Get(ctx, old.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if p.UID == old.UID {
			return false, old.Name + " not replaced yet"
		}
	}
	return true, ""
}

// evictAll asks for the eviction of every pod at once, as `kubectl drain` does, and retries each eviction
// the PodDisruptionBudget refuses (429) every second until it goes, for up to ten minutes. It returns
// how many times the budget refused one.
func evictAll(ctx context.Context, kube kubernetes.Interface, pods []corev1.Pod) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		refused int
		errs    []error
	)
	for _, p := range pods {
		wg.Go(func() {
			tick := time.NewTicker(time.Second)
			defer tick.Stop()
			uid := p.UID
			for {
				err := kube.PolicyV1().Evictions(ns).Evict(ctx, &policyv1.Eviction{
					ObjectMeta:    metav1.ObjectMeta{Name: p.Name, Namespace: ns},
					DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}},
				})
				switch {
				case err == nil:
					return
				case apierrors.IsTooManyRequests(err):
					mu.Lock()
					refused++
					mu.Unlock()
				default:
					mu.Lock()
					errs = append(errs, fmt.Errorf("evicting %s: %w", p.Name, err))
					mu.Unlock()
					return
				}
				select {
				case <-ctx.Done():
					mu.Lock()
					errs = append(errs, fmt.Errorf("evicting %s: still refused: %w", p.Name, ctx.Err()))
					mu.Unlock()
					return
				case <-tick.C:
				}
			}
		})
	}
	wg.Wait()
	return refused, errors.Join(errs...)
}
