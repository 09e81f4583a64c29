package servingcertrequest

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/certapi/certapi/pkg/apis/certapi"
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
	table := &metav1.Table{}
	if opt, ok := tableOptions.(*metav1.TableOptions); !ok || !opt.NoHeaders {
		table.ColumnDefinitions = columns
	}
	var items []certapi.ServingCertRequest
	switch t := obj.(type) {
	case *certapi.ServingCertRequest:
		items = []certapi.ServingCertRequest{*t}
		table.ResourceVersion = t.ResourceVersion
	case *certapi.ServingCertRequestList:
		items = t.Items
		table.ResourceVersion = t.ResourceVersion
		table.Continue = t.Continue
		table.RemainingItemCount = t.RemainingItemCount
	default:
		return nil, fmt.Errorf("cannot print %T as a ServingCertRequest table", obj)
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
