package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
)

// memory creates o.requests ServingCertRequests and reports certapi's resident set size.
func (l *loader) memory(ctx context.Context) error {
	o := l.o
	if l.cp == nil {
		return fmt.Errorf("--requests needs --local: it reads certapi's memory from /proc")
	}
	scrs := l.certapi.CertapiV1alpha1().ServingCertRequests(o.namespace)
	before, err := l.certapiMemory()
	if err != nil {
		return err
	}
	start := time.Now()
	createCtx, cancel := context.WithTimeout(ctx, createTimeout)
	defer cancel()
	failed, _ := forEachParallel(createCtx, 0, o.requests, func(ctx context.Context, i int) error {
		name := fmt.Sprintf("m%d", i)
		_, err := scrs.Create(ctx, &certapiv1alpha1.ServingCertRequest{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       certapiv1alpha1.ServingCertRequestSpec{ServiceName: name, DNSNames: []string{"*." + name + "." + o.namespace + ".svc"}},
		}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
	if failed > 0 {
		return fmt.Errorf("%d of %d creates failed", failed, o.requests)
	}
	// A full list through the API, as a controller's relist would do, then measure.
	if _, err := scrs.List(createCtx, metav1.ListOptions{}); err != nil {
		return err
	}
	created := time.Since(start)
	after, err := l.certapiMemory()
	if err != nil {
		return err
	}
	// The burst of creates leaves garbage the runtime has not collected or returned yet: run a GC through
	// pprof (?gc=1) and let the scavenger return freed pages, then measure the steady state.
	if err := l.collectGarbage(ctx); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(settleTime):
	}
	steady, err := l.certapiMemory()
	if err != nil {
		return err
	}
	fmt.Printf("memory: certapi RSS %s before, %s right after creating %d ServingCertRequests (in %s), %s 30 s after a GC "+
		"(anonymous: heap and stacks; file: the pages of certapi's binary the kernel maps)\n",
		before, after, o.requests, created.Round(time.Millisecond), steady)
	// Where the anonymous memory goes, from the Go runtime's own figures (after one more GC).
	heap, err := l.heapAfterGC(ctx, true)
	if err != nil {
		return err
	}
	fmt.Printf("  %s\n", runtimeMemory(heap))
	return nil
}

// runtimeMemory summarises the runtime.MemStats at the end of a /debug/pprof/heap?debug=1 profile taken
// right after a GC (HeapAlloc is then the live heap), in MiB. Stack, MSpan and MCache are printed as "in
// use / obtained": the first number is taken.
func runtimeMemory(profile []byte) string {
	stats := map[string]int64{}
	for line := range strings.Lines(string(profile)) {
		key, value, ok := strings.Cut(strings.TrimPrefix(line, "# "), " = ")
		if !ok {
			continue
		}
		var n int64
		if _, err := fmt.Sscanf(value, "%d", &n); err == nil {
			stats[key] = n
		}
	}
	mib := func(n int64) string { return fmt.Sprintf("%.1f", float64(n)/(1<<20)) }
	return fmt.Sprintf("Go runtime after a GC, MiB: live heap %s, heap spans in use %s, free heap not returned to the OS %s, "+
		"next GC at %s; stacks %s; runtime metadata (spans, GC, other) %s",
		mib(stats["HeapAlloc"]), mib(stats["HeapInuse"]), mib(stats["HeapIdle"]-stats["HeapReleased"]), mib(stats["NextGC"]),
		mib(stats["Stack"]), mib(stats["MSpan"]+stats["MCache"]+stats["BuckHashSys"]+stats["GCSys"]+stats["OtherSys"]))
}

// memSample is a process's resident memory, in bytes.
type memSample struct {
	rss  int64 // all of it
	anon int64 // its anonymous part: heap and stacks; the rest maps the binary
}

// String is the sample in MiB: all of it, then its anonymous and file parts.
func (m memSample) String() string {
	return fmt.Sprintf("%d MiB (%d anonymous, %d file)", m.rss>>20, m.anon>>20, (m.rss-m.anon)>>20)
}

// certapiMemory reads the resident memory of certapi (replica 0) of the --local control plane from
// /proc/<pid>/status.
func (l *loader) certapiMemory() (memSample, error) {
	pid := l.cp.ReplicaPID(0)
	if pid == 0 {
		return memSample{}, fmt.Errorf("%s of the local control plane is not running", l.cp.ReplicaName(0))
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return memSample{}, err
	}
	var m memSample
	for line := range strings.Lines(string(status)) {
		key, value, _ := strings.Cut(line, ":")
		var kb int64
		if _, err := fmt.Sscanf(value, "%d", &kb); err != nil {
			continue
		}
		switch key {
		case "VmRSS":
			m.rss = kb << 10
		case "RssAnon":
			m.anon = kb << 10
		}
	}
	if m.rss == 0 {
		return memSample{}, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
	}
	return m, nil
}
