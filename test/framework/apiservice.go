package framework

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	apiregistrationv1helper "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1/helper"
	aggregatorclient "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"
)

// createCertapiNamespace creates CertapiNamespace unless it exists.
func (cp *ControlPlane) createCertapiNamespace(ctx context.Context) error {
	cs, err := kubernetes.NewForConfig(cp.AdminConfig)
	if err != nil {
		return fmt.Errorf("creating admin client: %w", err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: CertapiNamespace}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", CertapiNamespace, err)
	}
	return nil
}

// registerAPIService creates (or updates, for a reused Dir) the namespace, the ExternalName
// Service and the APIService that route certapi.dev/v1alpha1 to the local certapi.
func (cp *ControlPlane) registerAPIService(ctx context.Context) error {
	cs, err := kubernetes.NewForConfig(cp.AdminConfig)
	if err != nil {
		return fmt.Errorf("creating admin client: %w", err)
	}
	agg, err := aggregatorclient.NewForConfig(cp.AdminConfig)
	if err != nil {
		return fmt.Errorf("creating aggregator client: %w", err)
	}

	if err := cp.createCertapiNamespace(ctx); err != nil {
		return err
	}

	port := int32(cp.servicePort()) //nolint:gosec // a TCP port
	svcSpec := corev1.ServiceSpec{
		Type:         corev1.ServiceTypeExternalName,
		ExternalName: "localhost",
		Ports: []corev1.ServicePort{{
			Name:       "https",
			Protocol:   corev1.ProtocolTCP,
			Port:       port,
			TargetPort: intstr.FromInt32(port),
		}},
	}
	svcs := cs.CoreV1().Services(CertapiNamespace)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: CertapiServiceName, Namespace: CertapiNamespace}, Spec: svcSpec}
	if _, err := svcs.Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		if !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating Service %s/%s: %w", CertapiNamespace, CertapiServiceName, err)
		}
		cur, err := svcs.Get(ctx, CertapiServiceName, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("getting Service %s/%s: %w", CertapiNamespace, CertapiServiceName, err)
		}
		if cur.Spec.Type != corev1.ServiceTypeExternalName {
			// A Service cannot simply change type with a ClusterIP set; recreate it.
			if err := svcs.Delete(ctx, CertapiServiceName, metav1.DeleteOptions{}); err != nil {
				return fmt.Errorf("deleting Service %s/%s: %w", CertapiNamespace, CertapiServiceName, err)
			}
			if _, err := svcs.Create(ctx, svc, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("re-creating Service %s/%s: %w", CertapiNamespace, CertapiServiceName, err)
			}
		} else {
			cur.Spec.ExternalName = svcSpec.ExternalName
			cur.Spec.Ports = svcSpec.Ports
			if _, err := svcs.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
				return fmt.Errorf("updating Service %s/%s: %w", CertapiNamespace, CertapiServiceName, err)
			}
		}
	}

	apiSvcSpec := apiregistrationv1.APIServiceSpec{
		Group:                CertapiGroup,
		Version:              CertapiVersion,
		Service:              &apiregistrationv1.ServiceReference{Namespace: CertapiNamespace, Name: CertapiServiceName, Port: &port},
		GroupPriorityMinimum: 1000,
		VersionPriority:      15,
	}
	apiSvcs := agg.ApiregistrationV1().APIServices()
	// No caBundle: certapi injects its own CA into its APIService, as in a real installation.
	apiSvc := &apiregistrationv1.APIService{ObjectMeta: metav1.ObjectMeta{Name: CertapiAPIService,
		Annotations: map[string]string{"certapi.dev/inject-ca-bundle": "true"}}, Spec: apiSvcSpec}
	if _, err := apiSvcs.Create(ctx, apiSvc, metav1.CreateOptions{}); err != nil {
		if !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating APIService %s: %w", CertapiAPIService, err)
		}
		cur, err := apiSvcs.Get(ctx, CertapiAPIService, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("getting APIService %s: %w", CertapiAPIService, err)
		}
		apiSvcSpec.CABundle = cur.Spec.CABundle // what certapi injected stays
		cur.Spec = apiSvcSpec
		if _, err := apiSvcs.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("updating APIService %s: %w", CertapiAPIService, err)
		}
	}
	return nil
}

// WaitAPIServiceAvailable waits until the APIService v1alpha1.certapi.dev has condition
// Available=True and kube-apiserver answers a discovery request for certapi.dev/v1alpha1 by
// proxying it to certapi (the condition alone can be stale right after a certapi restart). On
// timeout the error carries the condition's reason and message. It fails early when no certapi
// replica is running.
func (cp *ControlPlane) WaitAPIServiceAvailable(ctx context.Context) error {
	cfg := rest.CopyConfig(cp.AdminConfig)
	cfg.Timeout = healthRequestTimeout
	agg, err := aggregatorclient.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("creating aggregator client: %w", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("creating admin client: %w", err)
	}
	return PollUntil(ctx, pollInterval, apiServiceReadyTimeout, "APIService "+CertapiAPIService+" Available", cp.replicaProcs(), func(ctx context.Context) (bool, string) {
		s, err := agg.ApiregistrationV1().APIServices().Get(ctx, CertapiAPIService, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		c := apiregistrationv1helper.GetAPIServiceConditionByType(s, apiregistrationv1.Available)
		if c == nil {
			return false, "no Available condition yet"
		}
		status := fmt.Sprintf("Available=%s reason=%s message=%q", c.Status, c.Reason, c.Message)
		if c.Status != apiregistrationv1.ConditionTrue {
			return false, status
		}
		if _, err := cs.Discovery().ServerResourcesForGroupVersion(CertapiGroup + "/" + CertapiVersion); err != nil {
			return false, fmt.Sprintf("%s; discovery of %s/%s through kube-apiserver: %v", status, CertapiGroup, CertapiVersion, err)
		}
		return true, status
	})
}
