package version

import (
	"runtime/debug"
	"testing"

	apimachineryversion "k8s.io/apimachinery/pkg/version"
)

func TestFormat(t *testing.T) {
	unstamped := apimachineryversion.Info{}
	withVCS := &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "true"}}}
	for _, tc := range []struct {
		name    string
		stamp   apimachineryversion.Info
		info    *debug.BuildInfo
		ok      bool
		want    string
		wantGet string
	}{
		{"stamped by hack/version.sh", apimachineryversion.Info{GitVersion: "v0.3.0-2-gabc", GitCommit: "abcdef0123456789", GitTreeState: "clean", BuildDate: "2026-12-02T07:12:01Z"}, withVCS, true,
			"certapi v0.3.0-2-gabc (commit abcdef012345, clean, built 2026-12-02T07:12:01Z)", "v0.3.0-2-gabc"},
		{"a local build in a work tree", unstamped, withVCS, true, "certapi devel (commit 0123456789ab, dirty)", "devel"},
		{"go install of a tagged module", unstamped, &debug.BuildInfo{Main: debug.Module{Version: "v0.3.0"}}, true, "certapi v0.3.0", "v0.3.0"},
		{"no build information", unstamped, nil, false, "certapi devel", "devel"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := format("certapi", tc.stamp, tc.info, tc.ok); got != tc.want {
				t.Errorf("format = %q, want %q", got, tc.want)
			}
			if got, _, _, _ := resolve(tc.stamp, tc.info, tc.ok); got != tc.wantGet {
				t.Errorf("resolve's version = %q, want %q", got, tc.wantGet)
			}
		})
	}
}
