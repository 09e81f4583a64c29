package issuer

import (
	"context"
	"errors"
	"fmt"
	"slices"
)

// HandoffCheck is asked by the leader about each request a follower hands it through etcd, before it is
// signed. It returns nil when the stored ServingCertRequest allows the request, an error wrapping
// ErrHandoffRefused (with the reason) when it does not, and any other error when it could not tell; that
// request is then left unanswered and its caller gets a 503 it can retry.
//
// The check exists because the handoff keys are plain etcd keys: whoever can write to certapi's etcd could
// otherwise have the leader sign any Service name of any namespace without a ServingCertRequest, RBAC or
// admission ever seeing it. The leader signs only what a stored request allows.
type HandoffCheck func(ctx context.Context, req Request) error

// ErrHandoffRefused means the leader refused a handed-over request because what is stored does not allow
// it: the ServingCertRequest is gone or asks for other names now. Callers answer 409 Conflict.
var ErrHandoffRefused = errors.New("the leader refused the request")

// AllowedBy returns nil when req asks for nothing that allowed, the Request of the stored
// ServingCertRequest (RequestFor), does not: the same request, Service, DNS names (in any order) and
// renewBefore, a duration of at least a second and at most allowed's, and the servingcerts path, which is
// the only one that is handed over (Secret delivery and PodCertificateRequests are signed on the leader).
// Otherwise the error wraps ErrHandoffRefused and names the first difference.
func (req Request) AllowedBy(allowed Request) error {
	refuse := func(format string, args ...any) error {
		return fmt.Errorf("%w: ServingCertRequest %s/%s %s", ErrHandoffRefused, req.Namespace, req.Name, fmt.Sprintf(format, args...))
	}
	sorted := func(names []string) []string {
		s := slices.Clone(names)
		slices.Sort(s)
		return s
	}
	switch {
	case req.Namespace != allowed.Namespace || req.Name != allowed.Name:
		return refuse("is not the stored request %s/%s", allowed.Namespace, allowed.Name)
	case req.Path != PathServingCerts:
		return refuse("came by path %q; only %q is handed over", req.Path, PathServingCerts)
	case req.ServiceName != allowed.ServiceName:
		return refuse("names Service %q; the stored request names %q", req.ServiceName, allowed.ServiceName)
	case !slices.Equal(sorted(req.DNSNames), sorted(allowed.DNSNames)):
		return refuse("asks for DNS names %q; the stored request allows %q", req.DNSNames, allowed.DNSNames)
	case req.Duration <= 0 || req.Duration > allowed.Duration:
		return refuse("asks for a duration of %s; the stored request allows at most %s", req.Duration, allowed.Duration)
	case req.RenewBefore != allowed.RenewBefore:
		return refuse("asks for renewBefore %s; the stored request has %s", req.RenewBefore, allowed.RenewBefore)
	case req.MaxLifetime != 0:
		return refuse("asks for a lifetime cap, which only PodCertificateRequests have")
	}
	return nil
}
