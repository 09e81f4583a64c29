#!/usr/bin/env bash
# Builds the real parts certapi's tests run against: kube-apiserver and kubectl (k8s.io/kubernetes v1.37.x),
# etcd (go.etcd.io/etcd/server/v3), podcertnode (kubelet's own podcertificate manager, standing in for a
# node's kubelet) and kubenode (kubelet, kube-proxy, kube-controller-manager and kube-scheduler in one
# binary, with a symlink of each name to it), all from the Go module proxy through the hack/tools module;
# Prometheus's promtool and server (github.com/prometheus/prometheus) through their own module
# hack/tools/prometheus; helm (helm.sh/helm/v4) through its own module hack/tools/helm; and CoreDNS
# (github.com/coredns/coredns, only the plugins a cluster DNS needs) through its own module
# hack/tools/coredns; into _output/bin. Each group is skipped when its binaries were built from the same
# sources and Go; each has its own stamp, so that a change to one never rebuilds another.
#
# Usage: hack/build-tools.sh [GROUP...]   GROUP: kube (etcd, kube-apiserver, kubectl), node (podcertnode,
# kubenode), prometheus, helm, coredns; all five when none is named. make local-up builds kube (and node
# with NODE=1), hack/update-manifests.sh only helm, make images only coredns.
# GROUP kube-<minor> (e.g. kube-1.33; never built unless named) builds kube-apiserver and kubectl of an older
# Kubernetes minor from its own module hack/tools/kube-<minor> (hack/tools/new-kube-minor.sh writes it)
# into _output/kube/v<minor>/bin, with its own stamp there: what `make test-matrix` runs the core
# end-to-end cases against.
set -o errexit -o nounset -o pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
BIN="${ROOT}/_output/bin"
TOOLS="${ROOT}/hack/tools"
mkdir -p "${BIN}"
# Every tool is built as the Makefile builds certapi (its STATIC: no cgo, -trimpath). The tools share most
# of their packages with certapi at the same versions (k8s.io/apimachinery, client-go, apiserver, etcd's
# client, grpc, otel...), and the Go build cache reuses a compiled package only for the same flags: built
# alike, `make test` compiles each of them once instead of twice.
export CGO_ENABLED=0
export GOFLAGS="$(go env GOFLAGS) -trimpath"
TOOLCHAIN="$(go env GOVERSION) CGO_ENABLED=0 -trimpath"
GROUPS_WANTED=("$@")
if [[ ${#GROUPS_WANTED[@]} -eq 0 ]]; then
  GROUPS_WANTED=(kube node prometheus helm coredns)
fi
MINORS_WANTED=()
for g in "${GROUPS_WANTED[@]}"; do
  case "${g}" in
    kube | node | prometheus | helm | coredns) ;;
    kube-1.[0-9]*)
      if [[ ! -f "${TOOLS}/${g}/go.mod" ]]; then
        echo "build-tools.sh: no module hack/tools/${g}: write it with hack/tools/new-kube-minor.sh v${g#kube-}.<patch>" >&2
        exit 2
      fi
      MINORS_WANTED+=("${g#kube-}")
      ;;
    *) echo "build-tools.sh: unknown group ${g}; want kube, node, prometheus, helm, coredns or kube-<minor>" >&2; exit 2 ;;
  esac
done
wanted() { [[ " ${GROUPS_WANTED[*]} " == *" $1 "* ]]; }
# own FILE...: before a build writes them, turns each FILE that is a symlink (a worktree whose _output/bin
# links another checkout's tools) into a file of this checkout: `go build -o` would touch, or copy into,
# the other checkout's binary through the link, and `echo > STAMP` would overwrite its stamp.
own() { local f; for f in "$@"; do if [[ -L "${f}" ]]; then rm -f "${f}"; fi; done; }
# build_tool WHAT DIR STAMP WANT MINUTES BINARIES COMMAND...: builds WHAT (BINARIES, their names in ${BIN},
# space-separated) by running COMMAND in its module DIR, unless they were built from WANT (the module's
# sources, Go, flags), which STAMP holds after a build. MINUTES is what a cold build costs, for the message.
build_tool() {
  local what="$1" dir="$2" stamp="$3" want="$4" minutes="$5" bins="$6" b current=true verb=is
  shift 6
  for b in ${bins}; do
    [[ -x "${BIN}/${b}" ]] || current=false
  done
  [[ "${bins}" == *" "* ]] && verb=are
  if [[ -f "${stamp}" && "$(cat "${stamp}")" == "${want}" && "${current}" == true ]]; then
    echo "${what} ${verb} current in ${BIN}"
    return
  fi
  (
    cd "${dir}"
    start=${SECONDS}
    echo "building ${what} into ${BIN} (a cold build takes about ${minutes} minutes of CPU)"
    own "${stamp}"
    for b in ${bins}; do own "${BIN}/${b}"; done
    "$@"
    echo "${want}" > "${stamp}"
    echo "${what} built in $((SECONDS - start))s"
  )
}

# kube_ldflags: the version stamp of the Kubernetes binaries, as Kubernetes' hack/lib/version.sh writes it
# into k8s.io/component-base/version and k8s.io/client-go/pkg/version: the k8s.io/kubernetes module's
# version (v1.37.2) and its time as the build date, so that `kube-apiserver --version`, kubectl version,
# a Node's kubeletVersion and /version (which Helm's kubeVersion checks) say v1.37.2 rather than
# v0.0.0-master. The module proxy gives no commit: gitCommit stays empty.
# kube_ldflags [MODULE_DIR]: of the tools module in MODULE_DIR, hack/tools by default.
kube_ldflags() {
  local version date major minor flags="" p dir="${1:-${TOOLS}}"
  read -r version date < <(cd "${dir}" && go list -m -f '{{.Version}} {{.Time.UTC.Format "2006-01-02T15:04:05Z"}}' k8s.io/kubernetes)
  major="$(cut -d. -f1 <<<"${version#v}")"
  minor="$(cut -d. -f2 <<<"${version}")"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    flags+="-X ${p}.gitVersion=${version} -X ${p}.gitMajor=${major} -X ${p}.gitMinor=${minor} -X ${p}.gitCommit= -X ${p}.gitTreeState=clean -X ${p}.buildDate=${date} "
  done
  echo "${flags% }"
}

# The kube group (etcd, kube-apiserver, kubectl: what `make local-up` runs) and the node group (podcertnode
# and kubenode: the node's kubelet, kube-proxy, kube-controller-manager and kube-scheduler, linked once,
# not four times, which saves most of their build's link time; see docs/development.md, "Build times"),
# each with its own stamp. When both are stale they are built in one invocation: the links overlap each
# other and the compiles.
if wanted kube || wanted node; then
NODE_COMPONENTS=(kubelet kube-proxy kube-controller-manager kube-scheduler)
KUBE_LDFLAGS="$(kube_ldflags)"
pkgs=()
names=()
stamps=()
# group NAME STAMP WANT PACKAGES BINARIES: adds the group's packages to the build unless its binaries
# were built from the same sources, Go and version stamp.
group() {
  local name="$1" stamp="$2" want="$3" pkg_list="$4" bin_list="$5" current=true b
  for b in ${bin_list}; do
    [[ -x "${BIN}/${b}" ]] || current=false
  done
  if [[ -f "${stamp}" && "$(cat "${stamp}")" == "${want}" && "${current}" == true ]]; then
    echo "${name} tools are current in ${BIN}"
    return
  fi
  own "${stamp}"
  for b in ${bin_list}; do own "${BIN}/${b}"; done
  # shellcheck disable=SC2206
  pkgs+=(${pkg_list})
  names+=("${name}")
  stamps+=("${stamp}=${want}")
}
sum() { (cd "${TOOLS}" && cat "$@" | sha256sum | cut -d' ' -f1); }
if wanted kube; then
  group kube "${BIN}/.tools-stamp" "$(sum go.mod go.sum tools.go etcd/main.go) ${TOOLCHAIN} ${KUBE_LDFLAGS}" \
    "./etcd k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kubectl" "etcd kube-apiserver kubectl"
fi
if wanted node; then
  group node "${BIN}/.node-stamp" "$(sum go.mod go.sum podcertnode/main.go kubenode/main.go) ${TOOLCHAIN} ${KUBE_LDFLAGS}" \
    "./podcertnode ./kubenode" "podcertnode kubenode ${NODE_COMPONENTS[*]}"
fi
if (( ${#pkgs[@]} > 0 )); then
  (
    cd "${TOOLS}"
    start=${SECONDS}
    echo "building ${pkgs[*]} into ${BIN} (cold, both groups take about 6 minutes on 2 cores when certapi was built or vetted first, 9 otherwise; the kube group alone about 4)"
    for c in "${NODE_COMPONENTS[@]}"; do own "${BIN}/${c}"; done
    go build -ldflags "${KUBE_LDFLAGS}" -o "${BIN}/" "${pkgs[@]}"
    if [[ " ${names[*]} " == *" node "* ]]; then
      for c in "${NODE_COMPONENTS[@]}"; do
        ln -sfn kubenode "${BIN}/${c}"
      done
    fi
    for s in "${stamps[@]}"; do
      echo "${s#*=}" > "${s%%=*}"
    done
    echo "${names[*]} tools built in $((SECONDS - start))s"
  )
fi
fi

# kube-apiserver and kubectl of each older minor named (kube-<minor>), each from its own module and into its
# own directory, so that a minor never rebuilds another nor the current one.
for minor in ${MINORS_WANTED[@]+"${MINORS_WANTED[@]}"}; do
  mdir="${TOOLS}/kube-${minor}"
  mbin="${ROOT}/_output/kube/v${minor}/bin"
  mkdir -p "${mbin}"
  mldflags="$(kube_ldflags "${mdir}")"
  mstamp="${mbin}/.tools-stamp"
  mwant="$(cd "${mdir}" && cat go.mod go.sum tools.go | sha256sum | cut -d' ' -f1) ${TOOLCHAIN} ${mldflags}"
  if [[ -f "${mstamp}" && "$(cat "${mstamp}")" == "${mwant}" && -x "${mbin}/kube-apiserver" && -x "${mbin}/kubectl" ]]; then
    echo "kube-${minor} tools are current in ${mbin}"
    continue
  fi
  (
    cd "${mdir}"
    start=${SECONDS}
    echo "building kube-apiserver and kubectl of Kubernetes ${minor} into ${mbin} (cold, about 7 minutes of CPU)"
    own "${mstamp}" "${mbin}/kube-apiserver" "${mbin}/kubectl"
    go build -ldflags "${mldflags}" -o "${mbin}/" k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kubectl
    echo "${mwant}" > "${mstamp}"
    echo "kube-${minor} tools built in $((SECONDS - start))s"
  )
done

# promtool and prometheus, which check the alerting rules and the dashboard in artifacts/monitoring
# (test/monitoring). Their own module keeps Prometheus's dependencies from moving the versions
# kube-apiserver is built with.
if wanted prometheus; then
# remove_all_sd leaves out every service discovery but static, file and HTTP (Prometheus's own build
# tag): the tests scrape certapi by static_configs, and the cloud SDKs cost about 4 minutes of CPU cold.
PTAGS=remove_all_sd
build_tool "promtool and prometheus" "${TOOLS}/prometheus" "${BIN}/.prometheus-stamp" \
  "$(cd "${TOOLS}/prometheus" && cat go.mod go.sum tools.go | sha256sum | cut -d' ' -f1) ${TOOLCHAIN} ${PTAGS}" 7 "promtool prometheus" \
  go build -tags "${PTAGS}" -o "${BIN}/" github.com/prometheus/prometheus/cmd/promtool github.com/prometheus/prometheus/cmd/prometheus
fi

# helm, which lints, renders and installs the chart artifacts/charts/certapi (test/chart) and renders
# artifacts/deploy from it (hack/update-manifests.sh, make verify). Its own module, like Prometheus's:
# Helm 4 needs newer grpc, OpenTelemetry and golang.org/x modules than k8s.io/kubernetes v1.37.2 is built
# with. The version is stamped in as Helm's own Makefile does (`helm version`, .Capabilities.HelmVersion).
if wanted helm; then
build_helm() {
  local version
  version="$(go list -m -f '{{.Version}}' helm.sh/helm/v4)"
  go build -ldflags "-X helm.sh/helm/v4/internal/version.version=${version}" -o "${BIN}/helm" helm.sh/helm/v4/cmd/helm
}
build_tool helm "${TOOLS}/helm" "${BIN}/.helm-stamp" \
  "$(cd "${TOOLS}/helm" && cat go.mod go.sum tools.go | sha256sum | cut -d' ' -f1) ${TOOLCHAIN}" 6 helm \
  build_helm
fi

# CoreDNS, the test node's cluster DNS, for the certapi.dev/coredns image (make images). Static
# (CGO_ENABLED=0): it runs in an empty base image.
if wanted coredns; then
build_tool coredns "${TOOLS}/coredns" "${BIN}/.coredns-stamp" \
  "$(cd "${TOOLS}/coredns" && cat go.mod go.sum main.go | sha256sum | cut -d' ' -f1) ${TOOLCHAIN}" 4 coredns \
  go build -ldflags="-s -w" -o "${BIN}/coredns" .
fi
