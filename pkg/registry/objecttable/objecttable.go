// Package objecttable starts the table `kubectl get` prints for a certapi kind, the same way for every
// kind: the column definitions unless --no-headers, the one object or the list's items, and the list's
// resourceVersion and paging. Each kind's registry keeps its columns and the cells of its rows.
package objecttable

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Object is a pointer to an object of type T.
type Object[T any] interface {
	*T
	runtime.Object
	metav1.Object
}

// List is a pointer to a list of type L.
type List[L any] interface {
	*L
	runtime.Object
	metav1.ListInterface
}

// New returns the table of obj, one T or a list L (whose items is returns), without rows yet, and the
// objects that need one: the columns' definitions unless tableOptions asks for no headers, and the
// resourceVersion and, for a list, the continue token and the remaining count. kind names T in the error
// for any other obj.
func New[T, L any, PT Object[T], PL List[L]](obj, tableOptions runtime.Object, columns []metav1.TableColumnDefinition, kind string, items func(PL) []T) (*metav1.Table, []T, error) {
	table := &metav1.Table{}
	if opt, ok := tableOptions.(*metav1.TableOptions); !ok || !opt.NoHeaders {
		table.ColumnDefinitions = columns
	}
	switch t := obj.(type) {
	case PT:
		table.ResourceVersion = t.GetResourceVersion()
		return table, []T{*t}, nil
	case PL:
		table.ResourceVersion = t.GetResourceVersion()
		table.Continue = t.GetContinue()
		table.RemainingItemCount = t.GetRemainingItemCount()
		return table, items(t), nil
	default:
		return nil, nil, fmt.Errorf("cannot print %T as a %s table", obj, kind)
	}
}
