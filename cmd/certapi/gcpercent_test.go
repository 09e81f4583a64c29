package main

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/certapi/certapi/test/testhelpers"
)

func TestGCPercent(t *testing.T) {
	const mi = 1 << 20
	for _, tc := range []struct {
		name           string
		live, headroom uint64
		want           int
	}{
		{name: "idle: doubling is less than the headroom", live: 13 * mi, headroom: 16 * mi, want: 100},
		{name: "live heap equal to the headroom", live: 16 * mi, headroom: 16 * mi, want: 100},
		{name: "between one and two headrooms: grows by the headroom", live: 20 * mi, headroom: 16 * mi, want: 80},
		{name: "two headrooms", live: 32 * mi, headroom: 16 * mi, want: 50},
		{name: "10,000 requests: half the live heap", live: 35 * mi, headroom: 16 * mi, want: 50},
		{name: "large heap: never below 50", live: 1024 * mi, headroom: 16 * mi, want: 50},
		{name: "headroom 0: Go's default", live: 100 * mi, want: 100},
		{name: "no live heap read", headroom: 16 * mi, want: 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := gcPercent(tc.live, tc.headroom); got != tc.want {
				t.Errorf("gcPercent(%d MiB, %d MiB) = %d; want %d", tc.live/mi, tc.headroom/mi, got, tc.want)
			}
		})
	}
}

// TestGCTunerSetsAfterCollections checks that the tuner sets GOGC after a collection, and again after
// later ones, from the live heap: with a headroom of one byte, any live heap gives the least GOGC.
func TestGCTunerSetsAfterCollections(t *testing.T) {
	var mu sync.Mutex
	var calls []int
	tuner := newGCTuner(1, func(p int) int {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, p)
		return 100
	})
	t.Cleanup(tuner.stop)
	tuner.arm()
	testhelpers.WaitFor(t, 10*time.Millisecond, 10*time.Second, "the tuner to run after three collections", func(context.Context) (bool, string) {
		runtime.GC()
		return tuner.runs.Load() >= 3, fmt.Sprintf("ran %d times", tuner.runs.Load())
	})
	mu.Lock()
	got := append([]int(nil), calls...)
	mu.Unlock()
	if len(got) != 1 || got[0] != minGCPercent {
		t.Errorf("GOGC set to %v; want [%d] (set once, then only when it changes)", got, minGCPercent)
	}
}
