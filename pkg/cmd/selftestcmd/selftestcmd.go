// Package selftestcmd is the command line of `certapi selftest`: a check of an installed certapi from a
// client's side, run by the Helm chart's `helm test` Pod with certapi's own image (no other image, no shell).
// It waits until the APIService is Available and kube-apiserver serves discovery of certapi.dev/v1alpha1,
// then gets one certificate from the servingcerts subresource of a ServingCertRequest of its own and
// verifies it against the CA bundle certapi returns. Built here so that cmd/certapi and the flag reference
// generator (hack/docgen) use the same command.
package selftestcmd

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	aggregatorclient "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/generated/clientset/versioned"
	"github.com/certapi/certapi/pkg/signer"
)

const (
	apiServiceName = certapiv1alpha1.APIServiceName
	groupVersion   = certapiv1alpha1.APIVersion
	// pollInterval is how often the command looks again while it waits for certapi to serve.
	pollInterval = time.Second
	// fieldManager is the field manager of the ServingCertRequest the command creates.
	fieldManager = "certapi-selftest"
)

const selftestLong = `Check an installed certapi as its clients use it, from inside the cluster or with --kubeconfig.

1. Waits until the APIService v1alpha1.certapi.dev is Available and kube-apiserver serves discovery of
   certapi.dev/v1alpha1 with servingcertrequests/servingcerts.
2. Creates the ServingCertRequest --name for the Service --service in --namespace (or uses the one there).
3. Makes an ECDSA P-256 key in memory, sends a certificate request for it to that request's servingcerts
   subresource, and verifies the certificate: it is for the key sent, names <service>.<namespace>.svc, is
   for server authentication and verifies against the CA bundle certapi returns with it.
4. Deletes the ServingCertRequest it created.

Exits 0 only when every step passed, within --timeout; otherwise it says which step failed and why. No
private key is printed or stored. The Helm chart's "helm test" Pod runs it with certapi's image, as a
ServiceAccount allowed exactly that.

RBAC: get on apiservices (v1alpha1.certapi.dev); create, get and delete on servingcertrequests and create
on servingcertrequests/servingcerts in the namespace.`

// options are the command's flags.
type options struct {
	kubeconfig string
	namespace  string
	name       string
	service    string
	timeout    time.Duration
}

// NewCmd returns the `selftest` command, to be added to the certapi root command.
func NewCmd() *cobra.Command {
	o := &options{name: "certapi-selftest", service: "certapi-selftest", timeout: 2 * time.Minute}
	cmd := &cobra.Command{
		Use:          "selftest",
		Short:        "Check an installed certapi as a client: the APIService, discovery and one servingcerts call",
		Long:         selftestLong,
		SilenceUsage: true,
		Args:         cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.validate(); err != nil {
				return err
			}
			config, err := o.restConfig()
			if err != nil {
				return err
			}
			return run(cmd.Context(), cmd.OutOrStdout(), config, o)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.kubeconfig, "kubeconfig", o.kubeconfig, "A kubeconfig file to connect with. Empty: the pod's ServiceAccount (in-cluster configuration).")
	fs.StringVar(&o.namespace, "namespace", o.namespace, "The namespace of the ServingCertRequest the check uses. Required.")
	fs.StringVar(&o.name, "name", o.name, "The name of the ServingCertRequest the check uses.")
	fs.StringVar(&o.service, "service", o.service, "The Service name the ServingCertRequest is for, when the check creates it (the Service need not exist).")
	fs.DurationVar(&o.timeout, "timeout", o.timeout, "How long to wait for certapi to serve and issue.")
	// The server's sectioned help lists the server's flags; this command has its own.
	plain := &cobra.Command{}
	cmd.SetUsageFunc(plain.UsageFunc())
	cmd.SetHelpFunc(plain.HelpFunc())
	return cmd
}

func (o *options) validate() error {
	var errs []error
	if o.namespace == "" {
		errs = append(errs, errors.New("--namespace is required: the namespace of the ServingCertRequest the check uses"))
	}
	for _, f := range []struct {
		flag, value string
		check       func(string) []string
	}{
		{"namespace", o.namespace, validation.IsDNS1123Label},
		{"name", o.name, validation.IsDNS1123Subdomain},
		{"service", o.service, validation.IsDNS1035Label},
	} {
		if f.value == "" && f.flag == "namespace" {
			continue
		}
		if msgs := f.check(f.value); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("--%s=%q: %s", f.flag, f.value, strings.Join(msgs, "; ")))
		}
	}
	if o.timeout <= 0 {
		errs = append(errs, fmt.Errorf("--timeout=%s: want a positive duration", o.timeout))
	}
	return errors.Join(errs...)
}

func (o *options) restConfig() (*rest.Config, error) {
	if o.kubeconfig == "" {
		c, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("no --kubeconfig and not in a pod: %w", err)
		}
		return c, nil
	}
	c, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("reading --kubeconfig %s: %w", o.kubeconfig, err)
	}
	return c, nil
}

func run(ctx context.Context, out io.Writer, config *rest.Config, o *options) error {
	config = rest.CopyConfig(config)
	config.UserAgent = "certapi-selftest"
	certapi, err := versioned.NewForConfig(config)
	if err != nil {
		return err
	}
	aggregator, err := aggregatorclient.NewForConfig(config)
	if err != nil {
		return err
	}
	disco, err := discovery.NewDiscoveryClientForConfig(config)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()

	// 1. The APIService and discovery.
	var state, last string
	err = wait.PollUntilContextCancel(ctx, pollInterval, true, func(ctx context.Context) (bool, error) {
		svc, err := aggregator.ApiregistrationV1().APIServices().Get(ctx, apiServiceName, metav1.GetOptions{})
		if err != nil {
			if apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) {
				return false, fmt.Errorf("reading APIService %s: %w", apiServiceName, err)
			}
			state = fmt.Sprintf("APIService %s: %v", apiServiceName, err)
		} else if ok, why := APIServiceAvailable(svc); !ok {
			state = fmt.Sprintf("APIService %s is not Available: %s", apiServiceName, why)
		} else {
			list, err := disco.ServerResourcesForGroupVersion(groupVersion)
			state = DiscoveryProblem(list, err)
		}
		if state != last && state != "" {
			fmt.Fprintf(out, "waiting: %s\n", state)
		}
		last = state
		return state == "", nil
	})
	if err != nil {
		return fmt.Errorf("certapi does not serve within --timeout %s: %s (%w)", o.timeout, last, err)
	}
	fmt.Fprintf(out, "ok: APIService %s is Available; discovery of %s lists servingcertrequests/servingcerts\n", apiServiceName, groupVersion)

	// 2. The ServingCertRequest.
	requests := certapi.CertapiV1alpha1().ServingCertRequests(o.namespace)
	scr := &certapiv1alpha1.ServingCertRequest{
		ObjectMeta: metav1.ObjectMeta{Name: o.name, Labels: map[string]string{"app.kubernetes.io/component": "selftest"}},
		Spec:       certapiv1alpha1.ServingCertRequestSpec{ServiceName: o.service},
	}
	created, err := requests.Create(ctx, scr, metav1.CreateOptions{FieldManager: fieldManager})
	switch {
	case apierrors.IsAlreadyExists(err):
		if created, err = requests.Get(ctx, o.name, metav1.GetOptions{}); err != nil {
			return fmt.Errorf("reading ServingCertRequest %s/%s: %w", o.namespace, o.name, err)
		}
		fmt.Fprintf(out, "ok: ServingCertRequest %s/%s exists (service %s); it is left in place\n", o.namespace, o.name, created.Spec.ServiceName)
	case err != nil:
		return fmt.Errorf("creating ServingCertRequest %s/%s: %w", o.namespace, o.name, err)
	default:
		fmt.Fprintf(out, "ok: created ServingCertRequest %s/%s for service %s\n", o.namespace, o.name, o.service)
		defer func() {
			// Its own deadline: the check's may be spent.
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			if err := requests.Delete(ctx, o.name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &created.UID}}); err != nil && !apierrors.IsNotFound(err) {
				fmt.Fprintf(out, "warning: deleting ServingCertRequest %s/%s: %v\n", o.namespace, o.name, err)
			} else {
				fmt.Fprintf(out, "ok: deleted ServingCertRequest %s/%s\n", o.namespace, o.name)
			}
		}()
	}

	// 3. One certificate from servingcerts. client-go already retries a 503 with Retry-After; a follower
	// without a leader in time answers 503 after that too, so retry until the deadline on 5xx only.
	key, err := signer.GenerateKey(signer.ECDSAP256)
	if err != nil {
		return err
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, key)
	if err != nil {
		return fmt.Errorf("making a certificate request: %w", err)
	}
	req := &certapiv1alpha1.ServingCert{Spec: certapiv1alpha1.ServingCertSpec{
		CertificateRequest: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})),
	}}
	var issued *certapiv1alpha1.ServingCert
	var lastErr error
	err = wait.PollUntilContextCancel(ctx, pollInterval, true, func(ctx context.Context) (bool, error) {
		issued, lastErr = requests.CreateServingCert(ctx, o.name, req, metav1.CreateOptions{})
		if lastErr != nil && !retriable(lastErr) {
			return false, lastErr
		}
		return lastErr == nil, nil
	})
	if err != nil {
		if lastErr == nil {
			lastErr = err
		}
		return fmt.Errorf("servingcertrequests/%s/servingcerts in %s: %w", o.name, o.namespace, lastErr)
	}
	dnsName := created.Spec.ServiceName + "." + o.namespace + ".svc"
	leaf, roots, err := VerifyIssued(&issued.Status, key.Public(), dnsName, time.Now())
	if err != nil {
		return fmt.Errorf("the certificate servingcerts returned: %w", err)
	}
	fmt.Fprintf(out, "ok: servingcerts issued serial %s for %s, valid until %s, verified against the CA bundle (%d CA certificates)\n",
		issued.Status.SerialNumber, strings.Join(leaf.DNSNames, ", "), leaf.NotAfter.UTC().Format(time.RFC3339), roots)
	return nil
}

// retriable reports whether a servingcerts failure may pass by itself: certapi or kube-apiserver busy or
// without a leader yet, or the aggregator not reaching certapi for a moment.
func retriable(err error) bool {
	return apierrors.IsServiceUnavailable(err) || apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err) ||
		apierrors.IsTooManyRequests(err) || apierrors.IsInternalError(err) || apierrors.IsUnexpectedServerError(err)
}

// APIServiceAvailable reports whether an APIService is Available, and if not why, from its condition.
func APIServiceAvailable(svc *apiregistrationv1.APIService) (bool, string) {
	for _, c := range svc.Status.Conditions {
		if c.Type != apiregistrationv1.Available {
			continue
		}
		if c.Status == apiregistrationv1.ConditionTrue {
			return true, ""
		}
		return false, fmt.Sprintf("%s: %s", c.Reason, c.Message)
	}
	return false, "no Available condition yet"
}

// DiscoveryProblem says what is wrong with the discovery of certapi.dev/v1alpha1, given what kube-apiserver
// answered; empty when it lists the servingcertrequests resource and its servingcerts subresource.
func DiscoveryProblem(list *metav1.APIResourceList, err error) string {
	if err != nil {
		return fmt.Sprintf("discovery of %s: %v", groupVersion, err)
	}
	var names []string
	if list != nil {
		for _, r := range list.APIResources {
			names = append(names, r.Name)
		}
	}
	for _, want := range []string{"servingcertrequests", "servingcertrequests/servingcerts"} {
		if !slices.Contains(names, want) {
			return fmt.Sprintf("discovery of %s lists no %s (it lists %v)", groupVersion, want, names)
		}
	}
	return ""
}

// VerifyIssued checks what servingcerts returned against what the check asked for: the certificate is for
// the public key sent, names dnsName, is valid now for server authentication and chains to a CA of the
// returned bundle. It returns the certificate and how many CA certificates the bundle holds.
func VerifyIssued(status *certapiv1alpha1.ServingCertStatus, public crypto.PublicKey, dnsName string, now time.Time) (*x509.Certificate, int, error) {
	leaf, err := parseFirstCertificate([]byte(status.Certificate))
	if err != nil {
		return nil, 0, fmt.Errorf("status.certificate: %w", err)
	}
	pool := x509.NewCertPool()
	roots := 0
	for rest := []byte(status.CABundle); ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, 0, fmt.Errorf("status.caBundle: %w", err)
		}
		pool.AddCert(c)
		roots++
	}
	if roots == 0 {
		return nil, 0, errors.New("status.caBundle holds no certificate")
	}
	type equaler interface{ Equal(crypto.PublicKey) bool }
	if k, ok := leaf.PublicKey.(equaler); !ok || !k.Equal(public) {
		return nil, 0, errors.New("it is not for the key of the certificate request sent")
	}
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: dnsName, Roots: pool, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		return nil, 0, fmt.Errorf("it does not verify for %s against status.caBundle: %w", dnsName, err)
	}
	return leaf, roots, nil
}

func parseFirstCertificate(data []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("no PEM CERTIFICATE")
	}
	return x509.ParseCertificate(block.Bytes)
}
