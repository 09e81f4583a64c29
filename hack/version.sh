#!/usr/bin/env bash
# The one source of certapi's version: prints the version and what is stamped with it, for make (build,
# release), hack/image and hack/release.
#
# Usage: hack/version.sh            KEY=value lines: VERSION, GIT_COMMIT, GIT_TREE_STATE, BUILD_DATE,
#                                   SOURCE_DATE_EPOCH
#        hack/version.sh --ldflags  the -X flags that stamp them into github.com/certapi/certapi/pkg/version
#                                   (not k8s.io/component-base/version: pkg/version says why)
#
# VERSION is `git describe --tags --always --dirty` ($VERSION when set, which must then be vX.Y.Z with an
# optional -prerelease and +build). A commit with no tag above it is v0.0.0-g<hash>[-dirty], a semantic
# version as Helm's chart version and kubectl's version parsing need. BUILD_DATE is the commit's time, not
# the clock's, so that two builds of one commit are byte-identical.
set -o errexit -o nounset -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
semver='^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$'
if [[ -n "${VERSION:-}" ]]; then
  version="${VERSION}"
  if [[ ! "${version}" =~ ${semver} ]]; then
    echo "hack/version.sh: VERSION=${version} is not a semantic version; want vMAJOR.MINOR.PATCH with an optional -prerelease and +build, e.g. v0.2.0 or v0.2.0-rc.1" >&2
    exit 2
  fi
else
  version="$(git describe --tags --always --dirty 2>/dev/null || echo unknown)"
  if [[ ! "${version}" =~ ${semver} ]]; then
    version="v0.0.0-g${version}"
  fi
fi
commit="$(git rev-parse HEAD 2>/dev/null || true)"
tree=clean
if [[ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]]; then
  tree=dirty
fi
epoch="$(git log -1 --format=%ct 2>/dev/null || echo 0)"
date="$(date -u -d "@${epoch}" +%Y-%m-%dT%H:%M:%SZ)"
if [[ "${1:-}" == "--ldflags" ]]; then
  p=github.com/certapi/certapi/pkg/version
  echo "-X ${p}.gitVersion=${version} -X ${p}.gitCommit=${commit} -X ${p}.gitTreeState=${tree} -X ${p}.buildDate=${date}"
  exit 0
fi
echo "VERSION=${version}"
echo "GIT_COMMIT=${commit}"
echo "GIT_TREE_STATE=${tree}"
echo "BUILD_DATE=${date}"
echo "SOURCE_DATE_EPOCH=${epoch}"
