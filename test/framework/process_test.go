package framework

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestProcessStop checks what hack/local-up relies on: Stop ends a process that obeys SIGTERM with
// no error, kills one that ignores it after the grace and says so, and PollUntil gives up at once,
// with the end of the log, when the process it watches has exited.
func TestProcessStop(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatalf("no sh to run test processes with: %v", err)
	}
	dir := t.TempDir()

	obeys, err := StartProcess("obeys", filepath.Join(dir, "obeys.log"), sh, []string{"-c", "echo started; exec sleep 60"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := obeys.Stop(10 * time.Second); err != nil {
		t.Errorf("Stop of a process that obeys SIGTERM: %v", err)
	}
	if done, _ := obeys.Exited(); !done {
		t.Error("the process runs after Stop")
	}

	ignores, err := StartProcess("ignores", filepath.Join(dir, "ignores.log"), sh, []string{"-c", `trap "" TERM; echo trapped; while :; do sleep 1; done`}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Let the shell install its trap before the signal.
	if err := PollUntil(context.Background(), 10*time.Millisecond, 10*time.Second, "the trap", []*Process{ignores}, func(context.Context) (bool, string) {
		tail := tailFile(filepath.Join(dir, "ignores.log"), 1)
		return tail == "trapped", tail
	}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = ignores.Stop(200 * time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "killed") {
		t.Errorf("Stop of a process that ignores SIGTERM: %v; want an error saying it was killed", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Stop took %s with a grace of 200ms", d)
	}
	if again := ignores.Stop(time.Second); again == nil || again.Error() != err.Error() {
		t.Errorf("a second Stop returned %v; want the first one's %v", again, err)
	}

	fails, err := StartProcess("fails", filepath.Join(dir, "fails.log"), sh, []string{"-c", "echo goodbye; exit 3"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = PollUntil(context.Background(), 10*time.Millisecond, time.Minute, "something that never comes", []*Process{fails}, func(context.Context) (bool, string) {
		return false, "not yet"
	})
	if err == nil || !strings.Contains(err.Error(), "exit status 3") || !strings.Contains(err.Error(), "goodbye") {
		t.Errorf("PollUntil on a process that exited: %v; want its exit status and the end of its log", err)
	}
}

// TestProcessPause checks that Pause stops a process (the kernel reports it stopped), Resume runs it
// again, and Stop ends a paused process with SIGTERM, without the SIGKILL fallback.
func TestProcessPause(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatalf("no sh to run test processes with: %v", err)
	}
	p, err := StartProcess("paused", filepath.Join(t.TempDir(), "paused.log"), sh, []string{"-c", "exec sleep 60"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	state := func() string {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.Pid()))
		if err != nil {
			return err.Error()
		}
		// pid (comm) state ...: the state follows the last ')'.
		f := strings.Fields(string(data)[strings.LastIndexByte(string(data), ')')+1:])
		return f[0]
	}
	waitState := func(want string) {
		t.Helper()
		if err := PollUntil(context.Background(), 10*time.Millisecond, 10*time.Second, "state "+want, []*Process{p}, func(context.Context) (bool, string) {
			s := state()
			return s == want, s
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Pause(); err != nil {
		t.Fatal(err)
	}
	waitState("T")
	if err := p.Resume(); err != nil {
		t.Fatal(err)
	}
	waitState("S")
	if err := p.Pause(); err != nil {
		t.Fatal(err)
	}
	waitState("T")
	if err := p.Stop(10 * time.Second); err != nil {
		t.Errorf("Stop of a paused process: %v", err)
	}
}

// TestReservedPortsAreNotPickedTwice checks that a port FreePorts returned is reserved: this process
// does not get it again, and another process cannot reserve it while this one lives.
func TestReservedPortsAreNotPickedTwice(t *testing.T) {
	if port := os.Getenv("CERTAPI_TEST_RESERVE_PORT"); port != "" {
		// The other process: print whether it could reserve the port.
		p, _ := strconv.Atoi(port)
		fmt.Printf("reserved=%v\n", reservePort(p))
		return
	}
	ports, err := FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	if reservePort(ports[0]) {
		t.Errorf("port %d, returned by FreePorts, could be reserved again by the same process", ports[0])
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestReservedPortsAreNotPickedTwice$")
	cmd.Env = append(os.Environ(), "CERTAPI_TEST_RESERVE_PORT="+strconv.Itoa(ports[0]))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("running the other process: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "reserved=false") {
		t.Errorf("another process reserved port %d that this process holds:\n%s", ports[0], out)
	}
}

// TestFreePorts checks that FreePorts returns distinct free ports and none that is excluded.
func TestFreePorts(t *testing.T) {
	first, err := FreePorts(3)
	if err != nil {
		t.Fatal(err)
	}
	ports, err := FreePorts(20, first...)
	if err != nil {
		t.Fatal(err)
	}
	if len(ports) != 20 {
		t.Fatalf("FreePorts(20) returned %d ports", len(ports))
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if seen[p] || slices.Contains(first, p) {
			t.Errorf("port %d twice or excluded: %v (excluded %v)", p, ports, first)
		}
		seen[p] = true
		if !portFree(p) {
			t.Errorf("port %d is not free", p)
		}
	}
}
