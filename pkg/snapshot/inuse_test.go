package snapshot_test

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/certapi/certapi/pkg/etcdcluster"
	"github.com/certapi/certapi/pkg/snapshot"
)

// startClusterMemberEtcd starts, in this process, an etcd laid out in dataDir as a member of certapi's
// etcd cluster lays out its --data-dir (pkg/etcdcluster): its data in dataDir/etcd, its TLS files from a
// peer CA in dataDir/etcd-pki, the client URL it answers on its own host recorded in
// dataDir/etcd-local-client-url; it listens on TCP only (loopback, ports the kernel picks), with no socket
// in dataDir. It returns a client of it and a func that stops it (the test's end stops it too).
func startClusterMemberEtcd(t *testing.T, dataDir string) (*clientv3.Client, func()) {
	t.Helper()
	ca, err := etcdcluster.NewPeerCA(time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	mc, err := ca.IssueMember("certapi-0", nil, time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	pki := filepath.Join(dataDir, etcdcluster.PKIDirName)
	mkdir(t, pki)
	pair, trust := filepath.Join(pki, "member.pem"), filepath.Join(pki, "ca.crt")
	if err := os.WriteFile(pair, append(append([]byte{}, mc.CertPEM...), mc.KeyPEM...), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(trust, ca.TrustPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	tlsInfo := transport.TLSInfo{CertFile: pair, KeyFile: pair, TrustedCAFile: trust, ClientCertAuth: true}

	loopback := url.URL{Scheme: "https", Host: "127.0.0.1:0"}
	cfg := etcdcluster.SingleMemberConfig("certapi-0", filepath.Join(dataDir, snapshot.EtcdDirName), loopback, loopback)
	cfg.ClientTLSInfo, cfg.PeerTLSInfo = tlsInfo, tlsInfo
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop()) // its errors on Close are expected
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatal(err)
	}
	stop := sync.OnceFunc(e.Close)
	t.Cleanup(stop)
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		t.Fatalf("etcd failed while starting: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("etcd not ready within a minute")
	}
	clientURL := "https://" + e.Clients[0].Addr().String()
	if err := os.WriteFile(filepath.Join(dataDir, etcdcluster.LocalClientURLFileName), []byte(clientURL+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	clientTLS, err := tlsInfo.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{clientURL}, TLS: clientTLS, DialTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, stop
}

// TestRestoreRefusedWhileAClusterMemberRuns restores, with --force, into the data dir of a running etcd that
// listens on TCP alone, as a member of certapi's etcd cluster does: refused, with a message that says a
// cluster member runs there and how to stop it, and nothing moved. Once that etcd has stopped, the same
// restore goes through and moves the old data aside.
func TestRestoreRefusedWhileAClusterMemberRuns(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dataDir := filepath.Join(shortDir(t), "data")
	c, stop := startClusterMemberEtcd(t, dataDir)
	if _, err := c.Put(ctx, "/registry/certapi.dev/k", "v"); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "s.db")
	if _, err := snapshot.SaveFrom(ctx, c, file); err != nil {
		t.Fatal(err)
	}
	opts := snapshot.RestoreOptions{SnapshotPath: file, DataDir: dataDir, Force: true, MemberName: "certapi-0",
		PeerURL: "https://certapi-0.certapi-peers.certapi-system.svc:2380", ClusterEpoch: 1}

	for _, tc := range []struct {
		name string
		opts func(snapshot.RestoreOptions) snapshot.RestoreOptions
	}{
		{name: "with --force", opts: func(o snapshot.RestoreOptions) snapshot.RestoreOptions { return o }},
		{name: "without", opts: func(o snapshot.RestoreOptions) snapshot.RestoreOptions { o.Force = false; return o }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := snapshot.Restore(ctx, tc.opts(opts))
			if err == nil {
				t.Fatal("restore into the data dir of a running cluster member succeeded; want a refusal")
			}
			for _, want := range []string{"a member of certapi's etcd cluster is running on " + dataDir, "holds etcd's lock on " + filepath.Join(dataDir, "etcd", "member"),
				"scale statefulset/certapi --replicas=0", "--data-dir=" + dataDir} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("refusal %q does not say %q", err, want)
				}
			}
			if aside, _ := filepath.Glob(filepath.Join(dataDir, "etcd.before-restore-*")); len(aside) != 0 {
				t.Errorf("the refused restore moved data aside: %v", aside)
			}
		})
	}
	// The member still serves: the refusal took no lock away from it.
	if _, err := c.Put(ctx, "/registry/certapi.dev/k2", "v"); err != nil {
		t.Fatalf("a write after the refused restores: %v", err)
	}

	_ = c.Close()
	stop()
	res, err := snapshot.Restore(ctx, opts)
	if err != nil {
		t.Fatalf("restore after the member stopped: %v", err)
	}
	if res.MovedAside == "" {
		t.Error("the restore moved no old data aside")
	}
	if got, err := etcdcluster.ReadEpoch(res.EtcdDir); err != nil || got != 1 {
		t.Errorf("the restored data records epoch %d (%v); want 1", got, err)
	}
}
