package etcdcluster

import (
	"fmt"
	"strings"
	"time"
)

// DefaultPeerCARotateAt is the fraction of the peer CA's life after which the etcd leader rotates it by
// itself: two thirds, as certapi's serving CA (a third of its life is left for the rotation and for every
// replica to have restarted once before the old CA, and with it the chain to the new one, expires).
const DefaultPeerCARotateAt = 2.0 / 3

// PeerCAAction is what the etcd leader does with the peer CA.
type PeerCAAction string

const (
	// PeerCAKeep changes nothing.
	PeerCAKeep PeerCAAction = "Keep"
	// PeerCABegin starts a rotation: a new CA (PeerCA.Successor) signs from now on, trusted with the old
	// one; every member re-issues its certificate from it.
	PeerCABegin PeerCAAction = "Begin"
	// PeerCAFinish ends a rotation: every member presents a certificate of the new CA, so the old CA
	// leaves the bundle (PeerCA.Settled).
	PeerCAFinish PeerCAAction = "Finish"
)

// PeerCAMember is one member as the etcd leader saw the certificate it presents.
type PeerCAMember struct {
	Name string
	// Reached is true when a TLS handshake with the member's client URL succeeded.
	Reached bool
	// Current is true when the certificate it presented was signed by the CA that signs now.
	Current bool
}

// PeerCAInput is what the etcd leader knows of the peer CA when it decides.
type PeerCAInput struct {
	Now time.Time
	// NotBefore and NotAfter are the signing CA's validity.
	NotBefore, NotAfter time.Time
	// Rotating is true when the bundle trusts another CA besides the signing one.
	Rotating bool
	// Requested is the latest on-demand request (the Secret's annotation, set by `kubectl certapi rotate
	// --etcd-peer`); Handled the request the last rotation started for. A request is pending while they
	// differ.
	Requested, Handled string
	// Members are every member of the cluster, voting or learner: looked at only while Rotating.
	Members []PeerCAMember
	// RotateAt is the fraction of the CA's life after which it is rotated; 0 means DefaultPeerCARotateAt.
	RotateAt float64
}

// PeerCAPlan is DecidePeerCA's answer.
type PeerCAPlan struct {
	Action PeerCAAction
	// Handled is what Begin records as handled: the request it acts on, or Handled unchanged when the
	// rotation is the scheduled one.
	Handled string
	// RotateAt is when the signing CA is rotated by itself.
	RotateAt time.Time
	// Waiting names the members a rotation waits for (not reached, or presenting a certificate of the
	// old CA).
	Waiting []string
	// Reason says why, for the log and the status.
	Reason string
}

// DecidePeerCA chooses the etcd leader's next step with the peer CA. The rules, in order:
//
//  1. During a rotation: finish once every member presents a certificate of the new CA (then no process
//     needs the old CA's trust any more: members that still trust only the old CA verify the new
//     certificates through PeerCA.Chain); until then keep, naming the members waited for. An unreachable
//     member is waited for, never assumed: it may come back presenting the old CA's certificate. (A
//     member that starts re-issues its certificate from the Secret's CA at once.) A request made
//     meanwhile waits for the next rotation.
//  2. Otherwise begin when a request is pending (Requested set and not Handled), or when RotateAt of the
//     signing CA's life has passed.
//  3. Otherwise keep.
func DecidePeerCA(in PeerCAInput) PeerCAPlan {
	frac := in.RotateAt
	if frac <= 0 || frac >= 1 {
		frac = DefaultPeerCARotateAt
	}
	life := in.NotAfter.Sub(in.NotBefore)
	plan := PeerCAPlan{Action: PeerCAKeep, Handled: in.Handled, RotateAt: in.NotBefore.Add(time.Duration(float64(life) * frac).Round(time.Second))}
	if in.Rotating {
		for _, m := range in.Members {
			switch {
			case !m.Reached:
				plan.Waiting = append(plan.Waiting, m.Name+" (not reached)")
			case !m.Current:
				plan.Waiting = append(plan.Waiting, m.Name+" (presents the old CA's certificate)")
			}
		}
		if len(in.Members) == 0 {
			plan.Reason = "rotating the etcd peer CA: no member seen yet"
			return plan
		}
		if len(plan.Waiting) > 0 {
			plan.Reason = fmt.Sprintf("rotating the etcd peer CA: waiting for %d of %d members to present a certificate of the new CA: %s",
				len(plan.Waiting), len(in.Members), strings.Join(plan.Waiting, ", "))
			return plan
		}
		plan.Action = PeerCAFinish
		plan.Reason = fmt.Sprintf("every one of %d members presents a certificate of the new etcd peer CA: the old CA leaves the bundle", len(in.Members))
		return plan
	}
	if in.Requested != "" && in.Requested != in.Handled {
		plan.Action, plan.Handled = PeerCABegin, in.Requested
		plan.Reason = fmt.Sprintf("rotating the etcd peer CA on request %q", in.Requested)
		return plan
	}
	if !in.Now.Before(plan.RotateAt) {
		plan.Action = PeerCABegin
		plan.Reason = fmt.Sprintf("rotating the etcd peer CA: %.0f%% of its life has passed (it expires %s)", frac*100, in.NotAfter.UTC().Format(time.RFC3339))
		return plan
	}
	plan.Reason = fmt.Sprintf("the etcd peer CA rotates by itself at %s", plan.RotateAt.UTC().Format(time.RFC3339))
	return plan
}
