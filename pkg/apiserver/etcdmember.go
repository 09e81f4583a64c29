package apiserver

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/certapi/certapi/pkg/etcdcluster"
	"github.com/certapi/certapi/pkg/etcdcluster/incluster"
)

// startMember loads or creates the peer CA and starts this replica's member of the replicas' etcd
// cluster (c.Cluster); the caller runs its maintenance loop (Member.Run), and follow when not nil (it
// tells the member of every change of the peer CA's Secret until its context ends), and stops them. kube
// reaches kube-apiserver for the peer CA Secret, the StatefulSet and certapi's APIService.
func startMember(ctx context.Context, c EtcdConfig, kube *KubeClients, sealing caKeysSealing) (_ *etcdcluster.Member, follow func(context.Context) error, _ error) {
	o, namespace := &c.Cluster, c.Namespace
	cfg, err := o.memberConfig(c.DataDir)
	if err != nil {
		return nil, nil, err
	}
	name, dir := cfg.Name, cfg.Dir
	var store *incluster.PeerCASecret
	if o.PeerCACertFile != "" {
		// A CA given as files is the operator's: certapi never rotates it.
		certPEM, err := os.ReadFile(o.PeerCACertFile)
		if err != nil {
			return nil, nil, fmt.Errorf("reading --etcd-peer-ca-cert-file: %w", err)
		}
		keyPEM, err := os.ReadFile(o.PeerCAKeyFile)
		if err != nil {
			return nil, nil, fmt.Errorf("reading --etcd-peer-ca-key-file: %w", err)
		}
		if cfg.CA, err = etcdcluster.LoadPeerCA(certPEM, keyPEM, nil, nil); err != nil {
			return nil, nil, fmt.Errorf("--etcd-peer-ca-cert-file/--etcd-peer-ca-key-file: %w", err)
		}
	} else {
		client := kube.Kube
		secret := &incluster.PeerCASecret{Client: client, Namespace: namespace, Name: o.PeerCASecret, Member: name,
			PublicOnly: o.PeerCACustody == PeerCACustodyEtcd, Designated: cfg.Designated}
		if cfg.CA, err = secret.LoadOrCreate(ctx); err != nil {
			return nil, nil, err
		}
		if cfg.CA.Key == nil && o.PeerCACustody != PeerCACustodyEtcd {
			return nil, nil, fmt.Errorf("the etcd peer CA Secret %s/%s holds no key: the members keep it in their etcd (--etcd-peer-ca-custody=etcd "+
				"removed it from the Secret); run every member with --etcd-peer-ca-custody=etcd", namespace, o.PeerCASecret)
		}
		if o.PeerCACustody == PeerCACustodyEtcd {
			if err := custody(&cfg, o, client, namespace, name, sealing); err != nil {
				return nil, nil, err
			}
		}
		cfg.Bootstrap = secret
		cfg.PeerCAStore = secret
		// A first cluster is never bootstrapped while a CA bundle certapi published says a certapi ran with
		// a CA on other data (etcd.mode embedded switched to cluster without moving the data).
		cfg.PublishedCA = incluster.PublishedCA(kube.Aggregator)
		// The StatefulSet is the pod name without its ordinal, in certapi's namespace.
		cfg.DesiredMembers = incluster.StatefulSetReplicas(client, namespace, name[:strings.LastIndex(name, "-")])
		store = secret
	}
	klog.FromContext(ctx).Info("Starting the embedded etcd member of certapi's cluster", "member", name, "peerURL", cfg.PeerURL, "clientURL", cfg.ClientURL, "dataDir", dir)
	m, err := etcdcluster.Start(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	if store != nil {
		follow = func(ctx context.Context) error { return store.Watch(ctx, m.SetPeerCA) }
	}
	return m, follow, nil
}

// custody configures the member to keep the peer CA's key in etcd and to enroll (--etcd-peer-ca-custody=etcd).
func custody(cfg *etcdcluster.Config, o *EtcdClusterOptions, client kubernetes.Interface, namespace, name string, sealing caKeysSealing) error {
	sa, err := tokenServiceAccount(o.MemberTokenFile, namespace)
	if err != nil {
		return err
	}
	cfg.PeerCARecordKey = peerCARecordKey
	cfg.Transformer, cfg.RequireEncryptedRecord = sealing.transformer, sealing.encrypted
	cfg.ListenEnrollURL = "https://" + net.JoinHostPort(o.BindAddress, strconv.Itoa(o.EnrollPort))
	cfg.Proof = incluster.TokenFileProof(o.MemberTokenFile)
	cfg.Verifier = &incluster.PodTokenVerifier{Client: client, Rules: incluster.PodIdentityRules{
		Namespace: namespace, ServiceAccount: sa, StatefulSet: name[:strings.LastIndex(name, "-")], Audience: incluster.MemberTokenAudience,
	}}
	return nil
}

// tokenServiceAccount is the ServiceAccount whose token file is at path: the subject of the token this
// pod was given, which every member of certapi's StatefulSet shares. (The token is this process's own,
// so its claims need no verification here; other members' tokens are reviewed by kube-apiserver.)
func tokenServiceAccount(path, namespace string) (string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("--etcd-member-token-file: %w (mount a projected ServiceAccount token with audience %s there)", err, incluster.MemberTokenAudience)
	}
	parts := strings.Split(strings.TrimSpace(string(raw)), ".")
	if len(parts) != 3 {
		return "", fmt.Errorf("--etcd-member-token-file %s: not a JSON web token", path)
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return "", fmt.Errorf("--etcd-member-token-file %s: decoding its claims: %w", path, err)
	}
	var claims struct {
		Subject string `json:"sub"`
	}
	if err := json.Unmarshal(payload, &claims); err != nil {
		return "", fmt.Errorf("--etcd-member-token-file %s: decoding its claims: %w", path, err)
	}
	prefix := "system:serviceaccount:" + namespace + ":"
	sa, ok := strings.CutPrefix(claims.Subject, prefix)
	if !ok || sa == "" {
		return "", fmt.Errorf("--etcd-member-token-file %s: its subject %q is not a ServiceAccount of %s", path, claims.Subject, namespace)
	}
	return sa, nil
}
