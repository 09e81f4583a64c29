//go:build chaos

package multinode

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/certapi/certapi/test/framework"
	"github.com/certapi/certapi/test/node/nodetest"
)

// Environment variables of TestChaos; make chaos sets them.
const (
	// EnvChaosSeeds is a comma-separated list of seeds, one schedule each (default: one fixed seed).
	EnvChaosSeeds = "CERTAPI_CHAOS_SEEDS"
	// EnvChaosFaults is the number of faults of each schedule (default 2).
	EnvChaosFaults = "CERTAPI_CHAOS_FAULTS"
	// EnvChaosReport names a file the results are written to, as a Markdown table.
	EnvChaosReport = "CERTAPI_CHAOS_REPORT"
)

// fault is one fault of a schedule: made to a worker for a while, then undone.
type fault struct {
	name string
	// make makes the fault to node; undo ends it.
	make, undo func(ctx context.Context, node *framework.ClusterNode) error
}

// faults are the faults a schedule picks from.
var faults = []fault{
	{"stopped hard (link down, frozen)",
		func(ctx context.Context, n *framework.ClusterNode) error { return n.StopHard(ctx) },
		func(ctx context.Context, n *framework.ClusterNode) error { return n.Resume(ctx) }},
	{"frozen, link up (a hung machine)",
		func(ctx context.Context, n *framework.ClusterNode) error { return n.Freeze(ctx) },
		func(ctx context.Context, n *framework.ClusterNode) error { return n.Thaw(ctx) }},
	{"partitioned from the other nodes, not from kube-apiserver",
		func(ctx context.Context, n *framework.ClusterNode) error { return cp.PartitionFromOthers(ctx, n) },
		func(ctx context.Context, _ *framework.ClusterNode) error { return cp.Heal(ctx) }},
	{"cut off from kube-apiserver, not from the other nodes",
		func(ctx context.Context, n *framework.ClusterNode) error { return cp.IsolateFromControlPlane(ctx, n) },
		func(ctx context.Context, _ *framework.ClusterNode) error { return cp.Heal(ctx) }},
	{"its packets to one other node dropped (an asymmetric partition)",
		func(ctx context.Context, n *framework.ClusterNode) error {
			for _, o := range cp.Workers {
				if o != n {
					return cp.Partition(ctx, n, o, true)
				}
			}
			return nil
		},
		func(ctx context.Context, _ *framework.ClusterNode) error { return cp.Heal(ctx) }},
	{"30% of its packets lost",
		func(ctx context.Context, n *framework.ClusterNode) error { return cp.DropPackets(ctx, n, 0.3) },
		func(ctx context.Context, _ *framework.ClusterNode) error { return cp.Heal(ctx) }},
}

// TestChaos runs seeded schedules of faults (faults, on a worker chosen by the seed, for 10 to 40 s each,
// then undone and the cluster healed to three Ready pods and three voters before the next) under the
// checker's workload, and holds each schedule's history against the end (nodetest.CheckHistory): nothing
// acknowledged lost, every certificate signed by the one line of CAs, the CA unchanged. The seed is
// printed: CERTAPI_CHAOS_SEEDS=<seed> replays a schedule's faults (the cluster's timing is not replayed).
// Built with the tag chaos only: make chaos runs it (several seeds of several faults each, about an hour);
// make test runs the checker under one fixed fault (TestNodeLost), within its time budget.
func TestChaos(t *testing.T) {
	ctx := context.Background()
	seeds, err := chaosSeeds()
	if err != nil {
		t.Fatal(err)
	}
	perSeed := 2
	if v := os.Getenv(EnvChaosFaults); v != "" {
		if perSeed, err = strconv.Atoi(v); err != nil || perSeed < 1 {
			t.Fatalf("%s=%q: want a number of faults, at least 1", EnvChaosFaults, v)
		}
	}
	nodetest.LogPodsOnFailure(t, cp, ns, 3)
	installed(t)
	caBefore, line := caLine(t)
	report := []string{"| seed | fault | node | for | operations from the fault until healed | healed after the fault ended | invariants broken |", "|---|---|---|---|---|---|---|"}
	for _, seed := range seeds {
		rng := rand.New(rand.NewPCG(seed, 1))
		loadNS := fmt.Sprintf("chaos-%d", seed)
		nodetest.Kubectl(t, cp, "create", "namespace", loadNS)
		w := nodetest.StartWorkload(t, cp.AdminConfig, loadNS, 4, seed)
		for i := range perSeed {
			f := faults[rng.IntN(len(faults))]
			node := cp.Workers[rng.IntN(len(cp.Workers))]
			hold := 10*time.Second + time.Duration(rng.IntN(31))*time.Second
			t.Logf("seed %d, fault %d of %d: node %s %s for %s", seed, i+1, perSeed, node.Name, f.name, hold)
			start := time.Now()
			if err := f.make(ctx, node); err != nil {
				t.Fatal(err)
			}
			// Undone at the end whatever happens, so that a failure here does not fail the next test too.
			t.Cleanup(func() {
				_ = f.undo(context.Background(), node)
				_ = cp.Heal(context.Background())
			})
			<-time.After(hold) // the fault itself: nothing to wait for
			if err := f.undo(ctx, node); err != nil {
				t.Fatal(err)
			}
			undone := time.Now()
			nodetest.WaitFor(t, 5*time.Minute, "healed", healed(t, 3))
			healedAfter := time.Since(undone)
			during := since(w.Ops(), start)
			t.Logf("figure: seed %d, node %s %s for %s: %s; failed: %s; healed %s after", seed, node.Name, f.name, hold, nodetest.Summarize(during), nodetest.Answers(during), healedAfter.Round(time.Second))
			report = append(report, fmt.Sprintf("| %d | %s | %s | %s | %s | %s | |", seed, f.name, node.Name, hold, nodetest.Summarize(during), healedAfter.Round(time.Second)))
		}
		history := w.Stop()
		broken := w.Check(t, cp, history, line, ns, selector, fmt.Sprintf("seed %d: ", seed))
		t.Logf("seed %d: %s; %d invariants broken", seed, nodetest.Summarize(history), len(broken))
		report = append(report, fmt.Sprintf("| %d | the whole schedule | | | %s | | %d |", seed, nodetest.Summarize(history), len(broken)))
	}
	if caAfter, _ := caLine(t); nodetest.CACertificates(caAfter) != nodetest.CACertificates(caBefore) {
		t.Errorf("the CA after the schedules: %s; want the one of before, %s", nodetest.CACertificates(caAfter), nodetest.CACertificates(caBefore))
	}
	if file := os.Getenv(EnvChaosReport); file != "" {
		if err := os.WriteFile(file, []byte(strings.Join(report, "\n")+"\n"), 0o644); err != nil {
			t.Error(err)
		}
	}
}

// chaosSeeds returns the seeds of EnvChaosSeeds, or make test's one.
func chaosSeeds() ([]uint64, error) {
	v := os.Getenv(EnvChaosSeeds)
	if v == "" {
		return []uint64{seed}, nil
	}
	var out []uint64
	for _, s := range strings.Split(v, ",") {
		n, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s=%q: want comma-separated numbers", EnvChaosSeeds, v)
		}
		out = append(out, n)
	}
	return out, nil
}
