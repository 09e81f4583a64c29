package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/certapi/certapi/test/e2e/e2etest"
	"github.com/certapi/certapi/test/framework"
	"github.com/certapi/certapi/test/testhelpers"
)

// TestObjectsAreInEtcd reads the raw key of a ServingCertRequest from etcd, under certapi's prefix.
func TestObjectsAreInEtcd(t *testing.T) {
	ctx := context.Background()
	c, kube := testhelpers.Clients(t, cp.AdminConfig)
	ns := e2etest.Namespace(t, kube)
	if _, err := c.CertapiV1alpha1().ServingCertRequests(ns).Create(ctx, e2etest.Request("stored", "svc"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	etcd, err := clientv3.New(clientv3.Config{Endpoints: []string{cp.EtcdEndpoint}, DialTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()
	key := "/registry/certapi.dev/servingcertrequests/" + ns + "/stored"
	resp, err := etcd.Get(ctx, key)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	if len(resp.Kvs) != 1 {
		t.Fatalf("key %s not found in etcd", key)
	}
	// Stored as JSON of the v1alpha1 version (no encryption configured in this control plane).
	if v := string(resp.Kvs[0].Value); !strings.Contains(v, `"apiVersion":"certapi.dev/v1alpha1"`) || !strings.Contains(v, `"serviceName":"svc"`) {
		t.Fatalf("value of %s is not the stored object: %.200s", key, v)
	}
}

// TestEmbeddedEtcdSurvivesRestart runs certapi with no --etcd-servers, restarts it, and finds its objects.
func TestEmbeddedEtcdSurvivesRestart(t *testing.T) {
	ctx := context.Background()
	own := framework.StartT(t, framework.Options{CertapiEmbeddedEtcd: true})
	c, kube := testhelpers.Clients(t, own.AdminConfig)
	ns := e2etest.Namespace(t, kube)
	if _, err := c.CertapiV1alpha1().ServingCertRequests(ns).Create(ctx, e2etest.Request("durable", "svc"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create: %v", err)
	}
	if !logContains(t, own.Logs()["certapi"], "Starting embedded etcd") {
		t.Fatal("certapi's log does not say it started an embedded etcd")
	}
	if err := own.StopCertapi(); err != nil {
		t.Fatalf("stopping certapi: %v", err)
	}
	if err := own.StartCertapi(ctx); err != nil {
		t.Fatalf("restarting certapi: %v", err)
	}
	if err := own.WaitAPIServiceAvailable(ctx); err != nil {
		t.Fatal(err)
	}
	e2etest.Eventually(t, 60*time.Second, "the request to be served again after the restart", func(ctx context.Context) (bool, error) {
		got, err := c.CertapiV1alpha1().ServingCertRequests(ns).Get(ctx, "durable", metav1.GetOptions{})
		if err != nil {
			return false, nil // the aggregator may still be reconnecting
		}
		return got.Spec.ServiceName == "svc", nil
	})
}
