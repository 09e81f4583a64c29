package main

import (
	"bufio"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// The test binary stands in for the programs the tests start: pause itself, or a child that exits.
func TestMain(m *testing.M) {
	switch os.Getenv("PAUSE_TEST_ROLE") {
	case "pause":
		main() // returns only after -v
		os.Exit(0)
	case "exit":
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// childEnv is the environment of a child in role. Under the race detector a process lingers 1 s at exit
// unless told not to.
func childEnv(role string) []string {
	return append(os.Environ(), "PAUSE_TEST_ROLE="+role, "GORACE=atexit_sleep_ms=0")
}

// state is the process state letter of pid from /proc ("Z" for a zombie), or "" when there is no such
// process.
func state(t *testing.T, pid int) string {
	t.Helper()
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if os.IsNotExist(err) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	// pid (comm) state ...; comm may hold spaces and parentheses, so cut at the last ')'.
	fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
	return fields[0]
}

func TestReapCollectsEveryExitedChild(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if n := reap(); n != 0 {
		t.Fatalf("reap() with no children = %d, want 0", n)
	}
	var pids []int
	for range 3 {
		cmd := exec.Command(self)
		cmd.Env = childEnv("exit")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		pids = append(pids, cmd.Process.Pid)
	}
	// Each child exits at once and stays a zombie until its parent waits for it: wait until each can be
	// waited for, without collecting it (WNOWAIT).
	for _, pid := range pids {
		var info unix.Siginfo
		if err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil); err != nil {
			t.Fatalf("waitid(%d, WNOWAIT): %v", pid, err)
		}
		if s := state(t, pid); s != "Z" {
			t.Fatalf("child %d has exited but its state is %q, want Z (zombie)", pid, s)
		}
	}
	if n := reap(); n != len(pids) {
		t.Fatalf("reap() = %d, want %d", n, len(pids))
	}
	for _, pid := range pids {
		if s := state(t, pid); s != "" {
			t.Errorf("child %d is still there after reap (state %q)", pid, s)
		}
	}
}

func TestExitsZeroOnSIGTERMAndSIGINT(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			cmd := exec.Command(self)
			cmd.Env = childEnv("pause")
			stderr, err := cmd.StderrPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			lines := bufio.NewScanner(stderr)
			var out []string
			for lines.Scan() {
				out = append(out, lines.Text())
				if strings.Contains(lines.Text(), "waiting for SIGINT or SIGTERM") {
					break
				}
			}
			// A SIGCHLD with nothing to reap changes nothing; the signal after it ends pause.
			if err := cmd.Process.Signal(syscall.SIGCHLD); err != nil {
				t.Fatal(err)
			}
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			for lines.Scan() {
				out = append(out, lines.Text())
			}
			if err := cmd.Wait(); err != nil {
				t.Fatalf("pause after %v: %v, want exit status 0; stderr:\n%s", sig, err, strings.Join(out, "\n"))
			}
			if last := out[len(out)-1]; last != "pause: shutting down, got signal: "+sig.String() {
				t.Errorf("last line %q, want the shutdown on %v", last, sig)
			}
		})
	}
}

func TestVersion(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "-v")
	cmd.Env = childEnv("pause")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("pause -v: %v", err)
	}
	if string(out) != "pause dev\n" {
		t.Errorf("pause -v printed %q", out)
	}
}
