package objecttable

import (
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/certapi/certapi/pkg/apis/certapi"
)

func TestNew(t *testing.T) {
	columns := []metav1.TableColumnDefinition{{Name: "Name", Type: "string"}}
	remaining := int64(3)
	one := certapi.ServingCertRequest{ObjectMeta: metav1.ObjectMeta{Name: "a", ResourceVersion: "5"}}
	list := &certapi.ServingCertRequestList{
		ListMeta: metav1.ListMeta{ResourceVersion: "9", Continue: "next", RemainingItemCount: &remaining},
		Items:    []certapi.ServingCertRequest{one, {ObjectMeta: metav1.ObjectMeta{Name: "b"}}},
	}
	for _, tc := range []struct {
		name      string
		obj       runtime.Object
		options   runtime.Object
		want      *metav1.Table
		wantNames []string
		wantErr   bool
	}{{
		name:      "one object",
		obj:       &one,
		options:   &metav1.TableOptions{},
		want:      &metav1.Table{ColumnDefinitions: columns, ListMeta: metav1.ListMeta{ResourceVersion: "5"}},
		wantNames: []string{"a"},
	}, {
		name:      "a list, with its paging",
		obj:       list,
		options:   &metav1.TableOptions{},
		want:      &metav1.Table{ColumnDefinitions: columns, ListMeta: metav1.ListMeta{ResourceVersion: "9", Continue: "next", RemainingItemCount: &remaining}},
		wantNames: []string{"a", "b"},
	}, {
		name:      "no headers",
		obj:       &one,
		options:   &metav1.TableOptions{NoHeaders: true},
		want:      &metav1.Table{ListMeta: metav1.ListMeta{ResourceVersion: "5"}},
		wantNames: []string{"a"},
	}, {
		name:      "no table options: headers",
		obj:       &one,
		want:      &metav1.Table{ColumnDefinitions: columns, ListMeta: metav1.ListMeta{ResourceVersion: "5"}},
		wantNames: []string{"a"},
	}, {
		name:    "another kind",
		obj:     &certapi.CertificateAuthority{},
		wantErr: true,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			table, items, err := New(tc.obj, tc.options, columns, "ServingCertRequest",
				func(l *certapi.ServingCertRequestList) []certapi.ServingCertRequest { return l.Items })
			if tc.wantErr {
				if err == nil {
					t.Fatalf("New(%T) succeeded; want an error", tc.obj)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(table, tc.want) {
				t.Errorf("table = %+v, want %+v", table, tc.want)
			}
			var names []string
			for _, it := range items {
				names = append(names, it.Name)
			}
			if !reflect.DeepEqual(names, tc.wantNames) {
				t.Errorf("items %v, want %v", names, tc.wantNames)
			}
		})
	}
}
