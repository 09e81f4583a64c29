package e2e

import (
	"context"
	"crypto/elliptic"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/certapi/certapi/pkg/admission/requestquota"
	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/apis/certapi/validation"
	"github.com/certapi/certapi/pkg/generated/clientset/versioned"
	"github.com/certapi/certapi/pkg/signer/signertest"
	"github.com/certapi/certapi/test/e2e/e2etest"
	"github.com/certapi/certapi/test/framework"
	"github.com/certapi/certapi/test/testhelpers"
)

// tenantMemoryBound is what each replica's anonymous memory (RssAnon) must stay under with a namespace
// full of the largest requests the bounds allow: three quarters of the chart's 256Mi limit. Before the
// bounds, 400 requests of 250 KiB of annotations took a replica from 92 to 657 MB; this guards against
// that, it is no benchmark.
const tenantMemoryBound = 192 << 20

// TestTenantBounds plays the tenant of the security review: a user bound only to certapi's aggregated
// edit role in its namespaces, against two certapi replicas. Its 250 KiB of annotations are refused with
// a 422 that names the limit; a ResourceQuota on count/servingcertrequests.certapi.dev refuses its
// request past the quota with 403; without one, the per-namespace default refuses it past
// --max-servingcertrequests-per-namespace (its default); and with that namespace full of the largest
// requests the bounds allow, the leader's and the follower's memory stay under tenantMemoryBound.
func TestTenantBounds(t *testing.T) {
	const perNamespace = requestquota.DefaultMaxPerNamespace
	ctx := context.Background()
	own := framework.StartT(t, framework.Options{CertapiReplicas: 2, CertapiReplicaArgs: framework.LeaderIdentityArgs})
	admin, kube := testhelpers.Clients(t, own.AdminConfig)
	editRole := createAggregatedRole(t, kube, "certapi:aggregate-to-edit")
	tenantConfig, err := own.UserConfig("tenant")
	if err != nil {
		t.Fatal(err)
	}
	tenantConfig.QPS, tenantConfig.Burst = -1, 0 // the test's creates are the load, not client-go's limiter
	tenant, _ := testhelpers.Clients(t, tenantConfig)
	// tenantNamespace makes a namespace, runs prepare on it (nil: nothing) before any request in it reaches
	// certapi, and binds the tenant to the edit role there.
	tenantNamespace := func(prepare func(ns string)) string {
		ns := e2etest.Namespace(t, kube)
		if prepare != nil {
			prepare(ns)
		}
		if _, err := kube.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "tenant-edit"},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: editRole},
			Subjects:   []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: "tenant"}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// certapi authorizes through kube-apiserver (a SubjectAccessReview): wait until it allows the tenant.
		e2etest.Eventually(t, 30*time.Second, "the tenant's RoleBinding to take effect", func(ctx context.Context) (bool, error) {
			_, err := tenant.CertapiV1alpha1().ServingCertRequests(ns).Create(ctx, e2etest.Request("probe", "svc"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if apierrors.IsForbidden(err) && (strings.Contains(err.Error(), "cannot create") || strings.Contains(err.Error(), "status unknown for quota")) {
				return false, nil
			}
			return err == nil, err
		})
		return ns
	}

	t.Run("250 KiB of annotations are refused with a 422 that names the limit", func(t *testing.T) {
		ns := tenantNamespace(nil)
		big := e2etest.Request("big", "svc")
		big.Annotations = map[string]string{"tenant.example.com/blob": strings.Repeat("x", 250<<10)}
		_, err := tenant.CertapiV1alpha1().ServingCertRequests(ns).Create(ctx, big, metav1.CreateOptions{})
		want := fmt.Sprintf("at most %d bytes (32 KiB)", validation.MaxUserMetadataBytes)
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), want) {
			t.Fatalf("creating a request with 250 KiB of annotations: %v; want a 422 that says %q", err, want)
		}
		// The same through an update of a small request.
		small, err := tenant.CertapiV1alpha1().ServingCertRequests(ns).Create(ctx, e2etest.Request("small", "svc"), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		small.Annotations = big.Annotations
		if _, err := tenant.CertapiV1alpha1().ServingCertRequests(ns).Update(ctx, small, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), want) {
			t.Fatalf("updating a request to 250 KiB of annotations: %v; want a 422 that says %q", err, want)
		}
	})

	t.Run("a ResourceQuota refuses the request past it with 403", func(t *testing.T) {
		const hard = 3
		// The quota comes before the namespace's first request: quota admission remembers for 30 s that a
		// namespace had no quota when its watch had none, so a quota created after one would let a replica
		// whose watch has not delivered it yet admit a request uncounted (kube-apiserver's replicas too).
		ns := tenantNamespace(func(ns string) { quotaOn(t, kube, ns, hard) })
		for i := range hard {
			if err := createUnderQuota(t, tenant, ns, e2etest.Request(fmt.Sprintf("q%d", i), "svc")); err != nil {
				t.Fatalf("request %d under a quota of %d: %v", i+1, hard, err)
			}
		}
		err := createUnderQuota(t, tenant, ns, e2etest.Request("one-too-many", "svc"))
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "exceeded quota") || !strings.Contains(err.Error(), "count/servingcertrequests.certapi.dev") {
			t.Fatalf("request %d under a quota of %d: %v; want 403 exceeded quota", hard+1, hard, err)
		}
		// Quota counts objects only: issuance through the subresource, and the status writes it causes, go on.
		csr := signertest.CSRPEM(t, signertest.ECKey(t, elliptic.P256()))
		if _, err := admin.CertapiV1alpha1().ServingCertRequests(ns).CreateServingCert(ctx, "q0", e2etest.ServingCert(csr, nil), metav1.CreateOptions{}); err != nil {
			t.Fatalf("issuing through servingcerts at the quota: %v", err)
		}
		e2etest.Eventually(t, 30*time.Second, "the leader to write the issued certificate into q0's status", func(ctx context.Context) (bool, error) {
			r, err := admin.CertapiV1alpha1().ServingCertRequests(ns).Get(ctx, "q0", metav1.GetOptions{})
			return err == nil && r.Status.SerialNumber != "", err
		})
	})

	t.Run("a namespace full of the largest requests: the default limit, and memory", func(t *testing.T) {
		ns := tenantNamespace(nil)
		leader := -1
		e2etest.Eventually(t, 30*time.Second, "one replica to lead", func(context.Context) (bool, error) {
			leader = e2etest.LeaderOf(t, own)
			return leader >= 0, nil
		})
		follower := 1 - leader
		before := replicaMemory(t, own)

		// perNamespace requests, each with metadata at the limit and the longest spec validation allows.
		var next atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		start := time.Now()
		for range 8 {
			wg.Go(func() {
				for i := int(next.Add(1)) - 1; i < perNamespace; i = int(next.Add(1)) - 1 {
					if _, err := tenant.CertapiV1alpha1().ServingCertRequests(ns).Create(ctx, largestRequest(t, ns, i), metav1.CreateOptions{}); err != nil {
						errs <- fmt.Errorf("request %d: %w", i, err)
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		t.Logf("%d requests of %d bytes each (as JSON) created in %s", perNamespace, requestBytes(t, largestRequest(t, ns, 0)), time.Since(start).Round(time.Millisecond))

		// Each replica has seen all of them (in its watch cache, which feeds its count and the leader's
		// informer) once it refuses one more: ask each one directly, with a dry run.
		for i := range own.Replicas() {
			cfg, err := own.CertapiReplicaConfig(i)
			if err != nil {
				t.Fatal(err)
			}
			direct, _ := testhelpers.Clients(t, cfg)
			e2etest.Eventually(t, 30*time.Second, fmt.Sprintf("replica %d to count %d requests", i, perNamespace), func(ctx context.Context) (bool, error) {
				_, err := direct.CertapiV1alpha1().ServingCertRequests(ns).Create(ctx, e2etest.Request("probe", "svc"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
				return apierrors.IsForbidden(err), nil
			})
		}
		_, err := tenant.CertapiV1alpha1().ServingCertRequests(ns).Create(ctx, e2etest.Request("one-too-many", "svc"), metav1.CreateOptions{})
		want := fmt.Sprintf("holds %d ServingCertRequests", perNamespace)
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), fmt.Sprintf("--max-servingcertrequests-per-namespace=%d", perNamespace)) {
			t.Fatalf("request %d in a namespace without a ResourceQuota: %v; want 403 that says %q and names the flag", perNamespace+1, err, want)
		}
		list, err := admin.CertapiV1alpha1().ServingCertRequests(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Items) != perNamespace {
			t.Errorf("the namespace holds %d requests; want %d", len(list.Items), perNamespace)
		}

		after := replicaMemory(t, own)
		for _, r := range []struct {
			role string
			i    int
		}{{"leader", leader}, {"follower", follower}} {
			b, a := before[r.i], after[r.i]
			t.Logf("%s (replica %d): RssAnon %d -> %d MiB, VmRSS %d -> %d MiB", r.role, r.i, b.anon>>20, a.anon>>20, b.rss>>20, a.rss>>20)
			if a.anon > tenantMemoryBound {
				t.Errorf("%s: RssAnon %d MiB with %d of the largest requests in one namespace; want at most %d MiB",
					r.role, a.anon>>20, perNamespace, tenantMemoryBound>>20)
			}
		}
	})
}

// createAggregatedRole creates the ClusterRole name of the deploy manifests' aggregated RBAC (no
// kube-controller-manager runs here to aggregate it into edit, so the test binds it directly) and
// returns its name.
func createAggregatedRole(t *testing.T, kube kubernetes.Interface, name string) string {
	t.Helper()
	data, err := os.ReadFile("../../artifacts/deploy/base/rbac-aggregated.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var role rbacv1.ClusterRole
		if err := yaml.Unmarshal([]byte(doc), &role); err != nil {
			t.Fatal(err)
		}
		if role.Kind != "ClusterRole" || role.Name != name {
			continue
		}
		if _, err := kube.RbacV1().ClusterRoles().Create(context.Background(), &role, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		return name
	}
	t.Fatalf("no ClusterRole %s in the deploy manifests", name)
	return ""
}

// quotaOn creates a ResourceQuota of hard ServingCertRequests in ns with its status filled as
// kube-controller-manager's quota controller would (none runs here): the admission plugin adds to
// status.used and refuses a create it cannot count.
func quotaOn(t *testing.T, kube kubernetes.Interface, ns string, hard int64) {
	t.Helper()
	ctx := context.Background()
	name := corev1.ResourceName("count/servingcertrequests.certapi.dev")
	q, err := kube.CoreV1().ResourceQuotas(ns).Create(ctx, &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: "certs"},
		Spec:       corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{name: *resource.NewQuantity(hard, resource.DecimalSI)}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	q.Status = corev1.ResourceQuotaStatus{Hard: q.Spec.Hard, Used: corev1.ResourceList{name: *resource.NewQuantity(0, resource.DecimalSI)}}
	if _, err := kube.CoreV1().ResourceQuotas(ns).UpdateStatus(ctx, q, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// createUnderQuota creates r in ns under a ResourceQuota and returns the answer, as a client of several
// API server replicas must: a replica whose quota informer has not yet seen the quota's status refuses
// with "status unknown", and one that has not yet seen another replica's count conflicts on the quota's
// status (409), as kube-apiserver does with several replicas. Both are retried.
func createUnderQuota(t *testing.T, c versioned.Interface, ns string, r *certapiv1alpha1.ServingCertRequest) error {
	t.Helper()
	var last error
	e2etest.Eventually(t, 30*time.Second, "an answer to creating "+r.Name+" other than a conflict", func(ctx context.Context) (bool, error) {
		_, last = c.CertapiV1alpha1().ServingCertRequests(ns).Create(ctx, r, metav1.CreateOptions{})
		retry := apierrors.IsConflict(last) || (apierrors.IsForbidden(last) && strings.Contains(last.Error(), "status unknown for quota"))
		return !retry, nil
	})
	return last
}

// largestRequest is request i of ns at the bounds: labels and annotations of
// validation.MaxUserMetadataBytes, validation.MaxDNSNames DNS names of the longest kind, and
// validation.MaxServiceAccountNames ServiceAccount names of 253 characters.
func largestRequest(t *testing.T, ns string, i int) *certapiv1alpha1.ServingCertRequest {
	t.Helper()
	r := e2etest.Request(fmt.Sprintf("r-%03d", i), "svc")
	label := func(n int) string { return strings.Repeat("a", n) }
	for j := range validation.MaxDNSNames {
		r.Spec.DNSNames = append(r.Spec.DNSNames, fmt.Sprintf("%s%02d.%s.svc.cluster.local", label(61), j, ns))
	}
	for j := range validation.MaxServiceAccountNames {
		r.Spec.ServiceAccountNames = append(r.Spec.ServiceAccountNames, fmt.Sprintf("%s.%s.%s.%s%02d", label(63), label(63), label(63), label(59), j))
	}
	r.Annotations = map[string]string{"tenant.example.com/blob": fmt.Sprint(i)}
	pad := validation.MaxUserMetadataBytes - validation.UserMetadataBytes(&r.ObjectMeta)
	r.Annotations["tenant.example.com/blob"] += strings.Repeat("x", pad)
	if got := validation.UserMetadataBytes(&r.ObjectMeta); got != validation.MaxUserMetadataBytes {
		t.Fatalf("metadata of %d bytes; want %d", got, validation.MaxUserMetadataBytes)
	}
	return r
}

// requestBytes is the size of r as JSON.
func requestBytes(t *testing.T, r *certapiv1alpha1.ServingCertRequest) int {
	t.Helper()
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return len(b)
}

type replicaRSS struct{ anon, rss int64 }

// replicaMemory reads RssAnon and VmRSS of every certapi replica.
func replicaMemory(t *testing.T, own *framework.ControlPlane) []replicaRSS {
	t.Helper()
	out := make([]replicaRSS, own.Replicas())
	for i := range out {
		pid := own.ReplicaPID(i)
		out[i] = replicaRSS{anon: procStatus(t, pid, "RssAnon"), rss: procStatus(t, pid, "VmRSS")}
	}
	return out
}
