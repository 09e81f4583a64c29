package servedcert

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/certapi/certapi/pkg/controller/injector"
	"github.com/certapi/certapi/pkg/servedcert"
)

// EndpointResult is what one endpoint of a target serves.
type EndpointResult struct {
	// Address is the host:port probed.
	Address string
	servedcert.Result
}

// TargetResult is what a target's endpoints serve, as the verifier last saw it.
type TargetResult struct {
	Target injector.ServedTarget
	// State is the worst state of its endpoints (servedcert.Worse), or NoEndpoints.
	State servedcert.State
	// Message says what was found: the worst endpoint's message, with its address.
	Message string
	// Endpoints are the probed endpoints, sorted by address.
	Endpoints []EndpointResult
}

// Aggregate makes a target's result from its endpoints' (nil entries are endpoints not probed yet):
// ok=false while any is not probed yet, so that a half-probed target is not reported. why, when not
// empty, is a NoEndpoints reason and the endpoints are ignored.
func Aggregate(t injector.ServedTarget, why string, endpoints []*EndpointResult) (TargetResult, bool) {
	r := TargetResult{Target: t}
	if why != "" {
		r.State, r.Message = servedcert.NoEndpoints, why
		return r, true
	}
	var worst *EndpointResult
	for _, e := range endpoints {
		if e == nil {
			return r, false
		}
		r.Endpoints = append(r.Endpoints, *e)
		if worst == nil || servedcert.Worse(e.State, worst.State) {
			worst = e
		}
	}
	if worst == nil {
		return r, false
	}
	r.State = worst.State
	r.Message = fmt.Sprintf("%s: %s", worst.Address, worst.Message)
	if n := len(endpoints); n > 1 {
		bad := 0
		for _, e := range endpoints {
			if e.State == worst.State {
				bad++
			}
		}
		r.Message = fmt.Sprintf("%d of %d endpoints %s; %s", bad, n, worst.State, r.Message)
	}
	return r, true
}

// Describe names a target as status and Events do: "<Kind> <name>", with " webhook <name>" for a
// webhook configuration's entry, and the Service it reaches.
func Describe(t injector.ServedTarget) string {
	return fmt.Sprintf("%s (Service %s/%s port %d)", SlotName(t), t.Service.Namespace, t.Service.Name, t.Service.Port)
}

// SlotName names a target as status does: "<Kind> <name>[ webhook <webhook>]".
func SlotName(t injector.ServedTarget) string {
	name := string(t.Kind) + " " + t.Name
	if t.Slot != "" {
		name += " webhook " + t.Slot
	}
	return name
}

// EndpointName names one endpoint of a target as status does: "<Kind> <name>[ webhook <webhook>]: <host:port>".
func EndpointName(t injector.ServedTarget, addr string) string { return SlotName(t) + ": " + addr }

// Summary counts targets by state and names the worst ones.
type Summary struct {
	// Targets is the number of targets; Counts the number in each state.
	Targets int
	Counts  map[servedcert.State]int
	// Worst are the failing targets (servedcert.State.Failing) and those expiring soon, worst first,
	// then by name, at most max of them.
	Worst []TargetResult
}

// Summarize counts results by state and keeps the max worst (failing or expiring) targets.
func Summarize(results []TargetResult, max int) Summary {
	s := Summary{Targets: len(results), Counts: map[servedcert.State]int{}}
	var bad []TargetResult
	for _, r := range results {
		s.Counts[r.State]++
		if r.State != servedcert.Verified {
			bad = append(bad, r)
		}
	}
	slices.SortStableFunc(bad, func(a, b TargetResult) int {
		if a.State != b.State {
			if servedcert.Worse(a.State, b.State) {
				return -1
			}
			return 1
		}
		return strings.Compare(Describe(a.Target), Describe(b.Target))
	})
	if len(bad) > max {
		bad = bad[:max]
	}
	s.Worst = bad
	return s
}

// jitter spreads a periodic re-probe over [0.9, 1.1) of interval, with r in [0, 1), so that the
// targets found at once are not probed in one burst ever after.
func jitter(interval time.Duration, r float64) time.Duration {
	return time.Duration(float64(interval) * (0.9 + 0.2*r))
}
