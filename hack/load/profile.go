package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"k8s.io/client-go/rest"
)

// profileChunk is the length of one CPU profile of --profile. A phase's length is not known when it
// starts, and a CPU profile served by /debug/pprof/profile has a length fixed in advance, so a phase is
// profiled in back-to-back chunks until it ends; `go tool pprof` merges the files it is given. The last
// chunk runs past the phase's end by less than this.
const profileChunk = time.Second

// profiler takes CPU profiles of certapi (replica 0) and kube-apiserver while one phase runs, and
// certapi's heap profiles when it starts and ends, into the --profile directory:
// <phase>-certapi-cpu-NN.pprof, <phase>-kube-apiserver-cpu-NN.pprof, <phase>-certapi-heap-start.pprof and
// <phase>-certapi-heap.pprof.
//
// Profiling costs certapi CPU of its own (a few milliseconds per chunk): the CPU figures of a run with
// --profile are a little higher than without.
type profiler struct {
	l     *loader
	phase string
	// certapi and kube reach the two servers' /debug/pprof.
	certapi, kube *http.Client
	// stop ends the chunks after the one in progress; done reports how many chunks were written and the
	// first error.
	stop chan struct{}
	done chan profileResult
}

type profileResult struct {
	chunks int
	err    error
}

// startProfile starts profiling the phase; it returns nil, whose finish does nothing, without --profile
// or --local.
func (l *loader) startProfile(ctx context.Context, phase string) (*profiler, error) {
	if l.o.profile == "" || l.cp == nil {
		return nil, nil
	}
	if err := os.MkdirAll(l.o.profile, 0o755); err != nil {
		return nil, fmt.Errorf("--profile: %w", err)
	}
	certapiClient, err := l.cp.CertapiHTTPClient()
	if err != nil {
		return nil, err
	}
	certapiClient.Timeout = 0 // each fetch has a context of its own
	kubeClient, err := rest.HTTPClientFor(l.cp.AdminConfig)
	if err != nil {
		return nil, err
	}
	p := &profiler{l: l, phase: phase, certapi: certapiClient, kube: kubeClient, stop: make(chan struct{}), done: make(chan profileResult, 1)}
	// The heap profile counts what was allocated since certapi started: the one taken at the start is the
	// base from which the phase's own allocations are read (-diff_base).
	if err := p.fetch(ctx, p.certapi, l.cp.CertapiURL, "/debug/pprof/heap", p.file("certapi-heap-start")); err != nil {
		return nil, err
	}
	go func() {
		n, err := p.chunks(ctx)
		p.done <- profileResult{chunks: n, err: err}
	}()
	return p, nil
}

// chunks takes profileChunk-long CPU profiles of both servers at once, one after another, until stop
// is closed, and returns how many it wrote.
func (p *profiler) chunks(ctx context.Context) (int, error) {
	seconds := int(profileChunk / time.Second)
	for i := 1; ; i++ {
		select {
		case <-p.stop:
			return i - 1, nil
		case <-ctx.Done():
			return i - 1, ctx.Err()
		default:
		}
		var wg sync.WaitGroup
		var errCertapi, errKube error
		wg.Go(func() {
			errCertapi = p.fetch(ctx, p.certapi, p.l.cp.CertapiURL, fmt.Sprintf("/debug/pprof/profile?seconds=%d", seconds), p.file(fmt.Sprintf("certapi-cpu-%02d", i)))
		})
		wg.Go(func() {
			errKube = p.fetch(ctx, p.kube, p.l.cp.APIServerURL, fmt.Sprintf("/debug/pprof/profile?seconds=%d", seconds), p.file(fmt.Sprintf("kube-apiserver-cpu-%02d", i)))
		})
		wg.Wait()
		if err := errors.Join(errCertapi, errKube); err != nil {
			return i - 1, err
		}
	}
}

// file is the path of one profile of the phase.
func (p *profiler) file(what string) string {
	return filepath.Join(p.l.o.profile, p.phase+"-"+what+".pprof")
}

// fetch saves base+path to file.
func (p *profiler) fetch(ctx context.Context, client *http.Client, base, path, file string) error {
	ctx, cancel := context.WithTimeout(ctx, profileChunk+requestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("fetching %s%s: %w", base, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("fetching %s%s: %s", base, path, resp.Status)
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", file, err)
	}
	return f.Close()
}

// finish ends the CPU profiles (the chunk in progress runs to its end), saves certapi's heap profile
// after a GC, and says where the profiles are. A nil profiler does nothing.
func (p *profiler) finish(ctx context.Context) error {
	if p == nil {
		return nil
	}
	close(p.stop)
	res := <-p.done
	heap := p.file("certapi-heap")
	err := errors.Join(res.err, p.fetch(ctx, p.certapi, p.l.cp.CertapiURL, "/debug/pprof/heap?gc=1", heap))
	if res.chunks > 0 {
		fmt.Printf("  profiles of the %s phase (%d s): go tool pprof -top %s (certapi's CPU); go tool pprof -top %s (kube-apiserver's); "+
			"go tool pprof -sample_index=alloc_space -diff_base %s -top %s (what certapi allocated); "+
			"go tool pprof -sample_index=inuse_space -top %s (certapi's live heap at the end)\n",
			p.phase, res.chunks*int(profileChunk/time.Second), p.file("certapi-cpu-*"), p.file("kube-apiserver-cpu-*"),
			p.file("certapi-heap-start"), heap, heap)
	}
	if err != nil {
		return fmt.Errorf("--profile of the %s phase: %w", p.phase, err)
	}
	return nil
}

// collectGarbage runs a GC in certapi (replica 0) through /debug/pprof/heap?gc=1, discarding the profile.
func (l *loader) collectGarbage(ctx context.Context) error {
	_, err := l.heapAfterGC(ctx, false)
	return err
}

// heapAfterGC runs a GC in certapi (replica 0) through /debug/pprof/heap?gc=1 and returns the profile,
// in text with the runtime's MemStats when debug is set.
func (l *loader) heapAfterGC(ctx context.Context, debug bool) ([]byte, error) {
	client, err := l.cp.CertapiHTTPClient()
	if err != nil {
		return nil, err
	}
	client.Timeout = time.Minute
	path := "/debug/pprof/heap?gc=1"
	if debug {
		path += "&debug=1"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, l.cp.CertapiURL+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("running a GC in certapi: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("running a GC in certapi: %s", resp.Status)
	}
	if !debug {
		_, err = io.Copy(io.Discard, resp.Body)
		return nil, err
	}
	return io.ReadAll(resp.Body)
}
