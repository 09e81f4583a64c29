package apiserver

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

func TestEtcdClusterFlags(t *testing.T) {
	cases := []struct {
		name    string
		args    []string
		wantErr string // "" for valid
	}{
		{"single member by default", nil, ""},
		{"cluster mode", []string{"--etcd-peer-service=certapi-etcd.certapi-system.svc", "--etcd-member-name=certapi-0"}, ""},
		{"cluster mode, timeout off", []string{"--etcd-peer-service=certapi-etcd.ns.svc", "--etcd-member-name=certapi-2", "--etcd-dead-member-timeout=0"}, ""},
		{"with external etcd", []string{"--etcd-peer-service=certapi-etcd.ns.svc", "--etcd-member-name=certapi-0", "--etcd-servers=https://etcd:2379"}, "give one of them"},
		{"bad service", []string{"--etcd-peer-service=Certapi_Etcd", "--etcd-member-name=certapi-0"}, "--etcd-peer-service"},
		{"member without ordinal", []string{"--etcd-peer-service=certapi-etcd.ns.svc", "--etcd-member-name=certapi"}, "ending in -<ordinal>"},
		{"bad bind address", []string{"--etcd-peer-service=certapi-etcd.ns.svc", "--etcd-member-name=certapi-0", "--etcd-bind-address=localhost"}, "--etcd-bind-address"},
		{"same ports", []string{"--etcd-peer-service=certapi-etcd.ns.svc", "--etcd-member-name=certapi-0", "--etcd-peer-port=2379"}, "must differ"},
		{"port out of range", []string{"--etcd-peer-service=certapi-etcd.ns.svc", "--etcd-member-name=certapi-0", "--etcd-client-port=70000"}, "--etcd-client-port 70000"},
		{"restored cluster", []string{"--etcd-peer-service=certapi-etcd.ns.svc", "--etcd-member-name=certapi-1", "--etcd-cluster-epoch=2"}, ""},
		{"negative epoch", []string{"--etcd-peer-service=certapi-etcd.ns.svc", "--etcd-member-name=certapi-1", "--etcd-cluster-epoch=-1"}, "--etcd-cluster-epoch -1"},
		{"timeout too short", []string{"--etcd-peer-service=certapi-etcd.ns.svc", "--etcd-member-name=certapi-0", "--etcd-dead-member-timeout=10s"}, "at least 1m"},
		{"advertised IP (tests)", []string{"--etcd-peer-service=certapi-etcd.ns.svc", "--etcd-member-name=certapi-0", "--etcd-advertise-host=127.0.0.1"}, ""},
		{"bad advertised host", []string{"--etcd-peer-service=certapi-etcd.ns.svc", "--etcd-member-name=certapi-0", "--etcd-advertise-host=Not_A_Host"}, "--etcd-advertise-host"},
		{"member beyond the largest cluster", []string{"--etcd-peer-service=certapi-etcd.ns.svc", "--etcd-member-name=certapi-9"}, "at most 9 members"},
		{"CA files with the default custody", []string{"--etcd-peer-service=certapi-etcd.ns.svc", "--etcd-member-name=certapi-0", "--etcd-peer-ca-cert-file=/ca.crt", "--etcd-peer-ca-key-file=/ca.key"}, "--etcd-peer-ca-custody=secret with the files"},
		{"CA files with secret custody", []string{"--etcd-peer-service=certapi-etcd.ns.svc", "--etcd-member-name=certapi-0", "--etcd-peer-ca-cert-file=/ca.crt", "--etcd-peer-ca-key-file=/ca.key", "--etcd-peer-ca-custody=secret"}, ""},
		{"unknown custody", []string{"--etcd-peer-service=certapi-etcd.ns.svc", "--etcd-member-name=certapi-0", "--etcd-peer-ca-custody=vault"}, `expected "secret" or "etcd"`},
		{"CA cert without key", []string{"--etcd-peer-service=certapi-etcd.ns.svc", "--etcd-member-name=certapi-0", "--etcd-peer-ca-cert-file=/ca.crt"}, "give both or neither"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := NewOptions()
			fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
			o.AddFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			var err error
			if errs := o.EtcdCluster.Validate(len(o.RecommendedOptions.Etcd.StorageConfig.Transport.ServerList) > 0); len(errs) > 0 {
				err = errs[0]
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}
