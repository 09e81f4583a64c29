package framework

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
)

// sysProcAttr puts the child in its own process group and asks the kernel to SIGKILL it when the
// thread that forked it dies, so children never outlive a test binary killed by a timeout.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// Pdeathsig fires when the *thread* that forked the child exits, not the process. The Go runtime
// may retire threads, so every child is forked from one goroutine locked to an OS thread that
// lives as long as the process.
var (
	forkThreadOnce sync.Once
	forkRequests   chan func()
)

func startCmd(cmd *exec.Cmd) error {
	forkThreadOnce.Do(func() {
		forkRequests = make(chan func())
		go func() {
			runtime.LockOSThread() // never unlocked: the thread must not exit
			for f := range forkRequests {
				f()
			}
		}()
	})
	errc := make(chan error, 1)
	forkRequests <- func() { errc <- cmd.Start() }
	return <-errc
}

// waitStopped waits until every thread of process pid is stopped (state T in /proc): SIGSTOP is delivered
// asynchronously, and a test that calls the process right after Pause must find it stopped, not racing
// the signal to answer one more call.
func waitStopped(pid int) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		stopped, err := allThreadsStopped(pid)
		if err != nil || stopped {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("process %d: not every thread stopped within 5s of SIGSTOP", pid)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func allThreadsStopped(pid int) (bool, error) {
	stats, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	if err != nil || len(stats) == 0 {
		return false, fmt.Errorf("process %d: listing its threads: %v", pid, err)
	}
	for _, f := range stats {
		data, err := os.ReadFile(f)
		if err != nil {
			continue // a thread that exited meanwhile
		}
		// The state follows the command name, which is in parentheses and may contain spaces.
		i := strings.LastIndexByte(string(data), ')')
		if i < 0 || i+2 >= len(data) {
			return false, fmt.Errorf("process %d: unreadable %s", pid, f)
		}
		if state := data[i+2]; state != 'T' && state != 't' {
			return false, nil
		}
	}
	return true, nil
}
