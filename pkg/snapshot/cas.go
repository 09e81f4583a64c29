package snapshot

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apiserver/pkg/storage/value"

	"github.com/certapi/certapi/pkg/etcdcluster"
	"github.com/certapi/certapi/pkg/signer"
)

// Where certapi keeps its CAs in etcd (apiserver.EtcdPathPrefix, the generic registry's resource path and
// issuer.CAKeysResource): the CertificateAuthority object, whose status.caBundle holds the certificates
// of the bundle, and the CA record, whose authorities hold every CA certificate with the keys of those that
// sign.
const (
	caObjectKey = "/registry/certapi.dev/certificateauthorities/default"
	caRecordKey = "/registry/certapi.dev/certificateauthoritykeys/default"
)

// encryptedPrefix starts every value an encrypting provider of an EncryptionConfiguration writes.
var encryptedPrefix = []byte("k8s:enc:")

// SnapshotCA is a CA certificate a snapshot holds, and where.
type SnapshotCA struct {
	DistrustedCA
	// In says where the snapshot holds it: "CertificateAuthority status" or "CA record".
	In string
}

// SnapshotCAs is what a snapshot holds of certapi's CAs.
type SnapshotCAs struct {
	// CAs are the CA certificates found, each once, in every revision the snapshot keeps of the
	// CertificateAuthority object and the CA record (a snapshot taken before compaction keeps earlier ones).
	CAs []SnapshotCA
	// Unread says what could not be read (a value encrypted with no transformer to open it, say); empty when
	// every revision of both keys was read.
	Unread []string
	// Found is whether the snapshot holds the CertificateAuthority object or the CA record at all.
	Found bool
}

// ReadCAs reads the CA certificates of certapi's CertificateAuthority object and CA record from a snapshot
// file, every revision of them the file keeps, without etcd: it opens the snapshot's database read-only. The
// certificates are public; an encrypted value is opened with t when t is not nil (the transformer of the
// EncryptionConfiguration certapi runs with), else it is reported in Unread.
func ReadCAs(ctx context.Context, path string, t value.Transformer) (out SnapshotCAs, err error) {
	revs, err := etcdcluster.ReadRevisions(path, caObjectKey, caRecordKey)
	if err != nil {
		return SnapshotCAs{}, fmt.Errorf("reading the CAs of %s: %w", path, err)
	}
	var values []kv
	for _, r := range revs {
		if !r.Deleted {
			values = append(values, kv{key: r.Key, rev: r.ModRevision, value: r.Value})
		}
	}
	out.Found = len(values) > 0
	for _, v := range values {
		certs, where, err := certificatesOf(ctx, v, t)
		if err != nil {
			out.Unread = append(out.Unread, fmt.Sprintf("%s at revision %d: %v", where, v.rev, err))
			continue
		}
		for _, c := range certs {
			ca := SnapshotCA{DistrustedCA: identify(c), In: where}
			if !slices.ContainsFunc(out.CAs, func(o SnapshotCA) bool { return o.Same(ca.DistrustedCA) }) {
				out.CAs = append(out.CAs, ca)
			}
		}
	}
	return out, nil
}

type kv struct {
	key   string
	rev   int64
	value []byte
}

// identify is the identity of a CA certificate as records of distrusted CAs name it.
func identify(c *x509.Certificate) DistrustedCA {
	sum := sha256.Sum256(c.Raw)
	return DistrustedCA{SerialNumber: signer.FormatSerialNumber(c.SerialNumber), SubjectKeyID: signer.FormatKeyID(c.SubjectKeyId), SHA256Fingerprint: hex.EncodeToString(sum[:])}
}

// certificatesOf returns the CA certificates a stored value of the CertificateAuthority object or the CA record
// holds, and which of the two it is.
func certificatesOf(ctx context.Context, v kv, t value.Transformer) ([]*x509.Certificate, string, error) {
	where := "the CA record"
	if v.key == caObjectKey {
		where = "CertificateAuthority status"
	}
	data := v.value
	if bytes.HasPrefix(data, encryptedPrefix) {
		if t == nil {
			return nil, where, fmt.Errorf("encrypted (%s), and no --encryption-provider-config was given to open it", providerOf(data))
		}
		plain, _, err := t.TransformFromStorage(ctx, data, value.DefaultContext(v.key))
		if err != nil {
			return nil, where, fmt.Errorf("does not open with --encryption-provider-config: %w", err)
		}
		data = plain
	}
	var pems []string
	if v.key == caObjectKey {
		var obj struct {
			Status struct {
				CABundle string `json:"caBundle"`
			} `json:"status"`
		}
		if err := json.Unmarshal(data, &obj); err != nil {
			return nil, where, fmt.Errorf("not JSON: %w", err)
		}
		pems = append(pems, obj.Status.CABundle)
	} else {
		var rec struct {
			Authorities []struct {
				CertificatePEM string `json:"certificatePEM"`
			} `json:"authorities"`
		}
		if err := json.Unmarshal(data, &rec); err != nil {
			return nil, where, fmt.Errorf("not JSON: %w", err)
		}
		for _, a := range rec.Authorities {
			pems = append(pems, a.CertificatePEM)
		}
	}
	var certs []*x509.Certificate
	for _, p := range pems {
		if strings.TrimSpace(p) == "" {
			continue
		}
		cs, err := signer.ParseBundle([]byte(p))
		if err != nil {
			return nil, where, fmt.Errorf("its CA certificates do not parse: %w", err)
		}
		certs = append(certs, cs...)
	}
	return certs, where, nil
}

// providerOf names the provider and key of an encrypted value from its prefix ("k8s:enc:aescbc:v1:key1:...",
// "k8s:enc:kms:v2:<provider>:..."), for messages; never more than the prefix.
func providerOf(data []byte) string {
	parts := bytes.SplitN(data, []byte(":"), 6)
	if len(parts) < 6 {
		return "k8s:enc:"
	}
	return string(bytes.Join(parts[:5], []byte(":")))
}
