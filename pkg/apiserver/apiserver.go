// Package apiserver wires certapi's API server: its options and flags, its config, its storage and,
// when no external etcd is given, its embedded etcd.
package apiserver

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"

	"github.com/certapi/certapi/pkg/apis/certapi"
	"github.com/certapi/certapi/pkg/apis/certapi/install"
	"github.com/certapi/certapi/pkg/registry/certificateauthority"
	"github.com/certapi/certapi/pkg/registry/servingcertrequest"
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

// ExtraConfig is what certapi needs beyond a generic API server's config.
type ExtraConfig struct {
	// ClusterDomain is the cluster's DNS domain, the suffix of every fully qualified Service name.
	ClusterDomain string
}

// Config is the whole configuration of a certapi server.
type Config struct {
	GenericConfig *genericapiserver.RecommendedConfig
	ExtraConfig   ExtraConfig
}

// CompletedConfig is a Config with every default filled in; only it can make a Server.
type CompletedConfig struct {
	GenericConfig genericapiserver.CompletedConfig
	ExtraConfig   *ExtraConfig
}

// Server is a running certapi API server.
type Server struct {
	GenericAPIServer *genericapiserver.GenericAPIServer
}

// Complete fills in the defaults.
func (c *Config) Complete() CompletedConfig {
	return CompletedConfig{GenericConfig: c.GenericConfig.Complete(), ExtraConfig: &c.ExtraConfig}
}

// New builds the server and installs the certapi.dev API group.
func (c CompletedConfig) New() (*Server, error) {
	generic, err := c.GenericConfig.New("certapi", genericapiserver.NewEmptyDelegate())
	if err != nil {
		return nil, fmt.Errorf("creating the generic API server: %w", err)
	}
	s := &Server{GenericAPIServer: generic}

	apiGroupInfo := genericapiserver.NewDefaultAPIGroupInfo(certapi.GroupName, Scheme, metav1.ParameterCodec, Codecs)
	scr, scrStatus, err := servingcertrequest.NewREST(Scheme, c.GenericConfig.RESTOptionsGetter, c.ExtraConfig.ClusterDomain)
	if err != nil {
		return nil, err
	}
	ca, caStatus, err := certificateauthority.NewREST(Scheme, c.GenericConfig.RESTOptionsGetter)
	if err != nil {
		return nil, err
	}
	apiGroupInfo.VersionedResourcesStorageMap["v1alpha1"] = map[string]rest.Storage{
		"servingcertrequests":           scr,
		"servingcertrequests/status":    scrStatus,
		"certificateauthorities":        ca,
		"certificateauthorities/status": caStatus,
	}
	if err := generic.InstallAPIGroup(&apiGroupInfo); err != nil {
		return nil, fmt.Errorf("installing the certapi.dev API group: %w", err)
	}
	return s, nil
}
