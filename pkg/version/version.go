// Package version says which build of certapi a binary is, for the --version of certapi and of the
// kubectl plugins. A release build (make build, make release, hack/image) stamps the version, commit, tree
// state and build date into this package's variables with -ldflags -X (hack/version.sh --ldflags), as
// Kubernetes' builds stamp k8s.io/component-base/version; a plain `go build` or `go install` leaves them
// unset, and then what the Go toolchain recorded (the module's version, the VCS revision) is reported.
//
// Not into k8s.io/component-base/version itself: certapi's generic API server derives from that the
// Kubernetes version it emulates, and its feature gates with it; stamped v0.2.0 it would emulate
// Kubernetes 0.2, and refuse at start-up every feature default set for a later one.
package version

import (
	"runtime"
	"runtime/debug"
	"strings"

	apimachineryversion "k8s.io/apimachinery/pkg/version"
)

// Set at link time by hack/version.sh --ldflags (-X github.com/certapi/certapi/pkg/version.gitVersion=...);
// empty in a plain go build.
var (
	gitVersion   string // the version, vX.Y.Z or v0.0.0-g<hash>[-dirty]
	gitCommit    string // the commit, git rev-parse HEAD
	gitTreeState string // clean or dirty
	buildDate    string // the commit's time, ISO 8601
)

// stamp is what the build linked in.
func stamp() apimachineryversion.Info {
	return apimachineryversion.Info{GitVersion: gitVersion, GitCommit: gitCommit, GitTreeState: gitTreeState, BuildDate: buildDate}
}

// String is what `program --version` prints: the program's name and version, the commit and tree state
// and build date when known, and the Go toolchain and platform, e.g.
// "certapi v0.2.0 (commit 0123456789ab, clean, built 2026-12-02T07:12:01Z) go1.26.0 linux/amd64".
func String(program string) string {
	info, ok := debug.ReadBuildInfo()
	return format(program, stamp(), info, ok) + " " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH
}

// Get is the version alone: the stamped gitVersion, else the module's version, else "devel".
func Get() string {
	info, ok := debug.ReadBuildInfo()
	v, _, _, _ := resolve(stamp(), info, ok)
	return v
}

// stamped reports whether the build linked a version in.
func stamped(v apimachineryversion.Info) bool {
	return v.GitVersion != ""
}

// resolve picks the version, commit, tree state and build date from the stamp, or from the build
// information when there is no stamp.
func resolve(v apimachineryversion.Info, info *debug.BuildInfo, ok bool) (ver, commit, tree, date string) {
	if stamped(v) {
		return v.GitVersion, v.GitCommit, v.GitTreeState, v.BuildDate
	}
	ver = "devel"
	if ok && info != nil {
		if info.Main.Version != "" && info.Main.Version != "(devel)" {
			ver = info.Main.Version
		}
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				commit = s.Value
			case "vcs.modified":
				if s.Value == "true" {
					tree = "dirty"
				} else {
					tree = "clean"
				}
			}
		}
	}
	return ver, commit, tree, ""
}

func format(program string, v apimachineryversion.Info, info *debug.BuildInfo, ok bool) string {
	ver, commit, tree, date := resolve(v, info, ok)
	out := program + " " + ver
	if len(commit) > 12 {
		commit = commit[:12]
	}
	var details []string
	if commit != "" {
		details = append(details, "commit "+commit)
	}
	if tree != "" {
		details = append(details, tree)
	}
	if date != "" {
		details = append(details, "built "+date)
	}
	if len(details) > 0 {
		out += " (" + strings.Join(details, ", ") + ")"
	}
	return out
}
