package framework

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
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
		if *port > 0 && !slices.Contains(kept, *port) && portFree(*port) && (reservedHere(*port) || reservePort(*port)) {
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

// Ports the framework picks itself lie in [minStaticPort, start of the kernel's ephemeral range).
const minStaticPort = 20000

// FreePorts returns n distinct TCP ports on 127.0.0.1 that were free a moment ago, none of them in
// exclude, for processes the caller starts next to a control plane. Like the control plane's own
// ports they lie below the kernel's ephemeral range when it is known (see freePort).
func FreePorts(n int, exclude ...int) ([]int, error) {
	ports := make([]int, 0, n)
	for len(ports) < n {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		if !slices.Contains(exclude, p) && !slices.Contains(ports, p) {
			ports = append(ports, p)
		}
	}
	return ports, nil
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago and that this process has
// reserved (see reservePort). It prefers a port below the kernel's ephemeral range: a process
// restarted on its port (StartReplica, StartCertapi) could otherwise find it taken by the source
// port of some outgoing loopback connection meanwhile.
func freePort() (int, error) {
	if lo := ephemeralPortStart(); lo > minStaticPort+1000 {
		for range 100 {
			p := minStaticPort + rand.IntN(lo-minStaticPort)
			if portFree(p) && reservePort(p) {
				return p, nil
			}
		}
	}
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("finding a free port: %w", err)
		}
		p := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if reservePort(p) {
			return p, nil
		}
	}
	return 0, errors.New("finding a free port: every port tried is reserved by another test process")
}

// reservations holds, for the life of this process, the lock of every port it reserved.
var reservations = struct {
	sync.Mutex
	files map[int]*os.File
}{files: map[int]*os.File{}}

// reservedHere reports whether this process holds port's reservation: a control plane restarted in
// this process on its saved ports keeps them.
func reservedHere(port int) bool {
	reservations.Lock()
	defer reservations.Unlock()
	_, ok := reservations.files[port]
	return ok
}

// reservePort takes an exclusive lock on a file named after port in a directory every test process
// of this machine shares, and reports whether it got it. A port that is free when picked stays
// unbound until the process that picked it starts its server; without the lock, make test's
// packages, run side by side, picked the same port in that window now and then, and one server
// failed with "address already in use". The kernel drops the lock when the process ends, however it
// ends, so no reservation outlives its process. A port this process already reserved is reported
// as taken, so that two control planes of one process never share one either.
func reservePort(port int) bool {
	reservations.Lock()
	defer reservations.Unlock()
	if _, ok := reservations.files[port]; ok {
		return false
	}
	dir := filepath.Join(os.TempDir(), "certapi-test-ports")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return true // without the directory, fall back to the free check alone
	}
	f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(port)), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return true
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return false
	}
	reservations.files[port] = f
	return true
}

// ephemeralPortStart returns the first port of the kernel's ephemeral range, or 0 when unknown.
func ephemeralPortStart() int {
	data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	fields := strings.Fields(string(data))
	if len(fields) != 2 {
		return 0
	}
	lo, err := strconv.Atoi(fields[0])
	if err != nil || lo > 65535 {
		return 0
	}
	return lo
}

// portFree reports whether port can be bound on 127.0.0.1 now.
func portFree(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}
