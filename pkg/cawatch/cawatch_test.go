package cawatch

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	k8stesting "k8s.io/client-go/testing"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	certapifake "github.com/certapi/certapi/pkg/generated/clientset/versioned/fake"
)

func ca(serial string) *certapiv1alpha1.CertificateAuthority {
	return &certapiv1alpha1.CertificateAuthority{ObjectMeta: metav1.ObjectMeta{Name: certapiv1alpha1.CertificateAuthorityName},
		Status: certapiv1alpha1.CertificateAuthorityStatus{Active: &certapiv1alpha1.CertificateAuthorityRef{SerialNumber: serial}}}
}

// attempt is what one watch call does: fail with err, or send events and then end.
type attempt struct {
	err    error
	events []watch.Event
}

// TestFollow: each watch attempt in turn, what Follow returns, which serials the handler saw, and which
// hooks were called.
func TestFollow(t *testing.T) {
	forbidden := apierrors.NewForbidden(schema.GroupResource{Group: "certapi.dev", Resource: "certificateauthorities"}, "default", errors.New("no RBAC"))
	unavailable := apierrors.NewServiceUnavailable("certapi is starting")
	other := &certapiv1alpha1.CertificateAuthority{ObjectMeta: metav1.ObjectMeta{Name: "other"}}
	handlerFails := errors.New("handler fails")
	tests := []struct {
		name       string
		attempts   []attempt
		refusedSet bool
		doneAt     string // the serial at which the handler says done
		failAt     string // the serial at which the handler fails
		wantErr    error  // matched with errors.Is; nil: none
		wantSeen   []string
		wantHooks  []string
	}{
		{name: "current state first, done", attempts: []attempt{{events: []watch.Event{{Type: watch.Added, Object: ca("1")}, {Type: watch.Modified, Object: ca("2")}}}},
			doneAt: "2", wantSeen: []string{"1", "2"}},
		{name: "another name is ignored", attempts: []attempt{{events: []watch.Event{{Type: watch.Added, Object: other}, {Type: watch.Added, Object: ca("1")}}}},
			doneAt: "1", wantSeen: []string{"1"}},
		{name: "a refusal is returned unless Refused is set", attempts: []attempt{{err: forbidden}},
			wantErr: forbidden},
		{name: "refused, then allowed", attempts: []attempt{{err: forbidden}, {err: forbidden}, {events: []watch.Event{{Type: watch.Added, Object: ca("1")}}}},
			refusedSet: true, doneAt: "1", wantSeen: []string{"1"}, wantHooks: []string{"refused 1", "refused 2", "allowed"}},
		{name: "failures are retried", attempts: []attempt{{err: unavailable}, {events: []watch.Event{{Type: watch.Error, Object: &unavailable.ErrStatus}}}, {events: []watch.Event{{Type: watch.Added, Object: ca("1")}}}},
			doneAt: "1", wantSeen: []string{"1"}, wantHooks: []string{"failed", "failed"}},
		{name: "a watch that ends is started again", attempts: []attempt{{events: []watch.Event{{Type: watch.Added, Object: ca("1")}}}, {events: []watch.Event{{Type: watch.Added, Object: ca("2")}}}},
			doneAt: "2", wantSeen: []string{"1", "2"}, wantHooks: []string{}},
		{name: "the handler's error ends it", attempts: []attempt{{events: []watch.Event{{Type: watch.Added, Object: ca("1")}}}},
			failAt: "1", wantErr: handlerFails, wantSeen: []string{"1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := certapifake.NewSimpleClientset()
			calls := 0
			client.PrependWatchReactor("certificateauthorities", func(action k8stesting.Action) (bool, watch.Interface, error) {
				if sel := action.(k8stesting.WatchActionImpl).WatchRestrictions.Fields.String(); sel != "metadata.name=default" {
					t.Errorf("watch with field selector %q; want metadata.name=default", sel)
				}
				if calls >= len(tt.attempts) {
					t.Fatalf("watch called %d times; want %d", calls+1, len(tt.attempts))
				}
				a := tt.attempts[calls]
				calls++
				if a.err != nil {
					return true, nil, a.err
				}
				w := watch.NewFakeWithChanSize(len(a.events), false)
				for _, ev := range a.events {
					w.Action(ev.Type, ev.Object)
				}
				w.Stop() // the server ends the watch after these events
				return true, w, nil
			})
			var seen, hooks []string
			o := Options{
				Backoff:      func(int) time.Duration { return 0 },
				HealthyAfter: time.Hour, // an ended watch counts as a failure: each attempt's hooks are seen
				Allowed:      func() { hooks = append(hooks, "allowed") },
				Failed:       func(error, time.Duration) { hooks = append(hooks, "failed") },
			}
			if tt.refusedSet {
				o.Refused = func(n int, err error) time.Duration {
					hooks = append(hooks, fmt.Sprintf("refused %d", n))
					return 0
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err := Follow(ctx, client.CertapiV1alpha1().CertificateAuthorities(), o, func(c *certapiv1alpha1.CertificateAuthority) (bool, error) {
				seen = append(seen, c.Status.Active.SerialNumber)
				if c.Status.Active.SerialNumber == tt.failAt {
					return false, handlerFails
				}
				return c.Status.Active.SerialNumber == tt.doneAt, nil
			})
			if (err == nil) != (tt.wantErr == nil) || (err != nil && !errors.Is(err, tt.wantErr)) {
				t.Fatalf("Follow = %v; want %v", err, tt.wantErr)
			}
			if !slices.Equal(seen, tt.wantSeen) {
				t.Errorf("handler saw %v; want %v", seen, tt.wantSeen)
			}
			if tt.wantHooks != nil && !slices.Equal(hooks, tt.wantHooks) {
				t.Errorf("hooks %v; want %v", hooks, tt.wantHooks)
			}
		})
	}
}

// TestFollowEndsWithItsContext: Follow returns ctx's error when ctx ends while it waits.
func TestFollowEndsWithItsContext(t *testing.T) {
	client := certapifake.NewSimpleClientset()
	client.PrependWatchReactor("certificateauthorities", func(k8stesting.Action) (bool, watch.Interface, error) {
		return true, nil, apierrors.NewServiceUnavailable("down")
	})
	ctx, cancel := context.WithCancel(context.Background())
	o := Options{Backoff: func(int) time.Duration { return time.Hour }, Failed: func(error, time.Duration) { cancel() }}
	if err := Follow(ctx, client.CertapiV1alpha1().CertificateAuthorities(), o, func(*certapiv1alpha1.CertificateAuthority) (bool, error) {
		return false, nil
	}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Follow = %v; want context.Canceled", err)
	}
}

func TestDoubling(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want time.Duration
	}{
		{0, time.Second}, {1, time.Second}, {2, 2 * time.Second}, {3, 4 * time.Second}, {5, 10 * time.Second}, {1 << 20, 10 * time.Second},
	} {
		if got := Doubling(time.Second, 10*time.Second, tc.n); got != tc.want {
			t.Errorf("Doubling(1s, 10s, %d) = %v; want %v", tc.n, got, tc.want)
		}
	}
}
