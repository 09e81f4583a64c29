package framework

import (
	"os/exec"
	"runtime"
	"sync"
	"syscall"
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
