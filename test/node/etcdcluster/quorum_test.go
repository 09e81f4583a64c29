package etcdcluster

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/certapi/certapi/test/node/nodetest"
)

// outage is how long two members stay frozen: well under the 60 s their liveness probes allow.
const outage = 20 * time.Second

// backBound is how soon after the frozen members resume issuance must be back: the members answer at
// once, a leader is elected within about a second, and a caller waiting out a Retry-After of
// apiserver.QuorumRetryAfterSeconds (3 s) tries again.
const backBound = 15 * time.Second

// hungEndpointWindow is how long hung members can stay Ready endpoints of certapi's Service: until
// kubelet has seen three of their readiness probes fail (the chart's 2 s period and 3 s timeout). A call
// kube-apiserver routes to one of them on a new connection gets its own bare 503 once its TLS handshake
// times out (10 s), which client-go does not retry; calls started after this window reach the survivor.
const hungEndpointWindow = 3 * (2*time.Second + 3*time.Second)

// TestQuorumLost: under issuance load through kube-apiserver, two of the three members stop answering
// (their containers frozen in containerd, as nodes that hang) for 20 s while the leader's pod stays up.
// The survivor, without a quorum, answers every call at once with 503 and Retry-After and stays Ready
// (no other replica is), so every call that fails fails with a 503 with Retry-After within
// nodetest.CallBound (but for calls started while the hung members are still Ready endpoints, which
// kube-apiserver may route to them: hungEndpointWindow), the APIService is Available throughout (watched) but for kube-apiserver's checks
// that reached only frozen members (below), nothing is lost (the load's
// ServingCertRequest and the CA are there after), and issuance is back within backBound of the members
// answering again.
func TestQuorumLost(t *testing.T) {
	ctx := context.Background()
	kube, certapi, before := installed3(t)

	const loadNS = "quorum-lost"
	nodetest.Kubectl(t, cp, "create", "namespace", loadNS)
	t.Cleanup(func() {
		_, _ = nodetest.KubectlErr(cp, "delete", "namespace", loadNS, "--ignore-not-found", "--wait=false")
	})
	nodetest.Kubectl(t, cp, "create", "servingcertrequest", "load", "-n", loadNS, "--service=load")
	avail := nodetest.WatchAvailability(t, cp, apiService)
	l := nodetest.StartLoad(t, certapi, loadNS, "load")
	nodetest.WaitFor(t, time.Minute, "calls under way", func(context.Context) (bool, string) {
		return l.Calls() >= 40, fmt.Sprintf("%d calls", l.Calls())
	})
	l.Check(t, "before")
	avail.Check(t, "before")

	leader := nodetest.LeaderPod(t, cp)
	var frozen, frozenAddresses []string
	for _, p := range certapiPods(t, kube) {
		if p.Name == leader || len(frozen) == 2 {
			continue
		}
		frozenAddresses = append(frozenAddresses, net.JoinHostPort(p.Status.PodIP, "8443"))
		id := strings.TrimPrefix(p.Status.ContainerStatuses[0].ContainerID, "containerd://")
		if err := cp.ClusterNode.PauseContainer(ctx, id); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cp.ClusterNode.ResumeContainer(context.Background(), id) })
		frozen = append(frozen, p.Name)
	}
	frozenAt := time.Now()
	t.Logf("froze %v for %s; %s leads", frozen, outage, leader)
	<-time.After(outage) // the outage itself: nothing to wait for
	for _, p := range certapiPods(t, kube) {
		for _, name := range frozen {
			if p.Name == name {
				if err := cp.ClusterNode.ResumeContainer(ctx, strings.TrimPrefix(p.Status.ContainerStatuses[0].ContainerID, "containerd://")); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	resumed := time.Now()
	nodetest.WaitFor(t, 2*time.Minute, "a call started after the members resumed to succeed", func(context.Context) (bool, string) {
		return l.LastSuccess().After(resumed), "last success " + l.LastSuccess().UTC().Format(time.StampMilli)
	})
	back := time.Since(resumed)
	f, failed := l.Take()
	var viaHung int
	for _, x := range failed {
		_, retryAfter := apierrors.SuggestsClientDelay(x.Err)
		switch {
		case apierrors.IsServiceUnavailable(x.Err) && retryAfter && x.Took <= nodetest.CallBound:
			// certapi's own 503 without a quorum, which client-go retried until it gave up.
		case apierrors.IsServiceUnavailable(x.Err) && !retryAfter && x.Start.Before(frozenAt.Add(hungEndpointWindow)) && x.Took <= nodetest.CallBound:
			viaHung++ // kube-apiserver's own 503: routed to a hung member still listed Ready
		default:
			t.Errorf("a call failed otherwise than with a 503 with Retry-After within %s (or kube-apiserver's 503 for a call started within %s of the freeze): %s",
				nodetest.CallBound, hungEndpointWindow, x)
		}
	}
	if viaHung > 0 {
		t.Logf("%d call(s) started within %s of the freeze failed with kube-apiserver's own 503: routed to a hung member it still listed Ready", viaHung, hungEndpointWindow)
	}
	if len(failed) > 0 {
		t.Logf("first failure %s; last %s", failed[0], failed[len(failed)-1])
	}
	if f.Slowest > nodetest.CallBound {
		t.Errorf("a call took %s through the outage, over the documented bound %s", f.Slowest, nodetest.CallBound)
	}
	if back > backBound {
		t.Errorf("issuance was back %s after the members resumed; want within %s", back.Round(100*time.Millisecond), backBound)
	}
	t.Logf("figure: two of three members frozen for %s: %s (%d of them kube-apiserver's 503 through a hung member), every other failure a 503 with Retry-After; issuance back %s after they resumed",
		outage, f, viaHung, back.Round(100*time.Millisecond))
	// kube-apiserver checks an APIService with five discovery calls, each to a Ready endpoint at random,
	// and reports it not Available when all five fail. The frozen members stay Ready endpoints until
	// their readiness probes time out three times (about 10 s), so a check in that window finds only
	// frozen ones with a chance of up to (2/3)^5: that is expected, and its message names a frozen
	// member. Anything else (no endpoint, the survivor not answering) is not.
	avail.CheckExcept(t, "two of three members frozen", func(n nodetest.NotAvailable) bool {
		return n.Reason == "FailedDiscoveryCheck" && slices.ContainsFunc(frozenAddresses, func(a string) bool {
			return strings.Contains(n.Message, "https://"+a+"/")
		})
	})

	nodetest.WaitFor(t, 5*time.Minute, "three certapi pods Ready", func(ctx context.Context) (bool, string) {
		return nodetest.PodsReady(ctx, kube, ns, selector, 3)
	})
	nodetest.WaitFor(t, time.Minute, "calls under way again", func(context.Context) (bool, string) {
		return l.Calls() >= 40, fmt.Sprintf("%d calls", l.Calls())
	})
	l.Check(t, "after")
	avail.Check(t, "after")
	l.Stop()
	if _, err := certapi.CertapiV1alpha1().ServingCertRequests(loadNS).Get(ctx, "load", metav1.GetOptions{}); err != nil {
		t.Errorf("the load's ServingCertRequest after the outage: %v", err)
	}
	ca, err := certapi.CertapiV1alpha1().CertificateAuthorities().Get(ctx, "default", metav1.GetOptions{})
	if err != nil || nodetest.CACertificates(ca) != before {
		t.Errorf("the CAs changed through the outage: %v: before %s, after %s", err, before, nodetest.CACertificates(ca))
	}
}
