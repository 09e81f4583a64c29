// Command prometheus-operator-config writes the Prometheus configuration that the Prometheus Operator
// generates for a Prometheus selecting the ServiceMonitors given to it, with the operator's own code
// (github.com/prometheus-operator/prometheus-operator/pkg/prometheus: ResourceSelector, which validates a
// ServiceMonitor and loads the Secrets and ConfigMaps it references, and ConfigGenerator, which writes
// the scrape configuration). certapi's tests run a real Prometheus with it, so that the alerts and the
// dashboard are evaluated on the labels the operator's relabelling gives certapi's series (namespace,
// service, pod, endpoint, job and instance of the target; honor_labels as the ServiceMonitor says), not
// on a hand-written static_configs that only resembles it.
//
// It reads the ServiceMonitors from a YAML file (other kinds in it are skipped), and the Secrets and
// ConfigMaps they reference from the cluster of --kubeconfig, as the operator does. The Prometheus it
// generates for is "k8s" in --prometheus-namespace, selecting every ServiceMonitor given. Its Kubernetes
// service discovery reaches the API server of --apiserver-host with the given CA and credentials files
// (the Prometheus resource's spec.apiserverConfig). TLS assets (a CA from a ConfigMap or Secret) are
// written to --tls-assets-dir, which stands for the operator's /etc/prometheus/certs in the Prometheus
// pod, and $(SHARD) is expanded as the operator's config-reloader expands it in the pod (shard 0). The
// configuration holds the ServiceMonitors' bearer tokens, as the operator's does: keep it out of logs.
//
// Usage:
//
//	prometheus-operator-config --service-monitors FILE --kubeconfig FILE --apiserver-host URL \
//	  [--apiserver-ca-file F] [--apiserver-cert-file F --apiserver-key-file F] [--apiserver-token-file F] \
//	  --tls-assets-dir DIR [--scrape-interval 30s] [--evaluation-interval 30s] \
//	  [--service-discovery-role Endpoints|EndpointSlice] [--output FILE]
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/prometheus-operator/prometheus-operator/pkg/assets"
	"github.com/prometheus-operator/prometheus-operator/pkg/operator"
	prompkg "github.com/prometheus-operator/prometheus-operator/pkg/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// operatorCertsDir is where the Prometheus Operator mounts the TLS assets in the Prometheus pod, the
// prefix of every ca_file, cert_file and key_file it generates (its pkg/prometheus tlsAssetsDir).
const operatorCertsDir = "/etc/prometheus/certs"

type options struct {
	serviceMonitors    string
	kubeconfig         string
	namespace          string
	apiserverHost      string
	apiserverCA        string
	apiserverCert      string
	apiserverKey       string
	apiserverToken     string
	tlsAssetsDir       string
	scrapeInterval     string
	evaluationInterval string
	discoveryRole      string
	prometheusVersion  string
	output             string
}

func main() {
	var o options
	flag.StringVar(&o.serviceMonitors, "service-monitors", "", "YAML file holding the ServiceMonitors (other kinds are skipped), e.g. what helm template renders")
	flag.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the cluster the operator reads the ServiceMonitors' Secrets and ConfigMaps from")
	flag.StringVar(&o.namespace, "prometheus-namespace", "monitoring", "namespace of the Prometheus resource generated for")
	flag.StringVar(&o.apiserverHost, "apiserver-host", "", "API server URL of the Kubernetes service discovery (spec.apiserverConfig.host); empty: in-cluster")
	flag.StringVar(&o.apiserverCA, "apiserver-ca-file", "", "CA file to verify the API server with")
	flag.StringVar(&o.apiserverCert, "apiserver-cert-file", "", "client certificate file for the API server")
	flag.StringVar(&o.apiserverKey, "apiserver-key-file", "", "client key file for the API server")
	flag.StringVar(&o.apiserverToken, "apiserver-token-file", "", "bearer token file for the API server")
	flag.StringVar(&o.tlsAssetsDir, "tls-assets-dir", "", "directory to write the TLS assets to, in place of the operator's "+operatorCertsDir)
	flag.StringVar(&o.scrapeInterval, "scrape-interval", "30s", "the Prometheus resource's spec.scrapeInterval")
	flag.StringVar(&o.evaluationInterval, "evaluation-interval", "30s", "the Prometheus resource's spec.evaluationInterval")
	flag.StringVar(&o.discoveryRole, "service-discovery-role", string(monitoringv1.EndpointsRole), "the Prometheus resource's spec.serviceDiscoveryRole: Endpoints (the operator's default) or EndpointSlice")
	flag.StringVar(&o.prometheusVersion, "prometheus-version", operator.DefaultPrometheusVersion, "the Prometheus resource's spec.version")
	flag.StringVar(&o.output, "output", "-", "file to write the configuration to; - for standard output")
	flag.Parse()
	if err := run(context.Background(), o); err != nil {
		fmt.Fprintf(os.Stderr, "prometheus-operator-config: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	if o.serviceMonitors == "" || o.kubeconfig == "" || o.tlsAssetsDir == "" {
		return errors.New("--service-monitors, --kubeconfig and --tls-assets-dir are required")
	}
	role := monitoringv1.ServiceDiscoveryRole(o.discoveryRole)
	if role != monitoringv1.EndpointsRole && role != monitoringv1.EndpointSliceRole {
		return fmt.Errorf("--service-discovery-role %q: want %s or %s", o.discoveryRole, monitoringv1.EndpointsRole, monitoringv1.EndpointSliceRole)
	}
	smons, err := readServiceMonitors(o.serviceMonitors)
	if err != nil {
		return err
	}
	restConfig, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	if err != nil {
		return fmt.Errorf("reading --kubeconfig %s: %w", o.kubeconfig, err)
	}
	kube, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return fmt.Errorf("creating a client from --kubeconfig %s: %w", o.kubeconfig, err)
	}

	p := prometheusResource(o, role)
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	store := assets.NewStoreBuilder(kube.CoreV1(), kube.CoreV1())
	// As the operator's reconcile: select (validate, and load what each references into the store), then
	// generate from the valid ones. A rejected ServiceMonitor is an error here, not a skipped one: the
	// chart's must be valid.
	rs, err := prompkg.NewResourceSelector(logger, p, store, nil, operator.NewMetrics(prometheus.NewRegistry()), operator.NewFakeRecorder(len(smons)+1, p))
	if err != nil {
		return fmt.Errorf("creating the operator's resource selector: %w", err)
	}
	selected, err := rs.SelectServiceMonitors(ctx, func(_ string, selector labels.Selector, appendFn cache.AppendFunc) error {
		for _, sm := range smons {
			if selector.Matches(labels.Set(sm.Labels)) {
				appendFn(sm)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("selecting the ServiceMonitors: %w", err)
	}
	for key, res := range selected {
		for _, c := range res.Conditions() {
			if c.Type == monitoringv1.Accepted && c.Status != monitoringv1.ConditionTrue {
				return fmt.Errorf("the Prometheus Operator rejects ServiceMonitor %s: %s: %s", key, c.Reason, c.Message)
			}
		}
	}
	if len(selected.ValidResources()) == 0 {
		return fmt.Errorf("%s holds no ServiceMonitor", o.serviceMonitors)
	}
	opts := []prompkg.ConfigGeneratorOption{prompkg.WithEndpointSliceSupport()}
	cg, err := prompkg.NewConfigGenerator(logger, p, opts...)
	if err != nil {
		return fmt.Errorf("creating the operator's config generator: %w", err)
	}
	config, err := cg.GenerateServerConfiguration(p, selected.ValidResources(), nil, nil, nil, store, nil, nil, nil, nil)
	if err != nil {
		return fmt.Errorf("generating the configuration: %w", err)
	}

	// The TLS assets, as the operator's Secret mounted at /etc/prometheus/certs holds them.
	if err := os.MkdirAll(o.tlsAssetsDir, 0o700); err != nil {
		return fmt.Errorf("creating --tls-assets-dir: %w", err)
	}
	dir, err := filepath.Abs(o.tlsAssetsDir)
	if err != nil {
		return fmt.Errorf("--tls-assets-dir: %w", err)
	}
	names := make([]string, 0, len(store.TLSAssets()))
	for name, data := range store.TLSAssets() {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return fmt.Errorf("writing TLS asset %s: %w", name, err)
		}
		names = append(names, name)
	}
	sort.Strings(names)
	config = bytes.ReplaceAll(config, []byte(operatorCertsDir+"/"), []byte(dir+"/"))
	// The operator's config-reloader expands $(VAR) from the Prometheus pod's environment before
	// Prometheus reads the file: SHARD is the pod's shard, 0 of the one shard here (unexpanded, the
	// sharding relabelling keeps no target).
	config = bytes.ReplaceAll(config, []byte("$(SHARD)"), []byte("0"))
	if i := bytes.Index(config, []byte("$(")); i >= 0 {
		return fmt.Errorf("the generated configuration has a variable the config-reloader would expand and this tool does not: %.40s", config[i:])
	}

	if o.output == "-" {
		_, err = os.Stdout.Write(config)
		return err
	}
	if err := os.WriteFile(o.output, config, 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", o.output, err)
	}
	fmt.Fprintf(os.Stderr, "wrote %s (%d ServiceMonitors; TLS assets %s in %s)\n", o.output, len(selected.ValidResources()), strings.Join(names, ", "), dir)
	return nil
}

// prometheusResource is the Prometheus resource generated for: every ServiceMonitor in every namespace,
// no external labels (the operator's prometheus and prometheus_replica labels would be the same on every
// series here), Kubernetes service discovery through the given API server.
func prometheusResource(o options, role monitoringv1.ServiceDiscoveryRole) *monitoringv1.Prometheus {
	p := &monitoringv1.Prometheus{
		TypeMeta:   metav1.TypeMeta{APIVersion: monitoringv1.SchemeGroupVersion.String(), Kind: monitoringv1.PrometheusesKind},
		ObjectMeta: metav1.ObjectMeta{Name: "k8s", Namespace: o.namespace},
		Spec: monitoringv1.PrometheusSpec{
			CommonPrometheusFields: monitoringv1.CommonPrometheusFields{
				Version:                     o.prometheusVersion,
				ScrapeInterval:              monitoringv1.Duration(o.scrapeInterval),
				ServiceMonitorSelector:      &metav1.LabelSelector{},
				ServiceDiscoveryRole:        &role,
				ReplicaExternalLabelName:    ptr.To(""),
				PrometheusExternalLabelName: ptr.To(""),
			},
			EvaluationInterval: monitoringv1.Duration(o.evaluationInterval),
		},
	}
	if o.apiserverHost != "" {
		api := &monitoringv1.APIServerConfig{Host: o.apiserverHost, TLSConfig: &monitoringv1.TLSConfig{
			TLSFilesConfig: monitoringv1.TLSFilesConfig{CAFile: o.apiserverCA, CertFile: o.apiserverCert, KeyFile: o.apiserverKey},
		}}
		if o.apiserverToken != "" {
			api.Authorization = &monitoringv1.Authorization{CredentialsFile: o.apiserverToken}
		}
		p.Spec.APIServerConfig = api
	}
	return p
}

// readServiceMonitors returns every ServiceMonitor of the YAML stream in file.
func readServiceMonitors(file string) ([]*monitoringv1.ServiceMonitor, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("reading --service-monitors: %w", err)
	}
	defer f.Close()
	var out []*monitoringv1.ServiceMonitor
	r := utilyaml.NewYAMLReader(bufio.NewReader(f))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", file, err)
		}
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		if meta.Kind != monitoringv1.ServiceMonitorsKind {
			continue
		}
		var sm monitoringv1.ServiceMonitor
		if err := yaml.UnmarshalStrict(doc, &sm); err != nil {
			return nil, fmt.Errorf("%s: ServiceMonitor: %w", file, err)
		}
		out = append(out, &sm)
	}
}
