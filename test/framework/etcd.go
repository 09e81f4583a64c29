package framework

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// etcdMember is one etcd slot: a fixed name, ports and data directory, and the process running in
// it (nil before its first start).
type etcdMember struct {
	index     int
	name      string // process name, its key in Logs
	clientURL string
	args      []string

	// startMu serialises starting and stopping this member (not the wait for health).
	startMu sync.Mutex
	proc    *Process // guarded by ControlPlane.mu
}

// newEtcdMembers lays out n etcd members. A single member keeps the layout of earlier versions of
// the framework (name "default", data in <Dir>/etcd, process name "etcd"), so that a reused Dir
// keeps its data; with several, member i is "etcd-<i>" with data in <Dir>/etcd-<i>.
func (cp *ControlPlane) newEtcdMembers(n int, ports *portSet) []*etcdMember {
	clients := append([]int{ports.EtcdClient}, ports.EtcdMemberClients...)
	peers := append([]int{ports.EtcdPeer}, ports.EtcdMemberPeers...)
	ms := make([]*etcdMember, n)
	var initial []string
	for i := range ms {
		name, dataDir, member := ProcessEtcd, filepath.Join(cp.Dir, "etcd"), "default"
		if n > 1 {
			name = ProcessEtcd + "-" + strconv.Itoa(i)
			dataDir, member = filepath.Join(cp.Dir, name), name
		}
		clientURL := "http://127.0.0.1:" + strconv.Itoa(clients[i])
		peerURL := "http://127.0.0.1:" + strconv.Itoa(peers[i])
		initial = append(initial, member+"="+peerURL)
		ms[i] = &etcdMember{index: i, name: name, clientURL: clientURL, args: []string{
			"--name=" + member,
			"--data-dir=" + dataDir,
			"--listen-client-urls=" + clientURL,
			"--advertise-client-urls=" + clientURL,
			"--listen-peer-urls=" + peerURL,
			"--initial-advertise-peer-urls=" + peerURL,
			"--initial-cluster-state=new",
			// Throw-away test data: fsync only costs time. A process crash loses nothing (the page
			// cache survives); only a machine crash could.
			"--unsafe-no-fsync=true",
			"--log-level=warn",
		}}
	}
	for _, m := range ms {
		// Ignored by a member whose data directory already holds the cluster (a restart).
		m.args = append(m.args, "--initial-cluster="+strings.Join(initial, ","))
	}
	return ms
}

// etcdServers is the --etcd-servers value for kube-apiserver and certapi: every member.
func (cp *ControlPlane) etcdServers() string { return strings.Join(cp.EtcdEndpoints, ",") }

// EtcdMembers returns the number of etcd members (Options.EtcdMembers, at least 1).
func (cp *ControlPlane) EtcdMembers() int { return len(cp.etcdMembers) }

// EtcdMemberName returns the process name of etcd member i, its key in Logs: "etcd" with a single
// member, "etcd-<i>" with several; "" when there is no such member.
func (cp *ControlPlane) EtcdMemberName(i int) string {
	if i < 0 || i >= len(cp.etcdMembers) {
		return ""
	}
	return cp.etcdMembers[i].name
}

func (cp *ControlPlane) etcdMember(i int) (*etcdMember, error) {
	if i < 0 || i >= len(cp.etcdMembers) {
		return nil, fmt.Errorf("no etcd member %d: there are %d", i, len(cp.etcdMembers))
	}
	return cp.etcdMembers[i], nil
}

// StartEtcd starts every etcd member that is not running, concurrently (members of a cluster need
// each other to elect a leader), with the flags, ports and data of Start, and waits until each
// running member reports itself healthy on /health.
func (cp *ControlPlane) StartEtcd(ctx context.Context) error {
	var procs []*Process
	for i, m := range cp.etcdMembers {
		if cp.EtcdMemberRunning(i) {
			continue
		}
		p, err := cp.launchEtcdMember(m)
		if err != nil {
			return err
		}
		procs = append(procs, p)
	}
	errs := make([]error, len(cp.etcdMembers))
	var wg sync.WaitGroup
	for i, m := range cp.etcdMembers {
		wg.Go(func() { errs[i] = cp.waitEtcdMember(ctx, m) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// StopEtcd stops every etcd member gracefully (SIGTERM; SIGKILL after a deadline), concurrently, and
// waits for them to exit. Data stays; StartEtcd starts them again on it.
func (cp *ControlPlane) StopEtcd() error {
	errs := make([]error, len(cp.etcdMembers))
	var wg sync.WaitGroup
	for i := range cp.etcdMembers {
		wg.Go(func() { errs[i] = cp.StopEtcdMember(i) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// StartEtcdMember starts etcd member i on its data (stopping it gracefully first if it runs) and
// waits until it reports itself healthy, which needs a quorum of the cluster to be running.
func (cp *ControlPlane) StartEtcdMember(ctx context.Context, i int) error {
	m, err := cp.etcdMember(i)
	if err != nil {
		return fmt.Errorf("StartEtcdMember: %w", err)
	}
	if _, err := cp.launchEtcdMember(m); err != nil {
		return err
	}
	return cp.waitEtcdMember(ctx, m)
}

// StopEtcdMember stops etcd member i gracefully (SIGTERM; SIGKILL after a deadline) and waits for it
// to exit; a no-op when it is not running.
func (cp *ControlPlane) StopEtcdMember(i int) error {
	return cp.signalEtcdMember(i, syscall.SIGTERM)
}

// KillEtcdMember kills etcd member i with SIGKILL and waits for it to exit; a no-op when it is not
// running.
func (cp *ControlPlane) KillEtcdMember(i int) error {
	return cp.signalEtcdMember(i, syscall.SIGKILL)
}

// EtcdMemberRunning reports whether etcd member i is running.
func (cp *ControlPlane) EtcdMemberRunning(i int) bool {
	if i < 0 || i >= len(cp.etcdMembers) {
		return false
	}
	cp.mu.Lock()
	p := cp.etcdMembers[i].proc
	cp.mu.Unlock()
	if p == nil {
		return false
	}
	done, _ := p.Exited()
	return !done
}

func (cp *ControlPlane) signalEtcdMember(i int, sig syscall.Signal) error {
	m, err := cp.etcdMember(i)
	if err != nil {
		return err
	}
	m.startMu.Lock()
	defer m.startMu.Unlock()
	return cp.stopEtcdMember(m, sig)
}

// stopEtcdMember signals m's process and waits for it; the caller holds m.startMu.
func (cp *ControlPlane) stopEtcdMember(m *etcdMember, sig syscall.Signal) error {
	cp.mu.Lock()
	p := m.proc
	cp.mu.Unlock()
	if p == nil {
		return nil
	}
	if err := p.stop(sig, etcdStopGrace); err != nil {
		return fmt.Errorf("stopping %s: %w", m.name, err)
	}
	return nil
}

func (cp *ControlPlane) launchEtcdMember(m *etcdMember) (*Process, error) {
	m.startMu.Lock()
	defer m.startMu.Unlock()
	if err := cp.stopEtcdMember(m, syscall.SIGTERM); err != nil {
		return nil, err
	}
	return cp.launch(m.name, cp.etcdBin, m.args, &m.proc)
}

// waitEtcdMember waits until m answers /health with "health":"true": it has a leader and serves.
func (cp *ControlPlane) waitEtcdMember(ctx context.Context, m *etcdMember) error {
	cp.mu.Lock()
	p := m.proc
	cp.mu.Unlock()
	if p == nil {
		return fmt.Errorf("%s was never started", m.name)
	}
	client := &http.Client{Timeout: healthRequestTimeout}
	defer client.CloseIdleConnections()
	return PollUntil(ctx, pollInterval, etcdReadyTimeout, m.name+" /health at "+m.clientURL, []*Process{p}, func(ctx context.Context) (bool, string) {
		body, code, err := HTTPGet(ctx, client, m.clientURL+"/health")
		if err != nil {
			return false, err.Error()
		}
		return code == http.StatusOK && strings.Contains(body, `"health":"true"`), fmt.Sprintf("HTTP %d: %s", code, body)
	})
}

// etcdProcs returns the processes last started in every etcd slot.
func (cp *ControlPlane) etcdProcs() []*Process {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	var ps []*Process
	for _, m := range cp.etcdMembers {
		if m.proc != nil {
			ps = append(ps, m.proc)
		}
	}
	return ps
}

// EtcdLeader returns the index of the member that leads the etcd cluster (its raft leader), asking
// each running member; an error when none says it leads.
func (cp *ControlPlane) EtcdLeader(ctx context.Context) (int, error) {
	c, err := cp.EtcdClient()
	if err != nil {
		return -1, err
	}
	defer c.Close()
	var errs []error
	for i, m := range cp.etcdMembers {
		if !cp.EtcdMemberRunning(i) {
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, healthRequestTimeout)
		st, err := c.Status(sctx, m.clientURL)
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", m.name, err))
			continue
		}
		if st.Leader != 0 && st.Leader == st.Header.MemberId {
			return i, nil
		}
	}
	return -1, fmt.Errorf("no running etcd member says it leads: %w", errors.Join(errs...))
}
