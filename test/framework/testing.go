package framework

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
)

// logTailLines is how much of each process log StartT prints when a test fails.
const logTailLines = 200

// StartT starts a control plane for a test (in t.TempDir() when opts.Dir is empty) and stops it
// in t.Cleanup. When the test has failed, the cleanup first prints the last lines of every process
// log, and the log paths, with t.Log. A failing Start fails the test with t.Fatal. With opts.Node the
// deadline of Start is StartTimeout plus NodeLockTimeout, the longest wait for another test's node.
func StartT(t testing.TB, opts Options) *ControlPlane {
	t.Helper()
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	if opts.Stdout == nil {
		opts.Stdout = testWriter{t}
	}
	timeout := StartTimeout
	if opts.Node {
		timeout += NodeLockTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cp, err := Start(ctx, opts)
	if err != nil {
		if cp != nil {
			logLogTails(t, cp.Logs())
		}
		t.Fatalf("starting control plane: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			logLogTails(t, cp.Logs())
		}
		cp.Stop()
	})
	return cp
}

// PrintLogTails writes the last lines of every log in logs (process name -> path, as returned by
// ControlPlane.Logs) to w, with the paths, for a failure report.
func PrintLogTails(w io.Writer, logs map[string]string) {
	for _, name := range slices.Sorted(maps.Keys(logs)) {
		fmt.Fprintf(w, "===== %s: last %d lines of %s =====\n%s\n", name, logTailLines, logs[name], tailFile(logs[name], logTailLines))
	}
}

func logLogTails(t testing.TB, logs map[string]string) {
	t.Helper()
	for _, name := range slices.Sorted(maps.Keys(logs)) {
		t.Logf("===== %s: last %d lines of %s =====\n%s", name, logTailLines, logs[name], tailFile(logs[name], logTailLines))
	}
}

// testWriter sends progress lines to t.Log.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\r\n"))
	return len(p), nil
}

// StartMain is Start for a TestMain, which has no testing.T: when the control plane does not start, it
// prints why and the last lines of its logs to standard error, stops what did start and returns nil.
func StartMain(ctx context.Context, opts Options) *ControlPlane {
	cp, err := Start(ctx, opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "starting the control plane: %v\n", err)
		if cp != nil {
			PrintLogTails(os.Stderr, cp.Logs())
			cp.Stop()
		}
		return nil
	}
	return cp
}
