package servingcertrequest

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/certapi/certapi/pkg/apis/certapi"
	"github.com/certapi/certapi/pkg/registry/objecttable"
)

// tableConvertor prints the columns `kubectl get scr` shows: what the request is for and where its
// certificate stands.
type tableConvertor struct{}

var columns = []metav1.TableColumnDefinition{
	{Name: "Name", Type: "string", Format: "name", Description: "Name of the request."},
	{Name: "Service", Type: "string", Description: "The Service the certificate is for."},
	{Name: "Ready", Type: "string", Description: "The Ready condition's status."},
	{Name: "Reason", Type: "string", Description: "The Ready condition's reason.", Priority: 1},
	{Name: "Secret", Type: "string", Description: "The Secret certapi delivers into, if any.", Priority: 1},
	{Name: "Not After", Type: "string", Format: "date-time", Description: "When the latest certificate expires."},
	{Name: "Renewal", Type: "string", Format: "date-time", Description: "When the latest certificate is due for renewal."},
	{Name: "Age", Type: "string", Description: "Time since the request was created."},
}

func (tableConvertor) ConvertToTable(ctx context.Context, obj runtime.Object, tableOptions runtime.Object) (*metav1.Table, error) {
	table, items, err := objecttable.New(obj, tableOptions, columns, "ServingCertRequest",
		func(l *certapi.ServingCertRequestList) []certapi.ServingCertRequest { return l.Items })
	if err != nil {
		return nil, err
	}
	now := time.Now()
	for i := range items {
		scr := &items[i]
		ready, reason := "Unknown", ""
		for _, c := range scr.Status.Conditions {
			if c.Type == certapi.ConditionReady {
				ready, reason = string(c.Status), c.Reason
			}
		}
		table.Rows = append(table.Rows, metav1.TableRow{
			Cells: []interface{}{
				scr.Name,
				scr.Spec.ServiceName,
				ready,
				reason,
				scr.Spec.SecretName,
				formatTime(scr.Status.NotAfter),
				formatTime(scr.Status.RenewalTime),
				duration.HumanDuration(now.Sub(scr.CreationTimestamp.Time)),
			},
			Object: runtime.RawExtension{Object: scr},
		})
	}
	return table, nil
}

func formatTime(t *metav1.Time) string {
	if t == nil || t.IsZero() {
		return "<none>"
	}
	return t.UTC().Format(time.RFC3339)
}
