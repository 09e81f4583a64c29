package readiness

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/healthz"
	"k8s.io/klog/v2"
)

// Where a KMS plugin's health is reported.
//
// k8s.io/apiserver adds a check of the EncryptionConfiguration's KMS providers ("kms-providers" when they
// are all KMS v2 or with --encryption-provider-config-automatic-reload, else "kms-provider-<i>" each) to
// /healthz and /readyz, and already keeps it out of /livez: restarting a replica cannot bring a plugin
// back, and the restarted replica could not read the CA keys until the plugin is back. certapi takes it
// out of /readyz too. A plugin is as a rule down for every replica at once (one KMS, one HSM), and
// readiness failing on all of them would empty certapi's Service, make its APIService unavailable and
// degrade discovery for the whole cluster, while the leader still holds the CA key in memory and can
// sign: certapi must never be down as a whole, and not ready would gain nothing, with nowhere better to
// send the traffic. Reads need no plugin (k8s.io/apiserver keeps decrypted DEKs for a day); writes of
// the CA record fail once k8s.io/apiserver's write DEK expires, 3 minutes after the plugin last answered
// Status: never plaintext.
//
// The plugin's health is reported instead on /healthz (/healthz/kms-providers), in k8s.io/apiserver's
// metrics (apiserver_envelope_encryption_kms_operations_latency_seconds counts every call by gRPC status
// code; apiserver_envelope_encryption_key_id_hash_status_last_timestamp_seconds stops moving while Status
// fails), and by a log line when a plugin stops answering and when it answers again (ReportKMSHealth;
// k8s.io/apiserver's own probe logs only at -v=2).

// kmsHealthPeriod is how often ReportKMSHealth asks the checks, as often as k8s.io/apiserver's own
// probe of a healthy plugin.
const kmsHealthPeriod = time.Minute

// isKMSCheck reports whether a check is one of k8s.io/apiserver's KMS provider checks.
func isKMSCheck(name string) bool { return strings.HasPrefix(name, "kms-provider") }

// kmsChecksOutOfReadyz removes the KMS provider checks from c's /readyz checks, leaving /healthz's, and
// returns them.
func kmsChecksOutOfReadyz(c *genericapiserver.Config) []healthz.HealthChecker {
	var kms []healthz.HealthChecker
	kept := c.ReadyzChecks[:0]
	for _, chk := range c.ReadyzChecks {
		if isKMSCheck(chk.Name()) {
			kms = append(kms, chk)
			continue
		}
		kept = append(kept, chk)
	}
	c.ReadyzChecks = kept
	return kms
}

// ReportKMSHealth keeps the KMS provider checks out of /readyz and adds a post-start hook that asks them
// every kmsHealthPeriod until the server stops, logging each change.
func ReportKMSHealth(c *genericapiserver.Config) error {
	checks := kmsChecksOutOfReadyz(c)
	if len(checks) == 0 {
		return nil
	}
	names := make([]string, 0, len(checks))
	for _, chk := range checks {
		names = append(names, chk.Name())
	}
	klog.InfoS("The KMS plugins' health is on /healthz, in metrics and in this log, not on /readyz: certapi keeps signing with the CA it holds while a plugin is down", "checks", names)
	r := &kmsHealthReporter{checks: checks, healthy: map[string]bool{}}
	return c.AddPostStartHook("certapi-kms-health", func(hook genericapiserver.PostStartHookContext) error {
		go r.run(hook.Context, kmsHealthPeriod)
		return nil
	})
}

// kmsHealthReporter logs when a KMS check starts or stops passing.
type kmsHealthReporter struct {
	checks  []healthz.HealthChecker
	healthy map[string]bool // the last result of each check asked before
}

// run asks the checks every period until ctx ends. It is a periodic observer that only logs, with nothing
// to sync and nothing to retry, so it runs on a ticker rather than on the project's queue
// (pkg/controller.Queue), which is for syncing a key until it succeeds.
func (r *kmsHealthReporter) run(ctx context.Context, period time.Duration) {
	logger := klog.FromContext(ctx)
	ticker := time.NewTicker(period)
	defer ticker.Stop()
	for {
		for _, ch := range r.observe(ctx) {
			if ch.err != nil {
				logger.Error(ch.err, "WARNING: the KMS plugin does not answer: certapi signs with the CA it holds, but storing a CA fails from 3 minutes after its last answer (a rotation waits), and a restarted replica cannot read the CA keys, until it answers again", "check", ch.name)
			} else {
				logger.Info("The KMS plugin answers again", "check", ch.name)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// kmsHealthChange is one check whose result changed: err is nil when it passes now.
type kmsHealthChange struct {
	name string
	err  error
}

// observe asks every check once and returns those whose result changed since the last time; a failing
// check asked for the first time counts as a change, a passing one does not.
func (r *kmsHealthReporter) observe(ctx context.Context) []kmsHealthChange {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "/healthz", nil)
	if err != nil {
		return []kmsHealthChange{{name: "request", err: fmt.Errorf("building a health request: %w", err)}}
	}
	var changes []kmsHealthChange
	for _, chk := range r.checks {
		err := chk.Check(req)
		was, asked := r.healthy[chk.Name()]
		r.healthy[chk.Name()] = err == nil
		if changed := (asked && was != (err == nil)) || (!asked && err != nil); changed {
			changes = append(changes, kmsHealthChange{name: chk.Name(), err: err})
		}
	}
	return changes
}
