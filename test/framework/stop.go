package framework

import (
	"sync"
	"syscall"
)

// Stop stops everything Start started — the certapi replicas (concurrently), the round-robin
// proxy, kube-apiserver, then etcd — with SIGTERM and SIGKILL after a deadline, and waits for the
// processes and the proxy's goroutines to end. It is idempotent and safe to call on a partly
// started control plane. Data and logs stay in Dir.
func (cp *ControlPlane) Stop() {
	cp.mu.Lock()
	cp.stopped = true
	certapis := make([]*Process, 0, len(cp.replicas))
	for _, r := range cp.replicas {
		if r.proc != nil {
			certapis = append(certapis, r.proc)
		}
	}
	proxy, proxyLog := cp.proxy, cp.proxyLog
	apiserver := cp.apiserver
	node := cp.ClusterNode
	var etcds []*Process
	for _, m := range cp.etcdMembers {
		if m.proc != nil {
			etcds = append(etcds, m.proc)
		}
	}
	cp.mu.Unlock()

	var wg sync.WaitGroup
	for _, p := range certapis {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := p.stop(syscall.SIGTERM, certapiStopGrace); err != nil {
				cp.progress("stopping %s: %v", p.name, err)
			}
		}()
	}
	wg.Wait()
	if node != nil {
		// Before kube-apiserver: the nodes' pods are deleted through it. The workers first, while the first
		// node's proxy still lets their kubelets reach kube-apiserver.
		cp.stopWorkers()
		node.stop()
	}
	if proxy != nil {
		proxy.Close()
	}
	if proxyLog != nil {
		proxyLog.Close()
	}
	if apiserver != nil {
		if err := apiserver.stop(syscall.SIGTERM, apiServerStopGrace); err != nil {
			cp.progress("stopping %s: %v", apiserver.name, err)
		}
	}
	for _, p := range etcds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := p.stop(syscall.SIGTERM, etcdStopGrace); err != nil {
				cp.progress("stopping %s: %v", p.name, err)
			}
		}()
	}
	wg.Wait()
}
