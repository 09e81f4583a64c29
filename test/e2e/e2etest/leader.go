package e2etest

import (
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/certapi/certapi/test/framework"
)

// LeaderOf asks every running replica's /metrics which one leads and returns its index, or -1 when none
// says so. The replicas must run with framework.LeaderIdentityArgs (identity certapi-<i>).
func LeaderOf(t testing.TB, own *framework.ControlPlane) int {
	t.Helper()
	client, err := own.CertapiHTTPClient()
	if err != nil {
		t.Fatal(err)
	}
	leader := -1
	for i := range own.Replicas() {
		if !own.ReplicaRunning(i) {
			continue
		}
		resp, err := client.Get(own.CertapiReplicaURL(i) + "/metrics")
		if err != nil {
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(body), fmt.Sprintf("certapi_leader{identity=\"certapi-%d\"} 1", i)) {
			if leader >= 0 {
				t.Fatalf("replicas %d and %d both say they lead", leader, i)
			}
			leader = i
		}
	}
	return leader
}
