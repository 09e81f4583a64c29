//go:build !linux

package framework

import (
	"os/exec"
	"syscall"
)

// sysProcAttr puts the child in its own process group. Outside Linux there is no parent-death
// signal; Stop (or t.Cleanup) must run to end the children.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

func startCmd(cmd *exec.Cmd) error { return cmd.Start() }

// waitStopped has no /proc to read outside Linux: Pause returns once the signal is sent.
func waitStopped(int) error { return nil }
