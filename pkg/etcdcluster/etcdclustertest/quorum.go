// Package etcdclustertest holds the stand-ins for an etcd member that tests of the packages built on
// pkg/etcdcluster need, in one place instead of a copy in every test.
package etcdclustertest

import (
	"context"

	"github.com/certapi/certapi/pkg/etcdcluster"
)

// Quorum is a member whose quorum the test sets: what the readiness checks and the request filters read
// of an etcdcluster.Member.
type Quorum struct {
	// State is what QuorumState returns; its Lost is what QuorumLost returns.
	State etcdcluster.QuorumState
	// Lost, when set, is what QuorumLostContext returns; unset, a context that is done when State.Lost.
	Lost context.Context
}

// QuorumLost reports State.Lost.
func (f *Quorum) QuorumLost() bool { return f.State.Lost }

// QuorumState returns State.
func (f *Quorum) QuorumState() etcdcluster.QuorumState { return f.State }

// QuorumLostContext returns Lost, or a context that is done when State.Lost and never otherwise.
func (f *Quorum) QuorumLostContext() context.Context {
	if f.Lost != nil {
		return f.Lost
	}
	if !f.State.Lost {
		return context.Background()
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}
