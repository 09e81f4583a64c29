package snapshot

import "testing"

func TestDecideTarget(t *testing.T) {
	for _, tc := range []struct {
		state targetState
		force bool
		want  targetAction
	}{
		{targetAbsent, false, targetCreate},
		{targetAbsent, true, targetCreate},
		{targetEmptyDir, false, targetRemoveEmpty},
		{targetEmptyDir, true, targetRemoveEmpty},
		{targetNonEmptyDir, false, targetRefuse},
		{targetNonEmptyDir, true, targetMoveAside},
		{targetFile, false, targetNotDir},
		{targetFile, true, targetNotDir},
	} {
		if got := decideTarget(tc.state, tc.force); got != tc.want {
			t.Errorf("decideTarget(%d, force=%v) = %d, want %d", tc.state, tc.force, got, tc.want)
		}
	}
}
