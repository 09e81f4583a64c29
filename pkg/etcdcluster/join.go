package etcdcluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
)

// memberList asks each URL in turn for the member list; it returns the URL that answered, or "".
func (m *Member) memberList(ctx context.Context, urls []string) (string, []Entry) {
	for _, u := range urls {
		if u == m.cfg.ClientURL {
			continue
		}
		c, err := m.clients.dial(ctx, u)
		if err != nil {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		resp, err := c.MemberList(cctx)
		cancel()
		_ = c.Close()
		if err != nil {
			klog.FromContext(ctx).V(2).Info("Peer did not answer", "url", u, "err", err)
			continue
		}
		return u, convertMembers(resp.Members)
	}
	return "", nil
}

// joinCandidates are the client URLs to ask, in turn, to add this member: the member that answered the
// member list first, then the other voting members' advertised client URLs, then every other member found.
// etcd's strict reconfiguration check refuses an add on a member that has not been connected to a
// quorum of voters for 5 s; that is a fact about the member asked, not the cluster, so another may accept.
func joinCandidates(answered string, members []Entry, discovered []string, self string) []string {
	out := []string{answered}
	add := func(u string) {
		if u != "" && u != self && !slices.Contains(out, u) {
			out = append(out, u)
		}
	}
	for _, e := range members {
		if !e.IsLearner {
			for _, u := range e.ClientURLs {
				add(u)
			}
		}
	}
	for _, u := range discovered {
		add(u)
	}
	return out
}

// join removes this member's stale entries through the member at url and adds it as a learner through
// the first of candidates that accepts; it returns the initial cluster to start with.
func (m *Member) join(ctx context.Context, url string, candidates []string, stale []uint64) (string, error) {
	if len(stale) > 0 {
		c, err := m.clients.dial(ctx, url)
		if err != nil {
			return "", err
		}
		for _, id := range stale {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			_, err := c.MemberRemove(cctx, id)
			cancel()
			if err != nil && !errors.Is(err, rpctypes.ErrMemberNotFound) {
				_ = c.Close()
				return "", fmt.Errorf("removing the stale entry %x of this member: %w", id, err)
			}
			klog.FromContext(ctx).Info("Removed a stale etcd member entry of this member (its data was lost)", "id", fmt.Sprintf("%x", id))
		}
		_ = c.Close()
	}
	var refusals []string
	for _, u := range candidates {
		initial, err := m.addAsLearner(ctx, u)
		switch {
		case err == nil:
			m.lastJoinRefusal = ""
			return initial, nil
		case errors.Is(err, rpctypes.ErrTooManyLearners):
			klog.FromContext(ctx).Info("Another etcd member is joining; waiting for it to be promoted")
			return "", errWait
		case errors.Is(err, rpctypes.ErrUnhealthy):
			// etcd adds a member only through a member that has been connected to a quorum of voters for
			// 5 s: after a restart or a join, the next join waits that long. Ask the next member.
			refusals = append(refusals, u)
			continue
		}
		return "", fmt.Errorf("adding this member as a learner through %s: %w", u, err)
	}
	if msg := strings.Join(refusals, ", "); msg != m.lastJoinRefusal {
		klog.FromContext(ctx).Info("Every etcd member asked refused to add this one for now (not connected to a quorum of voters for 5 s); trying again",
			"refusedBy", refusals)
		m.lastJoinRefusal = msg
	}
	return "", errWait
}

// addAsLearner asks the member at url to add this member as a learner and returns the initial cluster.
func (m *Member) addAsLearner(ctx context.Context, url string) (string, error) {
	c, err := m.clients.dial(ctx, url)
	if err != nil {
		return "", err
	}
	defer func() { _ = c.Close() }()
	// Raft drops a configuration change proposed while another is unapplied (two members joining at the
	// same moment), and the call then waits for nothing: keep the wait short and try again. Should the
	// add have been applied after all, the next attempt finds it as a stale entry of this member's peer
	// URL and removes it first.
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	resp, err := c.MemberAddAsLearner(cctx, []string{m.cfg.PeerURL})
	cancel()
	if err != nil {
		return "", err
	}
	klog.FromContext(ctx).Info("Added this member as an etcd learner", "id", fmt.Sprintf("%x", resp.Member.ID), "through", url)
	var parts []string
	for _, mm := range resp.Members {
		switch {
		case mm.ID == resp.Member.ID:
			parts = append(parts, m.cfg.Name+"="+m.cfg.PeerURL)
		case mm.Name != "":
			for _, p := range mm.PeerURLs {
				parts = append(parts, mm.Name+"="+p)
			}
		}
	}
	return strings.Join(parts, ","), nil
}

// the leader, so it is tried again with backoff until it succeeds or ctx ends. Every attempt goes
// through one client of the voting members (etcdClients.votersClient), closed once this member votes.
func (m *Member) promote(ctx context.Context) error {
	if !m.etcd.Server.IsLearner() {
		return nil
	}
	defer m.clients.closeVoters()
	id := uint64(m.etcd.Server.MemberID())
	err := retry(ctx, 100*time.Millisecond, m.cfg.RetryInterval, func(ctx context.Context) (bool, error) {
		select {
		case <-m.etcd.Server.StopNotify():
			// The leader removed this learner (it was unhealthy too long, DecideMaintenance): give up, so
			// that the process restarts and joins anew.
			return false, errors.New("etcd stopped: the cluster removed this learner")
		default:
		}
		if !m.etcd.Server.IsLearner() {
			return true, nil
		}
		c, err := m.clients.votersClient(m.votingClientURLs())
		if err != nil {
			return false, nil
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err = c.MemberPromote(cctx, id)
		cancel()
		switch {
		case err == nil || errors.Is(err, rpctypes.ErrMemberNotLearner):
			klog.FromContext(ctx).Info("Promoted this etcd learner to a voting member")
			return true, nil
		case errors.Is(err, rpctypes.ErrMemberNotFound):
			return false, fmt.Errorf("the cluster removed this learner before its promotion: %w", err)
		case errors.Is(err, rpctypes.ErrMemberLearnerNotReady):
			klog.FromContext(ctx).V(2).Info("Learner not yet in sync; promotion retried")
		default:
			klog.FromContext(ctx).V(1).Info("Promotion failed; retried", "err", err)
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("promoting this learner: %w", err)
	}
	// The local server learns of its promotion when it applies the entry.
	return wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(context.Context) (bool, error) {
		return !m.etcd.Server.IsLearner(), nil
	})
}
