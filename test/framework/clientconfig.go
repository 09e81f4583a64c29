package framework

import (
	"errors"
	"fmt"
	"net"
	"net/http"
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

// ReplicaConfig returns a client config that calls one certapi replica directly at its pod IP, as
// kube-apiserver's aggregator does (its front-proxy client certificate, the user in X-Remote-User and
// X-Remote-Group), as user in groups. The replica's serving certificate is not verified: a test reads
// what that replica answers, past the Service that would pick one for it.
func (cp *ControlPlane) ReplicaConfig(podIP, user string, groups ...string) (*rest.Config, error) {
	certPEM, err := os.ReadFile(cp.PKI.FrontProxyClientCert)
	if err != nil {
		return nil, fmt.Errorf("reading the front-proxy client certificate: %w", err)
	}
	keyPEM, err := os.ReadFile(cp.PKI.FrontProxyClientKey)
	if err != nil {
		return nil, fmt.Errorf("reading the front-proxy client key: %w", err)
	}
	cfg := &rest.Config{
		Host:            "https://" + net.JoinHostPort(podIP, "8443"),
		TLSClientConfig: rest.TLSClientConfig{Insecure: true, CertData: certPEM, KeyData: keyPEM},
		QPS:             -1,
		Burst:           -1,
	}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			req = req.Clone(req.Context())
			req.Header.Set("X-Remote-User", user)
			req.Header.Del("X-Remote-Group")
			for _, g := range groups {
				req.Header.Add("X-Remote-Group", g)
			}
			return rt.RoundTrip(req)
		})
	})
	return cfg, nil
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }
