package main

import (
	"debug/buildinfo"
	"fmt"
	"time"

	"github.com/certapi/certapi/hack/internal/buildsource"
)

// source describes the commit being built.
type source = buildsource.Source

// sourceInfo reads the version, revision and commit time from hack/version.sh, the one source of
// certapi's version (git describe, or $VERSION).
func sourceInfo() (source, error) { return buildsource.Read() }

// source is what an image records about where it came from: certapi's commit for the images of certapi's
// own programs; for CoreDNS, the CoreDNS module's version and the Unix epoch as its time, so that its image
// changes only with its binary, not with every commit of certapi.
func (j job) source(bin string, src source) (source, error) {
	if j.pkg != "" {
		return src, nil
	}
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		return source{}, fmt.Errorf("reading the build information of %s: %w", bin, err)
	}
	for _, d := range info.Deps {
		if d.Path == "github.com/coredns/coredns" {
			return source{Version: d.Version, Time: time.Unix(0, 0).UTC()}, nil
		}
	}
	return source{}, fmt.Errorf("%s was not built from github.com/coredns/coredns", bin)
}
