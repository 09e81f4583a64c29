package apiserver

import (
	"bytes"
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime/schema"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/options/encryptionconfig"
	"k8s.io/apiserver/pkg/storage/value"
	"k8s.io/klog/v2"

	"github.com/certapi/certapi/pkg/apis/certapi"
	"github.com/certapi/certapi/pkg/issuer"
)

// caKeysResource is the resource an EncryptionConfiguration lists to encrypt the CA private keys.
func caKeysResource() schema.GroupResource { return certapi.Resource(issuer.CAKeysResource) }

// caKeysTransformer returns the value transformer the storage layer would use for the CA key pairs, and
// whether it encrypts them. When it would store them unencrypted it warns loudly, or, with require
// (--require-encrypted-ca-keys), fails.
func caKeysTransformer(c *genericapiserver.RecommendedConfig, require bool) (value.Transformer, bool, error) {
	resource := caKeysResource()
	opts, err := c.RESTOptionsGetter.GetRESTOptions(resource, &certapi.CertificateAuthority{})
	if err != nil {
		return nil, false, fmt.Errorf("getting storage options for %s: %w", resource, err)
	}
	t := opts.StorageConfig.Transformer
	unencrypted, err := caKeysUnencrypted(t)
	if err != nil {
		return nil, false, fmt.Errorf("probing the encryption of %s: %w", resource, err)
	}
	switch {
	case unencrypted == "":
		klog.InfoS("CA private keys are encrypted at rest", "resource", resource.String())
		return t, true, nil
	case require:
		return nil, false, fmt.Errorf("--require-encrypted-ca-keys: the CA private keys would be stored in etcd unencrypted: %s; "+
			"list the resource %s in the EncryptionConfiguration given with --encryption-provider-config, with an encrypting provider first", unencrypted, resource)
	default:
		klog.InfoS("WARNING: the CA private keys are stored in etcd UNENCRYPTED: "+unencrypted+". List the resource in an EncryptionConfiguration "+
			"given with --encryption-provider-config to encrypt them at rest; --require-encrypted-ca-keys refuses to start without.", "resource", resource.String())
	}
	return t, false, nil
}

// caKeysUnencrypted says why values written through t would be stored unencrypted, or "" when they would
// be encrypted. A resource the EncryptionConfiguration does not list gets the identity transformer, so t
// is probed: encrypting providers write the "k8s:enc:" prefix.
func caKeysUnencrypted(t value.Transformer) (string, error) {
	if t == nil {
		return "no --encryption-provider-config is given", nil
	}
	probe, err := t.TransformToStorage(context.Background(), []byte("probe"), value.DefaultContext("probe"))
	if err != nil {
		return "", err
	}
	if !bytes.HasPrefix(probe, []byte("k8s:enc:")) {
		return "the EncryptionConfiguration does not list the resource, or lists the identity provider first for it", nil
	}
	return "", nil
}

// caKeysSealing is how the CA keys are sealed in etcd, for the peer CA's record: the transformer of the
// EncryptionConfiguration for certificateauthoritykeys.certapi.dev, and whether it encrypts.
type caKeysSealing struct {
	transformer value.Transformer
	encrypted   bool
}

// loadCAKeysSealing reads the EncryptionConfiguration at path (empty: none) before etcd starts, as the
// storage layer reads it later, and returns the CA keys' transformer (identity when the file does not
// list the resource).
func loadCAKeysSealing(ctx context.Context, path string) (caKeysSealing, error) {
	if path == "" {
		return caKeysSealing{}, nil
	}
	cfg, err := encryptionconfig.LoadEncryptionConfig(ctx, path, false, defaultIdentity())
	if err != nil {
		return caKeysSealing{}, fmt.Errorf("--encryption-provider-config, for the etcd peer CA's record: %w", err)
	}
	r := caKeysResource()
	for _, gr := range []schema.GroupResource{r, {Group: r.Group, Resource: "*"}, {Group: "*", Resource: "*"}} {
		if t, ok := cfg.Transformers[gr]; ok {
			why, err := caKeysUnencrypted(t)
			if err != nil {
				return caKeysSealing{}, fmt.Errorf("probing the encryption of %s: %w", r, err)
			}
			return caKeysSealing{transformer: t, encrypted: why == ""}, nil
		}
	}
	return caKeysSealing{}, nil
}
