package framework

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
)

// portSet is the loopback ports of one control plane. It is saved in <Dir>/ports.json so that a
// restarted local stack keeps its URLs (and its kubeconfig stays valid) when the ports are free.
type portSet struct {
	EtcdClient int `json:"etcdClient"`
	EtcdPeer   int `json:"etcdPeer"`
	APIServer  int `json:"apiServer"`
	Certapi    int `json:"certapi"`
	// CertapiReplicas are the ports of certapi replicas 1..N-1 (replica 0 uses Certapi); empty
	// with a single replica.
	CertapiReplicas []int `json:"certapiReplicas,omitempty"`
	// EtcdMemberClients and EtcdMemberPeers are the ports of etcd members 1..N-1 (member 0 uses
	// EtcdClient and EtcdPeer); empty with a single member.
	EtcdMemberClients []int `json:"etcdMemberClients,omitempty"`
	EtcdMemberPeers   []int `json:"etcdMemberPeers,omitempty"`
}

// allocatePorts returns the ports saved in path when they are still free, and fresh free ports
// otherwise, with extraCertapi ports for certapi replicas beyond the first and two ports (client,
// peer) for each of extraEtcd etcd members beyond the first, and saves them.
func allocatePorts(path string, extraCertapi, extraEtcd int) (*portSet, error) {
	ps := &portSet{}
	data, err := os.ReadFile(path)
	switch {
	case err == nil:
		if err := json.Unmarshal(data, ps); err != nil {
			ps = &portSet{} // a broken file only costs new ports
		}
	case !errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	ps.CertapiReplicas = resized(ps.CertapiReplicas, extraCertapi)
	ps.EtcdMemberClients = resized(ps.EtcdMemberClients, extraEtcd)
	ps.EtcdMemberPeers = resized(ps.EtcdMemberPeers, extraEtcd)
	all := []*int{&ps.EtcdClient, &ps.EtcdPeer, &ps.APIServer, &ps.Certapi}
	for _, list := range [][]int{ps.CertapiReplicas, ps.EtcdMemberClients, ps.EtcdMemberPeers} {
		for i := range list {
			all = append(all, &list[i])
		}
	}
	// Saved ports that are still free (once each) stay; the others get fresh ones.
	var kept []int
	var renew []*int
	for _, port := range all {
		if *port > 0 && !slices.Contains(kept, *port) && portFree(*port) {
			kept = append(kept, *port)
		} else {
			renew = append(renew, port)
		}
	}
	fresh, err := FreePorts(len(renew), kept...)
	if err != nil {
		return nil, err
	}
	for i, port := range renew {
		*port = fresh[i]
	}
	data, err = json.MarshalIndent(ps, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encoding ports: %w", err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return nil, fmt.Errorf("writing %s: %w", path, err)
	}
	return ps, nil
}

// resized returns ports cut or padded with zeros (to be allocated) to n entries; nil for none.
func resized(ports []int, n int) []int {
	if n == 0 {
		return nil
	}
	if len(ports) > n {
		return ports[:n]
	}
	for len(ports) < n {
		ports = append(ports, 0)
	}
	return ports
}

// all lists every port of the set.
func (ps *portSet) all() []int {
	out := []int{ps.EtcdClient, ps.EtcdPeer, ps.APIServer, ps.Certapi}
	out = append(out, ps.CertapiReplicas...)
	out = append(out, ps.EtcdMemberClients...)
	return append(out, ps.EtcdMemberPeers...)
}
