package apiserver

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apiserver/pkg/server/egressselector"
	"k8s.io/apiserver/pkg/storage/storagebackend"
)

// newEtcdClient opens the issuer's own etcd client, to the servers and with the TLS files the storage
// layer uses: leader election, fenced CA writes and handoffs need etcd primitives the registry hides.
func newEtcdClient(t storagebackend.TransportConfig) (*clientv3.Client, error) {
	cfg := clientv3.Config{Endpoints: t.ServerList, DialTimeout: 10 * time.Second}
	if tcpEndpoints(t.ServerList) {
		cfg.DialOptions = []grpc.DialOption{grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return patientDial(ctx, "tcp", hostPort(addr))
		})}
	}
	if t.CertFile != "" || t.KeyFile != "" || t.TrustedCAFile != "" {
		tlsInfo := transport.TLSInfo{CertFile: t.CertFile, KeyFile: t.KeyFile, TrustedCAFile: t.TrustedCAFile}
		tlsConfig, err := tlsInfo.ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("loading etcd client TLS files: %w", err)
		}
		cfg.TLS = tlsConfig
	}
	client, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("connecting to etcd %v: %w", t.ServerList, err)
	}
	return client, nil
}

// etcdRedialInterval is how often a connection to an unreachable etcd member is tried again within one
// connection attempt of gRPC's.
const etcdRedialInterval = 250 * time.Millisecond

// patientDial dials addr and, while that fails, tries again every etcdRedialInterval until ctx ends (gRPC
// gives a connection attempt at least 20 s). Left to itself, gRPC fails an attempt at once and backs off
// exponentially before the next (1 s, 1.6 s, 2.6 s, ... up to 2 minutes), so after an etcd outage of 20 s
// its clients came back 5-7 s after etcd did; with this they come back within a fraction of a second.
func patientDial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		conn, err := d.DialContext(ctx, network, addr)
		if err == nil {
			return conn, nil
		}
		t.Reset(etcdRedialInterval)
		select {
		case <-ctx.Done():
			return nil, err
		case <-t.C:
		}
	}
}

// patientEgress gives the storage layer's etcd clients patientDial (as storagebackend.Config's
// EgressLookup, the one dialer hook k8s.io/apiserver has for them).
func patientEgress(egressselector.NetworkContext) (utilnet.DialFunc, error) {
	return patientDial, nil
}

// tcpEndpoints reports whether every etcd server is an http or https URL, reached over TCP: the storage
// layer's dialer hook dials TCP only, so the embedded etcd's Unix sockets keep gRPC's own dialer.
func tcpEndpoints(servers []string) bool {
	if len(servers) == 0 {
		return false
	}
	for _, s := range servers {
		u, err := url.Parse(s)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
			return false
		}
	}
	return true
}

// hostPort strips a scheme from addr, as etcd clients before 3.5 passed URLs to the dialer.
func hostPort(addr string) string {
	if strings.Contains(addr, "//") {
		if u, err := url.Parse(addr); err == nil {
			return u.Host
		}
	}
	return addr
}
