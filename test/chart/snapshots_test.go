package chart

import "testing"

// TestSnapshotsByDefault: the chart takes scheduled snapshots with its defaults (snapshots.interval auto:
// hourly, the newest 5 kept, in the data volume) and wherever it keeps etcd's data itself or is given a
// claim for them; with an external or dedicated etcd and no claim, auto takes none (that etcd is its
// owner's to back up), and "" takes none anywhere.
func TestSnapshotsByDefault(t *testing.T) {
	const ext = "etcd.external.endpoints[0]=https://etcd:2379"
	for _, tc := range []struct {
		name      string
		args      []string
		interval  string
		claimDir  bool
		retention string
	}{
		{"defaults (etcd.mode cluster)", nil, "1h", false, "5"},
		{"etcd.mode embedded", []string{"--set", "etcd.mode=embedded", "--set", "replicas=1"}, "1h", false, "5"},
		{"an external etcd with a claim", []string{"--set", "etcd.mode=external", "--set", ext, "--set", "snapshots.existingClaim=backups"}, "1h", true, "5"},
		{"an external etcd without a claim: none", []string{"--set", "etcd.mode=external", "--set", ext}, "", false, ""},
		{"a dedicated etcd without a claim: none", []string{"--set", "etcd.mode=dedicated", "--set", "replicas=3"}, "", false, ""},
		{"turned off", []string{"--set", "snapshots.interval="}, "", false, ""},
		{"another interval", []string{"--set", "snapshots.interval=15m"}, "15m", false, "5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, _ := render(t, "certapi-system", tc.args...)
			_, args := certapiArgs(t, objs)
			dir := args["snapshot-dir"] == "/var/lib/certapi-snapshots"
			if args["snapshot-interval"] != tc.interval || args["snapshot-retention"] != tc.retention || dir != tc.claimDir {
				t.Errorf("--snapshot-interval=%q --snapshot-retention=%q --snapshot-dir=%q; want %q, %q, on the claim: %v",
					args["snapshot-interval"], args["snapshot-retention"], args["snapshot-dir"], tc.interval, tc.retention, tc.claimDir)
			}
		})
	}
}
