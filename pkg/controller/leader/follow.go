package leader

import (
	"context"
	"crypto/x509"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/certapi/certapi/pkg/controller/rotation"
	"github.com/certapi/certapi/pkg/controller/secretdelivery"
	"github.com/certapi/certapi/pkg/controller/status"
	certapilisters "github.com/certapi/certapi/pkg/generated/listers/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/signer"
)

// distrustProgress tells how far a pending distrust has come: every Secret certapi delivers for an
// existing request, and (replicas) every certapi replica's own serving certificate, from the Active CA.
type distrustProgress struct {
	delivery *secretdelivery.Controller
	issuer   Issuer
	replicas bool
}

func (d distrustProgress) of(ctx context.Context, active *x509.Certificate) rotation.DistrustProgress {
	tally, ok := d.delivery.Distrust(active)
	p := rotation.DistrustProgress{Known: ok, PendingSecrets: tally.Pending, UnmanagedSecrets: tally.Unmanaged}
	if d.replicas && ok {
		n, err := d.issuer.ServingNotFrom(ctx, signer.FormatSerialNumber(active.SerialNumber))
		p.Known, p.PendingReplicas = err == nil, n
	}
	return p
}

// bundleFollower makes every request's status.caBundle follow the bundle after a rotation step; the
// status writer coalesces and paces the writes.
type bundleFollower struct {
	requests certapilisters.ServingCertRequestLister
	status   *status.Writer
}

func (b bundleFollower) set(_ context.Context, bundle []byte) {
	all, err := b.requests.List(labels.Everything())
	if err != nil {
		return
	}
	for _, r := range all {
		b.status.SetBundle(types.NamespacedName{Namespace: r.Namespace, Name: r.Name}, string(bundle))
	}
}
