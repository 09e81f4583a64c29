package signer

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"testing"
	"time"
)

// TestTLSHandshake serves a leaf on a real listener and connects with a
// client that trusts only the CA bundle, as kube-apiserver does when it calls
// a webhook through its Service.
func TestTLSHandshake(t *testing.T) {
	ca := newTestCA(t, time.Time{}, 0)
	tests := []struct {
		name       string
		key        string
		serverName string
		wantErr    bool
	}{
		{name: "ECDSA, service name", key: string(ECDSAP256), serverName: "webhook.team-a.svc"},
		{name: "ECDSA, FQDN", key: string(ECDSAP256), serverName: "webhook.team-a.svc.cluster.local"},
		{name: "RSA, service name", key: string(RSA2048), serverName: "webhook.team-a.svc"},
		{name: "bare service name refused", key: string(ECDSAP256), serverName: "webhook", wantErr: true},
		{name: "service.namespace refused", key: string(ECDSAP256), serverName: "webhook.team-a", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key := testKey(t, tt.key)
			leaf, err := ca.Sign(LeafRequest{ServiceName: "webhook", Namespace: "team-a", ClusterDomain: "cluster.local",
				PublicKey: key.Public(), Duration: time.Hour})
			if err != nil {
				t.Fatalf("Sign: %v", err)
			}
			ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
				Certificates: []tls.Certificate{{Certificate: [][]byte{leaf.Certificate.Raw}, PrivateKey: key, Leaf: leaf.Certificate}},
				MinVersion:   tls.VersionTLS12,
			})
			if err != nil {
				t.Fatalf("tls.Listen: %v", err)
			}
			defer ln.Close()
			done := make(chan struct{})
			go func() {
				defer close(done)
				conn, err := ln.Accept()
				if err != nil {
					return
				}
				defer conn.Close()
				_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
				if err := conn.(*tls.Conn).Handshake(); err == nil {
					_, _ = conn.Write([]byte("ok"))
				}
			}()

			roots := x509.NewCertPool()
			if !roots.AppendCertsFromPEM(EncodeBundle(ca.Certificate)) {
				t.Fatal("the CA bundle holds no certificate")
			}
			conn, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: roots, ServerName: tt.serverName, MinVersion: tls.VersionTLS12})
			if tt.wantErr {
				if err == nil {
					conn.Close()
					t.Fatal("handshake succeeded, want a certificate error")
				}
				ln.Close()
				<-done
				return
			}
			if err != nil {
				t.Fatalf("handshake: %v", err)
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
			got, err := io.ReadAll(conn)
			if err != nil || string(got) != "ok" {
				t.Fatalf("read %q, %v", got, err)
			}
			<-done
		})
	}
}
