package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"maps"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
)

// metricsSnapshot is one scrape of a /metrics endpoint: each sample's value by its series (the metric name
// with its labels, as exposed).
type metricsSnapshot map[string]float64

// scrape reads base+"/metrics" with client.
func scrape(ctx context.Context, client *http.Client, base string) (metricsSnapshot, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scraping %s/metrics: %w", base, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scraping %s/metrics: %s", base, resp.Status)
	}
	snap := metricsSnapshot{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			snap[line[:i]] = v
		}
	}
	return snap, sc.Err()
}

// sum adds up, by the values of the labels named in by, the samples of metric that changed from before
// to s. Series that did not exist before count from zero.
func (s metricsSnapshot) sum(before metricsSnapshot, metric string, by ...string) map[string]float64 {
	out := map[string]float64{}
	for series, v := range s {
		if !strings.HasPrefix(series, metric+"{") {
			continue
		}
		d := v - before[series]
		if d == 0 {
			continue
		}
		var key []string
		for _, label := range by {
			key = append(key, labelValue(series, label))
		}
		out[strings.Join(key, " ")] += d
	}
	return out
}

// labelValue returns the value of label in a series as exposed (name{a="x",b="y"}), or "".
func labelValue(series, label string) string {
	i := strings.Index(series, "{"+label+`="`)
	if i < 0 {
		i = strings.Index(series, ","+label+`="`)
	}
	if i < 0 {
		return ""
	}
	v := series[i+len(label)+3:]
	return v[:strings.IndexByte(v, '"')]
}

// phaseMetrics is what is compared at the two ends of a phase: certapi's and kube-apiserver's /metrics,
// and the CPU time used so far by each process of the local control plane and by this one.
type phaseMetrics struct {
	certapi, kube metricsSnapshot
	cpu           map[string]time.Duration
}

// clockTicks is the unit of the CPU times in /proc/<pid>/stat (USER_HZ, 100 on every Linux platform Go
// supports).
const clockTicks = 100

// cpuTimes returns the user+system CPU time of each process of the local control plane (by name) and of
// this load generator ("load").
func (l *loader) cpuTimes() (map[string]time.Duration, error) {
	out := map[string]time.Duration{}
	for name, pid := range l.cp.PIDs() {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return nil, fmt.Errorf("reading the CPU time of %s: %w", name, err)
		}
		// The command name (field 2) may hold spaces; utime and stime are fields 14 and 15.
		fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(fields) < 13 {
			return nil, fmt.Errorf("unexpected /proc/%d/stat of %s: %q", pid, name, stat)
		}
		var ticks int64
		for _, f := range fields[11:13] {
			v, err := strconv.ParseInt(f, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("unexpected /proc/%d/stat of %s: %w", pid, name, err)
			}
			ticks += v
		}
		out[name] = time.Duration(ticks) * time.Second / clockTicks
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return nil, fmt.Errorf("reading this process's CPU time: %w", err)
	}
	out["load"] = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	return out, nil
}

func (l *loader) scrapeBoth(ctx context.Context) (phaseMetrics, error) {
	var m phaseMetrics
	certapiClient, err := l.cp.CertapiHTTPClient()
	if err != nil {
		return m, err
	}
	kubeClient, err := rest.HTTPClientFor(l.cp.AdminConfig)
	if err != nil {
		return m, err
	}
	if m.certapi, err = scrape(ctx, certapiClient, l.cp.CertapiURL); err != nil {
		return m, err
	}
	if m.kube, err = scrape(ctx, kubeClient, l.cp.APIServerURL); err != nil {
		return m, err
	}
	m.cpu, err = l.cpuTimes()
	return m, err
}

// printPhase prints what a phase of n units (requests, issuances) cost: the CPU time of each process,
// the API calls certapi made and the requests kube-apiserver served, per unit, and how many items each
// of the leader's work queues handled, with their mean wait in the queue and mean work time.
func printPhase(before, after phaseMetrics, n int, unit string) {
	var total time.Duration
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(after.cpu)) {
		d := after.cpu[name] - before.cpu[name]
		total += d
		parts = append(parts, fmt.Sprintf("%s %.2f ms", name, float64(d)/float64(time.Millisecond)/float64(n)))
	}
	fmt.Printf("  CPU time per %s: %.2f ms in all (%s)\n", unit, float64(total)/float64(time.Millisecond)/float64(n), strings.Join(parts, ", "))
	printPer := func(title string, m map[string]float64) {
		fmt.Printf("  %s, per %s:\n", title, unit)
		for _, k := range slices.Sorted(maps.Keys(m)) {
			if per := m[k] / float64(n); per >= 0.05 {
				fmt.Printf("    %-60s %5.2f\n", k, per)
			}
		}
	}
	printPer("certapi's API calls (rest_client_requests_total: host method)",
		after.certapi.sum(before.certapi, "rest_client_requests_total", "host", "method"))
	printPer("kube-apiserver's requests (apiserver_request_total: verb group resource subresource)",
		after.kube.sum(before.kube, "apiserver_request_total", "verb", "group", "resource", "subresource"))
	counts := after.certapi.sum(before.certapi, "workqueue_queue_duration_seconds_count", "name")
	waits := after.certapi.sum(before.certapi, "workqueue_queue_duration_seconds_sum", "name")
	works := after.certapi.sum(before.certapi, "workqueue_work_duration_seconds_sum", "name")
	for _, name := range slices.Sorted(maps.Keys(counts)) {
		c := counts[name]
		wait := time.Duration(waits[name] / c * float64(time.Second))
		work := time.Duration(works[name] / c * float64(time.Second))
		fmt.Printf("  queue %-26s %6.0f items, mean wait %8s, mean work %8s\n", name, c, wait.Round(10*time.Microsecond), work.Round(10*time.Microsecond))
	}
}
