package rotation

import (
	"fmt"
	"reflect"
	"testing"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/controller"
)

// TestPendingTargets: what a distrust reports as still to take the bundle leaves out the targets that
// never will: skipped, in conflict, and Failed (a tenant's ConfigMap too large to take it).
func TestPendingTargets(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    certapiv1alpha1.InjectionSummary
		want int32
	}{
		{"all up to date", certapiv1alpha1.InjectionSummary{Targets: 4, UpToDate: 4}, 0},
		{"two taking it", certapiv1alpha1.InjectionSummary{Targets: 4, UpToDate: 2}, 2},
		{"skipped and conflicts are not waited for", certapiv1alpha1.InjectionSummary{Targets: 5, UpToDate: 2, Skipped: 1, Conflicts: 1}, 1},
		{"a failed target is not waited for", certapiv1alpha1.InjectionSummary{Targets: 4, UpToDate: 3, Failed: 1}, 0},
		{"never negative", certapiv1alpha1.InjectionSummary{Targets: 1, UpToDate: 1, Failed: 1}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := pendingTargets(tc.s); got != tc.want {
				t.Errorf("pendingTargets(%+v) = %d, want %d", tc.s, got, tc.want)
			}
		})
	}
}

// summaryTarget is a Target with a fixed summary.
type summaryTarget struct {
	controller.Listeners
	s    certapiv1alpha1.InjectionSummary
	hold bool
}

func (t *summaryTarget) AllHold([]byte) bool                                { return t.hold }
func (t *summaryTarget) InjectionSummary() certapiv1alpha1.InjectionSummary { return t.s }

// TestSumTargets: status.injection counts every object of every target (the injector's and the
// ClusterTrustBundle), and names at most ten failed ones.
func TestSumTargets(t *testing.T) {
	many := make([]string, 8)
	for n := range many {
		many[n] = fmt.Sprintf("ConfigMap ns/c%d", n)
	}
	cases := []struct {
		name    string
		targets []Target
		want    certapiv1alpha1.InjectionSummary
	}{
		{name: "the injector alone", targets: []Target{&summaryTarget{s: certapiv1alpha1.InjectionSummary{Targets: 3, UpToDate: 1, Skipped: 1, Conflicts: 1}}},
			want: certapiv1alpha1.InjectionSummary{Targets: 3, UpToDate: 1, Skipped: 1, Conflicts: 1}},
		{name: "the injector and a pending ClusterTrustBundle", targets: []Target{
			&summaryTarget{s: certapiv1alpha1.InjectionSummary{Targets: 3, UpToDate: 3}},
			&summaryTarget{s: certapiv1alpha1.InjectionSummary{Targets: 1}},
		}, want: certapiv1alpha1.InjectionSummary{Targets: 4, UpToDate: 3}},
		{name: "failed targets named up to ten", targets: []Target{
			&summaryTarget{s: certapiv1alpha1.InjectionSummary{Targets: 8, Failed: 8, FailedTargets: many}},
			&summaryTarget{s: certapiv1alpha1.InjectionSummary{Targets: 8, Failed: 8, FailedTargets: many}},
		}, want: certapiv1alpha1.InjectionSummary{Targets: 16, Failed: 16, FailedTargets: append(append([]string(nil), many...), many[:2]...)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := SumTargets(tc.targets); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("SumTargets = %+v; want %+v", got, tc.want)
			}
		})
	}
}
