package certificateauthority

import "github.com/certapi/certapi/pkg/apis/certapi"

// leaderStatus is status.leader from what the leader election said (LeaderFunc's results): Elected with
// the identity of the replica that holds it, None when no replica does, Unknown when it could not be read.
// A pure function.
func leaderStatus(identity string, ok bool, err error) *certapi.CertificateAuthorityLeader {
	switch {
	case err != nil:
		return &certapi.CertificateAuthorityLeader{State: certapi.LeaderStateUnknown}
	case !ok || identity == "":
		return &certapi.CertificateAuthorityLeader{State: certapi.LeaderStateNone}
	}
	return &certapi.CertificateAuthorityLeader{State: certapi.LeaderStateElected, Identity: identity}
}

// leaderCell is the table's Leader column, made from status.leader: the identity of the replica that
// leads, <none> when none does, <unknown> when the election could not be read or the object carries no
// leader (a write's answer, which is not filled). A pure function.
func leaderCell(l *certapi.CertificateAuthorityLeader) string {
	switch {
	case l == nil:
		return "<unknown>"
	case l.State == certapi.LeaderStateElected && l.Identity != "":
		return l.Identity
	case l.State == certapi.LeaderStateNone:
		return "<none>"
	}
	return "<unknown>"
}
