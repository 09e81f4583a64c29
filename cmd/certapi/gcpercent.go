package main

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/klog/v2"
)

// Bounds of the GOGC that gcPercent chooses.
const (
	maxGCPercent = 100 // Go's default: the heap may double between collections
	minGCPercent = 50  // the heap may grow by half its live part
)

// gcPercent is the GOGC that lets a heap whose live part is live grow, before the next collection, by
// headroom, but never by more than live (GOGC=100, Go's default) nor by less than live/2 (GOGC=50).
// headroom 0 is Go's default.
func gcPercent(live, headroom uint64) int {
	if headroom == 0 || live == 0 {
		return maxGCPercent
	}
	p := headroom * 100 / live
	return int(min(max(p, minGCPercent), maxGCPercent))
}

// gcTuner sets GOGC after each garbage collection from the live heap that collection found
// (gcPercent). It runs on the runtime's finalizer goroutine: a sentinel object, unreachable from the
// moment it is made, carries a finalizer that the next collection queues; the finalizer tunes and makes
// the next sentinel. So it costs one small allocation per collection, and nothing runs between them.
type gcTuner struct {
	headroom uint64
	// set sets GOGC and returns the previous value (debug.SetGCPercent).
	set     func(int) int
	sample  []metrics.Sample
	percent int
	// runs counts the collections after which tune ran.
	runs    atomic.Int64
	stopped atomic.Bool
}

// gcSentinel is the object whose finalizer runs after each collection. It holds a pointer, so it is not
// one of the tiny allocations the runtime batches together (those may never be finalized).
type gcSentinel struct{ t *gcTuner }

// startGCTuner starts tuning GOGC with headroom (see gcPercent), unless the environment sets GOGC or
// headroom is 0, and logs what it chose. The tuning lasts as long as the process.
func startGCTuner(headroom resource.Quantity) *gcTuner {
	if v := os.Getenv("GOGC"); v != "" {
		klog.InfoS("Go GC from GOGC; --gc-headroom is ignored", "GOGC", v)
		return nil
	}
	h := headroom.Value()
	if h <= 0 {
		klog.InfoS("Go GC at GOGC=100 (--gc-headroom=0)")
		return nil
	}
	t := newGCTuner(uint64(h), debug.SetGCPercent)
	klog.InfoS("Go GC: GOGC=100 while the live heap is small, down to 50 as it grows (set GOGC to choose one)", "gcHeadroom", headroom.String())
	t.arm()
	return t
}

func newGCTuner(headroom uint64, set func(int) int) *gcTuner {
	return &gcTuner{
		headroom: headroom,
		set:      set,
		sample:   []metrics.Sample{{Name: "/gc/heap/live:bytes"}},
		percent:  maxGCPercent,
	}
}

// arm makes the next collection run tune once.
func (t *gcTuner) arm() {
	runtime.SetFinalizer(&gcSentinel{t: t}, func(s *gcSentinel) {
		if s.t.stopped.Load() {
			return
		}
		s.t.tune()
		s.t.arm()
	})
}

// tune sets GOGC from the live heap of the collection that just ended. Finalizers run one at a time, so
// tune never runs twice at once.
func (t *gcTuner) tune() {
	t.runs.Add(1)
	metrics.Read(t.sample)
	if t.sample[0].Value.Kind() != metrics.KindUint64 {
		return
	}
	if p := gcPercent(t.sample[0].Value.Uint64(), t.headroom); p != t.percent {
		t.set(p)
		t.percent = p
	}
}

// stop ends the tuning after the next collection; GOGC stays as it was last set.
func (t *gcTuner) stop() { t.stopped.Store(true) }
