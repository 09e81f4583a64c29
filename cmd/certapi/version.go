package main

import (
	"runtime"
	"runtime/debug"
)

// version is set at link time (-ldflags=-X main.version=...) by hack/image to `git describe`; otherwise it
// comes from the module's build information.
var version = ""

// versionString is what --version prints: certapi's version, the commit it was built from when known,
// and the Go toolchain and platform.
func versionString() string {
	info, ok := debug.ReadBuildInfo()
	return formatVersion(version, info, ok)
}

func formatVersion(linked string, info *debug.BuildInfo, ok bool) string {
	v := linked
	var revision, modified string
	if ok {
		if v == "" && info.Main.Version != "" && info.Main.Version != "(devel)" {
			v = info.Main.Version
		}
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				revision = s.Value
			case "vcs.modified":
				if s.Value == "true" {
					modified = ", modified"
				}
			}
		}
	}
	if v == "" {
		v = "devel"
	}
	out := "certapi " + v
	if len(revision) > 12 {
		revision = revision[:12]
	}
	if revision != "" {
		out += " (commit " + revision + modified + ")"
	}
	return out + " " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH
}
