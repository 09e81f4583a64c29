package main

import (
	"runtime"
	"runtime/debug"
	"testing"
)

func TestFormatVersion(t *testing.T) {
	platform := " " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH
	withVCS := &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "true"}}}
	for _, tc := range []struct {
		name   string
		linked string
		info   *debug.BuildInfo
		ok     bool
		want   string
	}{
		{"linked by hack/image", "v0.3.0-2-gabc", &debug.BuildInfo{}, true, "certapi v0.3.0-2-gabc"},
		{"a local build in a work tree", "", withVCS, true, "certapi devel (commit 0123456789ab, modified)"},
		{"go install of a tagged module", "", &debug.BuildInfo{Main: debug.Module{Version: "v0.3.0"}}, true, "certapi v0.3.0"},
		{"no build information", "", nil, false, "certapi devel"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := formatVersion(tc.linked, tc.info, tc.ok); got != tc.want+platform {
				t.Fatalf("formatVersion = %q, want %q", got, tc.want+platform)
			}
		})
	}
}
