// Command pause is the first process of every pod sandbox on the test node: the one that holds the
// pod's namespaces open while its containers come and go. It is the Go equivalent of kubernetes'
// build/pause/linux/pause.c, so that the pause image (make images: certapi.dev/pause:3.10) is built here
// from source like every other image, with no registry involved.
//
// It does nothing until SIGINT or SIGTERM, and then exits 0. As a pod's PID 1 (shareProcessNamespace:
// true) it is the parent of every orphaned process in the pod, and it reaps them as they exit so that
// no zombie is left behind. It needs no privilege and runs as any user.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// version is set at link time (hack/image: -X main.version=<git describe>).
var version = "dev"

func main() {
	showVersion := flag.Bool("v", false, "Print the version and exit.")
	flag.Parse()
	if *showVersion {
		fmt.Printf("pause %s\n", version)
		return
	}
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	if os.Getpid() != 1 {
		fmt.Fprintln(os.Stderr, "pause: warning: not PID 1, so orphaned processes are not re-parented to it")
	}
	// Printed once the handlers are in place: from here on SIGTERM ends pause with status 0.
	fmt.Fprintln(os.Stderr, "pause: waiting for SIGINT or SIGTERM")
	for sig := range sigs {
		if sig == syscall.SIGCHLD {
			reap()
			continue
		}
		fmt.Fprintf(os.Stderr, "pause: shutting down, got signal: %v\n", sig)
		os.Exit(0)
	}
}

// reap collects every child that has exited, without blocking, and returns how many. One SIGCHLD can
// stand for several exits (signals of one kind coalesce), so it loops until none is left.
func reap() int {
	n := 0
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case err != nil || pid <= 0:
			// ECHILD: no children at all; pid 0: children, but none has exited.
			return n
		}
		n++
	}
}
