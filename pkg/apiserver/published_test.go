package apiserver

import (
	"context"
	"errors"
	"slices"
	"testing"

	certificatesv1 "k8s.io/api/certificates/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	aggregatorfake "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset/fake"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/controller"
)

// TestPublishedBundles: the bundles a leader with no CA record reads back are those of certapi's own
// APIService and of its ClusterTrustBundle when that is linked to certapi's signer; an object that is
// absent, not served or not readable is left out, and any other error stops the read.
func TestPublishedBundles(t *testing.T) {
	const apiSource, ctbSource = "APIService " + certapiv1alpha1.APIServiceName, "ClusterTrustBundle " + certapiv1alpha1.ClusterTrustBundleName
	svc := func(bundle string) *apiregistrationv1.APIService {
		return &apiregistrationv1.APIService{ObjectMeta: metav1.ObjectMeta{Name: certapiv1alpha1.APIServiceName},
			Spec: apiregistrationv1.APIServiceSpec{CABundle: []byte(bundle)}}
	}
	ctb := func(signer, bundle string) *certificatesv1.ClusterTrustBundle {
		return &certificatesv1.ClusterTrustBundle{ObjectMeta: metav1.ObjectMeta{Name: certapiv1alpha1.ClusterTrustBundleName},
			Spec: certificatesv1.ClusterTrustBundleSpec{SignerName: signer, TrustBundle: bundle}}
	}
	refuse := func(resource string, err error) k8stesting.ReactionFunc {
		return func(a k8stesting.Action) (bool, runtime.Object, error) {
			return a.GetResource().Resource == resource, nil, err
		}
	}
	gr := schema.GroupResource{Group: "certificates.k8s.io", Resource: "clustertrustbundles"}
	for _, tc := range []struct {
		name      string
		svc       *apiregistrationv1.APIService
		ctb       *certificatesv1.ClusterTrustBundle
		kubeErr   error // answer to every ClusterTrustBundle read
		aggErr    error // answer to every APIService read
		want      []string
		wantError bool
	}{
		{name: "first start: the APIService without a caBundle, no ClusterTrustBundle", svc: svc("")},
		{name: "both hold a bundle", svc: svc("A"), ctb: ctb(certapiv1alpha1.PodCertificateSignerName, "B"), want: []string{apiSource + "=A", ctbSource + "=B"}},
		{name: "a ClusterTrustBundle of that name for another signer is not read", svc: svc("A"), ctb: ctb("example.com/other", "B"), want: []string{apiSource + "=A"}},
		{name: "no APIService", ctb: ctb(certapiv1alpha1.PodCertificateSignerName, "B"), want: []string{ctbSource + "=B"}},
		{name: "ClusterTrustBundles forbidden", svc: svc("A"), kubeErr: apierrors.NewForbidden(gr, certapiv1alpha1.ClusterTrustBundleName, errors.New("no")), want: []string{apiSource + "=A"}},
		{name: "ClusterTrustBundles not served", svc: svc("A"), kubeErr: apierrors.NewNotFound(gr, ""), want: []string{apiSource + "=A"}},
		{name: "kube-apiserver does not answer", svc: svc("A"), kubeErr: apierrors.NewServiceUnavailable("down"), wantError: true},
		{name: "the APIService read fails", aggErr: apierrors.NewTimeoutError("slow", 1), wantError: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var kubeObjs, aggObjs []runtime.Object
			if tc.ctb != nil {
				kubeObjs = append(kubeObjs, tc.ctb)
			}
			if tc.svc != nil {
				aggObjs = append(aggObjs, tc.svc)
			}
			kube, agg := kubefake.NewClientset(kubeObjs...), aggregatorfake.NewSimpleClientset(aggObjs...)
			if tc.kubeErr != nil {
				kube.PrependReactor("get", "clustertrustbundles", refuse("clustertrustbundles", tc.kubeErr))
			}
			if tc.aggErr != nil {
				agg.PrependReactor("get", "apiservices", refuse("apiservices", tc.aggErr))
			}
			got, err := publishedBundles(controller.Clients{Kube: kube, Aggregator: agg})(context.Background())
			if tc.wantError {
				if err == nil {
					t.Fatalf("read %v; want an error", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var gotS []string
			for _, b := range got {
				gotS = append(gotS, b.Source+"="+string(b.PEM))
			}
			if !slices.Equal(gotS, tc.want) {
				t.Errorf("read %q; want %q", gotS, tc.want)
			}
		})
	}
}
