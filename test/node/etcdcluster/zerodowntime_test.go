package etcdcluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/certapi/certapi/pkg/etcdcluster"
	"github.com/certapi/certapi/pkg/generated/clientset/versioned"
	"github.com/certapi/certapi/test/node/nodetest"
)

// apiService is certapi's APIService, whose Available condition kube-apiserver's discovery depends on.
const apiService = "v1alpha1.certapi.dev"

// TestZeroDowntime: on the default install (three members), under issuance load through kube-apiserver
// (nodetest.StartLoad: 4 client-go callers, with client-go's retries of a 503 or 429 with Retry-After),
//
//   - a rolling upgrade to a new image of a release installed with the earlier default custody
//     (etcd.cluster.peerCACustody secret: the cluster made anew that way first, earlierCustody): the
//     release's image tagged anew in the node's containerd, as a registry would serve a new version, and
//     `helm upgrade --reuse-values --set image.tag=<new> --set etcd.cluster.peerCACustody=etcd`, which
//     moves the etcd peer CA's key out of its Secret into the members' etcd: once every member keeps it
//     there, the etcd leader empties the Secret's tls.key, and what certapi's token reads of the Secret
//     signs nothing; then it rotates the peer CA, whose key was readable in the Secret, and after the
//     drain below (every member restarted since) a client certificate made with the key read from the
//     Secret before the upgrade reads nothing from any member, where before the upgrade it read;
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
	kube, certapi, _ := installed3(t)
	before := earlierCustody(t, kube, certapi)

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
	// What certapi's token could read before the upgrade: the peer CA with its key. A certificate made
	// with it for a member's name reads certapi's etcd now.
	stolen := stolenPeerCA(t, kube)
	if err := readsEtcd(t, kube, stolen); err != nil {
		t.Fatalf("a certificate made with the peer CA's key, as the Secret held it, reads nothing even before the upgrade (the probe is broken): %v", err)
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

	// The key was readable in the Secret: the etcd leader rotates the peer CA once it has left it.
	start = time.Now()
	nodetest.WaitFor(t, 3*time.Minute, "the peer CA rotated away from the one whose key was in the Secret", func(ctx context.Context) (bool, string) {
		ca, err := certapi.CertapiV1alpha1().CertificateAuthorities().Get(ctx, "default", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if ca.Status.Etcd == nil || ca.Status.Etcd.PeerCA == nil {
			return false, "no status.etcd.peerCA"
		}
		p := ca.Status.Etcd.PeerCA
		return p.SerialNumber != stolen.Certificate.SerialNumber.Text(16) && !p.Rotating, fmt.Sprintf("%+v", p)
	})
	t.Logf("figure: the peer CA rotated after its key left the Secret in %s: %s", time.Since(start).Round(time.Second), l.Check(t, "the peer CA's rotation"))
	avail.Check(t, "the peer CA's rotation")

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
	// Every member started after the rotation: the key read from the Secret before makes nothing any of
	// them accepts.
	if err := readsEtcd(t, kube, stolen); err == nil {
		t.Error("a certificate made with the key the Secret held before the upgrade still reads certapi's etcd after the rotation and a restart of every member")
	}

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

// stolenPeerCA reads the etcd peer CA from its Secret with its key, as whoever could read the Secret could
// while the key was kept there.
func stolenPeerCA(t *testing.T, kube kubernetes.Interface) *etcdcluster.PeerCA {
	t.Helper()
	sec, err := kube.CoreV1().Secrets(ns).Get(context.Background(), "certapi-etcd-peer-ca", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ca, err := etcdcluster.LoadPeerCA(sec.Data[corev1.TLSCertKey], sec.Data[corev1.TLSPrivateKeyKey], sec.Data["ca.crt"], sec.Data["chain.crt"])
	if err != nil || ca.Key == nil {
		t.Fatalf("the peer CA Secret holds no usable key: %v", err)
	}
	return ca
}

// readsEtcd reports whether a client certificate that ca issues for member certapi-0's name reads
// certapi's etcd on every member's client port (each pod's IP, from this host): nil when each one
// answers, else the first refusal.
func readsEtcd(t *testing.T, kube kubernetes.Interface, ca *etcdcluster.PeerCA) error {
	t.Helper()
	mc, err := ca.IssueMember("certapi-0", []string{"certapi-0"}, time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(mc.CertPEM, mc.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range certapiPods(t, kube) {
		endpoint := "https://" + net.JoinHostPort(p.Status.PodIP, "2379")
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
			// The member's certificate is not what this probes: only whether it accepts the client's.
			TLS: &tls.Config{Certificates: []tls.Certificate{pair}, InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}})
		if err != nil {
			return fmt.Errorf("%s: %w", p.Name, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err = c.Get(ctx, "/registry/certapi.dev/", clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithLimit(1))
		cancel()
		_ = c.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", p.Name, err)
		}
	}
	return nil
}

// earlierCustody makes the package's cluster anew the way a release of the earlier default
// (etcd.cluster.peerCACustody secret) made it: scaled to zero, every claim and the peer CA Secret deleted,
// the published bundle removed from the APIService, then helm upgrade with custody secret and three members again. certapi-0 bootstraps a new cluster with
// a new peer CA whose key is in its Secret, and a new CA; earlierCustody returns that CA.
func earlierCustody(t *testing.T, kube kubernetes.Interface, certapi versioned.Interface) string {
	t.Helper()
	ctx := context.Background()
	start := time.Now()
	nodetest.Kubectl(t, cp, "-n", ns, "scale", "statefulset/certapi", "--replicas=0")
	nodetest.WaitFor(t, 5*time.Minute, "certapi's pods gone", func(ctx context.Context) (bool, string) {
		pods, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, err.Error()
		}
		return len(pods.Items) == 0, fmt.Sprintf("%d pods", len(pods.Items))
	})
	for i := range 5 {
		nodetest.Kubectl(t, cp, "-n", ns, "delete", "pvc", fmt.Sprintf("data-certapi-%d", i), "--ignore-not-found")
	}
	nodetest.Kubectl(t, cp, "-n", ns, "delete", "secret", "certapi-etcd-peer-ca")
	// Starting over with a new CA on purpose, as the refusal of a new cluster tells an admin to: the bundle
	// certapi published leaves the APIService, or certapi-0 refuses to bootstrap a second CA.
	nodetest.Kubectl(t, cp, "patch", "apiservice", apiService, "--type=json", "-p", `[{"op":"remove","path":"/spec/caBundle"}]`)
	for i := range 3 {
		if err := cp.CreateHostPathPV(ctx, fmt.Sprintf("certapi-data-earlier-%d", i), "1Gi"); err != nil {
			t.Fatal(err)
		}
	}
	helm(t, "upgrade", "certapi", releaseChart(t), "--namespace", ns, "--reuse-values", "--set", "etcd.cluster.peerCACustody=secret")
	nodetest.Kubectl(t, cp, "-n", ns, "scale", "statefulset/certapi", "--replicas=3")
	nodetest.WaitFor(t, 5*time.Minute, "three certapi pods Ready on new claims", func(ctx context.Context) (bool, string) {
		return nodetest.PodsReady(ctx, kube, ns, selector, 3)
	})
	nodetest.Kubectl(t, cp, "wait", "--for=condition=Available", "apiservice/"+apiService, "--timeout=2m")
	sec, err := kube.CoreV1().Secrets(ns).Get(ctx, "certapi-etcd-peer-ca", metav1.GetOptions{})
	if err != nil || len(sec.Data[corev1.TLSPrivateKeyKey]) == 0 {
		t.Fatalf("with custody secret the peer CA Secret holds no key: %v", err)
	}
	var ca string
	nodetest.WaitFor(t, 2*time.Minute, "exactly one CA on the new cluster", func(ctx context.Context) (bool, string) {
		got, err := certapi.CertapiV1alpha1().CertificateAuthorities().Get(ctx, "default", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		ca = nodetest.CACertificates(got)
		return len(got.Status.Certificates) == 1, ca
	})
	t.Logf("figure: the cluster made anew with custody secret (scaled to zero, claims and peer CA Secret deleted, helm upgrade) to three pods Ready: %s",
		time.Since(start).Round(time.Second))
	return ca
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
