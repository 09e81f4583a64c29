package etcdcluster

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestDecideStart(t *testing.T) {
	const name, peer = "certapi-0", "https://certapi-0.certapi-etcd.ns.svc:2380"
	self := Entry{ID: 1, Name: name, PeerURLs: []string{peer}}
	selfUnstarted := Entry{ID: 7, PeerURLs: []string{peer}}
	other := Entry{ID: 2, Name: "certapi-1", PeerURLs: []string{"https://certapi-1.certapi-etcd.ns.svc:2380"}}
	third := Entry{ID: 3, Name: "certapi-2", PeerURLs: []string{"https://certapi-2.certapi-etcd.ns.svc:2380"}}
	const published = "APIService v1alpha1.certapi.dev"
	tests := []struct {
		name       string
		in         StartInput
		want       StartAction
		wantRemove []uint64
	}{
		{"data, nobody answers: restart", StartInput{HasData: true, Designated: true}, StartRestart, nil},
		{"data, not designated, nobody answers: restart", StartInput{HasData: true}, StartRestart, nil},
		{"data, cluster lists us: restart", StartInput{HasData: true, Answered: true, Members: []Entry{self, other, third}}, StartRestart, nil},
		{"data, cluster lists our peer URL only (never started): restart", StartInput{HasData: true, Answered: true, Members: []Entry{selfUnstarted, other}}, StartRestart, nil},
		{"data, cluster removed us: discard and join", StartInput{HasData: true, Answered: true, Members: []Entry{other, third}}, StartDiscardAndJoin, nil},
		{"no data, cluster answers: join", StartInput{Answered: true, Members: []Entry{other, third}}, StartJoin, nil},
		{"no data, designated, cluster answers: join, never bootstrap", StartInput{Designated: true, Answered: true, Members: []Entry{other, third}}, StartJoin, nil},
		{"volume lost: stale entry of own name removed", StartInput{Designated: true, Answered: true, Members: []Entry{self, other, third}}, StartJoin, []uint64{1}},
		{"failed join: unstarted entry of own peer URL removed", StartInput{Answered: true, Members: []Entry{other, selfUnstarted}}, StartJoin, []uint64{7}},
		{"only own stale entries listed: wait", StartInput{Answered: true, Members: []Entry{self}}, StartWait, nil},
		{"no data, nobody answers, not designated: wait", StartInput{OtherPeersExist: true}, StartWait, nil},
		{"no data, nobody answers, not designated, first install: wait", StartInput{}, StartWait, nil},
		{"first install, designated: bootstrap", StartInput{Designated: true}, StartBootstrap, nil},
		{"first install with parallel pods, designated: bootstrap", StartInput{Designated: true, OtherPeersExist: true}, StartBootstrap, nil},
		{"cluster existed, designated alone (every pod recreated): bootstrap", StartInput{Designated: true, ClusterExisted: true}, StartBootstrap, nil},
		{"hazard: cluster existed, designated lost its volume while others restart: wait", StartInput{Designated: true, ClusterExisted: true, OtherPeersExist: true}, StartWait, nil},
		{"every volume lost, every other member reports no data: bootstrap anew", StartInput{Designated: true, ClusterExisted: true, OtherPeersExist: true, OthersReportNoData: true}, StartBootstrap, nil},
		{"every other member reports no data, not designated: wait", StartInput{ClusterExisted: true, OtherPeersExist: true, OthersReportNoData: true}, StartWait, nil},
		{"data of the current epoch: restart", StartInput{HasData: true, Epoch: 2, DataEpoch: 2}, StartRestart, nil},
		{"data of an earlier epoch, nobody answers: wait for the restored member, never restart the old cluster", StartInput{HasData: true, Epoch: 1}, StartWait, nil},
		{"data of an earlier epoch, the designated member, nobody answers: wait, never bootstrap an empty cluster", StartInput{HasData: true, Epoch: 1, Designated: true, ClusterExisted: true, OtherPeersExist: true, OthersReportNoData: true}, StartWait, nil},
		{"data of an earlier epoch, the restored member answers: discard", StartInput{HasData: true, Epoch: 2, DataEpoch: 1, Answered: true, Members: []Entry{other}}, StartDiscardStale, nil},
		{"data of an earlier epoch, the old cluster answers: discard", StartInput{HasData: true, Epoch: 1, Answered: true, Members: []Entry{self, other}}, StartDiscardStale, nil},
		{"data of a later epoch than the flag: refuse", StartInput{HasData: true, Epoch: 1, DataEpoch: 2, Designated: true}, StartRefuse, nil},
		{"no data, a later epoch: join the restored cluster", StartInput{Epoch: 1, Answered: true, Members: []Entry{other}}, StartJoin, nil},
		{"no data reported but a cluster answers: join", StartInput{Designated: true, ClusterExisted: true, OtherPeersExist: true, OthersReportNoData: true, Answered: true, Members: []Entry{other}}, StartJoin, nil},
		// Rule 4: etcd.mode switched from embedded to cluster without moving the single member's data.
		{"single member's CA published, no cluster ever, designated: refuse a second CA", StartInput{Designated: true, PublishedCA: published}, StartRefuse, nil},
		{"single member's CA published, parallel pods, designated: refuse", StartInput{Designated: true, OtherPeersExist: true, PublishedCA: published}, StartRefuse, nil},
		{"single member's CA published, not designated: wait", StartInput{OtherPeersExist: true, PublishedCA: published}, StartWait, nil},
		{"single member's data restored into this member (the documented move): restart", StartInput{HasData: true, Designated: true, PublishedCA: published}, StartRestart, nil},
		{"published CA, the cluster answers: join", StartInput{Designated: true, PublishedCA: published, Answered: true, Members: []Entry{other}}, StartJoin, nil},
		{"published CA, cluster existed, designated alone: bootstrap (recovery)", StartInput{Designated: true, ClusterExisted: true, PublishedCA: published}, StartBootstrap, nil},
		{"published CA, every volume of a cluster lost: bootstrap anew (recovery)", StartInput{Designated: true, ClusterExisted: true, OtherPeersExist: true, OthersReportNoData: true, PublishedCA: published}, StartBootstrap, nil},
		{"published CA, cluster existed, others restarting: wait", StartInput{Designated: true, ClusterExisted: true, OtherPeersExist: true, PublishedCA: published}, StartWait, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.in.Name, tt.in.PeerURL = name, peer
			got := DecideStart(tt.in)
			if got.Action != tt.want || !slices.Equal(got.Remove, tt.wantRemove) {
				t.Fatalf("DecideStart = %s remove %v (%s); want %s remove %v", got.Action, got.Remove, got.Reason, tt.want, tt.wantRemove)
			}
			if got.Reason == "" {
				t.Errorf("no reason given")
			}
		})
	}
}

// TestDecideStartRefusalSaysWhatToDo: the refusal of a second CA names what was found and the two ways on,
// the documented move of the data and the deliberate new CA.
func TestDecideStartRefusalSaysWhatToDo(t *testing.T) {
	got := DecideStart(StartInput{Name: "certapi-0", Designated: true, PublishedCA: "APIService v1alpha1.certapi.dev"})
	for _, want := range []string{
		"APIService v1alpha1.certapi.dev holds a CA bundle",
		"second CA",
		`docs/backup-and-restore.md, "From one embedded member to a cluster"`,
		"kubectl patch apiservice v1alpha1.certapi.dev --type=json",
	} {
		if !strings.Contains(got.Reason, want) {
			t.Errorf("reason %q does not say %q", got.Reason, want)
		}
	}
}

func TestQuorum(t *testing.T) {
	for n, want := range map[int]int{1: 1, 2: 2, 3: 2, 4: 3, 5: 3, 6: 4, 7: 4} {
		if got := Quorum(n); got != want {
			t.Errorf("Quorum(%d) = %d, want %d", n, got, want)
		}
	}
}

func TestDecideMaintenance(t *testing.T) {
	now := time.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC)
	const timeout = 10 * time.Minute
	up := func(id uint64) MemberState {
		return MemberState{Entry: Entry{ID: id, Name: "m" + string(rune('0'+id))}, Healthy: true}
	}
	down := func(id uint64, for_ time.Duration) MemberState {
		return MemberState{Entry: Entry{ID: id, Name: "m" + string(rune('0'+id))}, UnhealthySince: now.Add(-for_)}
	}
	learner := func(m MemberState) MemberState { m.IsLearner = true; return m }
	departed := func(m MemberState) MemberState { m.Departed = true; return m }
	tests := []struct {
		name       string
		members    []MemberState
		timeout    time.Duration
		wantRemove bool
		wantID     uint64
		wantReason string
	}{
		{"all healthy", []MemberState{up(1), up(2), up(3)}, timeout, false, 0, ""},
		{"3 voters, 1 dead past timeout: removed", []MemberState{up(1), up(2), down(3, timeout)}, timeout, true, 3, "removing voting member"},
		{"3 voters, 1 dead just under timeout: kept", []MemberState{up(1), up(2), down(3, timeout-time.Second)}, timeout, false, 0, ""},
		{"timeout 0 never removes", []MemberState{up(1), up(2), down(3, 24*time.Hour)}, 0, false, 0, ""},
		{"3 voters, 2 dead: refused, no quorum", []MemberState{up(1), down(2, time.Hour), down(3, time.Hour)}, timeout, false, 2, "fewer than the quorum"},
		{"2 voters, 1 dead: refused, never down to one", []MemberState{up(1), down(2, time.Hour)}, timeout, false, 2, "fewer than the quorum"},
		{"last member never removed", []MemberState{down(1, time.Hour)}, timeout, false, 0, ""},
		{"5 voters, 2 dead: one at a time, longest first", []MemberState{up(1), up(2), up(3), down(4, time.Hour), down(5, 2*time.Hour)}, timeout, true, 5, "removing"},
		{"4 voters after one removal, 1 dead: removed (3 of quorum 3)", []MemberState{up(1), up(2), up(3), down(4, time.Hour)}, timeout, true, 4, "removing"},
		{"4 voters, 2 dead: refused", []MemberState{up(1), up(2), down(3, time.Hour), down(4, time.Hour)}, timeout, false, 3, "fewer than the quorum"},
		{"unstarted voter does not count as healthy", []MemberState{up(1), {Entry: Entry{ID: 2}, Healthy: true}, down(3, time.Hour)}, timeout, false, 3, "fewer than the quorum"},
		{"dead learner removed", []MemberState{up(1), up(2), up(3), learner(down(4, timeout))}, timeout, true, 4, "removing learner"},
		{"stalled learner removed after a minute: it holds the learner slot", []MemberState{up(1), up(2), up(3), learner(down(4, DefaultStalledLearnerTimeout))}, timeout, true, 4, "one learner slot"},
		{"unstarted learner removed after a minute", []MemberState{up(1), up(2), up(3), learner(MemberState{Entry: Entry{ID: 4}, UnhealthySince: now.Add(-2 * DefaultStalledLearnerTimeout)})}, timeout, true, 4, "removing learner"},
		{"learner unhealthy just under a minute: kept", []MemberState{up(1), up(2), up(3), learner(down(4, DefaultStalledLearnerTimeout-time.Second))}, timeout, false, 0, ""},
		{"learner with a dead-member timeout under a minute: still a minute", []MemberState{up(1), up(2), up(3), learner(down(4, 10*time.Second))}, 10 * time.Second, false, 0, ""},
		{"stalled learner, timeout 0: kept", []MemberState{up(1), up(2), up(3), learner(down(4, time.Hour))}, 0, false, 0, ""},
		{"voter unhealthy for a minute: kept", []MemberState{up(1), up(2), up(3), down(4, DefaultStalledLearnerTimeout)}, timeout, false, 0, ""},
		{"dead learner kept while voters lack quorum", []MemberState{up(1), down(2, time.Minute), down(3, time.Minute), learner(down(4, time.Hour))}, timeout, false, 4, "fewer than the quorum"},
		{"healthy learner does not count as a voter", []MemberState{up(1), learner(up(2)), down(3, time.Hour)}, timeout, false, 3, "fewer than the quorum"},
		{"scaled away and stopped: removed before the timeout", []MemberState{up(1), up(2), up(3), up(4), departed(down(5, time.Second))}, timeout, true, 5, "scaled away"},
		{"scaled away but still running: kept", []MemberState{up(1), up(2), up(3), departed(up(4))}, timeout, false, 0, ""},
		{"scaled away, timeout 0: kept", []MemberState{up(1), up(2), up(3), departed(down(4, time.Hour))}, 0, false, 0, ""},
		{"scaled away 5 to 3, two stopped: one at a time", []MemberState{up(1), up(2), up(3), departed(down(4, time.Second)), departed(down(5, time.Second))}, timeout, true, 4, "scaled away"},
		{"scaled away while quorum is short: refused", []MemberState{up(1), down(2, time.Minute), departed(down(3, time.Second))}, timeout, false, 3, "fewer than the quorum"},
		{"equal times: lower ID first", []MemberState{up(1), up(2), up(3), down(5, time.Hour), down(4, time.Hour)}, timeout, true, 4, "removing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := DecideMaintenance(MaintenanceInput{Members: tt.members, Now: now, DeadMemberTimeout: tt.timeout})
			if got.Remove != tt.wantRemove || got.ID != tt.wantID || !strings.Contains(got.Reason, tt.wantReason) {
				t.Fatalf("DecideMaintenance = %+v; want remove=%v id=%d reason containing %q", got, tt.wantRemove, tt.wantID, tt.wantReason)
			}
		})
	}
}

func TestHealthTracker(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC)
	a, b := Entry{ID: 1, Name: "a"}, Entry{ID: 2, Name: "b"}
	var tr HealthTracker
	s := tr.Observe(t0, []Entry{a, b}, map[uint64]bool{1: true})
	if !s[0].Healthy || s[1].Healthy || !s[1].UnhealthySince.Equal(t0) {
		t.Fatalf("first round: %+v", s)
	}
	s = tr.Observe(t0.Add(time.Minute), []Entry{a, b}, map[uint64]bool{1: true})
	if !s[1].UnhealthySince.Equal(t0) {
		t.Fatalf("unhealthy-since moved: %+v", s[1])
	}
	s = tr.Observe(t0.Add(2*time.Minute), []Entry{a, b}, map[uint64]bool{1: true, 2: true})
	if !s[1].UnhealthySince.IsZero() {
		t.Fatalf("recovered member still unhealthy-since: %+v", s[1])
	}
	s = tr.Observe(t0.Add(3*time.Minute), []Entry{a, b}, map[uint64]bool{1: true})
	if !s[1].UnhealthySince.Equal(t0.Add(3 * time.Minute)) {
		t.Fatalf("a new outage must start a new clock: %+v", s[1])
	}
	tr.Observe(t0.Add(4*time.Minute), []Entry{a}, map[uint64]bool{1: true})
	if len(tr.since) != 0 {
		t.Fatalf("removed member not forgotten: %v", tr.since)
	}
}

func TestOrdinal(t *testing.T) {
	for name, want := range map[string]int{"certapi-0": 0, "certapi-12": 12, "my-certapi-3": 3, "certapi": -1, "certapi-": -1, "certapi-01": -1, "certapi-x": -1, "-1": -1} {
		if got := Ordinal(name); got != want {
			t.Errorf("Ordinal(%q) = %d, want %d", name, got, want)
		}
	}
}

func TestMemberNames(t *testing.T) {
	for name, want := range map[string][2]string{
		"certapi-0":    {"certapi-0", "certapi-8"},
		"my-certapi-7": {"my-certapi-0", "my-certapi-8"},
		"certapi-12":   {"certapi-0", "certapi-8"},
	} {
		got := MemberNames(name)
		if len(got) != MaxMembers || got[0] != want[0] || got[len(got)-1] != want[1] {
			t.Errorf("MemberNames(%q) = %q, want %d names from %s to %s", name, got, MaxMembers, want[0], want[1])
		}
	}
	if got := MemberNames("certapi"); got != nil {
		t.Errorf("MemberNames of a name without an ordinal = %q, want nil", got)
	}
}

func TestDecidePeerCA(t *testing.T) {
	notBefore := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	notAfter := notBefore.Add(300 * 24 * time.Hour)
	rotateAt := notBefore.Add(200 * 24 * time.Hour)
	early := notBefore.Add(24 * time.Hour)
	current := func(names ...string) []PeerCAMember {
		var ms []PeerCAMember
		for _, n := range names {
			ms = append(ms, PeerCAMember{Name: n, Reached: true, Current: true})
		}
		return ms
	}
	tests := []struct {
		name        string
		in          PeerCAInput
		want        PeerCAAction
		wantHandled string
		wantWaiting int
	}{
		{"young CA, no request: keep", PeerCAInput{Now: early}, PeerCAKeep, "", 0},
		{"just before two thirds: keep", PeerCAInput{Now: rotateAt.Add(-time.Second)}, PeerCAKeep, "", 0},
		{"two thirds of its life passed: begin", PeerCAInput{Now: rotateAt}, PeerCABegin, "", 0},
		{"expired: begin", PeerCAInput{Now: notAfter.Add(time.Hour)}, PeerCABegin, "", 0},
		{"a custom fraction: begin earlier", PeerCAInput{Now: notBefore.Add(31 * 24 * time.Hour), RotateAt: 0.1}, PeerCABegin, "", 0},
		{"a request: begin, recorded as handled", PeerCAInput{Now: early, Requested: "r1"}, PeerCABegin, "r1", 0},
		{"a request already handled: keep", PeerCAInput{Now: early, Requested: "r1", Handled: "r1"}, PeerCAKeep, "r1", 0},
		{"a new request after a handled one: begin", PeerCAInput{Now: early, Requested: "r2", Handled: "r1"}, PeerCABegin, "r2", 0},
		{"rotating, every member current: finish", PeerCAInput{Now: early, Rotating: true, Members: current("a", "b", "c")}, PeerCAFinish, "", 0},
		{"rotating, one member presents the old CA: keep", PeerCAInput{Now: early, Rotating: true,
			Members: append(current("a", "b"), PeerCAMember{Name: "c", Reached: true})}, PeerCAKeep, "", 1},
		{"rotating, one member not reached: keep, never assumed", PeerCAInput{Now: early, Rotating: true,
			Members: append(current("a", "b"), PeerCAMember{Name: "c", Current: true})}, PeerCAKeep, "", 1},
		{"rotating, no member seen: keep", PeerCAInput{Now: early, Rotating: true}, PeerCAKeep, "", 0},
		{"rotating, a request meanwhile waits for the next rotation", PeerCAInput{Now: early, Rotating: true, Requested: "r2", Handled: "r1",
			Members: []PeerCAMember{{Name: "a", Reached: true}}}, PeerCAKeep, "r1", 1},
		{"rotating past two thirds: finish first, never begin again", PeerCAInput{Now: rotateAt, Rotating: true, Members: current("a")}, PeerCAFinish, "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.in.NotBefore, tt.in.NotAfter = notBefore, notAfter
			got := DecidePeerCA(tt.in)
			if got.Action != tt.want || got.Handled != tt.wantHandled || len(got.Waiting) != tt.wantWaiting {
				t.Fatalf("DecidePeerCA = %s handled %q waiting %v (%s); want %s handled %q waiting %d",
					got.Action, got.Handled, got.Waiting, got.Reason, tt.want, tt.wantHandled, tt.wantWaiting)
			}
			if got.Reason == "" {
				t.Errorf("no reason given")
			}
			if tt.in.RotateAt == 0 && !got.RotateAt.Equal(rotateAt) {
				t.Errorf("RotateAt = %s, want %s", got.RotateAt, rotateAt)
			}
		})
	}
}

func TestDecideReadiness(t *testing.T) {
	since := time.Date(2026, 12, 2, 22, 0, 0, 0, time.UTC)
	lost := QuorumState{Lost: true, NoLeaderSince: since, Voters: 3, Reached: 1}
	settled := since.Add(ReadinessSettle)
	tests := []struct {
		name       string
		in         ReadinessInput
		want       bool
		wantReason []string
	}{
		{"quorum: ready, others or not", ReadinessInput{PeersKnown: true, OthersReady: []string{"certapi-1"}}, true, []string{"has its quorum"}},
		{"quorum, peers unknown: ready", ReadinessInput{}, true, []string{"has its quorum"}},
		{"no leader within the grace (not lost yet): ready, etcd not asked", ReadinessInput{Now: since.Add(time.Second), Quorum: QuorumState{NoLeaderSince: since, Voters: 3}, PeersKnown: true, OthersReady: []string{"certapi-1"}}, true,
			[]string{"known no leader for 1s", "etcd is not asked"}},
		{"two of three lost, no other replica Ready: stays Ready", ReadinessInput{Now: settled, Quorum: lost, PeersKnown: true}, true,
			[]string{"no quorum", "reaches 1 of 3 voting members", "a quorum is 2", "no other replica is Ready"}},
		{"two of three lost, the lost still shown Ready (kubelet has not noticed): stays Ready", ReadinessInput{Now: settled.Add(-time.Second), Quorum: lost, PeersKnown: true, OthersReady: []string{"certapi-1", "certapi-2"}}, true,
			[]string{"no quorum", "stays Ready whatever the others show"}},
		{"cut off, healthy peers Ready: leaves", ReadinessInput{Now: settled, Quorum: lost, PeersKnown: true, OthersReady: []string{"certapi-2", "certapi-1"}}, false,
			[]string{"no quorum", "certapi-1, certapi-2", "leaves the Service"}},
		{"every member lost its quorum, the others still Ready: leaves (and returns once they left)", ReadinessInput{Now: settled, Quorum: lost, PeersKnown: true, OthersReady: []string{"certapi-0"}}, false, nil},
		{"no quorum, endpoints not listed yet: stays Ready", ReadinessInput{Now: settled, Quorum: lost}, true, []string{"not known yet"}},
		{"no quorum, reach not checked yet: counts what it knows", ReadinessInput{Now: settled, Quorum: QuorumState{Lost: true, NoLeaderSince: since, Voters: 3}, PeersKnown: true}, true,
			[]string{"knows 3 voting members and no leader", "2026-12-02T22:00:00Z"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := DecideReadiness(tt.in)
			if got.Ready != tt.want {
				t.Fatalf("DecideReadiness = %v (%s); want %v", got.Ready, got.Reason, tt.want)
			}
			// etcd is asked only while the member knows a leader.
			if wantStorage := tt.in.Quorum.NoLeaderSince.IsZero(); got.CheckStorage != wantStorage {
				t.Errorf("CheckStorage %v; want %v", got.CheckStorage, wantStorage)
			}
			if got.Reason == "" {
				t.Errorf("no reason given")
			}
			for _, w := range tt.wantReason {
				if !strings.Contains(got.Reason, w) {
					t.Errorf("reason %q does not say %q", got.Reason, w)
				}
			}
		})
	}
}
