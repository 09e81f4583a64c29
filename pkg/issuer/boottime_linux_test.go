//go:build linux

package issuer

import (
	clientv3 "go.etcd.io/etcd/client/v3"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestLeaseClockIsBootTime: the issuer times its election lease on CLOCK_BOOTTIME, which counts the time
// since boot suspended time included (/proc/uptime shows the same clock), not on the wall or the
// monotonic clock, which stops while a VM is paused.
func TestLeaseClockIsBootTime(t *testing.T) {
	data, err := os.ReadFile("/proc/uptime")
	if err != nil {
		t.Fatal(err)
	}
	up, err := strconv.ParseFloat(strings.Fields(string(data))[0], 64)
	if err != nil {
		t.Fatal(err)
	}
	uptime := time.Duration(up * float64(time.Second))
	iss, err := New(Config{Client: new(clientv3.Client), Prefix: "/p", Identity: "a"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		read func() time.Time
	}{{"bootTime", bootTime}, {"the issuer's lease clock", iss.now}} {
		got := time.Duration(c.read().UnixNano())
		if d := got - uptime; d < -time.Second || d > 2*time.Second {
			t.Errorf("%s reads %s; want about the time since boot, %s", c.name, got, uptime)
		}
	}
	a := bootTime()
	if b := bootTime(); b.Before(a) {
		t.Errorf("bootTime went back: %s then %s", a, b)
	}
}
