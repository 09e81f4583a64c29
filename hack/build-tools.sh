#!/usr/bin/env bash
# Builds the real parts certapi's tests run against: kube-apiserver and kubectl (k8s.io/kubernetes v1.37.x),
# etcd (go.etcd.io/etcd/server/v3), podcertnode (kubelet's own podcertificate manager, standing in for a
# node's kubelet) and kubenode (kubelet, kube-proxy, kube-controller-manager and kube-scheduler in one
# binary, with a symlink of each name to it), all from the Go module proxy through the hack/tools module;
# Prometheus's promtool and server (github.com/prometheus/prometheus) through their own module
# hack/tools/prometheus, with prometheus-operator-config (the Prometheus Operator's configuration
# generator) through hack/tools/prometheus-operator; helm (helm.sh/helm/v4) and helm3 (helm.sh/helm/v3) through their own modules
# hack/tools/helm and hack/tools/helm3; and CoreDNS
# (github.com/coredns/coredns, only the plugins a cluster DNS needs) through its own module
# hack/tools/coredns; cosign (github.com/sigstore/cosign/v3), which test/release verifies the release's
# signatures with, through its own module hack/tools/cosign; and cert-manager-controller (cert-manager's own
# issuer and CertificateSigningRequest signer controllers, the signer of certapi's intermediate CA in the
# tests) through its own module hack/tools/cert-manager, with cert-manager's CRDs copied into
# _output/cert-manager/crds; into _output/bin. Each group is skipped when its binaries were built from the same
# sources and Go; each has its own stamp, so that a change to one never rebuilds another.
#
# Usage: hack/build-tools.sh [GROUP...]   GROUP: kube (etcd, kube-apiserver, kubectl), node (podcertnode,
# kubenode), prometheus (with prometheus-operator-config), helm, helm3, coredns, cosign, cert-manager; all
# eight when none is named. make local-up builds kube (and node
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
# alike, `make test` compiles each of them once instead of twice. For the same reason each tool's module
# requires the modules it shares with certapi at certapi's versions where its own are older (k8s.io/api,
# apimachinery and client-go v0.37.2 for CoreDNS, Prometheus, Helm 3, cosign and cert-manager, whose own
# pins are v0.36 or v0.37.1): a package at another version is compiled again, and aligning them took about
# a sixth of the tools' compiled files out of a cold `make test`. Their own tests (test/monitoring,
# test/chart, test/release, test/e2e/upstreamcsr, the node's CoreDNS) run them so built.
export CGO_ENABLED=0
export GOFLAGS="$(go env GOFLAGS) -trimpath"
# The tools are linked without their symbol table and DWARF (-s -w): nobody debugs them here, and a link
# without DWARF takes about 40% less CPU (kube-apiserver: 8 s instead of 14 s); stack traces keep their
# function names and lines.
STRIP="-s -w"
TOOLCHAIN="$(go env GOVERSION) CGO_ENABLED=0 -trimpath ${STRIP}"
GROUPS_WANTED=("$@")
if [[ ${#GROUPS_WANTED[@]} -eq 0 ]]; then
  GROUPS_WANTED=(kube node prometheus helm helm3 coredns cosign cert-manager)
fi
MINORS_WANTED=()
for g in "${GROUPS_WANTED[@]}"; do
  case "${g}" in
    kube | node | prometheus | helm | helm3 | coredns | cosign | cert-manager) ;;
    kube-1.[0-9]*)
      if [[ ! -f "${TOOLS}/${g}/go.mod" ]]; then
        echo "build-tools.sh: no module hack/tools/${g}: write it with hack/tools/new-kube-minor.sh v${g#kube-}.<patch>" >&2
        exit 2
      fi
      MINORS_WANTED+=("${g#kube-}")
      ;;
    *) echo "build-tools.sh: unknown group ${g}; want kube, node, prometheus, helm, helm3, coredns, cosign, cert-manager or kube-<minor>" >&2; exit 2 ;;
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
# Two jobs of one make that want the same tool (make test's verify and release both want helm) take turns
# on STAMP.lock: the second finds it current instead of writing the same binary at the same time.
build_tool() {
  (
    flock 9
    build_tool_unlocked "$@"
  ) 9>"$3.lock"
}
build_tool_unlocked() {
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
    go build -ldflags "${STRIP} ${KUBE_LDFLAGS}" -o "${BIN}/" "${pkgs[@]}"
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
    go build -ldflags "${STRIP} ${mldflags}" -o "${mbin}/" k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kubectl
    echo "${mwant}" > "${mstamp}"
    echo "kube-${minor} tools built in $((SECONDS - start))s"
  )
done

# promtool and prometheus, which check the alerting rules and the dashboard in artifacts/monitoring
# (test/monitoring). Their own module keeps Prometheus's dependencies from moving the versions
# kube-apiserver is built with.
if wanted prometheus; then
# remove_all_sd leaves out every service discovery but static, file and HTTP (Prometheus's own build
# tags), enable_kubernetes_sd puts Kubernetes' back: the tests scrape certapi as the Prometheus Operator
# configures Prometheus, by Kubernetes service discovery, and the cloud SDKs cost about 4 minutes of CPU
# cold.
PTAGS=remove_all_sd,enable_kubernetes_sd
build_tool "promtool and prometheus" "${TOOLS}/prometheus" "${BIN}/.prometheus-stamp" \
  "$(cd "${TOOLS}/prometheus" && cat go.mod go.sum tools.go | sha256sum | cut -d' ' -f1) ${TOOLCHAIN} ${PTAGS}" 7 "promtool prometheus" \
  go build -tags "${PTAGS}" -ldflags "${STRIP}" -o "${BIN}/" github.com/prometheus/prometheus/cmd/promtool github.com/prometheus/prometheus/cmd/prometheus
# prometheus-operator-config writes the configuration the Prometheus Operator's own code
# (github.com/prometheus-operator/prometheus-operator/pkg/prometheus) generates from the chart's
# ServiceMonitor, which test/monitoring's Prometheus runs with. Its own module, hack/tools/prometheus-operator:
# the operator pins other versions of Prometheus's and Kubernetes' modules.
build_tool prometheus-operator-config "${TOOLS}/prometheus-operator" "${BIN}/.prometheus-operator-stamp" \
  "$(cd "${TOOLS}/prometheus-operator" && cat go.mod go.sum main.go | sha256sum | cut -d' ' -f1) ${TOOLCHAIN}" 3 prometheus-operator-config \
  go build -ldflags "${STRIP}" -o "${BIN}/prometheus-operator-config" .
fi

# helm, which lints, renders and installs the chart artifacts/charts/certapi (test/chart) and renders
# artifacts/deploy from it (hack/update-manifests.sh, make verify). Its own module, like Prometheus's:
# Helm 4 needs newer grpc, OpenTelemetry and golang.org/x modules than k8s.io/kubernetes v1.37.2 is built
# with. The version is stamped in as Helm's own Makefile does (`helm version`, .Capabilities.HelmVersion).
if wanted helm; then
build_helm() {
  local version
  version="$(go list -m -f '{{.Version}}' helm.sh/helm/v4)"
  go build -ldflags "${STRIP} -X helm.sh/helm/v4/internal/version.version=${version}" -o "${BIN}/helm" helm.sh/helm/v4/cmd/helm
}
build_tool helm "${TOOLS}/helm" "${BIN}/.helm-stamp" \
  "$(cd "${TOOLS}/helm" && cat go.mod go.sum tools.go | sha256sum | cut -d' ' -f1) ${TOOLCHAIN}" 6 helm \
  build_helm
fi

# helm3, Helm 3 beside Helm 4: most clusters are installed with Helm 3, so test/chart lints, renders and
# installs the chart with both. Its own module, as the two pin different versions of the same modules.
if wanted helm3; then
# As Helm 3's own Makefile does, it also stamps the Kubernetes version that `helm template` and lint assume
# with no cluster, from the client-go it links (v0.36 is 1.36); unstamped it says 1.20, under the chart's
# kubeVersion.
build_helm3() {
  local version kube flags=""
  version="$(go list -m -f '{{.Version}}' helm.sh/helm/v3)"
  kube="$(go list -m -f '{{.Version}}' k8s.io/client-go)"
  for p in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
    flags+=" -X ${p}.k8sVersionMajor=1 -X ${p}.k8sVersionMinor=$(cut -d. -f2 <<<"${kube}")"
  done
  go build -ldflags "${STRIP} -X helm.sh/helm/v3/internal/version.version=${version}${flags}" -o "${BIN}/helm3" helm.sh/helm/v3/cmd/helm
}
build_tool helm3 "${TOOLS}/helm3" "${BIN}/.helm3-stamp" \
  "$(cd "${TOOLS}/helm3" && cat go.mod go.sum tools.go | sha256sum | cut -d' ' -f1) ${TOOLCHAIN} kube-stamped" 6 helm3 \
  build_helm3
fi

# CoreDNS, the test node's cluster DNS, for the certapi.dev/coredns image (make images). Static
# (CGO_ENABLED=0): it runs in an empty base image.
if wanted coredns; then
build_tool coredns "${TOOLS}/coredns" "${BIN}/.coredns-stamp" \
  "$(cd "${TOOLS}/coredns" && cat go.mod go.sum main.go | sha256sum | cut -d' ' -f1) ${TOOLCHAIN}" 4 coredns \
  go build -ldflags "${STRIP}" -o "${BIN}/coredns" .
fi

# cosign, Sigstore's verifier, with which test/release checks the release's signatures, attestations and
# checksums.txt offline against its public key (docs/release.md, "Verifying a release"). Its own module: it
# links the cloud KMS SDKs, TUF and Rekor's and Fulcio's clients. Stamped with its version as its Makefile does.
if wanted cosign; then
build_cosign() {
  local version
  version="$(go list -m -f '{{.Version}}' github.com/sigstore/cosign/v3)"
  go build -ldflags "${STRIP} -X sigs.k8s.io/release-utils/version.gitVersion=${version}" -o "${BIN}/cosign" github.com/sigstore/cosign/v3/cmd/cosign
}
build_tool cosign "${TOOLS}/cosign" "${BIN}/.cosign-stamp" \
  "$(cd "${TOOLS}/cosign" && cat go.mod go.sum tools.go | sha256sum | cut -d' ' -f1) ${TOOLCHAIN}" 8 cosign \
  build_cosign
fi

# cert-manager-controller: cert-manager's own Issuer and ClusterIssuer controllers and its CA and SelfSigned
# CertificateSigningRequest signers, run by a main of ours (hack/tools/cert-manager), and cert-manager's CRDs
# (deploy/crds of the same cert-manager module) in _output/cert-manager/crds: the certificates.k8s.io/v1
# signer that signs certapi's intermediate CA in the tests (test/framework.StartCertManager). Its own module:
# cert-manager pins other versions of Kubernetes' modules. The stamp covers the CRDs too: they are copied
# from the module the stamp names.
if wanted cert-manager; then
CM_CRDS="${ROOT}/_output/cert-manager/crds"
build_cert_manager() {
  local dir
  # go list -m names no directory for a module not yet in the module cache (a fresh machine): download it.
  go mod download github.com/cert-manager/cert-manager
  dir="$(go list -m -f '{{.Dir}}' github.com/cert-manager/cert-manager)"
  if [[ -z "${dir}" || ! -d "${dir}/deploy/crds" ]]; then
    echo "build-tools.sh: cert-manager's deploy/crds not found in the module cache (${dir:-no directory}): run go mod download in hack/tools/cert-manager" >&2
    return 1
  fi
  go build -ldflags "${STRIP}" -o "${BIN}/cert-manager-controller" .
  # A fresh directory: never write through a symlink into another checkout's copy.
  rm -rf "${CM_CRDS}.new"
  mkdir -p "${CM_CRDS}.new"
  cp "${dir}"/deploy/crds/*.yaml "${CM_CRDS}.new/"
  chmod 0644 "${CM_CRDS}.new"/*.yaml
  rm -rf "${CM_CRDS}"
  mv "${CM_CRDS}.new" "${CM_CRDS}"
}
if [[ ! -d "${CM_CRDS}" ]]; then
  # No CRDs: build again even when the binary is current.
  own "${BIN}/.cert-manager-stamp"
  rm -f "${BIN}/.cert-manager-stamp"
fi
build_tool cert-manager-controller "${TOOLS}/cert-manager" "${BIN}/.cert-manager-stamp" \
  "$(cd "${TOOLS}/cert-manager" && cat go.mod go.sum main.go | sha256sum | cut -d' ' -f1) ${TOOLCHAIN}" 7 cert-manager-controller \
  build_cert_manager
fi
