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

// process is one child process of the framework, running in its own process group with its
// stdout and stderr appended to a log file.
type process struct {
	name    string
	logPath string
	cmd     *exec.Cmd

	done    chan struct{} // closed when the process has exited and been reaped
	waitErr error         // valid after done is closed

	stopOnce sync.Once
	stopErr  error
}

// startProcess starts bin with args, appending its output to logPath.
func startProcess(name, logPath, bin string, args, env []string) (*process, error) {
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
	p := &process{name: name, logPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// exited reports whether the process has exited, and its wait error.
func (p *process) exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.waitErr
	default:
		return false, nil
	}
}

// exitError returns a descriptive error for a process that exited while it should have been running.
func (p *process) exitError() error {
	_, werr := p.exited()
	if werr == nil {
		werr = errors.New("exit status 0")
	}
	return fmt.Errorf("%s exited unexpectedly (%w); last lines of %s:\n%s", p.name, werr, p.logPath, tailFile(p.logPath, 30))
}

// stop sends sig to the process group, waits up to grace for the process to exit, then sends
// SIGKILL to the group and waits for the exit. It is idempotent.
func (p *process) stop(sig syscall.Signal, grace time.Duration) error {
	p.stopOnce.Do(func() {
		p.stopErr = p.signalAndWait(sig, grace)
	})
	return p.stopErr
}

func (p *process) signalAndWait(sig syscall.Signal, grace time.Duration) error {
	if done, _ := p.exited(); done {
		return nil
	}
	pid := p.cmd.Process.Pid
	if err := syscall.Kill(-pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signalling %s (pgid %d) with %v: %w", p.name, pid, sig, err)
	}
	if sig != syscall.SIGKILL {
		timer := time.NewTimer(grace)
		defer timer.Stop()
		select {
		case <-p.done:
			return nil
		case <-timer.C:
		}
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
