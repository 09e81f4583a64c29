package apiserver

import (
	"testing"
	"time"

	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/util/compatibility"
)

// TestComplete: Complete fills every default New relies on, and keeps what is set.
func TestComplete(t *testing.T) {
	cases := []struct {
		name       string
		extra      ExtraConfig
		wantStatus time.Duration
		wantLeader LeaderOptions
	}{
		{
			name:       "unset: the defaults",
			extra:      ExtraConfig{ClusterDomain: "cluster.local", MaxCertificateDuration: time.Hour},
			wantStatus: DefaultStatusInterval,
			wantLeader: DefaultLeaderOptions(),
		},
		{
			name: "set: kept",
			extra: ExtraConfig{ClusterDomain: "example.org", MaxCertificateDuration: time.Minute, StatusInterval: time.Second,
				Leader: LeaderOptions{KubeAPIQPS: 1, KubeAPIBurst: 1, SecretWorkers: 1, InjectorWorkers: 1, StatusWorkers: 1}},
			wantStatus: time.Second,
			wantLeader: LeaderOptions{KubeAPIQPS: 1, KubeAPIBurst: 1, SecretWorkers: 1, InjectorWorkers: 1, StatusWorkers: 1},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			generic := genericapiserver.NewRecommendedConfig(Codecs)
			generic.EffectiveVersion = compatibility.DefaultBuildEffectiveVersion()
			generic.ExternalAddress = "127.0.0.1:443" // what the secure serving options would give
			c := &Config{GenericConfig: generic, ExtraConfig: tc.extra}
			got := c.Complete().ExtraConfig
			if got.StatusInterval != tc.wantStatus {
				t.Errorf("StatusInterval = %s; want %s", got.StatusInterval, tc.wantStatus)
			}
			if got.Leader != tc.wantLeader {
				t.Errorf("Leader = %+v; want %+v", got.Leader, tc.wantLeader)
			}
			if got.IssuerConfig.ClusterDomain != tc.extra.ClusterDomain || got.IssuerConfig.MaxCertificateDuration != tc.extra.MaxCertificateDuration {
				t.Errorf("the issuer's cluster domain %q and lifetime cap %s; want the server's, %q and %s",
					got.IssuerConfig.ClusterDomain, got.IssuerConfig.MaxCertificateDuration, tc.extra.ClusterDomain, tc.extra.MaxCertificateDuration)
			}
		})
	}
}

// TestOptionsComplete: completing the options names this replica unless --leader-identity did, and
// starts nothing (no etcd: the run function starts it).
func TestOptionsComplete(t *testing.T) {
	cases := []struct {
		name, identity string
	}{
		{name: "no --leader-identity: the host name and a suffix"},
		{name: "--leader-identity kept", identity: "replica-a"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := NewOptions()
			o.LeaderIdentity = tc.identity
			o.DataDir = t.TempDir()
			if err := o.Complete(); err != nil {
				t.Fatal(err)
			}
			if tc.identity != "" && o.LeaderIdentity != tc.identity {
				t.Errorf("LeaderIdentity = %q; want %q", o.LeaderIdentity, tc.identity)
			}
			if o.LeaderIdentity == "" {
				t.Error("no LeaderIdentity after Complete")
			}
			if got := o.RecommendedOptions.Etcd.StorageConfig.Transport.ServerList; len(got) != 0 {
				t.Errorf("Complete set --etcd-servers to %v; it must start no etcd", got)
			}
		})
	}
}
