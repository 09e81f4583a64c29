package issuer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apiserver/pkg/storage/value"

	"github.com/certapi/certapi/pkg/signer"
)

// CAKeysResource is the resource name under which the CA key pairs are stored, and the name an admin lists in
// an EncryptionConfiguration (as "certificateauthoritykeys.certapi.dev") to encrypt them at rest.
const CAKeysResource = "certificateauthoritykeys"

// ErrFenced means a CA write was refused because this replica no longer holds the election key it wrote
// under: another replica leads now, or the session ended.
var ErrFenced = errors.New("CA write refused: this replica no longer leads (its election key is gone)")

// caRecord is the stored form of the CA key pairs. It goes through the same value transformers as every
// other certapi object, so an EncryptionConfiguration encrypts it; it is never served by the API.
type caRecord struct {
	APIVersion  string    `json:"apiVersion"`
	Kind        string    `json:"kind"`
	Authorities []caEntry `json:"authorities"`
}

type caEntry struct {
	// Role is Active, Next or Retiring, as in CertificateAuthority status.
	Role           string `json:"role"`
	CertificatePEM string `json:"certificatePEM"`
	KeyPEM         string `json:"keyPEM"`
}

// keystore reads and writes the CA record in etcd. Writes are fenced on the leader's election key.
type keystore struct {
	client      *clientv3.Client
	key         string
	transformer value.Transformer
}

// authenticatedData binds the ciphertext to its key, as kube-apiserver's etcd3 store does, so a value
// copied under another key does not decrypt.
type authenticatedData string

func (d authenticatedData) AuthenticatedData() []byte { return []byte(d) }

// load returns the stored CAs and the record's mod revision; a nil slice and revision 0 when none is stored.
func (k *keystore) load(ctx context.Context) ([]storedCA, int64, error) {
	resp, err := k.client.Get(ctx, k.key)
	if err != nil {
		return nil, 0, fmt.Errorf("reading the CA record: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return nil, 0, nil
	}
	kv := resp.Kvs[0]
	data, _, err := k.transformer.TransformFromStorage(ctx, kv.Value, authenticatedData(k.key))
	if err != nil {
		return nil, 0, fmt.Errorf("decrypting the CA record (is --encryption-provider-config the one it was written with?): %w", err)
	}
	var rec caRecord
	if err := json.Unmarshal(data, &rec); err != nil {
		return nil, 0, fmt.Errorf("decoding the CA record: %w", err)
	}
	cas := make([]storedCA, 0, len(rec.Authorities))
	for i, e := range rec.Authorities {
		ca, err := signer.LoadCA([]byte(e.CertificatePEM), []byte(e.KeyPEM))
		if err != nil {
			return nil, 0, fmt.Errorf("loading CA %d of the stored record: %w", i, err)
		}
		cas = append(cas, storedCA{Role: e.Role, CA: ca})
	}
	return cas, kv.ModRevision, nil
}

// storedCA is one CA with its role.
type storedCA struct {
	Role string
	CA   *signer.CA
}

// save writes cas if the record is still at modRevision (0: absent) and the election key leaderKey still
// has createRevision leaderRev. Both conditions are one etcd transaction, so a deposed leader cannot
// overwrite a CA that its successor wrote.
func (k *keystore) save(ctx context.Context, cas []storedCA, modRevision int64, leaderKey string, leaderRev int64) error {
	rec := caRecord{APIVersion: "certapi.dev/internal", Kind: "CertificateAuthorityKeys"}
	for _, c := range cas {
		keyPEM, err := c.CA.KeyPEM()
		if err != nil {
			return fmt.Errorf("encoding a CA key: %w", err)
		}
		rec.Authorities = append(rec.Authorities, caEntry{Role: c.Role, CertificatePEM: string(c.CA.CertificatePEM()), KeyPEM: string(keyPEM)})
	}
	data, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("encoding the CA record: %w", err)
	}
	stored, err := k.transformer.TransformToStorage(ctx, data, authenticatedData(k.key))
	if err != nil {
		return fmt.Errorf("encrypting the CA record: %w", err)
	}
	var recordCmp clientv3.Cmp
	if modRevision == 0 {
		recordCmp = clientv3.Compare(clientv3.CreateRevision(k.key), "=", 0)
	} else {
		recordCmp = clientv3.Compare(clientv3.ModRevision(k.key), "=", modRevision)
	}
	resp, err := k.client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(leaderKey), "=", leaderRev), recordCmp).
		Then(clientv3.OpPut(k.key, string(stored))).
		Commit()
	if err != nil {
		return fmt.Errorf("writing the CA record: %w", err)
	}
	if !resp.Succeeded {
		return ErrFenced
	}
	return nil
}
