//go:build !linux

package issuer

import "time"

// bootTime is Go's monotonic clock where CLOCK_BOOTTIME is not available (certapi's images are
// Linux; this keeps the package building elsewhere). Unlike CLOCK_BOOTTIME it may stop while the machine
// sleeps, so a lease may look younger after a suspend than it is.
func bootTime() time.Time {
	return time.Now()
}
