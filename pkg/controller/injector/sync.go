package injector

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"

	"github.com/certapi/certapi/pkg/cabundle"
	"github.com/certapi/certapi/pkg/controller"
)

// syncAndTell syncs one object on the term's queue and then tells the listeners, since its state may
// have changed.
func (i *Injector) syncAndTell(ctx context.Context, k key) (controller.Result, error) {
	after, err := i.sync(ctx, k)
	i.changes.Notify()
	return controller.Result{After: after}, err
}

// sync brings one object up to date. A positive duration re-queues it after that long.
func (i *Injector) sync(ctx context.Context, k key) (time.Duration, error) {
	m := i.meta(k)
	if m == nil || !optedIn(m) {
		i.forget(k) // deleted, or the annotation was removed: the caBundle stays as it is
		return 0, nil
	}
	i.mu.Lock()
	if _, ok := i.objects[k]; !ok {
		i.objects[k] = &objState{state: StatePending}
	}
	i.mu.Unlock()

	if reason, msg := refusedTarget(k.kind, k.name, m.Annotations); reason != "" {
		i.setConflict(k, m, reason, msg)
		return 0, nil
	}
	now := i.clock.Now()
	if wait := i.coolingDown(k, m, now); wait > 0 {
		return wait, nil
	}
	cb := i.currentCanonical()
	bundle, d := cb.pem, cb.digest
	switch {
	case cb.err != nil:
		i.setPending(k, ReasonInvalidBundle, "the CA bundle to inject does not parse, so nothing is written: "+cb.err.Error())
		return 0, nil // the next bundle change triggers again
	case bundle == nil:
		i.setPending(k, ReasonWaitingForBundle, "there is no CA bundle to inject yet")
		return 0, nil
	case i.stillRefused(k, m.ResourceVersion, d):
		return 0, nil // refused for good, and neither the object nor the bundle changed since
	}
	var err error

	kc := i.kinds[k.kind]
	logger := klog.FromContext(ctx).WithValues("kind", k.kind, "name", k.name)
	// At most: one write of the bundle, one release of the managedFields entry, and the reads
	// between; more means the object keeps changing, and the informer will bring it back.
	for range 4 {
		obs, held := i.observed(k)
		if !obs.current(m.UID, m.ResourceVersion) {
			obs, err = kc.get(ctx, k.name)
			if apierrors.IsNotFound(err) {
				i.forget(k)
				return 0, nil
			}
			if err != nil {
				i.setFailed(k, nil, fmt.Sprintf("reading %s %s: %v", k.kind, k.name, err))
				return 0, err
			}
			i.setObservation(k, obs)
		}
		p := decide(obs, bundle, d, held)
		switch {
		case p.skip != "":
			i.setSkipped(k, obs, p.skip)
			return 0, nil

		case len(p.notKept) > 0:
			// Nothing is written: the field keeps what the webhook may still serve from. The
			// object comes back when it changes.
			i.setObservation(k, obs)
			i.setConflict(k, m, ReasonForeignCANotKept, notKeptMessage(k.kind, k.name, p.notKept))
			return 0, nil

		case p.upToDate && p.release == nil:
			i.setUpToDate(k, obs, cb)
			i.tellKept(k, m, p.kept)
			return 0, nil

		case p.upToDate:
			resp, err := kc.patch(ctx, k.name, p.release)
			if err != nil {
				i.setFailed(k, obs, i.failure(k, err, fmt.Sprintf("removing certapi's managedFields entry from %s %s: %v", k.kind, k.name, err)))
				return 0, err
			}
			resp.basedOn = m.ResourceVersion
			i.setObservation(k, resp)
			logger.V(2).Info("Gave up certapi's field ownership of the caBundle, so that the server-side apply owner of spec.conversion can change it", "appliers", obs.appliedBy)

		default:
			if len(p.overwritten) > 0 {
				if fought := i.restoration(k, m, obs, p, now); fought {
					return i.conflictCooldown, nil
				}
			}
			resp, err := kc.patch(ctx, k.name, p.patch)
			if err != nil && cabundle.Classify(err) == cabundle.Refused {
				// Not retried on a timer: the informer brings the object back when it changes, and a new
				// bundle re-checks every target. A refusal counts from the first one: the one thing certapi
				// controls, the bundle, only changes with a rotation, which retries every target anyway,
				// and waiting for a few refusals would only hold the rotation gate for longer.
				i.setRefused(k, m, obs.ResourceVersion, d, refusedMessage(k.kind, k.name, err))
				logger.Info("kube-apiserver refused the caBundle write; the target no longer holds CA rotations and is tried again when it changes",
					"reason", apierrors.ReasonForError(err), "err", shortError(err))
				return 0, nil
			}
			if err != nil {
				i.setFailed(k, obs, i.failure(k, err, fmt.Sprintf("writing the caBundle of %s %s: %v", k.kind, k.name, err)))
				return 0, err
			}
			resp.basedOn = m.ResourceVersion
			i.setWritten(k, resp, cb)
			i.tellKept(k, m, p.kept)
			logger.V(2).Info("Injected the CA bundle", "slots", p.write, "restored", len(p.overwritten) > 0, "keptForeignCAs", len(p.kept))
		}
	}
	return 0, nil
}

// staleRetries is how many times in a row a write may be refused as stale (its resourceVersion test
// failed, or a conflict) before it is reported as a problem: the object was just changing, which is
// normal for a CRD that kube-apiserver is still establishing.
const staleRetries = 3

// failure returns the problem message for a failed write, or "" while a stale write is retried.
func (i *Injector) failure(k key, err error, msg string) string {
	if cabundle.Classify(err) == cabundle.Stale && i.queue.NumRequeues(k) < staleRetries {
		return ""
	}
	return msg
}
