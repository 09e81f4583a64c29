package snapshot

import (
	"slices"
	"testing"
)

func TestToPrune(t *testing.T) {
	for _, tc := range []struct {
		name  string
		names []string
		keep  int
		want  []string
	}{
		{"none", nil, 3, nil},
		{"fewer than kept", []string{"certapi-20260101T000000Z.db", "certapi-20260102T000000Z.db"}, 3, nil},
		{"exactly kept", []string{"certapi-20260101T000000Z.db", "certapi-20260102T000000Z.db"}, 2, nil},
		{"oldest go, in any listing order",
			[]string{"certapi-20260103T000000Z.db", "certapi-20260101T000000Z.db", "certapi-20260104T000000Z.db", "certapi-20260102T000000Z.db"}, 2,
			[]string{"certapi-20260101T000000Z.db", "certapi-20260102T000000Z.db"}},
		{"other files are never pruned",
			[]string{"certapi-20260101T000000Z.db", "mine.db", "certapi-manual.db", ".certapi-20260102T000000Z.db.part-123", "certapi-20260102T000000Z.db.bak", "certapi-20260102T000000Z.db"}, 1,
			[]string{"certapi-20260101T000000Z.db"}},
		{"keep below 1 keeps 1", []string{"certapi-20260101T000000Z.db", "certapi-20260102T000000Z.db"}, 0, []string{"certapi-20260101T000000Z.db"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := toPrune(tc.names, tc.keep); !slices.Equal(got, tc.want) {
				t.Errorf("toPrune = %v, want %v", got, tc.want)
			}
		})
	}
}
