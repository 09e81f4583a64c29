package etcdcluster

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/certapi/certapi/pkg/etcdcluster/incluster"
	"github.com/certapi/certapi/test/framework"
	"github.com/certapi/certapi/test/testhelpers"
)

// TestCertapiExitsWhenItsMemberStops: certapi (the binary, ordinal 0) and two members in this process
// form a cluster of three. certapi's member is removed from the cluster, which stops its etcd server:
// certapi cannot serve without it, so its run function stops the server and returns the member's error,
// and the process exits (kubelet then restarts the pod, whose member rejoins) rather than serve errors.
func TestCertapiExitsWhenItsMemberStops(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// Custody secret: the members of this process take the peer CA, with its key, from the Secret.
	cp, clientPort := startCertapiMember(ctx, t, "--etcd-advertise-host=127.0.0.1", "--etcd-peer-ca-custody=secret")
	kube := kubernetes.NewForConfigOrDie(rest.CopyConfig(cp.AdminConfig))
	ca, err := (&incluster.PeerCASecret{Client: kube, Namespace: framework.CertapiNamespace, Name: incluster.DefaultSecretName, Member: "test"}).LoadOrCreate(ctx)
	if err != nil {
		t.Fatalf("the peer CA: %v", err)
	}
	w := newWorld(t, 3) // nodes[0] stands for certapi's own member and is never started here
	w.ca = ca
	w.deadMemberTimeout = time.Hour
	w.external = []string{"https://127.0.0.1:" + clientPort}
	w.start(w.nodes[1])
	w.start(w.nodes[2])
	w.waitVoters(3)

	var id uint64
	for _, e := range w.nodes[1].member.Members() {
		if e.Name == "certapi-0" {
			id = e.ID
		}
	}
	if id == 0 {
		t.Fatalf("certapi-0 is not a member: %+v", w.nodes[1].member.Members())
	}
	// etcd refuses a removal until the members that stay have been connected for a while ("unhealthy
	// cluster"): tried until it takes.
	client := w.client()
	testhelpers.WaitFor(t, 500*time.Millisecond, time.Minute, "certapi-0's member removed", func(ctx context.Context) (bool, string) {
		if _, err := client.MemberRemove(ctx, id); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	testhelpers.WaitFor(t, 100*time.Millisecond, 2*time.Minute, "certapi to exit once its member stopped", func(context.Context) (bool, string) {
		return !cp.CertapiRunning(), "certapi still runs"
	})
	var logs strings.Builder
	for name, path := range cp.Logs() {
		if strings.HasPrefix(name, "certapi") {
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			logs.Write(b)
		}
	}
	for _, want := range []string{"The embedded etcd member stopped; stopping the server", "the embedded etcd member certapi-0 stopped"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("certapi's log does not say %q", want)
		}
	}
}
