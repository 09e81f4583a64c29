package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"k8s.io/client-go/rest"
)

// cpuProfileSeconds is how long --cpu-profile profiles: about the length of a 500-Secret run.
const cpuProfileSeconds = 5

// cpuProfiles starts taking seconds-long CPU profiles of certapi and kube-apiserver at once, writes them
// to o.cpuProfile plus ".certapi" and ".kube-apiserver", and reports on the channel when both are done.
func (l *loader) cpuProfiles(ctx context.Context, seconds int) <-chan error {
	done := make(chan error, 1)
	certapiClient, err := l.cp.CertapiHTTPClient()
	if err != nil {
		done <- err
		return done
	}
	certapiClient.Timeout = 0 // the context bounds the profile
	kubeClient, err := rest.HTTPClientFor(l.cp.AdminConfig)
	if err != nil {
		done <- err
		return done
	}
	fetch := func(client *http.Client, base, file string) error {
		ctx, cancel := context.WithTimeout(ctx, time.Duration(seconds)*time.Second+requestTimeout)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", base, seconds), nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return fmt.Errorf("profiling %s: %w", base, err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("profiling %s: %s", base, resp.Status)
		}
		f, err := os.Create(file)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(f, resp.Body)
		return err
	}
	errs := make(chan error, 2)
	go func() { errs <- fetch(certapiClient, l.cp.CertapiURL, l.o.cpuProfile+".certapi") }()
	go func() { errs <- fetch(kubeClient, l.cp.APIServerURL, l.o.cpuProfile+".kube-apiserver") }()
	go func() { done <- errors.Join(<-errs, <-errs) }()
	return done
}

// heapProfile runs a GC in certapi and saves its /debug/pprof/heap to o.heap (discarded when that is "").
func (l *loader) heapProfile(ctx context.Context) error {
	client, err := l.cp.CertapiHTTPClient()
	if err != nil {
		return err
	}
	client.Timeout = time.Minute
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, l.cp.CertapiURL+"/debug/pprof/heap?gc=1", nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("fetching the heap profile: %w", err)
	}
	defer resp.Body.Close()
	if l.o.heap == "" {
		_, err = io.Copy(io.Discard, resp.Body)
		return err
	}
	f, err := os.Create(l.o.heap)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(f, resp.Body)
	return err
}
