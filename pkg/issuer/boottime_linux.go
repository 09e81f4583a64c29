//go:build linux

package issuer

import (
	"time"

	"golang.org/x/sys/unix"
)

// bootTime reads CLOCK_BOOTTIME: the time since boot, suspended time included, never stepped when the
// wall clock is set. Go's monotonic clock (CLOCK_MONOTONIC on Linux) stops while the machine is suspended or the VM
// paused, so a lease timed on it would look younger after a freeze than it is; on this clock a frozen
// VM resumes with its lease already known expired. The result is a time.Time without a monotonic
// reading, meaningful only against other results of bootTime.
func bootTime() time.Time {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		// Every Linux since 2.6.39 has CLOCK_BOOTTIME; this is not reached in practice.
		panic("reading CLOCK_BOOTTIME: " + err.Error())
	}
	return time.Unix(ts.Unix())
}
