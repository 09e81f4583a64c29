package injector

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/cabundle"
	"github.com/certapi/certapi/pkg/servedcert"
)

// digest is the SHA-256 of a caBundle: the injector keeps digests, not bundles, per object.
type digest [sha256.Size]byte

func digestOf(b []byte) digest { return sha256.Sum256(b) }

// observation is what the injector knows of one opted-in object, read in full (a GET or a patch
// response) and trimmed to what deciding needs: where its caBundles are, a digest of each, and the
// facts about its managedFields that matter.
type observation struct {
	UID             types.UID
	ResourceVersion string
	// basedOn, for an observation that is certapi's own patch response, is the resourceVersion of the
	// informer copy that write was decided on: until the informer catches up it still shows basedOn,
	// and this observation is the newer one.
	basedOn string
	// Skip says why there is nothing to inject; "" when there is. Slots is then empty.
	Skip string
	// Slots are the caBundle fields to keep, in object order.
	Slots []slot
	// certapiEntry is the index in metadata.managedFields of certapi's own Update entry, -1 when
	// there is none; certapiOnlyCABundle says that entry owns caBundle fields and nothing else.
	certapiEntry        int
	certapiOnlyCABundle bool
	// release says certapi should drop its managedFields entry once the bundle is in place: a
	// server-side apply manager owns the configuration around the caBundle (a CRD's
	// spec.conversion), and certapi's ownership would stop that owner from switching it off
	// (kubernetes#108081; see DESIGN.md, "Opting in to caBundle injection").
	release bool
	// appliedBy names the server-side apply managers behind release.
	appliedBy []string
	// keepForeign: the object is annotated certapi.dev/keep-foreign-ca: "true" (see foreign.go).
	keepForeign bool
}

// slot is one caBundle field.
type slot struct {
	// Name identifies the slot within the object: the webhook name, or "" for the single caBundle
	// of a CRD or an APIService.
	Name string
	// Path is the JSON pointer of the field, for the patch.
	Path string
	// fieldPath is the field's path in managedFields (FieldsV1) notation.
	fieldPath []string
	// Digest is the SHA-256 of the field's current value (of nothing when unset).
	Digest digest
	// owners are the field managers other than certapi that own the field, from managedFields: who
	// wrote the value certapi would restore.
	owners []string
	// text says the field is a string holding the PEM (a ConfigMap's data), not bytes (base64 in
	// JSON, as every caBundle).
	text bool
	// wrapKey, when set, says the field's map does not exist yet: the patch adds, at Path, a map
	// holding the value under wrapKey.
	wrapKey string
	// own is the digest of certapi's CAs in the field (see fieldContent.own).
	own digest
	// foreign are the other CAs in the field, and foreignProblem why they cannot be kept; both only
	// when the object keeps foreign CAs.
	foreign        []*x509.Certificate
	foreignProblem string
	// prefixes are the digests of the field's leading certificates (see fieldContent.prefixes).
	prefixes []digest
	// service is the Service kube-apiserver dials with this slot's bundle; nil for a ConfigMap.
	service *servedcert.ServiceRef
}

// addSlot appends s, whose field holds raw, to obs's slots, with what raw holds.
func (o *observation) addSlot(s slot, raw []byte) {
	s.Digest = digestOf(raw)
	c := splitField(raw, o.keepForeign)
	s.own, s.foreign, s.foreignProblem, s.prefixes = c.own, c.foreign, c.problem, c.prefixes
	o.Slots = append(o.Slots, s)
}

// slotHolds reports whether s holds the bundle with digest d: exactly, or, when the object keeps
// foreign CAs, as its certapi part next to foreign CAs that may be kept.
func (o *observation) slotHolds(s slot, d digest) bool {
	return s.Digest == d || (o.keepForeign && s.foreignProblem == "" && (s.own == d || slices.Contains(s.prefixes, d)))
}

// value is what the patch writes into s for bundle.
func (s slot) value(bundle []byte) any {
	var v any = base64.StdEncoding.EncodeToString(bundle)
	if s.text {
		v = string(bundle)
	}
	if s.wrapKey != "" {
		return map[string]any{s.wrapKey: v}
	}
	return v
}

// ownerEntry is one managedFields entry, parsed.
type ownerEntry struct {
	manager   string
	operation metav1.ManagedFieldsOperationType
	fields    map[string]any
}

// current reports whether o still describes the object whose informer copy has resourceVersion rv.
func (o *observation) current(uid types.UID, rv string) bool {
	return o != nil && o.UID == uid && (o.ResourceVersion == rv || (o.basedOn != "" && o.basedOn == rv))
}

// holds reports whether every slot holds the bundle with digest d (false when there is no slot).
func (o *observation) holds(d digest) bool {
	if o == nil || len(o.Slots) == 0 {
		return false
	}
	for _, s := range o.Slots {
		if !o.slotHolds(s, d) {
			return false
		}
	}
	return true
}

// plan is what to do with one object, decided from its observation and the bundle.
type plan struct {
	// skip is why there is nothing to inject; "" when there is.
	skip string
	// upToDate: every slot holds the bundle.
	upToDate bool
	// patch writes the bundle into the slots that differ (an RFC 6902 JSON patch guarded by a test
	// of metadata.resourceVersion); nil when there is nothing to write.
	patch []byte
	// write names the slots the patch writes, for logs and messages.
	write []string
	// overwritten are the slots, among write, that held this very bundle when certapi last looked:
	// another writer changed them. Restoring them counts towards a fight.
	overwritten []string
	// release drops certapi's managedFields entry (see observation.release); only when upToDate.
	release []byte
	// kept describes the foreign CAs the object's caBundles keep (after the patch, if any), for the
	// Event; notKept, when set, says why the object is not written at all (see foreign.go).
	kept    []string
	notKept []string
}

// heldSlot is what certapi last saw a slot hold while up to date, or wrote into it: the bundle's
// digest and the field's (different when foreign CAs are kept).
type heldSlot struct {
	bundle digest
	field  digest
}

// decide returns what to do with an object observed as obs, given the bundle to inject (with its
// digest d) and held: for each slot name, what certapi last saw that slot hold while up to date, or
// wrote into it. An object that keeps foreign CAs gets the bundle followed by them in each slot, or
// nothing at all when any slot holds something that cannot be kept.
func decide(obs *observation, bundle []byte, d digest, held map[string]heldSlot) plan {
	if obs.Skip != "" {
		return plan{skip: obs.Skip}
	}
	var ops []cabundle.Op
	var p plan
	seen := map[string]bool{}
	for _, s := range obs.Slots {
		if obs.keepForeign {
			if s.foreignProblem != "" {
				p.notKept = append(p.notKept, fmt.Sprintf("the caBundle of %s: %s", slotLabel(s), s.foreignProblem))
				continue
			}
			for _, c := range notIn(bundle, s.foreign) {
				if desc := describeCA(c); !seen[desc] {
					seen[desc] = true
					p.kept = append(p.kept, desc)
				}
			}
		}
		if obs.slotHolds(s, d) {
			continue
		}
		value := bundle
		if obs.keepForeign {
			value = withForeign(bundle, s.foreign)
		}
		ops = append(ops, cabundle.Op{Op: "add", Path: s.Path, Value: s.value(value)})
		p.write = append(p.write, slotLabel(s))
		if h, ok := held[s.Name]; ok && h.bundle == d && h.field != s.Digest {
			p.overwritten = append(p.overwritten, slotLabel(s))
		}
	}
	if len(p.notKept) > 0 {
		return plan{notKept: p.notKept}
	}
	if len(ops) == 0 {
		p.upToDate = true
		if obs.release && obs.certapiEntry >= 0 && obs.certapiOnlyCABundle {
			i := obs.certapiEntry
			p.release = cabundle.GuardedPatch(obs.ResourceVersion,
				cabundle.Op{Op: "test", Path: fmt.Sprintf("/metadata/managedFields/%d/manager", i), Value: certapiv1alpha1.FieldManager},
				cabundle.Op{Op: "test", Path: fmt.Sprintf("/metadata/managedFields/%d/operation", i), Value: string(metav1.ManagedFieldsOperationUpdate)},
				cabundle.Op{Op: "remove", Path: fmt.Sprintf("/metadata/managedFields/%d", i)},
			)
		}
		return p
	}
	// The guard makes the patch apply to exactly the object observed: a webhook addressed by its
	// index is the webhook we looked at, and kube-apiserver does not retry a failed test.
	p.patch = cabundle.GuardedPatch(obs.ResourceVersion, ops...)
	return p
}

// slotLabel names a slot in messages.
func slotLabel(s slot) string {
	if s.Name != "" {
		return fmt.Sprintf("webhook %q", s.Name)
	}
	return strings.TrimPrefix(strings.ReplaceAll(s.Path, "/", "."), ".")
}

// overwrittenBy names the managers (other than certapi) that own the named slots now, from the
// object's managedFields: who wrote the caBundle certapi would restore.
func overwrittenBy(obs *observation, slots []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range obs.Slots {
		if !slices.Contains(slots, slotLabel(s)) {
			continue
		}
		for _, m := range s.owners {
			if !seen[m] {
				seen[m] = true
				out = append(out, m)
			}
		}
	}
	sort.Strings(out)
	return out
}

// ---------------------------------------------------------------------------------------------
// Observing: what the observe function of every kind (one file per kind, see kinds.go) shares

// newObservation fills in the identity and certapi's own managedFields entry of m, and returns the
// other entries of the main resource, parsed, for the kind to draw on.
func newObservation(m *metav1.ObjectMeta) (*observation, []ownerEntry) {
	obs := &observation{UID: m.UID, ResourceVersion: m.ResourceVersion, certapiEntry: -1}
	obs.keepForeign, _ = keepForeignCA(m.Annotations) // an invalid value is refused before any read (refusedTarget)
	var owners []ownerEntry
	for i, e := range m.ManagedFields {
		if e.Subresource != "" {
			continue
		}
		var fields map[string]any
		if e.FieldsV1 != nil {
			_ = json.Unmarshal(e.FieldsV1.Raw, &fields) // unparsable: owns nothing we can tell
		}
		if e.Manager == certapiv1alpha1.FieldManager && e.Operation == metav1.ManagedFieldsOperationUpdate {
			obs.certapiEntry = i
			obs.certapiOnlyCABundle = onlyCABundle(fields)
			continue
		}
		owners = append(owners, ownerEntry{manager: e.Manager, operation: e.Operation, fields: fields})
	}
	return obs, owners
}

// setOwners records, per slot, the managers that own its field.
func setOwners(obs *observation, owners []ownerEntry) {
	for n := range obs.Slots {
		for _, e := range owners {
			if hasPath(e.fields, obs.Slots[n].fieldPath) {
				obs.Slots[n].owners = append(obs.Slots[n].owners, e.manager)
			}
		}
	}
}

// hasPath reports whether a FieldsV1 set owns path or something under it.
func hasPath(fields map[string]any, path []string) bool {
	cur := fields
	for _, p := range path {
		next, ok := cur[p]
		if !ok {
			return false
		}
		m, ok := next.(map[string]any)
		if !ok {
			return false
		}
		cur = m
	}
	return true
}

// onlyCABundle reports whether every field of a FieldsV1 set is a caBundle (or a parent on the way
// to one): certapi's entry owns nothing else, so removing it gives up nothing else.
func onlyCABundle(fields map[string]any) bool {
	if len(fields) == 0 {
		return false
	}
	var walk func(m map[string]any) bool
	walk = func(m map[string]any) bool {
		for k, v := range m {
			if k == "." {
				return false // owns a list item or map itself, not only a caBundle inside it
			}
			child, _ := v.(map[string]any)
			if k == "f:caBundle" {
				if len(child) != 0 {
					return false
				}
				continue
			}
			if len(child) == 0 || !walk(child) {
				return false
			}
		}
		return true
	}
	return walk(fields)
}

// ---------------------------------------------------------------------------------------------
// Other injectors

// foreignClaims returns the annotations, sorted, by which another injector claims the object.
func foreignClaims(annotations map[string]string) []string {
	var out []string
	for k := range annotations {
		if isForeignInjectorAnnotation(k) {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

func isForeignInjectorAnnotation(k string) bool {
	switch {
	case strings.HasPrefix(k, "cert-manager.io/inject-ca-"), k == "cert-manager.io/inject-apiserver-ca",
		k == "service.beta.openshift.io/inject-cabundle":
		return true
	}
	return false
}

// refusal is the message of a conflict with another injector.
func refusal(kind Kind, name string, claims []string) string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "certapi does not inject the CA bundle into %s %s: it is also claimed by another injector (annotation", kind, name)
	if len(claims) > 1 {
		b.WriteString("s")
	}
	fmt.Fprintf(&b, " %s), and two injectors would overwrite each other's caBundle. Keep one: remove annotation %s, or remove %s.",
		strings.Join(claims, ", "), certapiv1alpha1.AnnotationInjectCABundle, strings.Join(claims, " and "))
	return b.String()
}

// ---------------------------------------------------------------------------------------------
// Objects another controller owns

// kubeRootCAConfigMap is the ConfigMap kube-controller-manager's root CA publisher keeps in every
// namespace: it rewrites ca.crt with the cluster's root CA whenever it differs.
const kubeRootCAConfigMap = "kube-root-ca.crt"

// ReasonManagedByKubernetes: the object is one that a Kubernetes controller keeps (a namespace's
// kube-root-ca.crt); certapi would fight it.
const ReasonManagedByKubernetes = "ManagedByKubernetes"

// refusedTarget returns why certapi refuses to manage an object that opts in, from its kind, its key
// ("<namespace>/<name>" for a ConfigMap) and its annotations, as a Problem reason and message; "" when
// it does not refuse. It needs no read of the object: another injector's annotation, or a name that
// a Kubernetes controller owns, is enough.
func refusedTarget(kind Kind, name string, annotations map[string]string) (reason, message string) {
	if claims := foreignClaims(annotations); len(claims) > 0 {
		return ReasonClaimedByAnotherInjector, refusal(kind, name, claims)
	}
	if _, problem := keepForeignCA(annotations); problem != "" {
		return ReasonInvalidAnnotation, fmt.Sprintf("certapi does not inject the CA bundle into %s %s: %s", kind, name, problem)
	}
	if kind == KindConfigMap {
		if _, n, _ := strings.Cut(name, "/"); n == kubeRootCAConfigMap {
			return ReasonManagedByKubernetes, fmt.Sprintf("certapi does not inject the CA bundle into ConfigMap %s: kube-controller-manager's root CA publisher "+
				"owns %s in every namespace and writes the cluster's root CA into its %s, so the two would overwrite each other. Remove annotation %s from it, "+
				"and annotate a ConfigMap of another name (or mount the ClusterTrustBundle of signer certapi.dev/serving).",
				name, kubeRootCAConfigMap, ConfigMapKey, certapiv1alpha1.AnnotationInjectCABundle)
		}
	}
	return "", ""
}

// refusedMessage describes a refused write for Problems and Events: the API's reason and message
// (kube-apiserver's messages name fields and limits, never the values written), and when certapi tries
// again.
func refusedMessage(kind Kind, name string, err error) string {
	reason := string(apierrors.ReasonForError(err))
	if reason == "" {
		reason = "Unknown"
	}
	msg := shortError(err)
	out := fmt.Sprintf("kube-apiserver refused to write the CA bundle into %s %s (%s): %s. Retrying cannot fix that, so it does not hold CA rotations; "+
		"certapi tries again when the object or the bundle changes. Fix the cause (make room, allow the write), or remove annotation %s.",
		kind, name, reason, msg, certapiv1alpha1.AnnotationInjectCABundle)
	if len(out) > maxNote {
		out = out[:maxNote-3] + "..."
	}
	return out
}

// shortError is err's message cut to 400 bytes: kube-apiserver may quote the whole patched object in a
// field error (a tenant's megabyte of ConfigMap data), which has no place in an Event or a log line.
func shortError(err error) string {
	msg := err.Error()
	if len(msg) > 400 {
		msg = msg[:397] + "..."
	}
	return msg
}

// maxNote bounds the message of a Warning Event (events.k8s.io allows 1 KiB of note).
const maxNote = 1000
