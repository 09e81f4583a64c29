package rotation

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/signer"
)

// TestNoteClock: a rotation refused for the clock makes one Warning Event per episode (not one per
// retry), and a later successful Rotate ends the episode.
func TestNoteClock(t *testing.T) {
	rec := events.NewFakeRecorder(10)
	c := &Controller{recorder: rec}
	obj := &certapiv1alpha1.CertificateAuthority{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
	behind := fmt.Errorf("planning the next rotation step: %w: the clock reads 2030-01-01T00:00:00Z", signer.ErrClockBehind)
	for _, tc := range []struct {
		name       string
		err        error
		wantEvents int
	}{
		{"refused", behind, 1},
		{"refused again, a retry", behind, 0},
		{"another error does not end the episode", errors.New("etcd unreachable"), 0},
		{"refused again", behind, 0},
		{"a Rotate that went through ends it", nil, 0},
		{"refused anew", behind, 1},
	} {
		c.noteClock(context.Background(), obj, tc.err)
		var got []string
		for len(rec.Events) > 0 {
			got = append(got, <-rec.Events)
		}
		if len(got) != tc.wantEvents {
			t.Fatalf("%s: events %q; want %d", tc.name, got, tc.wantEvents)
		}
		for _, e := range got {
			if !strings.HasPrefix(e, "Warning ClockBehind") || !strings.Contains(e, "the clock reads") {
				t.Errorf("%s: event %q; want a ClockBehind Warning with the refusal", tc.name, e)
			}
		}
	}
}
