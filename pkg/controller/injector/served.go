package injector

import (
	"sort"

	"github.com/certapi/certapi/pkg/servedcert"
	"github.com/certapi/certapi/pkg/signer"
)

// serviceRef makes the ServiceRef of a reference with an optional port.
func serviceRef(namespace, name string, port *int32) *servedcert.ServiceRef {
	r := servedcert.NewServiceRef(namespace, name, port)
	return &r
}

// ServedTarget is one caBundle slot that names a Service, of an object that holds certapi's current
// bundle: the verifier (pkg/controller/servedcert) checks what that Service's endpoints serve against
// that bundle.
type ServedTarget struct {
	Kind Kind
	// Name is the object's key: its name, or "<namespace>/<name>" for a namespaced kind.
	Name string
	// Slot names the slot within the object: the webhook's name, "" for a CRD or an APIService.
	Slot string
	// Service is what kube-apiserver dials with the slot's bundle.
	Service servedcert.ServiceRef
	// Foreign is the PEM of the foreign CAs the slot keeps after certapi's bundle (an object annotated
	// certapi.dev/keep-foreign-ca: "true"); "" for most. A string, so that a target stays comparable.
	Foreign string
}

// ServedTargets returns the bundle every listed target holds (nil when the Source has none yet) and the
// slots naming a Service of every object that is up to date with it, sorted by kind, name and slot.
// Objects that do not hold certapi's current bundle (pending, skipped, in conflict, failed) are not
// listed: what they serve cannot be judged against a bundle certapi injected. It answers from the
// injector's own state; the injector tells its listeners after each target it synced.
func (i *Injector) ServedTargets() ([]byte, []ServedTarget) {
	cur := i.currentCanonical()
	if cur.pem == nil {
		return nil, nil
	}
	i.mu.Lock()
	var out []ServedTarget
	for k, st := range i.objects {
		if st.state != StateUpToDate || st.obs == nil || (st.bundle != cur.digest && st.certs != cur.certs) {
			continue
		}
		for _, s := range st.obs.Slots {
			if s.service == nil {
				continue
			}
			t := ServedTarget{Kind: k.kind, Name: k.name, Slot: s.Name, Service: *s.service}
			if st.obs.keepForeign && s.foreignProblem == "" && len(s.foreign) > 0 {
				t.Foreign = string(signer.EncodeBundle(s.foreign...))
			}
			out = append(out, t)
		}
	}
	i.mu.Unlock()
	order := map[Kind]int{}
	for n, kind := range Kinds {
		order[kind] = n
	}
	sort.Slice(out, func(a, b int) bool {
		ta, tb := out[a], out[b]
		if ta.Kind != tb.Kind {
			return order[ta.Kind] < order[tb.Kind]
		}
		if ta.Name != tb.Name {
			return ta.Name < tb.Name
		}
		return ta.Slot < tb.Slot
	})
	return cur.pem, out
}
