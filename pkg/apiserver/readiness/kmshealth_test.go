package readiness

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"testing"

	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/healthz"
)

func checkNames(checks []healthz.HealthChecker) []string {
	var names []string
	for _, c := range checks {
		names = append(names, c.Name())
	}
	return names
}

func TestKMSChecksOutOfReadyz(t *testing.T) {
	ok := func(*http.Request) error { return nil }
	for _, tc := range []struct {
		name              string
		readyz, healthz   []string
		wantReadyz, moved []string
	}{
		{
			name:       "static configuration, two providers",
			readyz:     []string{"ping", "etcd", "kms-provider-0", "etcd-readiness", "kms-provider-1"},
			healthz:    []string{"ping", "etcd", "kms-provider-0", "kms-provider-1"},
			wantReadyz: []string{"ping", "etcd", "etcd-readiness"},
			moved:      []string{"kms-provider-0", "kms-provider-1"},
		},
		{
			name:       "automatic reload",
			readyz:     []string{"ping", "kms-providers", "etcd"},
			healthz:    []string{"ping", "kms-providers", "etcd"},
			wantReadyz: []string{"ping", "etcd"},
			moved:      []string{"kms-providers"},
		},
		{
			name:       "no KMS provider",
			readyz:     []string{"ping", "etcd", "certapi-certificate-authority"},
			healthz:    []string{"ping", "etcd"},
			wantReadyz: []string{"ping", "etcd", "certapi-certificate-authority"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c genericapiserver.Config
			for _, n := range tc.readyz {
				c.ReadyzChecks = append(c.ReadyzChecks, healthz.NamedCheck(n, ok))
			}
			for _, n := range tc.healthz {
				c.HealthzChecks = append(c.HealthzChecks, healthz.NamedCheck(n, ok))
			}
			moved := kmsChecksOutOfReadyz(&c)
			if got := checkNames(c.ReadyzChecks); !slices.Equal(got, tc.wantReadyz) {
				t.Errorf("/readyz checks %v, want %v", got, tc.wantReadyz)
			}
			if got := checkNames(moved); !slices.Equal(got, tc.moved) {
				t.Errorf("moved %v, want %v", got, tc.moved)
			}
			if got := checkNames(c.HealthzChecks); !slices.Equal(got, tc.healthz) {
				t.Errorf("/healthz checks %v, want them unchanged: %v", got, tc.healthz)
			}
		})
	}
}

func TestKMSHealthReporterObserve(t *testing.T) {
	down := errors.New("connection refused")
	// Each step sets the result of check kms-provider-0 and says which change observe must report.
	for _, tc := range []struct {
		name  string
		steps []error
		want  []string // per step: "" no change, "down", "up"
	}{
		{"healthy from the start: nothing to say", []error{nil, nil}, []string{"", ""}},
		{"down from the start", []error{down, down, nil}, []string{"down", "", "up"}},
		{"goes down and comes back", []error{nil, down, down, nil, nil}, []string{"", "down", "", "up", ""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var result error
			r := &kmsHealthReporter{
				checks:  []healthz.HealthChecker{healthz.NamedCheck("kms-provider-0", func(*http.Request) error { return result })},
				healthy: map[string]bool{},
			}
			for i, step := range tc.steps {
				result = step
				changes := r.observe(context.Background())
				got := ""
				switch {
				case len(changes) > 1:
					t.Fatalf("step %d: %d changes", i, len(changes))
				case len(changes) == 1 && changes[0].err != nil:
					got = "down"
				case len(changes) == 1:
					got = "up"
				}
				if got != tc.want[i] {
					t.Fatalf("step %d: change %q, want %q", i, got, tc.want[i])
				}
			}
		})
	}
}
