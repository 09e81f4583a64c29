// Package apiserver wires certapi's API server, in k8s.io/sample-apiserver's shape: Options hold and
// validate the flags; the run function (Run) builds the kube clients once, starts etcd (the embedded one
// when no --etcd-servers is given), turns the options into a Config, completes it and makes the Server
// (New), and serves until its context ends or the embedded etcd member stops. Its HTTP filters are in
// package filters and its health checks in package readiness.
package apiserver

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"

	"github.com/certapi/certapi/pkg/apis/certapi/install"
)

var (
	// Scheme knows certapi's internal and versioned types.
	Scheme = runtime.NewScheme()
	// Codecs encodes and decodes certapi's types for the wire and for storage.
	Codecs = serializer.NewCodecFactory(Scheme)
)

func init() {
	install.Install(Scheme)
	// The generic server serves list and watch options and status objects in the unversioned group.
	metav1.AddToGroupVersion(Scheme, schema.GroupVersion{Version: "v1"})
	unversioned := schema.GroupVersion{Group: "", Version: "v1"}
	Scheme.AddUnversionedTypes(unversioned,
		&metav1.Status{},
		&metav1.APIVersions{},
		&metav1.APIGroupList{},
		&metav1.APIGroup{},
		&metav1.APIResourceList{},
	)
}
