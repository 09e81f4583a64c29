package certificateauthority

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/certapi/certapi/pkg/apis/certapi"
)

// TestTableLeaderColumn: the Leader column is made from status.leader, whatever it says.
func TestTableLeaderColumn(t *testing.T) {
	for _, tc := range []struct {
		name   string
		leader *certapi.CertificateAuthorityLeader
		want   string
	}{
		{"a leader", &certapi.CertificateAuthorityLeader{State: certapi.LeaderStateElected, Identity: "certapi-1"}, "certapi-1"},
		{"no leader", &certapi.CertificateAuthorityLeader{State: certapi.LeaderStateNone}, "<none>"},
		{"election unreadable", &certapi.CertificateAuthorityLeader{State: certapi.LeaderStateUnknown}, "<unknown>"},
		{"not filled", nil, "<unknown>"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ca := &certapi.CertificateAuthority{
				ObjectMeta: metav1.ObjectMeta{Name: "default", CreationTimestamp: metav1.NewTime(time.Now().Add(-time.Hour))},
				Status: certapi.CertificateAuthorityStatus{
					Leader: tc.leader,
					Active: &certapi.CertificateAuthorityRef{SerialNumber: "0a"},
					Conditions: []metav1.Condition{
						{Type: certapi.ConditionReady, Status: metav1.ConditionTrue},
						{Type: "Rotating", Status: metav1.ConditionFalse},
					},
					Certificates: []certapi.CertificateAuthorityCertificate{{
						CertificateAuthorityRef: certapi.CertificateAuthorityRef{SerialNumber: "0a"}, Role: certapi.CARoleActive,
						NotAfter: metav1.NewTime(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)),
					}},
				},
			}
			table, err := tableConvertor{}.ConvertToTable(context.Background(), ca, &metav1.TableOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(table.Rows) != 1 || len(table.Rows[0].Cells) != len(columns) {
				t.Fatalf("rows %+v, want one of %d cells", table.Rows, len(columns))
			}
			cells := table.Rows[0].Cells
			for i, want := range []any{"default", "True", "False", "0a", "2030-01-02T03:04:05Z", tc.want} {
				if cells[i] != want {
					t.Errorf("column %s = %v, want %v", columns[i].Name, cells[i], want)
				}
			}
		})
	}
}
