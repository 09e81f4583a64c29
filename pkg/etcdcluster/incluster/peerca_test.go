package incluster

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestTransient(t *testing.T) {
	gr := schema.GroupResource{Resource: "secrets"}
	cases := []struct {
		name string
		err  error
		want bool
	}{
		{"connection refused", &url.Error{Op: "Get", URL: "https://10.0.0.1", Err: &net.OpError{Op: "dial", Err: errors.New("connection refused")}}, true},
		{"wrapped network error", fmt.Errorf("reading: %w", &net.DNSError{Err: "timeout", IsTimeout: true}), true},
		{"503", apierrors.NewServiceUnavailable("later"), true},
		{"429", apierrors.NewTooManyRequests("later", 1), true},
		{"500", apierrors.NewInternalError(errors.New("boom")), true},
		{"forbidden", apierrors.NewForbidden(gr, "certapi-etcd-peer-ca", errors.New("no")), false},
		{"namespace missing", apierrors.NewNotFound(schema.GroupResource{Resource: "namespaces"}, "certapi-system"), false},
		{"invalid Secret content", errors.New("the key does not belong to the certificate"), false},
	}
	for _, tc := range cases {
		if got := transient(tc.err); got != tc.want {
			t.Errorf("%s: transient = %v, want %v", tc.name, got, tc.want)
		}
	}
}
