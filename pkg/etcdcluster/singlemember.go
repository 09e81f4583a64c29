package etcdcluster

import (
	"net/url"

	"go.etcd.io/etcd/server/v3/embed"
)

// MaxSocketPath is the longest path a Unix socket may have on Linux (sun_path is 108 bytes with the NUL).
const MaxSocketPath = 107

// SingleMemberConfig returns the configuration of a one-member etcd named name, with its data in dir,
// that listens for and advertises clients on client and peers on peer, and logs only errors: the
// embedded etcd of a certapi with no --etcd-servers, and the temporary one a snapshot restore starts.
// The caller sets the rest (logger, compaction) before embed.StartEtcd.
func SingleMemberConfig(name, dir string, client, peer url.URL) *embed.Config {
	cfg := embed.NewConfig()
	cfg.Name = name
	cfg.Dir = dir
	cfg.ListenClientUrls = []url.URL{client}
	cfg.AdvertiseClientUrls = []url.URL{client}
	cfg.ListenPeerUrls = []url.URL{peer}
	cfg.AdvertisePeerUrls = []url.URL{peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.LogLevel = "error"
	return cfg
}
