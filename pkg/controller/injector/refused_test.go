package injector

import (
	"errors"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
)

func TestRefusedTarget(t *testing.T) {
	openshift := map[string]string{certapiv1alpha1.AnnotationInjectCABundle: "true", "service.beta.openshift.io/inject-cabundle": "true"}
	for _, tc := range []struct {
		name        string
		kind        Kind
		key         string
		annotations map[string]string
		wantReason  string
		wantIn      []string
	}{
		{name: "a ConfigMap of its own", kind: KindConfigMap, key: "app/trust", annotations: optInOnly()},
		{name: "kube-root-ca.crt: kube-controller-manager's", kind: KindConfigMap, key: "app/kube-root-ca.crt", annotations: optInOnly(),
			wantReason: ReasonManagedByKubernetes, wantIn: []string{"ConfigMap app/kube-root-ca.crt", "kube-controller-manager", certapiv1alpha1.AnnotationInjectCABundle, "another name"}},
		{name: "kube-root-ca.crt in kube-system", kind: KindConfigMap, key: "kube-system/kube-root-ca.crt", annotations: optInOnly(),
			wantReason: ReasonManagedByKubernetes, wantIn: []string{"kube-system/kube-root-ca.crt"}},
		{name: "a name that only ends like it", kind: KindConfigMap, key: "app/my-kube-root-ca.crt", annotations: optInOnly()},
		{name: "a webhook configuration named like it is no ConfigMap", kind: KindValidatingWebhookConfiguration, key: "kube-root-ca.crt", annotations: optInOnly()},
		{name: "another injector's annotation wins", kind: KindConfigMap, key: "app/kube-root-ca.crt", annotations: openshift,
			wantReason: ReasonClaimedByAnotherInjector, wantIn: []string{"service.beta.openshift.io/inject-cabundle"}},
		{name: "another injector on a webhook configuration", kind: KindMutatingWebhookConfiguration, key: "m",
			annotations: map[string]string{"cert-manager.io/inject-ca-from": "ns/c"}, wantReason: ReasonClaimedByAnotherInjector},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reason, msg := refusedTarget(tc.kind, tc.key, tc.annotations)
			if reason != tc.wantReason {
				t.Fatalf("reason = %q, want %q (message %q)", reason, tc.wantReason, msg)
			}
			if (msg == "") != (reason == "") {
				t.Errorf("reason %q with message %q", reason, msg)
			}
			for _, s := range tc.wantIn {
				if !strings.Contains(msg, s) {
					t.Errorf("message %q does not mention %q", msg, s)
				}
			}
		})
	}
}

func optInOnly() map[string]string {
	return map[string]string{certapiv1alpha1.AnnotationInjectCABundle: "true"}
}

func TestRefusedMessage(t *testing.T) {
	err := apierrors.NewInvalid(schema.GroupKind{Kind: "ConfigMap"}, "big", field.ErrorList{field.TooLong(field.NewPath(""), "", 1048576)})
	msg := refusedMessage(KindConfigMap, "ns/big", err)
	for _, s := range []string{"ConfigMap ns/big", "(Invalid)", "Too long", "1048576", "when the object or the bundle changes", certapiv1alpha1.AnnotationInjectCABundle} {
		if !strings.Contains(msg, s) {
			t.Errorf("message %q does not mention %q", msg, s)
		}
	}
	long := apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "big", errors.New(strings.Repeat("x", 5000)))
	if msg := refusedMessage(KindConfigMap, "ns/big", long); len(msg) > maxNote {
		t.Errorf("a message of %d bytes does not fit an Event", len(msg))
	}
}

func TestRefusedFor(t *testing.T) {
	d1, d2 := digestOf([]byte("one")), digestOf([]byte("two"))
	failed := &objState{state: StateFailed, refused: refusedWrite{resourceVersion: "7", bundle: d1}}
	for _, tc := range []struct {
		name string
		st   *objState
		rv   string
		d    digest
		want bool
	}{
		{"nothing changed: still refused, not retried, does not hold the gate", failed, "7", d1, true},
		{"the object changed: tried again", failed, "8", d1, false},
		{"the bundle changed: tried again", failed, "7", d2, false},
		{"pending, not failed", &objState{state: StatePending, refused: refusedWrite{resourceVersion: "7", bundle: d1}}, "7", d1, false},
		{"up to date", &objState{state: StateUpToDate}, "7", d1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.st.refusedFor(tc.rv, tc.d); got != tc.want {
				t.Errorf("refusedFor = %v, want %v", got, tc.want)
			}
		})
	}
}
