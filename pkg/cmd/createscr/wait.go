package createscr

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/cmd/internal/byname"
	certapiclient "github.com/certapi/certapi/pkg/generated/clientset/versioned/typed/certapi/v1alpha1"
)

// readiness reports whether obj's Ready condition is True for obj's current generation and, for
// messages, what that condition says.
func readiness(obj *certapiv1alpha1.ServingCertRequest) (bool, string) {
	cond := meta.FindStatusCondition(obj.Status.Conditions, certapiv1alpha1.ConditionReady)
	if cond == nil {
		if obj.Spec.SecretName == "" {
			return false, "it has no Ready condition yet; without --secret a request becomes Ready when a " +
				"certificate is first issued through its servingcerts subresource"
		}
		return false, "it has no Ready condition yet"
	}
	desc := fmt.Sprintf("Ready=%s", cond.Status)
	if cond.Reason != "" {
		desc += ", reason " + cond.Reason
	}
	if cond.Message != "" {
		desc += ": " + cond.Message
	}
	if cond.ObservedGeneration != 0 && cond.ObservedGeneration < obj.Generation {
		return false, fmt.Sprintf("%s (about generation %d; the request is at generation %d)", desc, cond.ObservedGeneration, obj.Generation)
	}
	return cond.Status == metav1.ConditionTrue, desc
}

// waitForReady watches the request namespace/name until its Ready condition is True, and returns it
// then. When timeout passes first, the error says what the request's Ready condition said last.
func waitForReady(ctx context.Context, client certapiclient.ServingCertRequestInterface, namespace, name string, timeout time.Duration) (*certapiv1alpha1.ServingCertRequest, error) {
	ref := resourceName + "/" + name
	waitCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	lw := cache.ToListWatcherWithWatchListSemantics(byname.ListWatch[*certapiv1alpha1.ServingCertRequestList](client, name), client)

	var last *certapiv1alpha1.ServingCertRequest
	check := func(obj any) (bool, error) {
		scr, ok := obj.(*certapiv1alpha1.ServingCertRequest)
		if !ok {
			return false, fmt.Errorf("watching %s: unexpected object %T", ref, obj)
		}
		last = scr
		ready, _ := readiness(scr)
		return ready, nil
	}
	precondition := func(store cache.Store) (bool, error) {
		obj, exists, err := store.GetByKey(namespace + "/" + name)
		if err != nil {
			return false, fmt.Errorf("reading %s from the watch cache: %w", ref, err)
		}
		if !exists {
			return false, fmt.Errorf("%s was deleted before it became Ready", ref)
		}
		return check(obj)
	}
	condition := func(ev watch.Event) (bool, error) {
		switch ev.Type {
		case watch.Deleted:
			return false, fmt.Errorf("%s was deleted before it became Ready", ref)
		case watch.Added, watch.Modified:
			return check(ev.Object)
		}
		return false, nil
	}

	_, err := watchtools.UntilWithSync(waitCtx, lw, &certapiv1alpha1.ServingCertRequest{}, precondition, condition)
	switch {
	case err == nil:
		return last, nil
	case errors.Is(waitCtx.Err(), context.DeadlineExceeded) && ctx.Err() == nil:
		what := "it could not be read while waiting (may you list and watch servingcertrequests here?)"
		if last != nil {
			_, what = readiness(last)
		}
		return last, fmt.Errorf("timed out after %s waiting for %s to be Ready: %s", timeout, ref, what)
	case ctx.Err() != nil:
		return last, fmt.Errorf("waiting for %s to be Ready: %w", ref, ctx.Err())
	default:
		return last, fmt.Errorf("waiting for %s to be Ready: %w", ref, err)
	}
}
