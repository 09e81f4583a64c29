package rotation

import (
	"testing"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
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
