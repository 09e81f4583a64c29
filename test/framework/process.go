package framework

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Process is a child process started by StartProcess: in its own process group (so that a Ctrl-C
// in the terminal reaches only the parent, which then stops its children in order), with its
// stdout and stderr appended to a log file, and on Linux killed by the kernel when the parent dies.
// The framework runs etcd, kube-apiserver and certapi as Processes; hack/local-up runs the example
// webhook as one.
type Process struct {
	name    string
	logPath string
	cmd     *exec.Cmd

	done    chan struct{} // closed when the process has exited and been reaped
	waitErr error         // valid after done is closed

	stopOnce sync.Once
	stopErr  error
	killErr  error // set under stopOnce when the grace passed and the group got SIGKILL
}

// StartProcess starts bin with args, appending its output to logPath (created if missing) after a
// line naming the command. env is the process environment; nil means the parent's. name labels the
// process in errors.
func StartProcess(name, logPath, bin string, args, env []string) (*Process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening log of %s: %w", name, err)
	}
	defer logFile.Close() // the child holds its own descriptor

	fmt.Fprintf(logFile, "=== %s starting %s: %s %s\n", time.Now().Format(time.RFC3339Nano), name, bin, strings.Join(args, " "))

	cmd := exec.Command(bin, args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.Stdin = nil
	if env != nil {
		cmd.Env = env
	}
	cmd.SysProcAttr = sysProcAttr()
	if err := startCmd(cmd); err != nil {
		return nil, fmt.Errorf("starting %s (%s): %w", name, bin, err)
	}
	p := &Process{name: name, logPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Pid returns the process id, which is also the id of its process group.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Done returns a channel that is closed once the process has exited and been reaped.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited, and its wait error (nil for exit status 0).
func (p *Process) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.waitErr
	default:
		return false, nil
	}
}

// ExitError returns a descriptive error for a process that exited while it should have been
// running: its exit status and the last lines of its log.
func (p *Process) ExitError() error {
	_, werr := p.Exited()
	if werr == nil {
		werr = errors.New("exit status 0")
	}
	return fmt.Errorf("%s exited unexpectedly (%w); last lines of %s:\n%s", p.name, werr, p.logPath, tailFile(p.logPath, 30))
}

// Pause stops the process group with SIGSTOP, as a long GC stall or a frozen VM would: it keeps its
// sockets and state but runs nothing until Resume. Stop and Kill still work on a paused process.
func (p *Process) Pause() error {
	if err := p.signal(syscall.SIGSTOP); err != nil {
		return err
	}
	return waitStopped(p.Pid())
}

// Resume continues a process group stopped by Pause (SIGCONT).
func (p *Process) Resume() error { return p.signal(syscall.SIGCONT) }

func (p *Process) signal(sig syscall.Signal) error {
	if done, _ := p.Exited(); done {
		return fmt.Errorf("signalling %s with %v: it has exited", p.name, sig)
	}
	if err := syscall.Kill(-p.Pid(), sig); err != nil {
		return fmt.Errorf("signalling %s (pgid %d) with %v: %w", p.name, p.Pid(), sig, err)
	}
	return nil
}

// Stop sends SIGTERM to the process group, then SIGKILL when the process has not exited after
// grace, and waits for the exit. It is idempotent: a later call returns what the first returned.
// The error says so when SIGKILL was needed.
func (p *Process) Stop(grace time.Duration) error {
	if err := p.stop(syscall.SIGTERM, grace); err != nil {
		return err
	}
	return p.killErr
}

// stop sends sig to the process group, waits up to grace for the process to exit, then sends
// SIGKILL to the group and waits for the exit. It is idempotent.
func (p *Process) stop(sig syscall.Signal, grace time.Duration) error {
	p.stopOnce.Do(func() {
		p.stopErr = p.signalAndWait(sig, grace)
	})
	return p.stopErr
}

func (p *Process) signalAndWait(sig syscall.Signal, grace time.Duration) error {
	if done, _ := p.Exited(); done {
		return nil
	}
	pid := p.Pid()
	if err := syscall.Kill(-pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signalling %s (pgid %d) with %v: %w", p.name, pid, sig, err)
	}
	if sig != syscall.SIGKILL {
		// A paused process (Pause) handles the signal only once it runs again.
		_ = syscall.Kill(-pid, syscall.SIGCONT)
		timer := time.NewTimer(grace)
		defer timer.Stop()
		select {
		case <-p.done:
			return nil
		case <-timer.C:
		}
		p.killErr = fmt.Errorf("%s (pid %d) did not stop within %s of %v; killed", p.name, pid, grace, sig)
		if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("killing %s (pgid %d): %w", p.name, pid, err)
		}
	}
	timer := time.NewTimer(30 * time.Second)
	defer timer.Stop()
	select {
	case <-p.done:
		return nil
	case <-timer.C:
		return fmt.Errorf("%s (pid %d) did not exit after SIGKILL", p.name, pid)
	}
}

// tailFile returns the last n lines of the file at path (or a note why it cannot).
func tailFile(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	defer f.Close()
	// Only the end of the file matters; skip most of a large log.
	const maxRead = 4 << 20
	if st, err := f.Stat(); err == nil && st.Size() > maxRead {
		if _, err := f.Seek(st.Size()-maxRead, 0); err != nil {
			return fmt.Sprintf("(cannot seek %s: %v)", path, err)
		}
	}
	ring := make([]string, 0, n)
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		if len(ring) == n {
			ring = ring[1:]
		}
		ring = append(ring, sc.Text())
	}
	return strings.Join(ring, "\n")
}
