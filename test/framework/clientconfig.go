package framework

import (
	"errors"
	"fmt"
	"os"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

func (cp *ControlPlane) buildAdminConfig() error {
	caPEM, err := os.ReadFile(cp.PKI.ServerCACert)
	if err != nil {
		return fmt.Errorf("reading server CA: %w", err)
	}
	certPEM, err := os.ReadFile(cp.PKI.AdminCert)
	if err != nil {
		return fmt.Errorf("reading admin certificate: %w", err)
	}
	keyPEM, err := os.ReadFile(cp.PKI.AdminKey)
	if err != nil {
		return fmt.Errorf("reading admin key: %w", err)
	}
	cp.AdminConfig = cp.clientConfig(caPEM, certPEM, keyPEM)
	return nil
}

func (cp *ControlPlane) clientConfig(caPEM, certPEM, keyPEM []byte) *rest.Config {
	return &rest.Config{
		Host: cp.APIServerURL,
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   caPEM,
			CertData: certPEM,
			KeyData:  keyPEM,
		},
		// A negative QPS disables client-go's client-side rate limiter: tests measure the server.
		QPS:   -1,
		Burst: -1,
	}
}

// UserConfig returns a client config for user (and groups) authenticated by a fresh client
// certificate signed by the client CA, for authorization tests. The user has no permissions
// until RBAC grants some.
func (cp *ControlPlane) UserConfig(user string, groups ...string) (*rest.Config, error) {
	if user == "" {
		return nil, errors.New("UserConfig: user is required")
	}
	kp, err := cp.clientCA.sign(clientTemplate(user, groups))
	if err != nil {
		return nil, fmt.Errorf("issuing client certificate for %q: %w", user, err)
	}
	keyPEM, err := kp.keyPEM()
	if err != nil {
		return nil, err
	}
	cfg := rest.CopyConfig(cp.AdminConfig)
	cfg.CertData = kp.certPEM
	cfg.KeyData = keyPEM
	return cfg, nil
}

func (cp *ControlPlane) writeKubeconfig(path string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["certapi-local"] = &clientcmdapi.Cluster{
		Server:                   cp.APIServerURL,
		CertificateAuthorityData: cp.AdminConfig.CAData,
	}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{
		ClientCertificateData: cp.AdminConfig.CertData,
		ClientKeyData:         cp.AdminConfig.KeyData,
	}
	cfg.Contexts["admin@certapi-local"] = &clientcmdapi.Context{Cluster: "certapi-local", AuthInfo: "admin"}
	cfg.CurrentContext = "admin@certapi-local"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("writing kubeconfig %s: %w", path, err)
	}
	return nil
}
