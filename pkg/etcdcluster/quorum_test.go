package etcdcluster

import (
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"
)

// TestObserveLeader: the quorum is lost only after NoLeaderGrace without a leader, a leader seen in
// between starts the grace again, and a leader back ends the loss at once.
func TestObserveLeader(t *testing.T) {
	logger := ktesting.NewLogger(t, ktesting.NewConfig())
	t0 := time.Date(2026, 12, 2, 22, 0, 0, 0, time.UTC)
	type step struct {
		at        time.Duration
		hasLeader bool
		wantLost  bool
		justLost  bool
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"a leader throughout", []step{{0, true, false, false}, {10 * time.Second, true, false, false}}},
		{"an election: no leader for a moment", []step{{0, true, false, false}, {time.Second, false, false, false}, {1500 * time.Millisecond, true, false, false}}},
		{"no leader for the grace: lost once", []step{
			{0, false, false, false}, {NoLeaderGrace - time.Millisecond, false, false, false},
			{NoLeaderGrace, false, true, true}, {NoLeaderGrace + time.Second, false, true, false},
		}},
		{"a leader in between starts the grace again", []step{
			{0, false, false, false}, {2 * time.Second, true, false, false},
			{2500 * time.Millisecond, false, false, false}, {4 * time.Second, false, false, false},
			{2500*time.Millisecond + NoLeaderGrace, false, true, true},
		}},
		{"a leader back ends the loss at once", []step{
			{0, false, false, false}, {NoLeaderGrace, false, true, true}, {NoLeaderGrace + 100*time.Millisecond, true, false, false},
			{NoLeaderGrace + 200*time.Millisecond, false, false, false},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := &quorumObserver{}
			for i, s := range tt.steps {
				voters := -1
				if !s.hasLeader {
					voters = 3
				}
				justLost := q.observe(logger, t0.Add(s.at), s.hasLeader, voters)
				st := q.get()
				if q.lost.Load() != s.wantLost || st.Lost != s.wantLost || justLost != s.justLost {
					t.Fatalf("step %d (%s, leader %v): lost %v (state %v), just lost %v; want %v, %v", i, s.at, s.hasLeader, q.lost.Load(), st.Lost, justLost, s.wantLost, s.justLost)
				}
				if s.hasLeader != st.NoLeaderSince.IsZero() {
					t.Fatalf("step %d: NoLeaderSince %s with a leader %v", i, st.NoLeaderSince, s.hasLeader)
				}
				if !s.hasLeader && st.Voters != 3 {
					t.Fatalf("step %d: voters %d; want 3", i, st.Voters)
				}
			}
		})
	}
}

// TestQuorumLostContext: a context taken while the quorum holds ends when it is lost; one taken while
// it is lost has ended; one taken after it is back lives on.
func TestQuorumLostContext(t *testing.T) {
	logger := ktesting.NewLogger(t, ktesting.NewConfig())
	t0 := time.Date(2026, 12, 2, 22, 0, 0, 0, time.UTC)
	q := &quorumObserver{}
	q.observe(logger, t0, true, -1)
	before := q.context()
	q.observe(logger, t0.Add(time.Second), false, 3)
	if before.Err() != nil {
		t.Fatal("ended within the grace")
	}
	q.observe(logger, t0.Add(time.Second+NoLeaderGrace), false, 3)
	if before.Err() == nil {
		t.Fatal("a context taken before did not end when the quorum was lost")
	}
	if q.context().Err() == nil {
		t.Fatal("a context taken while the quorum is lost has not ended")
	}
	q.observe(logger, t0.Add(10*time.Second), true, -1)
	after := q.context()
	if after.Err() != nil {
		t.Fatal("a context taken after the quorum came back has ended")
	}
	q.observe(logger, t0.Add(11*time.Second), false, 3)
	q.observe(logger, t0.Add(11*time.Second+NoLeaderGrace), false, 3)
	if after.Err() == nil {
		t.Fatal("it did not end when the quorum was lost again")
	}
}
